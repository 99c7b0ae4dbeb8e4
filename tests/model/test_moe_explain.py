"""explain on the three MoE models issue 23 names shows each MoE term with its formula, and the
formula's value is the estimate's (explain and estimate share plan_costs)."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.model.estimate import estimate
from planner.model.explain import explain
from planner.schema import PlanConfig

MOE_TERMS = ("moe_load", "moe_router_permute_s", "expert_matmul_s", "expert_wave_efficiency",
             "all_to_all_s", "ep_exposed_s", "ep_bytes", "moe_dispatch_buffer_bytes")

PLANS = {
    # DeepSeek-V3 as its report trained it: PP16, EP64 over 8 nodes, DeepEP, overlap
    "deepseek-v3": dict(dp=128, pp=16, ep=64, mbs=1, n_micro=16, gbs=2048, seq_len=4096,
                        recompute="full", moe_dispatcher="deepep",
                        sequence_parallel=False),
    # Qwen3-235B-A22B as the Megatron MoE model zoo's H100 row
    "qwen3-235b-a22b": dict(dp=16, tp=2, pp=8, vpp=4, ep=32, mbs=1, n_micro=128, gbs=2048,
                            seq_len=4096, schedule="interleaved", grad_dtype="bf16"),
    # Qwen3-30B-A3B, EP8 in one node
    "qwen3-30b-a3b": dict(dp=16, pp=2, ep=8, mbs=1, n_micro=8, gbs=128, seq_len=8192,
                          recompute="none", grad_dtype="bf16", sequence_parallel=False),
}


@pytest.mark.parametrize("name", PLANS)
def test_explain_shows_every_moe_term(name):
    model, hw = load_model(name), load_hardware("h100-nvlink")
    config = PlanConfig(**PLANS[name])
    plan = explain(model, hw, config)
    terms = {t.key: t for t in plan.terms}
    for key in MOE_TERMS:
        assert key in terms, (name, key)
        assert terms[key].formula and terms[key].why, (name, key)
    # λ > 1 with expert parallelism, and explain's value is the estimate's
    assert terms["moe_load"].value > 1
    assert plan.time.step_s == pytest.approx(estimate(model, hw, config).time.step_s, rel=1e-9)
    # the dispatch formula names the links it crosses
    assert "W_n" in terms["all_to_all_s"].formula or "α" in terms["all_to_all_s"].formula
