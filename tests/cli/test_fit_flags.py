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
])
def test_flags_that_do_not_apply_are_refused_in_one_line(flags, says):
    r = runner.invoke(app, [*EXPLAIN, *flags])
    assert r.exit_code != 0
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0], r.stderr
