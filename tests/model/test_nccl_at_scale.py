"""Issue 22 item 1's check at scale: published nccl-tests results on 32–512 GPUs
(tests/data/nccl_at_scale.json: each row's source, hardware, NCCL version and what was
unstated) against plan3d's NCCL tuner model, priced as a plan's collectives are
(model/nccl_tests.py: collective_group → tuner_link → nccl_pick). Nothing here is fitted; rows
the model misses for a reason we can name but not source a fix for are strict xfails carrying
that reason, so a change that makes them pass shows up.

Tolerances, stated before looking at the predictions:
- bandwidth-bound rows (≥ 8 GiB, the latency under 5 % of the time): ±15 % on the bus
  bandwidth. The profile's network figure is the low end of NVIDIA's "46–48 GB/s per NDR NIC"
  (nccl-tests#290); these fabrics reach 48.6 (389 GB/s over 8 NICs), so a right model lands
  ~6 % low on them; the same cluster's runs scatter 2 % (together-slinky-2026-07-11) and its
  largest jobs drop 6 % more (60 nodes: 366 against 390); twice that, rounded, is 15 %. A model
  15 % off would still order layouts whose collectives differ by more, which is what the planner
  needs of it.
- latency-bound rows (bytes to a few KiB): ±25 % on the time. NCCL's latencies are its tuner's
  per-step estimates (tuning.cc), not fitted to any fabric; nccl-tests' small-size times include
  the kernel launch and the proxy's progress, and the same run's 4–128 B times scatter 63–71 µs."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from planner.catalog import load_hardware
from planner.model.nccl_tests import predict_row, with_overrides

DATA = json.loads((Path(__file__).parents[1] / "data" / "nccl_at_scale.json").read_text())
ROWS = DATA["rows"]
BANDWIDTH_TOL = 0.15
LATENCY_TOL = 0.25


def _tolerance(row):
    return BANDWIDTH_TOL if "measured_busbw_gb_s" in row else LATENCY_TOL


def _predict(row):
    hw = with_overrides(load_hardware(row["profile"]), row.get("overrides", {}))
    return predict_row(row, hw)


def _param(row):
    marks = [pytest.mark.xfail(strict=True, reason=row["xfail"])] if "xfail" in row else []
    return pytest.param(row, id=row["id"], marks=marks)


@pytest.mark.parametrize("row", [_param(r) for r in ROWS])
def test_published_nccl_tests_row(row):
    got = _predict(row)
    assert got is not None, "plan3d does not offer this algorithm for this collective"
    predicted, measured = got
    assert predicted / measured - 1 == pytest.approx(0, abs=_tolerance(row)), (predicted, measured)


def test_the_rows_are_sourced_and_at_scale():
    # every row names a source with its URL, where in it, hardware, software and what was
    # unstated; all but one source's rows are at 64 GPUs or more (the 32-GPU one is the only
    # published reduce-scatter row found, and says so)
    for row in ROWS:
        source = DATA["sources"][row["source"]]
        assert {"url", "where", "hardware", "software", "unstated"} <= set(source)
        assert row["gpus"] == row["nodes"] * row["gpus_per_node"]
    small = {r["source"] for r in ROWS if r["gpus"] < 64}
    assert small == {"together-slinky-2026-07-11"}
    assert len(ROWS) >= 50 and max(r["gpus"] for r in ROWS) >= 480


def test_the_rows_that_pass_do_not_drift_with_scale():
    # the rows the model is held to (ring, tree, NVLS-tree, all-gather; 64 to 512 GPUs): their
    # median error lies within 8 % (the ~6 % the profile's per-NIC figure sits under these
    # fabrics, plus run-to-run scatter), and its slope against log2(GPUs) within 2 % per
    # doubling — at more than that the model would cross the 15 % tolerance between 64 and
    # 8,192 GPUs, growing optimistic (or pessimistic) with scale as issue 22 found of the
    # step times
    points = [(math.log2(row["gpus"]), p / m - 1) for row in ROWS
              if "xfail" not in row and row["gpus"] >= 64 for p, m in [_predict(row)]]
    assert len(points) >= 25
    errors = [e for _, e in points]
    assert abs(statistics.median(errors)) <= 0.08
    slope = statistics.linear_regression(*zip(*points)).slope
    assert abs(slope) <= 0.02, slope
