"""Refusals and hints that name only what would work (the ux6 review): PlanConfig's own checks
as one line in the flags' names, the levers a plan that does not fit has left, a flag refused
where it would change nothing, the torchtitan registry's DeepSeek-V3 16B, help at 80 columns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import planner
from planner.cli import app

runner = CliRunner()
MODEL_16B = str(Path(planner.__file__).parent / "reference/models/torchtitan-deepseek-v3-16b.toml")


def one_line_error(r, code: int = 2) -> str:
    assert r.exit_code == code, (r.exit_code, r.output)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("plan3d: error: "), r.stderr
    assert "internal error" not in lines[0]
    return lines[0].removeprefix("plan3d: error: ")


# ---- PlanConfig's validators: a PlanError in the flags' names, never "internal error" ----------

def test_a_plan_config_refusal_is_one_line_in_the_flags_names():
    # cp = 4 with the plain all-to-all kind and a hierarchical group: explain no longer checks it
    # itself; PlanConfig's validator (schema.cp_kind_problem) refuses it, said in flags
    r = runner.invoke(app, ["explain", "-m", "8b", "-n", "16", "--plan",
                            "dp2 tp2 pp1 cp4 z1 sel", "--cp-kind", "a2a", "--cp-a2a", "2"])
    assert one_line_error(r) == ("--cp-a2a 2 is the all-to-all group of the hierarchical kind; "
                                 "give --cp-kind hierarchical, or leave --cp-a2a out")
    r = runner.invoke(app, ["explain", "-m", "8b", "-n", "8", "--plan",
                            "dp2 tp2 pp1 cp2 z1 sel", "--cp-kind", "hierarchical"])
    # cp = 2 has no divisor strictly between 1 and 2 (it said "between 2 and 1")
    assert one_line_error(r) == ("the hierarchical kind needs an all-to-all group (--cp-a2a) "
                                 "strictly between 1 and cp, and cp = 2 has none: use the ring "
                                 "or a2a kind")


def test_a_library_request_past_the_flag_checks_is_refused_as_a_plan_error():
    # api callers build PlanRequest themselves, past parse_request's checks: an fp8 recipe on a
    # bf16 plan reaches PlanConfig, whose refusal comes back as a PlanError in the flags' names
    from planner import api
    from planner.errors import PlanError
    from planner.search.request import PlanRequest

    req = PlanRequest(gpus=8, fp8_recipe="delayed", zero=[1], recompute=["selective"])
    with pytest.raises(PlanError) as caught:
        api.explain_request("8b", "h100-nvlink", req)
    assert str(caught.value) == "--fp8-recipe delayed needs --precision fp8, got bf16"


def test_in_flag_names_leaves_flags_dotted_keys_and_degrees_alone():
    from planner.errors import in_flag_names

    fields = ("compile_loss", "cp_a2a", "cp", "framework")
    text = ("compile_loss is compile.components; --framework torchtitan, or leave "
            "--compile-loss out; cp_a2a must divide cp = 4")
    assert in_flag_names(text, fields, {"recompute": "--recompute"}) == (
        "--compile-loss is compile.components; --framework torchtitan, or leave --compile-loss "
        "out; --cp-a2a must divide cp = 4")


# ---- a plan that does not fit: only the levers that would change something ------------------

def test_the_hints_leave_out_what_the_plan_already_does():
    # 70B on 8 H100 at ZeRO-3 with full recompute, dp 8: needs 172.8 GiB of 79.6; the H200's
    # 140.4 GiB is too little, the B200's 179 GiB and the GB200's 185 GiB fit it
    r = runner.invoke(app, ["explain", "-m", "70b", "-n", "8", "--zero", "3",
                            "--recompute", "full"])
    line = one_line_error(r, 1)
    assert "172.8 GiB per GPU" in line and "79.6 GiB available" in line
    assert "--zero 3" not in line and "--recompute full" not in line
    assert ("try a larger --tp or --pp, more --gpus, a GPU with more memory (--hw b200-nvlink "
            "or --hw gb200-nvl72), or `plan3d search`") in line
    # dp 1 (tp 8 on 8 GPUs): a larger tp or pp needs more GPUs; ZeRO-1 and selective: both
    r = runner.invoke(app, ["explain", "-m", "70b", "-n", "8", "--zero", "1", "--tp", "8"])
    line = one_line_error(r, 1)
    assert "try --zero 3, --recompute full, more --gpus for a larger --tp or --pp," in line
    # ZeRO-0 with dp 8: more GPUs only add replicas that hold everything, so not offered alone
    r = runner.invoke(app, ["explain", "-m", "70b", "-n", "8", "--zero", "0"])
    line = one_line_error(r, 1)
    assert "try --zero 3, --recompute full, a larger --tp or --pp, or `plan3d search`" in line


def test_the_hints_offer_no_zero_3_the_framework_refuses():
    # Megatron runs ZeRO-3 (Megatron-FSDP) without a pipeline only: at pp 2 the hint leaves it
    # out (70B dp8 tp4 pp2 v2 z1 on 64 H100 needs 118.6 GiB); at pp 1 it offers it
    r = runner.invoke(app, ["explain", "-m", "70b", "-n", "64", "--plan", "dp8 tp4 pp2 v2 z1"])
    line = one_line_error(r, 1)
    assert "118.6 GiB per GPU" in line and "--zero 3" not in line
    assert "try --recompute full, a larger --tp or --pp" in line
    r = runner.invoke(app, ["explain", "-m", "70b", "-n", "64", "--plan", "dp32 tp2 pp1 z1"])
    assert "try --zero 3, --recompute full" in one_line_error(r, 1)


# ---- --torchtitan-flex-ac: refused where it would change nothing --------------------------------

@pytest.mark.parametrize("model, flags, says", [
    ("8b", [], "llama-3.1-8b has no MLA attention and no routed experts"),
    ("qwen3-30b-a3b", [], "qwen3-30b-a3b has no MLA attention, so it would change nothing"),
    (MODEL_16B, ["--recompute", "full"], "with --recompute full it would change nothing"),
])
def test_flex_ac_is_refused_where_it_changes_nothing(model, flags, says):
    for command in ("explain", "search"):
        r = runner.invoke(app, [command, "-m", model, "-n", "8", "--framework", "torchtitan",
                                "--torchtitan-flex-ac", *flags])
        line = one_line_error(r)
        assert line.startswith("--torchtitan-flex-ac changes ") and says in line


def test_flex_ac_is_taken_on_an_mla_moe_model():
    base = ["explain", "-m", MODEL_16B, "-n", "8", "--framework", "torchtitan", "--ep", "8",
            "--zero", "3", "--json"]
    r = runner.invoke(app, [*base, "--torchtitan-flex-ac"])
    assert r.exit_code in (0, 1), r.output
    assert '"torchtitan_flex_ac": true' in r.stdout


# ---- --emit torchtitan: the shipped DeepSeek-V3 16B, and refusals that offer what works -------

def test_the_shipped_16b_model_is_emitted_as_its_registry_entry():
    base = ["explain", "-m", MODEL_16B, "-n", "8", "--framework", "torchtitan", "--ep", "8",
            "--zero", "3", "--compile-loss", "--emit"]
    r = runner.invoke(app, [*base, "torchtitan"])
    assert r.exit_code == 0, r.output
    assert "--module deepseek_v3" in r.stdout and "--config deepseek_v3_16b" in r.stdout
    r = runner.invoke(app, [*base, "torchtitan@0.2"])
    assert r.exit_code == 0, r.output
    assert 'name = "deepseek_v3"' in r.stdout and 'flavor = "16B"' in r.stdout


def test_a_model_outside_the_registry_offers_megatron_only_where_it_runs():
    # llama-2 7B is in no torchtitan registry entry; --emit megatron plans it for Megatron-Core,
    # which refuses --compile-loss, so with it the refusal does not offer it
    base = ["explain", "-m", "7b", "-n", "8", "--zero", "3"]
    line = one_line_error(runner.invoke(app, [*base, "--emit", "torchtitan"]))
    assert "no llama-2-7b" in line or "config registry" in line
    assert "--emit megatron" in line
    assert runner.invoke(app, [*base, "--emit", "megatron"]).exit_code == 0
    line = one_line_error(runner.invoke(app, [*base, "--emit", "torchtitan", "--compile-loss"]))
    assert "config registry" in line
    assert line.endswith("(not --emit megatron: --compile-loss is torchtitan's own)")
    line = one_line_error(runner.invoke(app, [*base, "--emit", "megatron", "--compile-loss"]))
    assert "--compile-loss is torchtitan's" in line


# ---- --help at 80 columns: every flag name whole ----------------------------------------------

@pytest.mark.parametrize("command", ["explain", "search", "compare"])
def test_help_at_80_columns_shows_every_flag_whole(command):
    import typer

    r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in r.stdout
    words = set(re.findall(r"(?<![\w-])--?[a-z][\w-]*", r.stdout))
    params = typer.main.get_command(app).commands[command].params
    names = {o for p in params for o in (*p.opts, *p.secondary_opts)}
    assert names <= words, sorted(names - words)  # --torchtitan-flex-ac, not --torchtitan-fle…


def test_the_emitters_cp_refusal_offers_megatron_only_without_torchtitans_own_flags():
    from planner.catalog import load_model
    from planner.errors import PlanError
    from planner.frameworks.emit import emit
    from planner.schema import PlanConfig

    plan = PlanConfig(dp=2, tp=2, cp=2, gbs=16, n_micro=8, seq_len=8192, zero_stage=3,
                      framework="torchtitan", cp_kind="a2a")
    for own, offered in ((False, True), (True, False)):
        with pytest.raises(PlanError) as caught:
            emit("torchtitan", plan.model_copy(update={"compile_loss": own}),
                 load_model("llama-3.1-8b"))
        assert "re-plan with --cp-kind ring" in str(caught.value)
        assert ("--framework megatron" in str(caught.value)) == offered
