"""The published A100 runs reproduced by the time model (issue: step time, throughput and MFU).

Tolerance: the issue's targets — median |error| of step time ≤ 10 %, none worse than 25 % —
because the sources leave micro-batch size and virtual stages unstated (planner.model.validation says
what is assumed) and the runs' own measurement noise is a few per cent. Nothing here is fitted to
these runs: the A100 GEMM efficiency comes from the per-layer benchmark (Table 4)."""

import pytest

from planner.catalog import load_hardware
from planner.model.validation import calibrate_layer_gemm, published_cases, validate


@pytest.fixture(scope="module")
def report():
    return validate(load_hardware("a100-nvlink"))


def test_every_end_to_end_case_is_run(report):
    # 10 rows of Narayanan Table 1, the Megatron README example, 8 rows of Korthikanti Table 5,
    # and the 530B run at DP 8: 20 cases.
    assert len(report.cases) == 20


def test_median_error_within_ten_percent(report):
    assert report.median_abs_error <= 0.10, report.median_abs_error


def test_no_case_worse_than_twenty_five_percent(report):
    worst = max(report.cases, key=lambda c: abs(c.error))
    assert abs(worst.error) <= 0.25, (worst.id, worst.error)


def test_recompute_ordering_matches_korthikanti(report):
    # Table 5: selective recompute + SP is faster than full recompute for every model size.
    by_id = {c.id: c for c in report.cases}
    for size in ("22B", "175B", "530B", "1T"):
        sel = by_id[f"korthikanti22_{size}_sp_selective"]
        full = by_id[f"korthikanti22_{size}_full_recompute"]
        assert sel.predicted_s < full.predicted_s
        # and the predicted speed-up is within 15 points of the measured one (29–32 %); the 22B
        # run (one micro-batch, no pipeline) is the loosest: 41 % predicted vs 29 % measured
        measured_gain = full.measured_s / sel.measured_s - 1
        predicted_gain = full.predicted_s / sel.predicted_s - 1
        assert abs(predicted_gain - measured_gain) < 0.15, size


def test_layer_calibration_reproduces_table4():
    # The one fitted number: η from one 22B layer (t=8, b=4). Each of the ten fwd/bwd timings is
    # reproduced within 8 % (the model's backward is exactly 2× forward; measured 1.55–1.64×).
    fit = calibrate_layer_gemm(load_hardware("a100-nvlink"))
    assert 0.62 < fit.efficiency < 0.70
    for _, fm, fp, bm, bp in fit.rows:
        assert abs(fp / fm - 1) < 0.08
        assert abs(bp / bm - 1) < 0.08
    # and the profile carries that value (rounded to two places)
    assert load_hardware("a100-nvlink").efficiency.gemm.bf16 == pytest.approx(fit.efficiency,
                                                                               abs=0.005)


def test_cases_carry_sources():
    for case in published_cases():
        assert case["source"], case["id"]
