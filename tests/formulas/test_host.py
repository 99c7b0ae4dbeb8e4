"""formulas/host.py: a segment run from an empty launch queue, by hand, as a property of the
two-stage flow line it stands for, and its constant against the micro-benchmark it cites."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from planner.formulas import host as H


def test_by_hand():
    # 300 kernels at 6 µs: the host issues them in 1.8 ms. Against 1.0 ms on the GPU the
    # segment is host-bound: 1.8 − 1.0 = 0.8 ms more than the GPU's time
    assert H.synced_exposed_s(1.0e-3, 300, 6e-6) == pytest.approx(0.8e-3, rel=1e-12)
    # against 5 ms the GPU is behind after the first launch: one t_h, 6 µs
    assert H.synced_exposed_s(5.0e-3, 300, 6e-6) == pytest.approx(6e-6, rel=1e-12)


def test_the_segment_is_the_slower_of_the_two_not_their_sum():
    gpu = np.linspace(1e-4, 1e-2, 50)
    n, t_h = 400, 6e-6
    segment = gpu + H.synced_exposed_s(gpu, n, t_h)
    assert np.allclose(segment, np.maximum(gpu + t_h, n * t_h), rtol=1e-12)
    assert np.all(segment < gpu + n * t_h)  # never the sum (n·t_h = 2.4 ms > t_h)


def test_it_bounds_a_simulated_flow_line_from_below():
    """Kernel i starts on the GPU once the host has issued it (at i·t_h) and kernel i − 1 has
    finished; the simulated makespan is at least G + the term, at most G + H."""
    rng = np.random.default_rng(23)
    t_h = 6e-6
    for _ in range(200):
        n = int(rng.integers(1, 400))
        g = rng.exponential(rng.choice([1e-6, 1e-5, 1e-4]), n)
        finish = 0.0
        for i, gi in enumerate(g, start=1):
            finish = max(i * t_h, finish) + gi
        gpu = g.sum()
        assert gpu + H.synced_exposed_s(gpu, n, t_h) <= finish * (1 + 1e-12)
        assert finish <= gpu + n * t_h * (1 + 1e-12)


def test_the_host_cost_is_its_parts_and_the_measurement():
    assert H.HOST_OP_S == pytest.approx(H.EAGER_OP_S + H.LAUNCH_S, rel=1e-12)
    # the kept run of benchmarks/bench_eager_op.py: its median over the operators, to the
    # constant's 0.1 µs
    results = Path(__file__).parents[2] / "benchmarks" / "results_eager_op.txt"
    median_us = float(re.search(r"^median\s+([\d.]+) µs", results.read_text(), re.M).group(1))
    assert median_us * 1e-6 == pytest.approx(H.EAGER_OP_S, abs=0.1e-6)
