"""explain's term tables at 80 columns (issue 19 review): a formula breaks only between a name
or number and the next (never 'sq' / 'rt(b)'), and every part of the step has its share of the
step, the shares adding up to the whole."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.outputs.render import TIME_PARTS, formula_lines

runner = CliRunner()

DEEPSEEK = ["explain", "--model", "deepseek-v3", "--gpus", "2048", "--plan",
            "dp128 tp4 pp4 v8 ep256 ovl z1", "--gbs", "1024"]
OFFLOAD = ["explain", "--model", "70b", "--gpus", "64", "--framework", "torchtitan", "--plan",
           "dp32 tp1 pp1 cp2 z3 sel offp"]


def test_formula_lines_break_after_an_operator_only():
    # λ's formula in 33 cells: the first break after the product dot at cell 29, the second
    # line the 33 cells that remain
    lam = "v_max + 1 + 1.17741002251547·sqrt(c)·sqrt(t)/(sqrt(b)·sqrt(s))"
    assert formula_lines(lam, 33).split("\n") == [
        "v_max + 1 + 1.17741002251547·", "sqrt(c)·sqrt(t)/(sqrt(b)·sqrt(s))"]
    assert formula_lines("a·b", 80) == "a·b"  # short enough: as it is
    assert formula_lines("abcdefgh", 3) == "abcdefgh"  # one run longer than the width: whole
    assert formula_lines("ab + cd", 4) == "ab +\ncd"  # the space at the break dropped


def _formula_rows(text: str, symbol: str, formula: str) -> list[str]:
    """The printed lines of the term `symbol`'s formula in explain's text: the formula column
    starts where its table's header says `formula`, and ends at the first run of 3 spaces."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.split()[:1] == [symbol])
    x = next(lines[k] for k in range(i, 0, -1) if " formula " in lines[k]).index("formula")
    rows, got, want = [], "", formula.replace(" ", "")
    for line in lines[i:]:
        rows.append(re.split(r"\s{3,}", line[x:].rstrip())[0])
        got += rows[-1].replace(" ", "")
        if len(got) >= len(want):
            break
    assert got == want, (symbol, rows)
    return rows


@pytest.mark.parametrize("symbol", ["λ", "T_strag", "T_ep,exp", "M_nccl"])
def test_no_formula_is_split_inside_a_name_at_80_columns(symbol):
    r = runner.invoke(app, DEEPSEEK, env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    data = json.loads(runner.invoke(app, [*DEEPSEEK, "--json"]).stdout)
    formula = next(t["formula"] for t in data["terms"] if t["symbol"] == symbol)
    rows = _formula_rows(r.stdout, symbol, formula)
    assert len(rows) > 1  # long enough to break at 80 columns
    # each line ends at a break: an operator it ends with, or a space (rich's) before the next
    done = ""
    for line in rows[:-1]:
        done += line.replace(" ", "")
        assert line[-1] in "·/+,(" or formula.replace(" ", "")[len(done):][:1] in "-+)" or \
            _space_after(formula, done), (symbol, line)
    assert all(len(x) <= 80 for x in r.stdout.splitlines())


def _space_after(formula: str, done: str) -> bool:
    """Whether the formula has a space where the printed text `done` (spaces removed) ends."""
    n = 0
    for k, ch in enumerate(formula):
        if ch != " ":
            n += 1
        if n == len(done):
            return formula[k + 1:k + 2] == " "
    return False


@pytest.mark.parametrize("args", [DEEPSEEK, OFFLOAD], ids=["moe", "offload"])
def test_every_part_of_the_step_has_its_share_and_they_add_up(args):
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    step = data["time"]["step_s"]
    parts = {t["key"]: t for t in data["terms"] if t["key"] in TIME_PARTS}
    # the MoE plan has the exposed all-to-all, the offload plan the offload copies; both the
    # stragglers: the parts add up to the step
    assert {"straggler_s", "ep_exposed_s" if args is DEEPSEEK else "offload_s"} <= set(parts)
    assert sum(t["value"] for t in parts.values()) == pytest.approx(step, rel=1e-9)
    text = runner.invoke(app, args, env={"COLUMNS": "80"}).stdout
    shares = []
    for t in parts.values():
        first = next(x for x in text.splitlines() if x.split()[:1] == [t["symbol"]])
        share = re.search(r"(\d+\.\d)%\s*$", first)
        assert share, (t["symbol"], first)  # T_strag and T_ep,exp had a blank share
        assert float(share.group(1)) == pytest.approx(100 * t["value"] / step, abs=0.05)
        shares.append(float(share.group(1)))
    assert sum(shares) == pytest.approx(100, abs=0.05 * len(shares))


def test_the_answer_says_where_the_whole_step_goes_and_the_margin():
    # 70B on 512 H100 without recompute (search's row m): 77.7 of 79.6 GiB, 97 %, above the
    # 90 % search keeps; its step's parts, stragglers included, add up to 100 % (88 + 3 + 8 + 0
    # + 2 = 101 by rounding each)
    args = ["explain", "--model", "70b", "--gpus", "512", "--plan", "dp32 tp4 pp4 v7 z1",
            "--brief"]
    text = " ".join(runner.invoke(app, args, env={"COLUMNS": "80"}).stdout.split())
    assert "(97%), 1.9 GiB to spare on the most loaded (first) pipeline stage, inside the 10% " \
        "memory margin (search marks it m, never row 1)." in text
    shares = re.search(r"Of the step: (.*?)\.", text).group(1)
    named = {n.strip(): int(v) for n, v in re.findall(r"([a-z ]+) (\d+)%", shares)}
    assert list(named) == ["compute", "bubble", "exposed communication", "optimizer",
                           "stragglers"]
    assert abs(sum(named.values()) - 100) <= 2  # each share rounded to 1 %
    data = json.loads(runner.invoke(app, [*args[:-1], "--json"]).stdout)["time"]
    assert named["stragglers"] == round(100 * data["straggler_s"] / data["step_s"])
    # row 1's plan, at 88 %, is outside the margin: no such words
    row1 = runner.invoke(app, [*args[:5], "--plan", "dp32 tp4 pp4 v8 z1 full3", "--brief"],
                         env={"COLUMNS": "80"}).stdout
    assert "margin" not in row1 and "(88%)" in row1
