"""torch._grouped_mm's measured efficiency (HardwareProfile.efficiency.grouped_mm_16): the
routed experts of a framework that runs one grouped kernel (torchtitan, DeepSpeed AutoEP) are
costed at it where the profile has it, in 16 bits; Megatron's per-expert GEMMs (Transformer
Engine) are not. The weighing pass (score_weighting_bytes) is the framework's own."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.model.estimate import estimate
from planner.model.explain import explain
from planner.schema import PlanConfig

B200 = load_hardware("b200-nvlink")
MODEL = load_model("qwen3-30b-a3b")


def _without_measurement(hw):
    eff = hw.efficiency.model_copy(update={"grouped_mm_16": None})
    return hw.model_copy(update={"efficiency": eff})


def _plan(framework: str, precision="bf16", **extra) -> PlanConfig:
    return PlanConfig(dp=8, tp=1, pp=1, ep=8, mbs=1, n_micro=4, gbs=32, seq_len=4096,
                      zero_stage=2 if framework == "torchtitan" else 1, recompute="none",
                      sequence_parallel=False, framework=framework, precision=precision,
                      **extra)


def test_the_profile_carries_the_benchmark_median():
    # torchao's eight bf16 fwd+bwd figures on B200 of 2,250 TFLOPS: median of
    # 0.332 0.363 0.365 0.380 0.383 0.336 0.316 0.335 = (0.336 + 0.363)/2 = 0.35
    assert B200.efficiency.grouped_mm_16 == 0.35
    # H100: torchao's same microbenchmark, pytorch/ao#2765: 3·2·16640·8192·5120 FLOPs =
    # 4.1875e12 in 10.524 ms = 397.9 TFLOP/s of 989.4 = 0.402 → 0.40; the other Hopper profiles
    # (the same SM) take it
    assert load_hardware("h100-nvlink").efficiency.grouped_mm_16 == 0.40
    assert 3 * 2 * 16640 * 8192 * 5120 / 10.524e-3 / 989.4e12 == pytest.approx(0.402, abs=5e-4)
    for hw in ("h800-nvlink", "h200-nvlink", "dgx-h100-superpod", "aws-p5-efa",
               "meta-h100-roce"):
        assert load_hardware(hw).efficiency.grouped_mm_16 == 0.40, hw
    assert load_hardware("a100-nvlink").efficiency.grouped_mm_16 is None  # not measured


def test_megatron_is_not_moved():
    config = _plan("megatron")
    a = estimate(MODEL, B200, config).time.step_s
    b = estimate(MODEL, _without_measurement(B200), config).time.step_s
    assert a == b


def _terms(hw, config) -> dict[str, float]:
    return {t.key: t.value for t in explain(MODEL, hw, config).terms}


def test_torchtitan_experts_at_the_measured_share():
    config = _plan("torchtitan")
    measured = _terms(B200, config)["expert_matmul_s"]
    dense = _terms(_without_measurement(B200), config)["expert_matmul_s"]
    # the same FLOPs at 0.35 instead of the 16-bit GEMM figure 0.61: × 0.61/0.35 = 1.742857
    assert measured / dense == pytest.approx(0.61 / 0.35, rel=1e-12)


def test_torchtitan_weighs_in_fp32():
    terms = _terms(load_hardware("h100-nvlink"), _plan("torchtitan"))
    # T = 4096 tokens, k = 8, h = 2048: 2048·(4096·8·20 + 2·2·4096) = 1,375,731,712 B at
    # 3.35 TB/s · 0.89 = 2.9815 TB/s: 0.461423 ms
    assert terms["moe_weighting_s"] == pytest.approx(1_375_731_712 / 2.9815e12, rel=1e-9)
