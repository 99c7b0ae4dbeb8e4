"""The recipe and recompute-level flags (issue 21) on the command line: accepted where they
apply, refused in one stderr line where they do not."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()
EXPLAIN = ["explain", "-m", "70b", "-n", "512", "--tp", "8", "--pp", "4", "--gbs", "1024"]


def test_explain_takes_the_recipe_and_the_levels_and_says_them_back():
    r = runner.invoke(app, [*EXPLAIN, "--recompute", "full", "--recompute-layers", "5",
                            "--precision", "fp8", "--fp8-recipe", "blockwise", "--json"])
    assert r.exit_code == 0, r.output
    config = json.loads(r.stdout)["config"]
    assert (config["recompute_layers"], config["fp8_recipe"]) == (5, "blockwise")
    r = runner.invoke(app, [*EXPLAIN, "--recompute", "selective", "--recompute-modules",
                            "core_attn,mlp", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["recompute_modules"] == ["core_attn", "mlp"]


@pytest.mark.parametrize("flags, says", [
    (["--fp8-recipe", "mxfp8"], "--fp8-recipe needs --precision fp8"),
    (["--precision", "fp8", "--fp8-recipe", "mxfp8"], "Blackwell"),
    (["--recompute", "selective", "--recompute-layers", "3"], "needs --recompute full"),
    (["--recompute", "full", "--recompute-modules", "mlp"], "needs --recompute selective"),
    (["--framework", "deepspeed", "--zero", "1", "--recompute", "full", "--recompute-layers",
      "3"], "deepspeed does not run it"),
    (["--compile-loss"], "--compile-loss is torchtitan's"),  # fit: megatron has no such switch
    (["--torchtitan-flex-ac"], "--torchtitan-flex-ac is torchtitan's"),
    # on a model without MLA + MoE blocks it changes nothing (test_refusals_say_what_works)
    (["--framework", "torchtitan", "--zero", "3", "--torchtitan-flex-ac"],
     "--torchtitan-flex-ac changes only MLA + MoE blocks"),
])
def test_flags_that_do_not_apply_are_refused_in_one_line(flags, says):
    r = runner.invoke(app, [*EXPLAIN, *flags])
    assert r.exit_code != 0
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0], r.stderr


def test_flex_ac_is_costed_but_not_emitted():
    # costed for the published runs of torchtitan < v0.2.1, not written for 0.2.2/0.3.0
    from pathlib import Path

    import planner

    model = str(Path(planner.__file__).parent / "reference/models/torchtitan-deepseek-v3-16b.toml")
    r = runner.invoke(app, ["explain", "-m", model, "-n", "8", "--framework", "torchtitan",
                            "--ep", "8", "--zero", "3", "--torchtitan-flex-ac", "--emit",
                            "torchtitan"])
    assert r.exit_code != 0
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "leave --torchtitan-flex-ac out to emit" in lines[0], r.stderr


def test_compile_loss_costs_torchtitans_compiled_loss_and_rides_along():
    """--compile-loss (torchtitan's compile.components ["loss"]) reaches the plan: the loss's
    peak is the 16-bit logits and their 16-bit gradient, 2·2·s·b·V bytes, not eager PyTorch's
    12·s·b·V; the search's rows carry the flag in their explain arguments."""
    from pathlib import Path

    import planner

    model = str(Path(planner.__file__).parent / "reference/models/torchtitan-deepseek-v3-16b.toml")
    base = ["--model", model, "--gpus", "8", "--framework", "torchtitan", "--gbs", "32",
            "--seq-len", "4096", "--json"]
    plan = ["explain", *base, "--plan", "dp8 tp1 pp1 ep8 mbs4 z3 sel"]

    def loss_bytes(*flags):
        data = json.loads(runner.invoke(app, [*plan, *flags]).stdout)
        return data, next(t["value"] for t in data["terms"] if t["key"] == "loss_bytes")

    _, eager = loss_bytes()
    data, compiled = loss_bytes("--compile-loss")
    assert data["config"]["compile_loss"] is True
    # (12 − 2·2)·s·b·V = 8 · 4096 · 4 · 102400 = 13,421,772,800 bytes
    assert eager - compiled == 13_421_772_800
    r = runner.invoke(app, ["search", *base, "--compile-loss", "--top", "3"])
    assert r.exit_code == 0, r.output
    assert all("--compile-loss" in args for args in json.loads(r.stdout)["explain_args"])


def test_a_framework_implied_by_emit_rides_along_in_the_row_command():
    """search --emit torchtitan plans torchtitan's layouts without --framework: the row's explain
    arguments must name it, or the pasted command explains a Megatron plan (and refuses
    --compile-loss)."""
    r = runner.invoke(app, ["search", "-m", "8b", "-n", "8", "--emit", "torchtitan",
                            "--compile-loss", "--top", "2", "--json"])
    assert r.exit_code == 0, r.output
    for args in json.loads(r.stdout)["explain_args"]:
        assert args[args.index("--framework") + 1] == "torchtitan"
        again = runner.invoke(app, [*args, "--json"])
        assert again.exit_code == 0, again.output
        assert json.loads(again.stdout)["config"]["framework"] == "torchtitan"
