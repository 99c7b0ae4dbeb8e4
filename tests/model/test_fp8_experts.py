"""moe: a framework's FP8 recipe runs the routed experts' grouped GEMMs in FP8 or leaves them in
16 bits (Framework.fp8_expert_gemms). torchtitan's Float8Linear converter swaps nn.Linear only;
its GroupedExperts run torch._grouped_mm in bf16 (components/quantization/float8.py @ v0.2.2),
so T_exp under --precision fp8 is its bf16 value; Megatron's TE recipe runs them in FP8."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.model.cost import Choices, numbers, plan_costs
from planner.schema import PlanConfig

H100 = load_hardware("h100-nvlink")


def _terms(framework: str, precision: str) -> tuple[dict, object]:
    config = PlanConfig(framework=framework, dp=8, tp=1, pp=1, ep=8, mbs=1, n_micro=1, gbs=8,
                        seq_len=4096, zero_stage=2 if framework == "torchtitan" else 1,
                        precision=precision, recompute="full")
    x = numbers(load_model("qwen3-30b-a3b"), H100, config)
    terms: dict = {}

    def keep(key, value):
        terms[key] = value
        return value

    plan_costs(x, Choices.of(config), keep)
    return terms, x


def test_torchtitan_fp8_leaves_the_experts_gemms_in_bf16():
    bf16, _ = _terms("torchtitan", "bf16")
    fp8, x = _terms("torchtitan", "fp8")
    # the same FLOPs at the 16-bit peak and efficiency: the bf16 plan's time exactly
    assert float(fp8["expert_matmul_s"]) == pytest.approx(float(bf16["expert_matmul_s"]),
                                                          rel=1e-12)
    # while its linear layers (attention, shared experts, router) run at the FP8 peak
    assert x.peak_flops > 1.9 * x.peak_flops_16  # H100 SXM: 1978.9 vs 989.4 TFLOP/s
    assert float(fp8["matmul_s"] - fp8["expert_matmul_s"]) < float(
        bf16["matmul_s"] - bf16["expert_matmul_s"])


def test_megatron_fp8_runs_the_experts_gemms_in_fp8():
    bf16, xb = _terms("megatron", "bf16")
    fp8, x = _terms("megatron", "fp8")
    # T_exp ∝ 1/(F·η): the ratio of the two peaks and efficiencies, the wave term the same
    ratio = (xb.peak_flops * xb.gemm_eff) / (x.peak_flops * x.gemm_eff)
    assert float(fp8["expert_matmul_s"]) == pytest.approx(
        float(bf16["expert_matmul_s"]) * ratio, rel=1e-12)
    assert ratio < 0.75
