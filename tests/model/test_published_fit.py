"""The fit verdict, proven both ways on published runs (planner/reference/published_fit.json):
every run its source says ran is judged to fit, every run its source says ran out of memory is
judged not to, each with the recipe its source states and what plan3d assumed written beside it.

Tolerance: plan3d's memory is validated to ±10 % per row against measured peaks
(tests/test_measured_memory.py), so a verdict is only claimed outside that band: a run that ran
must be predicted at most 1.10 × its GPU's capacity, a run that ran out of memory above its
capacity (plan3d's "does not fit").  Nothing in the cost model was fitted to these rows.

A row's reported peak (torchtitan's logged max reserved) is matched within the same ±10 %: the
spread of what a row leaves unstated (allocator fragmentation, the PyTorch build, the expert
load on the busiest rank).  pytorch/torchtitan#1789's DeepSeek-V3 16B run (73.32 GiB on an
80 GB H100, op SAC, the loss compiled) is costed at 78.4 GiB (+6.9 %) from its op-SAC block
(formulas.moe_memory.torchtitan_flex_sac_block_bytes) and compiled loss
(formulas.activations.compiled_loss_peak_bytes), each measured by the CPU oracle, not fitted
to the row; plan3d said 146.7 GiB ("does not fit") before them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.catalog import load_hardware, load_model
from planner.model.estimate import estimate
from planner.model.validation import case_config, case_model, published_cases
from planner.schema import PlanConfig

REFERENCE = Path(__file__).parents[2] / "planner" / "reference"
DATA = json.loads((REFERENCE / "published_fit.json").read_text())
ROWS = DATA["rows"]
GIB = 2**30
TOLERANCE = 0.10


def row_model(row: dict):
    """The row's model: a preset by name, or the model file beside the table ('model_file')."""
    if "model_file" in row:
        return load_model(str(REFERENCE / row["model_file"]))
    return load_model(row["model"])


def fit_config(row: dict) -> PlanConfig:
    """The row's layout: torchtitan FSDP2 over dp ranks (times tp), the local batch as one
    micro-batch; a row with a global batch (Megatron's pipelines) runs gbs/(dp·b) of them, its
    recompute modules, dispatcher and all-to-all overlap as stated. 'layer' (torchtitan's per-layer selective AC, every N-th block checkpointed:
    activation_checkpoint.py @ 1f029641b) is partial recompute of ⌊L/N⌋ layers, each keeping
    only its input, the others everything."""
    extra = {}
    recompute = row["recompute"]
    if recompute == "layer":
        recompute = "full"
        extra["recompute_layers"] = row_model(row).n_layers // row["ac_layer_every"]
    if "gbs" in row:  # a pipeline's micro-batches: the global batch over dp local batches
        extra["n_micro"] = row["gbs"] // (row["dp"] * row["local_batch"])
    if row.get("vpp", 1) > 1:
        extra.update(vpp=row["vpp"], schedule="interleaved")
    for key in ("recompute_modules", "moe_dispatcher", "moe_a2a_overlap"):
        if key in row:
            extra[key] = row[key]
    return PlanConfig(
        dp=row["dp"], tp=row["tp"], pp=row["pp"], cp=row["cp"], mbs=row["local_batch"],
        n_micro=extra.pop("n_micro", 1), gbs=row.get("gbs", row["dp"] * row["local_batch"]),
        seq_len=row["seq_len"],
        zero_stage=row["zero"], recompute=recompute, sequence_parallel=row["tp"] > 1,
        ep=row.get("ep", 1),
        framework=row["framework"], precision=row["precision"],
        fp8_recipe=row.get("fp8_recipe"),
        fp8_param_gather=row.get("fp8_param_gather", False),  # enable_fsdp_float8_all_gather
        compile_loss=row.get("compile_loss", False),  # compile.components = ["loss"]
        # torchtitan before v0.2.1 on its flex flavours: the attention in full AC
        torchtitan_flex_ac=row.get("torchtitan_flex_ac", False),
        **extra)


def row_hardware(row: dict):
    hw = load_hardware(row["hardware"])
    if "hbm_gb" in row:  # the source's GPU has a different HBM size than the profile
        hw = hw.model_copy(update={"hbm_gib": row["hbm_gb"] * 1e9 / GIB})
    return hw


def test_the_rows_are_sourced_and_both_outcomes_are_present():
    assert {r["outcome"] for r in ROWS} == {"ran", "oom"}
    assert all(r["source"].startswith("https://") and r["stated"] and r["assumed"] for r in ROWS)
    assert all(r["dp"] * r["tp"] * r["pp"] * r["cp"] == r["gpus"] for r in ROWS)


@pytest.mark.parametrize("row", [r for r in ROWS if r["outcome"] == "ran"], ids=lambda r: r["id"])
def test_every_run_that_ran_fits(row):
    hw = row_hardware(row)
    memory = estimate(row_model(row), hw, fit_config(row)).memory
    assert memory.total_bytes <= (1 + TOLERANCE) * hw.capacity_bytes, \
        f"{memory.total_bytes / GIB:.1f} GiB of {hw.capacity_bytes / GIB:.1f}"


KNOWN_PEAK_MISSES = {
    # plan3d 69.7 / 67.8 GiB against 47.96 / 46.97 GiB measured (Trainy's June 2025 H200 runs,
    # torch.compile + float8 with FSDP float8 all-gather). The same eager layout on H100 in
    # torchtitan's Dec 2024 Table 3 (8B, FSDP 128, local batch 2, per-op AC) measured 67.0 GiB,
    # which plan3d matches (67.3), and compile + Float8 saved only 5.6 GiB there (Table 1): what
    # the 2025 stack drops beyond that is not found yet. A known miss, not a tolerance widened.
    "trainy25-l3-8b-32h200-fsdp32-b2-float8", "trainy25-l3-8b-64h200-fsdp64-b2-float8",
    # plan3d 191.0 GiB against 88 % of a B200 (157.5 GiB) for torchtitan's DeepSeek-V3 16B at
    # local batch 4 × 6,144 tokens, compiled, no AC (PR 1993); the same notes put local batch
    # 4 × 4,096 at "2/3rds of VRAM" (≈ 119 GiB) where plan3d counts 139.3 GiB: plan3d counts
    # ≈ 1.2× what torchtitan's compiled MoE holds. Its verdicts stand (the three OOMs are ≥ 1.36×
    # the capacity, beyond that factor); the cause is not found yet.
    "tt1993-dsv3-16b-8b200-ep1-b4-s6144"}


@pytest.mark.parametrize("row", [
    pytest.param(r, marks=pytest.mark.xfail(strict=True, reason="known miss: KNOWN_PEAK_MISSES"))
    if r["id"] in KNOWN_PEAK_MISSES else r
    for r in ROWS if "measured_gib" in r], ids=lambda r: r["id"])
def test_a_reported_peak_is_matched_within_the_tolerance(row):
    # where the source reports the peak it measured (torchtitan's Dec 2024 H100 tables, the
    # maximum over GPUs), plan3d's peak is within ±10 % of it (the band of
    # tests/test_measured_memory.py); eager PyTorch counted for the torch.compile rows
    memory = estimate(row_model(row), row_hardware(row), fit_config(row)).memory
    assert memory.total_bytes / GIB == pytest.approx(row["measured_gib"], rel=TOLERANCE)


@pytest.mark.parametrize("row", [r for r in ROWS if r["outcome"] == "oom"], ids=lambda r: r["id"])
def test_every_run_that_ran_out_of_memory_does_not_fit(row):
    memory = estimate(row_model(row), row_hardware(row), fit_config(row)).memory
    assert not memory.fits, f"{memory.total_bytes / GIB:.1f} GiB"


CASES = {c["id"]: c for c in published_cases()}


@pytest.mark.parametrize("case_id", DATA["megatron_ran_ids"])
def test_every_korthikanti_run_fits_on_its_a100(case_id):
    # Korthikanti et al. 2022 trained each of these on A100 80GB (Tables 3 and 5)
    config, _ = case_config(CASES[case_id])
    assert estimate(case_model(CASES[case_id]), load_hardware("a100-nvlink"), config).memory.fits
