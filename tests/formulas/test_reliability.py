"""Stragglers, failures and goodput (planner/formulas/reliability.py): hand-derived cases
(tests/cases/reliability.toml), properties, and the formulas on arrays and symbols."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from planner.formulas import reliability as R

CASES = tomllib.loads((Path(__file__).parents[1] / "cases" / "reliability.toml").read_text())
LAMBDA = R.FAILURES_PER_GPU_HOUR
B_GPU = R.STORAGE_WRITE_GB_PER_S_PER_GPU * 1e9


@pytest.mark.parametrize("case", CASES["zmax"], ids=lambda c: str(c["n"]))
def test_expected_maximum_by_hand(case):
    assert R.expected_max_normal(float(case["n"])) == pytest.approx(case["expected"], abs=1e-4)


def test_expected_maximum_against_sampling_and_monotone():
    # the limit form overstates a small n a little and meets the sampled mean at large n
    rng = np.random.default_rng(0)
    sampled = rng.standard_normal((4000, 4096)).max(axis=1).mean()
    assert R.expected_max_normal(4096.0) == pytest.approx(sampled, rel=0.01)
    n = np.array([2.0, 8, 64, 512, 4096, 32768, 262144])
    assert np.all(np.diff(R.expected_max_normal(n)) > 0)


def test_straggler_by_hand_and_cross_check():
    c = CASES["straggler"]
    assert R.straggler_s(c["compute_s"], float(c["n"]), R.GPU_SPEED_CV) == pytest.approx(
        c["expected_s"], rel=1e-4)
    # not fitted, a cross-check: at 64k GPUs the whole spread z(N)·σ/μ is of the order of
    # PRISM's 9 % GPU time variability
    assert 0.04 < R.straggler_s(1.0, 65536.0, R.GPU_SPEED_CV, reference_ranks=1) < 0.12
    # the 8-GPU reference's own spread is in the efficiency already: nothing below it
    assert R.straggler_s(1.0, 8.0, R.GPU_SPEED_CV) == 0
    assert R.straggler_s(1.0, 2.0, R.GPU_SPEED_CV) == 0


def test_failures_by_hand():
    c = CASES["failures"]
    assert R.interruptions_per_day(16384, LAMBDA) == pytest.approx(c["per_day_16384"], rel=1e-6)
    assert R.interruptions_per_day(1024, LAMBDA) == pytest.approx(c["per_day_1024"], rel=1e-5)
    assert R.mtbf_s(16384, LAMBDA) == pytest.approx(c["mtbf_16384_s"], rel=1e-6)


def test_checkpoint_interval_and_goodput_by_hand():
    c = CASES["checkpoint"]
    size = R.checkpoint_bytes(c["params"], 14)
    delta = R.checkpoint_write_s(size, c["gpus"], B_GPU)
    mtbf = R.mtbf_s(c["gpus"], LAMBDA)
    tau = R.young_daly_interval_s(delta, mtbf)
    load = R.checkpoint_load_s(size, c["gpus"], B_GPU)
    assert (size, delta) == (pytest.approx(c["bytes"]), pytest.approx(c["write_s"]))
    assert tau == pytest.approx(c["interval_s"], rel=1e-5)
    assert R.goodput(tau, delta, R.RESTART_S + load, mtbf) == pytest.approx(c["goodput"], rel=1e-5)


def test_young_daly_is_the_best_interval():
    delta, mtbf, restart = 30.0, 8 * 3600.0, 600.0
    tau = R.young_daly_interval_s(delta, mtbf)
    around = np.linspace(0.3 * tau, 3 * tau, 201)
    g = R.goodput(around, delta, restart, mtbf)
    # the first-order goodput peaks within a few percent of Daly's higher-order τ, where it is
    # flat: the goodput at τ is the best to 10⁻⁴, and 0.3τ or 3τ lose far more
    assert around[np.argmax(g)] == pytest.approx(tau, rel=0.05)
    assert R.goodput(tau, delta, restart, mtbf) == pytest.approx(g.max(), abs=1e-4)
    assert g.max() - max(g[0], g[-1]) > 0.01


def test_goodput_falls_with_scale_and_restart_time():
    gpus = np.array([1024.0, 4096, 16384, 65536])
    mtbf = R.mtbf_s(gpus, LAMBDA)
    delta = R.checkpoint_write_s(R.checkpoint_bytes(70e9, 14), gpus, B_GPU)
    g = R.goodput(R.young_daly_interval_s(delta, mtbf), delta, R.RESTART_S, mtbf)
    assert np.all(np.diff(g) < 0) and g[0] > 0.97
    # the restart assumption's weight: 10 more minutes per restart cost 16,384 GPUs about
    # 600 / 11,135 = 5.4 points of goodput
    tau = R.young_daly_interval_s(delta[2], mtbf[2])
    drop = R.goodput(tau, delta[2], 600, mtbf[2]) - R.goodput(tau, delta[2], 1200, mtbf[2])
    assert drop == pytest.approx(600 / mtbf[2] * tau / (tau + delta[2]), rel=1e-9)


def test_symbols_give_youngs_first_order_interval():
    d, m = sp.symbols("delta M", positive=True)
    tau = R.young_daly_interval_s(d, m)
    # to first order in δ/M, Young's √(2δM): the ratio → 1 as δ/M → 0
    assert float(sp.limit(tau / sp.sqrt(2 * d * m), d, 0)) == pytest.approx(1)
    assert sp.simplify(R.mtbf_s(sp.Symbol("N"), sp.Symbol("lam")) - 3600.0 / (
        sp.Symbol("N") * sp.Symbol("lam"))) == 0


def test_the_straggler_formula_on_symbols_reads_z_n_minus_z_8_with_the_same_value():
    # explain shows T_strag by name, κ_g·max(0, z(N) − z(8)), not z's Gumbel form expanded in
    # sympy floats; its value is the float formula's (the case above: 10 s on 16,384 GPUs,
    # 0.36578 s)
    from planner.model.explain import formula_text

    t, k, n = sp.symbols("T κ_g N", positive=True)
    expr = R.straggler_s(t, n, k)
    assert formula_text(expr) == "T·κ_g·max(0, z(N) - z(8))"
    c = CASES["straggler"]
    value = float(expr.xreplace({t: c["compute_s"], k: R.GPU_SPEED_CV, n: c["n"]}))
    assert value == pytest.approx(c["expected_s"], rel=1e-4)
    assert value == pytest.approx(R.straggler_s(c["compute_s"], float(c["n"]), R.GPU_SPEED_CV),
                                  rel=1e-12)
    # below the reference the max keeps it at 0, as on floats
    assert float(expr.xreplace({t: 1.0, k: R.GPU_SPEED_CV, n: 4})) == 0
    # arrays and floats never see sympy: the same function, no wrapper
    arr = R.straggler_s(np.array([10.0, 10.0]), np.array([8.0, 16384.0]), R.GPU_SPEED_CV)
    assert arr == pytest.approx([0.0, c["expected_s"]], rel=1e-4)
