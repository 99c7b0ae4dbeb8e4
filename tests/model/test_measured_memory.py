"""Measured peak memory against the model, under the framework that ran it; and every collected
published run that really ran is judged to fit.

torchtitan's published peak reserved memory (tests/data/measured_memory.json, with the source of
every row) is compared with plan3d's reserved bytes (what PyTorch's caching allocator holds:
torch.cuda.max_memory_reserved, which torchtitan prints). Nothing in the memory model was fitted
to these rows: the eager and per-op SAC activation sets, the loss peak and the FSDP2 conventions
come from the frameworks' source and the PyTorch oracle (tests/oracle/), the allocator's slack from
the hardware profile.

Tolerance: 10 % per row (the issue's target). When this test was written the 18 rows came out
−9.0 … +6.7 % (median |error| 3.0 %). Earlier versions missed four rows: the 405B pipeline rows
had been costed with micro-batches of one sequence where torchtitan's default at the benchmark's
commit is as many micro-batches as pipeline ranks, and the activation gradients of the layer
under backward (measured by tests/oracle/test_step_peak.py) were not counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.catalog import load_hardware, load_model
from planner.model.estimate import estimate
from planner.model.validation import h100_run_config, published_h100_runs
from planner.schema import PlanConfig

DATA = Path(__file__).parents[1] / "data"
ROWS = json.loads((DATA / "measured_memory.json").read_text())["rows"]
# the benchmark's GPUs are H100 with 96 GB HBM2e; reserved bytes do not depend on capacity
H100 = load_hardware("h100-nvlink")
GIB = 2**30
TOLERANCE = 0.10

def torchtitan_config(row: dict) -> PlanConfig:
    """The row's layout. With PP, torchtitan at the benchmark's commit carves the local batch into
    as many micro-batches as there are pipeline ranks (experimental.pipeline_parallel_microbatches
    defaults to None, and build_pipeline_schedule then takes pipeline_parallel_degree:
    torchtitan/parallelisms/pipelining_utils.py @ 9dec370), for 1F1B and Interleaved1F1B alike:
    local batch 32 → 8 micro-batches of 4 sequences. Without PP the local batch is one
    micro-batch."""
    n_micro = row["pp"]
    return PlanConfig(
        dp=row["dp"], tp=row["tp"], pp=row["pp"], cp=row["cp"], vpp=row.get("vpp", 1),
        mbs=row["local_batch"] // n_micro, n_micro=n_micro, gbs=row["dp"] * row["local_batch"],
        seq_len=row["seq_len"], zero_stage=3, recompute=row["recompute"],
        sequence_parallel=row["tp"] > 1, schedule=row["schedule"], framework=row["framework"])


def test_the_rows_are_what_the_docstring_says():
    assert len(ROWS) == 18
    assert all(r["framework"] == "torchtitan" and r["dp"] * r["tp"] * r["pp"] * r["cp"] == r["gpus"]
               for r in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_torchtitan_peak_reserved_within_tolerance(row):
    memory = estimate(load_model(row["model"]), H100, torchtitan_config(row)).memory
    error = memory.reserved_bytes / GIB / row["reserved_gib"] - 1
    assert abs(error) <= TOLERANCE, f"{error:+.1%}"


def test_the_issue_example_8b_fsdp_eager():
    # Llama 3.1 8B, FSDP 8, local batch 2, seq 8192, per-op SAC, eager: 82.4 GiB measured; the
    # model before frameworks said 101 GiB. plan3d now: 16Ψ/8 states + SAC set + fp32 loss
    row = next(r for r in ROWS if r["id"] == "tt-8b-fsdp8-eager")
    memory = estimate(load_model("8b"), H100, torchtitan_config(row)).memory
    assert 0.90 * 82.4 <= memory.reserved_bytes / GIB <= 1.10 * 82.4
    # the loss dominates what the old model left out: 12·s·b·V = 12·8192·2·128256 B = 23.5 GiB
    assert memory.activations_bytes / GIB > 23.5


DGXC = published_h100_runs()


@pytest.mark.parametrize("run", DGXC, ids=lambda r: f"{r['model']}-{r['gpus']}-{r['precision']}")
def test_every_published_megatron_run_that_ran_fits(run):
    # NVIDIA's DGX Cloud recipes (NeMo = Megatron-Core) on H100 80 GB: each ran, so each must fit
    plan = estimate(load_model(run["model"]), H100, h100_run_config(run))
    assert plan.memory.fits, f"{plan.memory.total_bytes / GIB:.1f} GiB"


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_every_torchtitan_run_that_ran_fits_on_its_96_gb_gpu(row):
    # the benchmark's H100 have 96 GB of HBM2e, taken as 96·10⁹ B = 89.4 GiB (the usable figure
    # is not published): its runs, measured at ≤ 85 GiB reserved, must fit there
    h96 = H100.model_copy(update={"hbm_gib": 96e9 / GIB})
    assert estimate(load_model(row["model"]), h96, torchtitan_config(row)).memory.fits
