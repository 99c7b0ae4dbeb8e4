"""plan3d compare: one job over several profiles and GPU counts; the deadline sizing; the chart."""

from __future__ import annotations

import json
import sys

import pytest
from rich.console import Console
from typer.testing import CliRunner

from planner.catalog import load_hardware, load_model
from planner.cli import app
from planner.compare import CompareResult, chart_image, compare, per_profile
from planner.errors import PlanError
from planner.outputs.render import render_compare
from planner.search.core import search
from planner.search.ranking import DEFAULT_HEADROOM
from planner.search.request import PlanRequest

runner = CliRunner()
MODEL = "8b"
PROFILES = ("h100-nvlink", "b200-nvlink")
COUNTS = (16, 32)
GBS = 256  # sequences of 8,192 tokens: 2 Mi tokens per step, in every cell
TOKENS = 1e12


@pytest.fixture(scope="module")
def result() -> CompareResult:
    return compare(load_model(MODEL), [(n, load_hardware(n)) for n in PROFILES], COUNTS,
                   PlanRequest(gpus=max(COUNTS), gbs=GBS), TOKENS,
                   prices={"h100-nvlink": 2.0, "b200-nvlink": 4.0}, goodput=0.9)


def test_every_cell_is_the_searchs_best_plan_budgeted_by_hand(result):
    assert [(c.hardware, c.gpus) for c in result.cells] == [
        ("h100-nvlink", 16), ("h100-nvlink", 32), ("b200-nvlink", 16), ("b200-nvlink", 32)]
    model = load_model(MODEL)
    price = {"h100-nvlink": 2.0, "b200-nvlink": 4.0}
    for c in result.cells:
        hw = load_hardware(c.hardware)
        p, b = c.plan, c.plan.budget
        # the same job everywhere: the same global batch
        assert p.config.gbs == GBS and p.config.n_gpus == c.gpus
        # search's row 1 for the cell: one recommendation rule (planner.ranking) for both
        best = search(model, hw, PlanRequest(gpus=c.gpus, gbs=GBS), top=1,
                      headroom=DEFAULT_HEADROOM).plans[0]
        assert p.config == best.config and p.time.step_s == best.time.step_s
        # days from tokens/s: τ = gbs · seq / step; days = T / (τ · 0.9) / 86,400
        tau = GBS * 8192 / p.time.step_s
        assert p.time.tokens_per_s == pytest.approx(tau)
        assert b.days == pytest.approx(TOKENS / (tau * 0.9) / 86_400)
        # GPU-hours = GPUs · days · 24; cost = GPU-hours · price; energy = GPU-hours · TDP
        assert b.gpu_hours == pytest.approx(c.gpus * b.days * 24)
        assert b.cost == pytest.approx(b.gpu_hours * price[c.hardware])
        assert b.gpu_power_w == hw.tdp_w
        assert b.energy_mwh == pytest.approx(b.gpu_hours * hw.tdp_w / 1e6)
        assert b.goodput == 0.9


def test_the_answer_names_the_cheapest_and_the_fastest(result):
    cells = result.cells
    # ties (perfect scaling costs the same GPU-hours) go to the faster cell
    cheapest = min(cells, key=lambda c: (c.plan.budget.cost, c.plan.budget.days))
    fastest = min(cells, key=lambda c: c.plan.budget.days)
    assert (result.cheapest.hardware, result.cheapest.gpus) == (cheapest.hardware, cheapest.gpus)
    assert (result.fastest.hardware, result.fastest.gpus) == (fastest.hardware, fastest.gpus)
    assert result.cheapest.cost == cheapest.plan.budget.cost
    assert result.cheapest_by == "cost" and result.gbs == GBS and result.seq_len == 8192


def test_without_prices_the_cheapest_is_the_fewest_gpu_hours():
    r = compare(load_model(MODEL), [(n, load_hardware(n)) for n in PROFILES], [16],
                PlanRequest(gpus=16, gbs=GBS), TOKENS)
    assert r.cheapest_by == "gpu_hours" and r.cheapest.cost is None
    assert r.cheapest.gpu_hours == min(c.plan.budget.gpu_hours for c in r.cells)
    # without --goodput, each cell's own: the plan's goodput from failures and checkpoints
    assert r.goodput is None
    for c in r.cells:
        assert c.plan.budget.goodput == c.plan.goodput.fraction
        assert c.plan.budget.goodput_from == "model"


def test_default_batch_is_that_of_the_largest_count():
    # no --gbs: max(4 Mi tokens, 1 Ki tokens · 8,192 GPUs) = 8 Mi tokens = 1,024 sequences of
    # 8,192, used for the 8-GPU cell too
    r = compare(load_model(MODEL), [("h100-nvlink", load_hardware("h100-nvlink"))], [8, 8192],
                PlanRequest(gpus=8192), TOKENS)
    assert r.gbs == 1024 and all(c.plan.config.gbs == 1024 for c in r.cells if c.plan)


def test_deadline_sizes_the_fewest_gpus_that_finish():
    model, hw = load_model(MODEL), load_hardware("h100-nvlink")
    req = PlanRequest(gpus=256, gbs=GBS)
    # one count: whole 8-GPU domains, doubling up to it: 8, 16, 32, 64, 128, 256
    days = {n: compare(model, [("h100-nvlink", hw)], [n], req.model_copy(update={"gpus": n}),
                       TOKENS).cells[0].plan.budget.days for n in (32, 64)}
    deadline = (days[32] + days[64]) / 2  # 32 GPUs are too slow, 64 make it
    r = compare(model, [("h100-nvlink", hw)], [256], req, TOKENS, deadline_days=deadline)
    assert [c.gpus for c in r.cells] == [8, 16, 32, 64]  # it stops at the first that finishes
    assert [c.meets_deadline for c in r.cells] == [False, False, False, True]
    assert [c.chosen for c in r.cells] == [False, False, False, True]
    assert r.cells[-1].plan.budget.days == pytest.approx(days[64])
    assert r.fastest.gpus == r.cheapest.gpus == 64
    assert [c.gpus for c in r.shown] == [64]
    # listed counts are tried as given
    r = compare(model, [("h100-nvlink", hw)], [24, 48, 96], req, TOKENS, deadline_days=deadline)
    assert [c.gpus for c in r.cells][-1] == 96 and r.cells[-1].chosen
    # a deadline nobody meets: no answer, and a note with the best seen
    r = compare(model, [("h100-nvlink", hw)], [16, 32], req, TOKENS, deadline_days=1e-3)
    assert r.cheapest is None and r.fastest is None and not any(c.chosen for c in r.cells)
    assert "no size tried (16, 32 GPUs) trains 1T tokens in 0.001 days" in r.notes[0]
    assert "the best is" in r.notes[0] and "on 32 GPUs" in r.notes[0]


def test_a_cell_without_a_plan_says_why():
    # 405B on 8 GPUs fits nowhere; on 16,384 it does
    r = compare(load_model("405b"), [("h100-nvlink", load_hardware("h100-nvlink"))], [8, 2048],
                PlanRequest(gpus=2048, gbs=1024), 15e12)
    small, large = r.cells
    assert small.plan is None and "fits on 8 × h100-nvlink" in small.reason
    assert large.plan is not None and r.cheapest.gpus == 2048


@pytest.mark.parametrize("text, expected", [
    ("2.5", 2.5),
    ("h100-nvlink=2.5, b200-nvlink=4", {"h100-nvlink": 2.5, "b200-nvlink": 4.0}),
])
def test_per_profile_values(text, expected):
    assert per_profile(text, "price", PROFILES, 1e6) == expected


@pytest.mark.parametrize("text, message", [
    ("a100-nvlink=2", r"--price: 'a100-nvlink' is not one of the profiles given to --hw"),
    ("h100-nvlink=2,h100-nvlink=3", r"h100-nvlink is given twice"),
    ("h100-nvlink:2", r"'h100-nvlink:2' is not a number; give one number for all profiles"),
    ("h100-nvlink=2,b200-nvlink", r"'b200-nvlink' has no '='"),
    ("cheap", r"is not a number"),
    ("-1", r"must be positive"),
    ("h100-nvlink=nan", r"must be positive"),
    (",", r"empty value"),
])
def test_per_profile_errors(text, message):
    with pytest.raises(PlanError, match=message):
        per_profile(text, "price", PROFILES, 1e6)


def test_render_fits_80_columns_and_puts_the_answer_first(result):
    console = Console(width=200, record=True, color_system=None)
    render_compare(result, console)
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert "…" not in text
    assert lines[1].startswith(f"Cheapest: {result.cheapest.hardware} × {result.cheapest.gpus}")
    assert lines[2].startswith(f"Fastest: {result.fastest.hardware} × {result.fastest.gpus}")
    for c in result.cells:
        assert any(line.startswith(c.hardware) and f"{c.gpus:,}" in line for line in lines)


def test_the_longest_readme_row_fits_80_columns_on_one_line(result):
    # the README's 405b comparison: priced, each cell's own goodput (G%), 16,384 GPUs, a layout of
    # 25 characters (dp64 tp2 pp16 cp8h4 v7 z1). Widths: hardware 11 + GPUs 6 + layout 25 + step
    # 5 + G% 2 + days 5 + GPU-h 5 + cost 5 + MWh 5 = 69, and 8 one-space gaps: 77 ≤ 80 (with
    # two-space gaps, 85: the layout folded onto a second line, as it did before)
    from planner.formulas.choices import ContextKind, ZeroStage

    cell = result.cells[0]
    long = cell.plan.config.model_copy(update=dict(
        dp=64, tp=2, pp=16, cp=8, cp_kind=ContextKind.HIERARCHICAL, cp_a2a=4, vpp=7, mbs=1,
        zero_stage=ZeroStage(1), sequence_parallel=True))
    assert long.short_label() == "dp64 tp2 pp16 cp8h4 v7 z1"
    plan = cell.plan.model_copy(update={"config": long})
    big = result.model_copy(update={"goodput": None, "cells": [
        cell.model_copy(update={"plan": plan, "gpus": 16_384}), *result.cells[1:]]})
    console = Console(width=80, record=True, color_system=None)
    render_compare(big, console)
    lines = console.export_text().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    row = next(line for line in lines if line.startswith("h100-nvlink 16,384 "))
    assert "dp64 tp2 pp16 cp8h4 v7 z1 " in row and row.rstrip().endswith(
        _short(plan.budget.energy_mwh))
    header = next(line for line in lines if line.startswith("hardware"))
    assert header.split() == ["hardware", "GPUs", "layout", "step", "G%", "days", "GPU-h",
                              "cost", "MWh"]
    assert "hardware      GPUs layout" in header  # one space between columns here
    # a table that fits with two spaces between columns keeps them
    console = Console(width=80, record=True, color_system=None)
    render_compare(result, console)
    assert "  GPUs  layout  " in console.export_text()


def _short(x):
    from planner.outputs.render import _short_number

    return _short_number(x)


CLI = ["compare", "--model", MODEL, "--hw", ",".join(PROFILES), "--gpus", "16,32", "--gbs",
       str(GBS), "--train-tokens", "1T", "--price", "h100-nvlink=2,b200-nvlink=4"]


def test_cli_json_matches_its_schema():
    jsonschema = pytest.importorskip("jsonschema")
    r = runner.invoke(app, [*CLI, "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    schema = json.loads(runner.invoke(app, ["schema", "compare"]).stdout)
    jsonschema.validate(data, schema)
    assert data["cheapest"]["cost"] == min(c["plan"]["budget"]["cost"] for c in data["cells"])


def test_cli_text():
    r = runner.invoke(app, CLI)
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[1].startswith("Cheapest: ")
    assert max(len(line) for line in r.stdout.splitlines()) <= 80


@pytest.mark.parametrize("extra, message", [
    (["--price", "a100-nvlink=3"], "not one of the profiles given to --hw"),
    (["--goodput", "1.5"], "--goodput"),
    (["--deadline-days", "0"], "--deadline-days must be a positive"),
    (["--chart", "x.pdf"], "--chart writes .svg or .png"),
    (["--hw", "h100-nvlink,h100-nvlink"], "names a profile twice"),
])
def test_cli_errors_are_one_line(extra, message):
    r = runner.invoke(app, [*CLI, *extra])
    assert r.exit_code == 2, r.output
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cli_no_cell_finishes_exits_1():
    r = runner.invoke(app, [*CLI, "--deadline-days", "0.001"])
    assert r.exit_code == 1
    assert "no profile trains the tokens within 0.001 days" in r.stderr


def test_chart_svg_and_png(result, tmp_path):
    pytest.importorskip("matplotlib")
    svg = chart_image(result, "svg").decode()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    for name in PROFILES:  # text kept as text
        assert name in svg
    assert chart_image(result, "svg").decode() == svg  # no date inside: the same every run
    assert chart_image(result, "png").startswith(b"\x89PNG")
    out = tmp_path / "curves.svg"
    r = runner.invoke(app, [*CLI, "--chart", str(out)])
    assert r.exit_code == 0, r.output
    # the path may wrap at the console's width: compare with whitespace folded
    assert out.read_text().count("<svg") == 1 and f"wrote {out}" in " ".join(r.stdout.split())


def test_chart_without_matplotlib_is_one_clear_line(result, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib → ImportError
    with pytest.raises(PlanError, match=r"pip install 'plan3d\[chart\]'"):
        chart_image(result, "svg")
    out = tmp_path / "c.png"
    r = runner.invoke(app, [*CLI, "--chart", str(out)])
    assert r.exit_code == 2 and not out.exists()
    assert r.stderr.strip() == ("plan3d: error: --chart draws with matplotlib, which is not "
                                "installed: pip install 'plan3d[chart]'")


def test_matplotlib_is_not_imported_without_chart():
    import subprocess

    code = ("import sys; from typer.testing import CliRunner; from planner.cli import app; "
            f"r = CliRunner().invoke(app, {CLI!r}); assert r.exit_code == 0, r.output; "
            "print('matplotlib' in sys.modules, 'scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_the_readme_shows_two_compare_examples():
    # their output is checked with every other README example by tests/test_ux.py, at 80 columns
    # (each row on one line: test_the_longest_readme_row_fits_80_columns_on_one_line)
    from pathlib import Path

    text = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    assert text.count("<!-- plan3d-output columns=80: plan3d compare ") == 2
