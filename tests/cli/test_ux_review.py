"""A new user's walk at 80 columns (issue 19 review): the table and the text under it agree."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from planner.cli import app
from planner.units import share_text

runner = CliRunner()


def test_memory_share_rounds_down_everywhere():
    # 96.6 % of memory reads 96 % (the safe side for memory), 99.99 % reads 99 %, a full GPU 100 %
    assert (share_text(96.6, 100), share_text(99.99, 100), share_text(100, 100)) == (
        "96%", "99%", "100%")
    r = runner.invoke(app, ["search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink",
                            "--headroom", "0", "--top", "3"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    row1 = next(x for x in r.stdout.splitlines() if re.match(r"\s+1\S*\s+dp", x))
    table = re.findall(r"(\d+)%", row1)[1]  # MFU, then mem
    text = re.search(r"Row 1, the plan to run: .*?, (\d+)% of memory", r.stdout).group(1)
    assert table == text
