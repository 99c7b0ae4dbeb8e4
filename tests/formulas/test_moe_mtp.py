"""Multi-token prediction (formulas/moe_mtp.py): hand-derived values, the symbolic form, and the
model and launch settings agreeing on where the modules sit."""

from __future__ import annotations

import pytest
import sympy

from planner.formulas import moe_mtp as MTP


def test_extra_params_by_hand():
    # DeepSeek-V3, h = 7168, V′ = 129,280 (a multiple of 128), t = 1, D = 1:
    # eh_proj 2·7168² = 102,760,448; three norms 3·7168 = 21,504; the embedding copy
    # 129,280·7168 = 926,679,040 → 1,029,460,992
    assert MTP.mtp_extra_params(1, 7168, 129_280, 1) == 1_029_460_992
    # no module, nothing (not even the embedding copy)
    assert MTP.mtp_extra_params(0, 7168, 129_280, 1) == 0
    # over t = 8 the projection and the embedding split, the norms do not:
    # (102,760,448 + 926,679,040)/8 + 21,504 = 128,701,440
    assert MTP.mtp_extra_params(1, 7168, 129_280, 8) == 128_701_440


def test_time_and_activations_by_hand():
    # eh_proj on 4096 tokens of h = 7168: 2·4096·2·7168² = 841,813,590,016 FLOPs
    assert MTP.eh_proj_flops(4096, 7168) == 841_813_590_016
    assert MTP.mtp_time_s(1, 2e-3, 40e-3) == pytest.approx(42e-3)
    # 2 micro-batches in flight, s = 4096, b = 1, h = 7168, no CP/SP: 3·2·4096·7168 B =
    # 176,160,768 each, + a 1 GB loss: 2·176,160,768 + 10⁹
    assert MTP.mtp_activation_bytes(1, 2, 4096, 1, 7168, 1, 1, 1e9) == 2 * 176_160_768 + 1e9


def test_symbolic_form():
    D, h, V, t = sympy.symbols("D h V t", positive=True)
    expr = MTP.mtp_extra_params(D, h, V, t)
    # with one module the min is 1: 2h²/t + 3h + V·h/t
    assert sympy.simplify(expr.subs(D, 1) - (2 * h**2 / t + 3 * h + V * h / t)) == 0


def _dsv3(**kw):
    from planner.schema import PlanConfig

    base = dict(dp=64, tp=1, pp=16, ep=64, mbs=1, n_micro=16, gbs=1024, seq_len=4096,
                zero_stage=1, recompute="selective", sequence_parallel=False)
    return PlanConfig(**{**base, **kw})


def test_the_module_takes_a_layer_slot_of_the_last_stage():
    from planner.catalog import load_hardware, load_model
    from planner.model.cost import Choices, layout_costs, numbers

    hw, model = load_hardware("h800-nvlink"), load_model("deepseek-v3")

    def k(config):
        return layout_costs(numbers(model, hw, config), Choices.of(config))

    on, off = k(_dsv3()), k(_dsv3(mtp=False))
    # pp 16: ⌈(61 + 1)/16⌉ = 4 = ⌈61/16⌉ — the slot fits the stages' slack
    assert on.layers == off.layers == 4
    # the stage time adds the module's projection and its head pass, nothing else:
    # T_mtp = T_head + 3·2·T·2h²/(F·η)
    from planner.formulas import flops as F
    from planner.formulas import timing as T

    x = numbers(model, hw, _dsv3())
    eh = 3 * 2 * 4096 * 2 * 7168**2 / (x.peak_flops * x.gemm_eff)
    head = T.head_time_s(F.head_flops(4096, 1, on.vocab_padded, 7168), on.logits_act,
                         x.peak_flops_16, x.gemm_eff_16, x.hbm_bw, x.hbm_eff)
    assert on.compute_mb_s - off.compute_mb_s == pytest.approx(head + eh, rel=1e-12)
    # pp 61 (one layer a stage): ⌈62/61⌉ = 2, the last stage's layer plus the module
    assert k(_dsv3(pp=61, dp=16, ep=16, n_micro=64)).layers == 2
    assert k(_dsv3(pp=61, dp=16, ep=16, n_micro=64, mtp=False)).layers == 1


def test_megatron_counts_the_module_in_its_flops():
    from planner.catalog import load_hardware, load_model
    from planner.model.estimate import estimate

    hw, model = load_hardware("h800-nvlink"), load_model("deepseek-v3")
    on = estimate(model, hw, _dsv3()).time.model_flops_causal
    off = estimate(model, hw, _dsv3(mtp=False)).time.model_flops_causal
    # one more MoE layer of 61 (58 MoE + 3 dense), one more head pass and eh_proj: between 1/61
    # and 1/61 + the head's share of the step (the head is ~1.5 layers here): 1.6 % … 5 %
    assert 1 / 61 < on / off - 1 < 0.05


def test_the_launch_puts_the_module_where_the_model_costed_it():
    from planner.catalog import load_model
    from planner.frameworks.emit import emit

    model = load_model("deepseek-v3")
    text = emit("megatron", _dsv3(), model).text
    assert "--mtp-num-layers 1" in text
    # 62 slots over 16 stages: 14 of 4 then 2 of 3; E first, the module last before the loss
    assert 'Etttt|' + 'tttt|' * 13 + 'ttt|ttmL"' in text
    off = emit("megatron", _dsv3(mtp=False), model).text
    assert "mtp" not in off and "ttmL" not in off
