"""moe (issue 23): the shared experts' GEMMs shown as their own term, T_sh, inside T_mm, with no
total moved: T_mm is the non-expert GEMMs (attention, router), T_sh and T_exp, and it equals the
one non-expert GEMM term it was split from (the same FLOPs at the same wave efficiency η·w)."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.formulas import flops as F
from planner.formulas import timing as T
from planner.model.cost import Choices, numbers, plan_costs
from planner.schema import PlanConfig

H100 = load_hardware("h100-nvlink")
PLANS = {
    # DeepSeek-V3: one shared expert of 2048 (n_s·3·h·f_s = 3·7168·2048 weights a token)
    "deepseek-v3": PlanConfig(dp=128, tp=1, pp=16, ep=64, mbs=1, n_micro=8, gbs=1024,
                              seq_len=4096, zero_stage=1, sequence_parallel=False),
    # Qwen3-235B-A22B: no shared expert, so no T_sh
    "qwen3-235b-a22b": PlanConfig(dp=64, tp=4, pp=4, ep=16, mbs=1, n_micro=16, gbs=1024,
                                  seq_len=4096, zero_stage=1, sequence_parallel=True),
}


def _terms(name: str):
    model, config = load_model(name), PLANS[name]
    x = numbers(model, H100, config)
    terms: dict = {}

    def keep(key, value):
        terms[key] = value
        return value

    costs = plan_costs(x, Choices.of(config), keep)
    return model, config, x, terms, costs


@pytest.mark.parametrize("name", sorted(PLANS))
def test_t_mm_is_its_parts_and_what_it_was(name):
    model, c, x, terms, _ = _terms(name)
    s, b, t, cp = c.seq_len, c.mbs, c.tp, c.cp
    eff = x.gemm_eff * terms["wave_efficiency"]
    # before the split: one non-expert GEMM term over attention + shared experts + router
    joint = T.compute_time_s(F.layer_matmul_flops(
        s, b, x.attn_matmul + x.shared_matmul + model.hidden * x.router_experts) / (t * cp),
        x.peak_flops, eff)
    assert terms["matmul_s"] == pytest.approx(joint + terms["expert_matmul_s"], rel=1e-12)
    if model.n_shared_experts:
        # T_sh = 2·b·s·n_s·3·h·f_s/(t·c·F_peak·η·w): 3·7168·2048 = 44,040,192 weights a token
        assert x.shared_matmul == 3 * 7168 * 2048 == model.n_shared_experts * 3 * \
            model.hidden * model.shared_expert_ffn
        by_hand = 2 * b * s * 44_040_192 / (t * cp) / (x.peak_flops * eff)
        assert terms["shared_matmul_s"] == pytest.approx(by_hand, rel=1e-12)
        assert 0 < terms["shared_matmul_s"] < terms["matmul_s"] - terms["expert_matmul_s"]
    else:
        assert "shared_matmul_s" not in terms


def test_explain_shows_t_sh_with_its_formula():
    from planner.model.explain import explain

    model, config = load_model("deepseek-v3"), PLANS["deepseek-v3"]
    plan = explain(model, H100, config)
    rows = {t.key: t for t in plan.terms}
    sh = rows["shared_matmul_s"]
    assert sh.symbol == "T_sh" and "b·s" in sh.formula and "w" in sh.formula
    assert "T_sh" in rows["matmul_s"].formula and "T_exp" in rows["matmul_s"].formula
    _, _, _, terms, _ = _terms("deepseek-v3")
    assert sh.value == pytest.approx(terms["shared_matmul_s"], rel=1e-12)
