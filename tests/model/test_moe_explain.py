"""explain on the three MoE models issue 23 names shows each MoE term with its formula, and the
formula's value is the estimate's (explain and estimate share plan_costs)."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.model.estimate import estimate
from planner.model.explain import explain
from planner.schema import PlanConfig

MOE_TERMS = ("moe_load", "moe_router_permute_s", "moe_host_wait_s", "expert_matmul_s",
             "expert_wave_efficiency",
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


def test_exchange_delay_reads_over_its_named_sub_terms():
    """The EP exchange's wait beside the step's reduction and gather (data_parallel
    .exchange_delay_s) is shown as Σ_g min(O·F/(W + F), F) over each group's own seconds O and
    the exchange's F beside them, named as sub-terms (not the collectives' whole expressions,
    which made a cold explain take 19 s); the sub-terms' values, put back into that formula
    with the phase's window W (the stage's backward: L_s·p·(T_bwd + T_rec); the first forward:
    L_s·p·T_fwd), give the term's value."""
    from planner.formulas.comm import flow_delay_s

    model, hw = load_model("deepseek-v3"), load_hardware("h100-nvlink")
    config = PlanConfig(dp=128, tp=4, pp=4, vpp=7, schedule="interleaved", ep=64, mbs=1,
                        n_micro=16, gbs=2048, seq_len=4096, moe_dispatcher="deepep",
                        moe_a2a_overlap=True, zero_stage=1)
    terms = {t.key: t for t in explain(model, hw, config).terms}
    v = {t.symbol: t.value for t in terms.values()}
    windows = {"rs": v["L_s"] * 4 * (v["T_bwd"] + v["T_rec"]), "ag": v["L_s"] * 4 * v["T_fwd"]}
    for key, phase in (("dp_reduce_ep_delay_s", "rs"), ("dp_gather_ep_delay_s", "ag")):
        subs = {t.symbol: t.value for k, t in terms.items() if k.startswith(key + ":")}
        # both groups (the dense dp group, the experts' edp group), each with its O and F
        assert sorted(subs) == sorted(f"{s}_{phase},{g}" for s in "OF" for g in ("dp", "edp"))
        for symbol in subs:
            assert symbol in terms[key].formula
        assert len(terms[key].formula) < 200  # readable: no collective's expression inlined
        total = sum(flow_delay_s(subs[f"O_{phase},{g}"], subs[f"F_{phase},{g}"], windows[phase])
                    for g in ("dp", "edp"))
        assert terms[key].value == pytest.approx(total, rel=1e-9)
        assert 0 < terms[key].value <= subs[f"F_{phase},dp"] + subs[f"F_{phase},edp"]
