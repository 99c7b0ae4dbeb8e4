"""The options weighed (search --why's "Also weighed", --json `alternatives`) are held to the
recommendation rule's memory margin (issue 19, item 1): a plan an option names, which the summary
may say would change the answer, fits with the margin, as row 1 must — also the plans tried
outside the searched space (hybrid sharding on the fastest layouts, the other fp8 recipes on row
1's layout), which once counted a plan that fit only inside the margin."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()
E70 = ["--model", "70b", "--gpus", "512", "--hw", "h100-nvlink"]


@pytest.mark.parametrize("args, hsdp", [
    # hybrid sharding tried on the three fastest layouts: dp256 hsdp128 tp1 pp1 cp2 z3 full27
    # (8.056 s) was named, at 91 % of memory, inside the 10 % margin; now dp32 hsdp16 tp8 pp2 v8 z1
    (E70, True),
    # the other fp8 recipes on row 1's layout; no hybrid group fits with the margin (it named
    # dp256 hsdp128 tp2 pp1 z3 full18, inside it)
    ([*E70, "--precision", "fp8"], False),
])
def test_every_plan_an_option_names_fits_with_the_margin(args, hsdp):
    r = runner.invoke(app, ["search", *args, "--json", "--top", "1"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    extra = data["explain_args"][0][data["explain_args"][0].index("--gbs"):]
    # the plans tried outside the searched space (the rest come from the plans that fit with
    # the margin, by construction)
    named = {a["plan"] for a in data["alternatives"] if a["plan"] and a["option"].startswith(
        ("hybrid sharding", "other fp8 recipes"))}
    assert any("hsdp" in p for p in named) == hsdp  # hybrid sharding named where one fits
    assert any("fp8" in a["option"] and a["plan"] for a in data["alternatives"]) == (
        "fp8" in args)
    for layout in sorted(named):
        e = runner.invoke(app, ["explain", *E70, "--plan", layout, *extra, "--json"])
        assert e.exit_code == 0, (layout, e.output)
        memory = json.loads(e.stdout)["memory"]
        share = memory["total_bytes"] / memory["capacity_bytes"]
        assert share <= 1 - data["headroom"], (layout, share)
