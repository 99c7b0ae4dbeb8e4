"""compare's chart: one legend, numbers on every axis; the missing extra found before computing."""

from __future__ import annotations

import re
import sys

import pytest

from planner.catalog import load_hardware, load_model
from planner.compare import chart_image, check_chart, compare
from planner.errors import PlanError
from planner.search.request import PlanRequest

PROFILES = ("h100-nvlink", "b200-nvlink")


@pytest.fixture(scope="module")
def svg() -> str:
    pytest.importorskip("matplotlib")
    result = compare(load_model("8b"), [(n, load_hardware(n)) for n in PROFILES], [16, 32],
                     PlanRequest(gpus=32, gbs=256), 1e12, prices=2.0)
    return chart_image(result, "svg").decode()


def texts(svg: str) -> list[str]:
    """The SVG's text elements (svg.fonttype none keeps text as text)."""
    return [re.sub(r"<[^>]+>", "", t).strip() for t in re.findall(r"<text[^>]*>(.*?)</text>",
                                                                    svg, flags=re.S)]


def test_one_legend_for_both_panels(svg):
    t = texts(svg)
    for name in PROFILES:  # each profile named once: one legend, not one per panel
        assert t.count(name) == 1, t


def test_every_axis_carries_numbers(svg):
    t = texts(svg)
    numbers = [s for s in t if re.fullmatch(r"[\d,.]+[kMG]?", s)]
    assert {"16", "32"} <= set(numbers)  # the GPU counts, on both x axes
    assert t.count("16") == 2
    # the value axes: days (1-2-5 steps on the log axis) and cost (engineering notation)
    assert len([s for s in numbers if s not in ("16", "32")]) >= 4, t


def test_without_matplotlib_check_chart_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib → ImportError
    with pytest.raises(PlanError, match=r"^--chart draws with matplotlib, which is not installed: "
                                        r"pip install 'plan3d\[chart\]'$"):
        check_chart()
