"""The plan flags are one set (planner.cli.plan_flags): declared once, offered by explain, search
and compare alike, each the PlanRequest field of its name."""

from __future__ import annotations

import json
from dataclasses import fields

import typer
from typer.testing import CliRunner

from planner.cli import app
from planner.cli.plan_flags import PLAN_FLAG_NAMES, PlanFlags, with_plan_flags
from planner.search.request import PlanRequest

runner = CliRunner()


def _options(command: str) -> set[str]:
    group = typer.main.get_command(app)
    return {p.name for p in group.commands[command].params}


def test_every_plan_flag_is_a_request_field_and_every_request_field_a_flag():
    # parse_request passes a flag on by its name: a flag that names no field would be refused by
    # PlanRequest (extra="forbid"); the fields left are the searched space's (search's and
    # compare's --allow-tp-across-nodes and --offload) and --gpus, which compare takes as a list
    assert set(PLAN_FLAG_NAMES) <= set(PlanRequest.model_fields)
    assert set(PlanRequest.model_fields) - set(PLAN_FLAG_NAMES) == {
        "gpus", "allow_tp_across_nodes", "offload"}


def test_explain_search_and_compare_offer_every_plan_flag():
    for command in ("explain", "search", "compare"):
        missing = set(PLAN_FLAG_NAMES) - _options(command)
        assert not missing, (command, missing)


def test_the_flags_keep_their_spellings_and_defaults():
    group = typer.main.get_command(app)
    params = {p.name: p for p in group.commands["search"].params}
    assert params["tokens_per_step"].opts == ["--tokens-per-step"]
    assert params["sp"].opts == ["--sp"] and params["sp"].secondary_opts == ["--no-sp"]
    assert params["overlap_grad_reduce"].default is True
    assert params["precision"].default == "bf16" and params["recompute_group"].default == 1
    for f in fields(PlanFlags):
        assert params[f.name].default == f.default, f.name


def test_compare_takes_the_plan_flags_it_once_lacked():
    # before the shared set, compare had no --ep: its search tried every ep
    r = runner.invoke(app, ["compare", "--model", "mixtral-8x7b", "--hw", "h100-nvlink",
                            "--gpus", "64", "--train-tokens", "1T", "--ep", "4", "--json"])
    assert r.exit_code == 0, r.output
    assert [c["plan"]["config"]["ep"] for c in json.loads(r.stdout)["cells"]] == [4]


def test_a_command_without_the_flags_parameter_is_refused():
    def lonely(model: str) -> None:
        pass

    try:
        with_plan_flags(lonely)
    except TypeError as exc:
        assert "no `flags: PlanFlags` parameter" in str(exc)
    else:
        raise AssertionError("with_plan_flags took a command without `flags`")


def test_a_flag_declared_inline_joins_its_panel():
    # --mtp and --moe-shared-expert-overlap are declared in PlanFlags alone, panel and all
    r = runner.invoke(app, ["search", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    panel = r.stdout.split("─ Mixture of experts ─", 1)[1].split("╰", 1)[0]
    assert "--mtp" in panel and "--no-mtp" in panel and "--moe-shared-expert-overlap" in panel


def _params(command: str) -> dict:
    group = typer.main.get_command(app)
    return {p.name: p for p in group.commands[command].params}


def test_every_option_is_in_a_named_panel():
    # each option names its panel where it is declared: --contiguous-checkpoints, added without
    # a HELP_PANELS entry, sat alone with --help in the unnamed "Options" panel
    for command in ("explain", "search", "compare"):
        loose = [name for name, p in _params(command).items()
                 if name != "help" and not getattr(p, "rich_help_panel", None)]
        assert not loose, (command, loose)
    r = runner.invoke(app, ["search", "--help"], env={"COLUMNS": "200"})
    memory = r.stdout.split("─ Memory and recompute ─", 1)[1].split("╰", 1)[0]
    assert "--contiguous-checkpoints" in memory
    options = r.stdout.split("─ Options ─", 1)[1].split("╰", 1)[0]
    assert [w for w in options.split() if w.startswith("--")] == ["--help"]


def test_search_and_compare_share_the_search_flags():
    # the flags that shape the searched space, beyond the plan: search's and compare's alike
    for name in ("allow_tp_across_nodes", "offload", "headroom"):
        s, c = _params("search")[name], _params("compare")[name]
        assert (s.opts, s.default, s.help) == (c.opts, c.default, c.help), name
    # 405B on 64 H100: no plan fits without offload; compare's cell offloads 90 % of the
    # optimizer (--offload fit), and with --offload none has no plan
    base = ["compare", "--model", "405b", "--hw", "h100-nvlink", "--gpus", "64",
            "--train-tokens", "1T"]
    r = runner.invoke(app, [*base, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["cells"][0]["plan"]["config"]["offload_optimizer"] == 0.9
    r = runner.invoke(app, [*base, "--offload", "none"])
    assert r.exit_code == 1 and "no cell has a plan that fits" in r.stderr
