"""Plans that fit only inside the memory margin (issue 19, item 1): the table shows the fastest of
each layout that beats row 1, at most two, marked `m` after the ranked rows, with a one-line
legend under it; --json marks them in `ranks`; --why weighs each against row 1 part by part, the
parts adding up to the step difference (items 2 and 3)."""

from __future__ import annotations

import json
import math
import re

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.search.summary import margin_legend

runner = CliRunner()


def _seconds(text: str) -> float:
    return float(text.replace("−", "-").replace("+", ""))


@pytest.mark.parametrize("args, row_1, marked", [
    # torchtitan, 70B on 64 H100: row 1 at 66 % of memory; two FSDP layouts at 97 % step
    # 62.8 s against row 1's 68.7 s (the faster plans the issue saw ranked first; row 1 was the
    # pipelined dp1 tp2 pp8 cp4 zbv z2 sel before per-op SAC's rerun matmuls were costed)
    (["--model", "70b", "--gpus", "64", "--framework", "torchtitan"],
     "dp16 tp1 pp1 cp4 z3 sel", ["dp32 tp1 pp1 cp2 z3 sel", "dp16 tp1 pp1 cp4 mbs2 z3 sel"]),
    # 8B on 8 H100: the 99 % plan the issue saw ranked third
    (["--model", "8b", "--gpus", "8"], "dp2 tp1 pp1 cp4 z1",
     ["dp4 tp1 pp1 cp2 z1", "dp8 tp1 pp1 z2"]),
    # 70B on 512 H100: two layouts at 96–99 % of memory are faster, marked, never row 1 (one of
    # them the 1= row dp32 tp4 pp4 v8 z1 full3 without its recompute). Row 1 was dp32 tp8 pp2 v8
    # z1 (now 1=, 0.7 % slower) until attention ran at cuDNN's measured rates: cp2's ring has
    # the longer attention to hide under
    (["--model", "70b", "--gpus", "512", "--hw", "h100-nvlink"], "dp16 tp4 pp4 cp2 v6 z1",
     ["dp16 tp2 pp4 cp4 v6 z1", "dp32 tp4 pp4 v8 z1"]),
])
def test_faster_plans_inside_the_margin_are_shown_marked_never_first(args, row_1, marked):
    r = runner.invoke(app, ["search", *args, "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    layouts = [a[a.index("--plan") + 1] for a in data["explain_args"]]
    assert layouts[0] == row_1 and data["ranks"][0] == "1"
    assert [lay for lay, rk in zip(layouts, data["ranks"]) if rk == "m"] == marked
    assert data["ranks"][-len(marked):] == ["m"] * len(marked)  # after the ranked rows
    row1 = data["plans"][0]
    for plan, rk in zip(data["plans"], data["ranks"]):
        share = plan["memory"]["total_bytes"] / plan["memory"]["capacity_bytes"]
        assert (share > 1 - data["headroom"]) == (rk == "m"), (rk, share)
        if rk == "m":
            assert plan["time"]["step_s"] < row1["time"]["step_s"]
    assert margin_legend(0.1) in data["summary"]
    text = runner.invoke(app, ["search", *args], env={"COLUMNS": "80"}).stdout
    assert ("m: faster than row 1, but fits only inside the 10% memory margin (--headroom)."
            in text.splitlines())


def test_why_weighs_a_margin_row_part_by_part():
    # 70B on 512 H100 with a 30 % margin: row m is faster, inside the margin (above 70 % of
    # memory), and --why compares it with row 1 in parts that add up to the step difference
    args = ["search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink", "--headroom",
            "0.3", "--top", "5"]
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    i = data["ranks"].index("m")
    fast, best = data["plans"][i], data["plans"][0]
    layout = data["explain_args"][i][data["explain_args"][i].index("--plan") + 1]
    assert margin_legend(0.3) in data["summary"]
    why = " ".join(runner.invoke(app, [*args, "--why"], env={"COLUMNS": "80"}).stdout.split())
    line = re.search(rf"Row m, {re.escape(layout)}, is [\d.]+% faster than row 1: (.*?) \(fits "
                     r"only inside the memory margin\)", why).group(1)
    parts = re.findall(r"([a-zA-Z/ ]+) ([−+]\d+\.\d{3}) s", line.split(" = ")[0])
    total = _seconds(re.search(r"= ([−+]\d+\.\d{3}) s$", line).group(1))
    difference = fast["time"]["step_s"] - best["time"]["step_s"]
    assert difference < 0 and abs(total - difference) <= 5e-4  # printed to the millisecond
    # each part printed to the millisecond; parts under half a millisecond left out of the words
    assert abs(sum(_seconds(v) for _, v in parts) - total) <= 5e-4 * (len(parts) + 1) + 5e-4
    sizes = [abs(_seconds(v)) for _, v in parts]
    assert sizes == sorted(sizes, reverse=True)  # the largest first
    share = fast["memory"]["total_bytes"] / fast["memory"]["capacity_bytes"]
    assert 0.7 < share < 1 and math.floor(100 * share) >= 70


def test_the_json_schema_says_what_the_marks_mean():
    # `plan3d schema search`, the stable interface for scripts, documents the labels of `ranks`
    r = runner.invoke(app, ["schema", "search"])
    assert r.exit_code == 0, r.output
    props = json.loads(r.stdout)["properties"]
    ranks = props["ranks"]["description"]
    assert "'m' after the ranked rows" in ranks and "never recommended" in ranks
    assert "reproduce it exactly" in props["explain_args"]["description"]
