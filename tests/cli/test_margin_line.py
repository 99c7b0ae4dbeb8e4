"""The line under search's table for a faster plan that fits only inside the memory margin says
where its lead comes from, part by part, and the parts add up to the step difference (issue 19,
items 2 and 3)."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()


def _seconds(text: str) -> float:
    return float(text.replace("−", "-").replace("+", ""))


def test_the_margin_line_names_the_parts_that_sum_to_the_step_difference():
    # 70B on 512 H100 with a 30 % margin: row m is faster, at 100 % of memory
    r = runner.invoke(app, ["search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink",
                            "--headroom", "0.3", "--top", "5", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    line = next(s for s in data["summary"] if s.startswith("Faster but inside"))
    fast = data["plans"][data["ranks"].index("m")]
    best = data["plans"][0]
    args = data["explain_args"][data["ranks"].index("m")]
    assert f"(m): {args[args.index('--plan') + 1]} at " in line  # named as the table spells it
    parts = re.findall(r"([a-zA-Z/ ]+) ([−+]\d+\.\d{3}) s", line.split("faster: ", 1)[1])
    total = _seconds(re.search(r"= ([−+]\d+\.\d{3}) s\.$", line).group(1))
    difference = fast["time"]["step_s"] - best["time"]["step_s"]
    assert difference < 0 and abs(total - difference) <= 5e-4  # printed to the millisecond
    # each part printed to the millisecond; parts under half a millisecond left out of the words
    assert abs(sum(_seconds(v) for _, v in parts) - total) <= 5e-4 * (len(parts) + 1) + 5e-4
    assert [name.strip() for name, _ in parts][0] == "compute"  # the largest first
    assert "100% of memory" in line
