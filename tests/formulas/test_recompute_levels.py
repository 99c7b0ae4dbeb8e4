"""Hand-derived bytes of the recompute levels between none and full
(planner/formulas/recompute.py), and the identities that tie them to the three classic levels."""

from __future__ import annotations

import sympy as sp

from planner.formulas import activations as A
from planner.formulas import recompute as RC
from planner.formulas.choices import Attention, Recompute

MiB = 2**20


def test_partial_block_recompute_hand():
    # 7B-like layer, s = 4096, b = 1, h = 4096, t = 1: the input 2sbh = 2·4096·4096 = 32 MiB,
    # Korthikanti's kept set ≈ 34sbh = 17 · 32 MiB = 544 MiB; L = 8, r = 2:
    # 2·32 + 6·544 = 64 + 3264 = 3328 MiB
    assert RC.partial_saved_bytes(8, 2, 32 * MiB, 544 * MiB) == 3328 * MiB


def test_partial_recompute_ends_are_none_and_full():
    L, inp, kept = sp.symbols("L input kept", positive=True)
    assert RC.partial_saved_bytes(L, 0, inp, kept) == L * kept
    assert sp.simplify(RC.partial_saved_bytes(L, L, inp, kept) - L * inp) == 0
    # and each extra recomputed layer saves exactly kept − input
    r = sp.Symbol("r")
    diff = RC.partial_saved_bytes(L, r, inp, kept) - RC.partial_saved_bytes(L, r + 1, inp, kept)
    assert sp.simplify(diff - (kept - inp)) == 0


def test_grouped_recompute_hand():
    # uniform with groups of 4 on a 16-layer stage: 16/4 = 4 inputs of 64 MiB = 256 MiB kept,
    # and the rerun of one group holds 4 full layers of 544 MiB = 2176 MiB at its backward
    assert RC.grouped_saved_bytes(16, 4, 64 * MiB) == 256 * MiB
    assert RC.grouped_working_bytes(4, 544 * MiB) == 2176 * MiB
    # groups of 1 are full recompute: L inputs
    assert RC.grouped_saved_bytes(16, 1, 64 * MiB) == 16 * 64 * MiB


def test_checkpoint_input_distributed_and_on_host():
    # 70B, s = 4096, b = 1, h = 8192, t = 8: 2·4096·8192 = 64 MiB without SP
    assert RC.checkpoint_input_bytes(4096, 1, 8192, 8, 1, False, False, 0) == 64 * MiB
    # --distribute-saved-activations: 64/8 = 8 MiB
    assert RC.checkpoint_input_bytes(4096, 1, 8192, 8, 1, False, True, 0) == 8 * MiB
    # with SP the input is already split 8 ways and distribution adds nothing: 8 MiB
    assert RC.checkpoint_input_bytes(4096, 1, 8192, 8, 1, True, True, 0) == 8 * MiB
    # DeepSpeed cpu_checkpointing: nothing on the GPU
    assert RC.checkpoint_input_bytes(4096, 1, 8192, 8, 1, False, True, 1) == 0
    # with sequence parallelism and no distribution it equals Korthikanti's full-recompute term
    s, b, h, t = sp.symbols("s b h t", positive=True)
    full = A.layer_activation_bytes(s, b, h, 1, 1, h, 4 * h, 2, 1, t, 1, True, Recompute.FULL,
                                    Attention.CLASSIC)
    assert sp.simplify(RC.checkpoint_input_bytes(s, b, h, t, 1, True, False, 0) - full) == 0


def test_module_savings_reproduce_korthikanti_selective():
    # core_attn recompute is Korthikanti's selective: none − selective = scores/t (5as²b/t)
    s, b, h, a, t = sp.symbols("s b h a t", positive=True)
    args = (s, b, h, a, a, h / a, 4 * h, 2, 1, t, 1, True)
    none = A.layer_activation_bytes(*args, Recompute.NONE, Attention.CLASSIC)
    sel = A.layer_activation_bytes(*args, Recompute.SELECTIVE, Attention.CLASSIC)
    scores = A.score_activation_bytes(s, b, a, 1, Attention.CLASSIC)
    assert sp.simplify(none - sel - RC.core_attention_saving_bytes(scores, t)) == 0


def test_mlp_saving_gpt_hand():
    # GPT (f = 4h, GELU n_mlp = 2, 2-byte saved inputs, t = 1): fc1 input 2sbh + GELU input 8sbh
    # + fc2 input 8sbh = 18sbh, of Korthikanti's 19sbh MLP (its dropout mask stays)
    s, b, h = sp.symbols("s b h", positive=True)
    got = RC.mlp_saving_bytes(s, b, h, 4 * h, 2, 1, 1, False, 2)
    assert sp.simplify(got - 18 * s * b * h) == 0
    # Llama (SwiGLU n_mlp = 3, f = 3.5h) at t = 8 with SP, fp8 saved inputs (1 B):
    # sb·(1·h/8 + (2·2 + 1)·3.5h/8) = sb·(0.125h + 2.1875h) = 2.3125 sbh
    got = RC.mlp_saving_bytes(s, b, h, sp.Rational(7, 2) * h, 3, 8, 1, True, 1)
    assert sp.simplify(got - sp.Rational(37, 16) * s * b * h) == 0


def test_layernorm_and_activation_savings_hand():
    # two norm outputs at 2 B, s = 4096, b = 1, h = 8192, t = 8 with SP:
    # 2·2·4096·8192/8 = 16 MiB
    assert RC.layernorm_saving_bytes(4096, 1, 8192, 8, 1, True, 2) == 16 * MiB
    # moe_act: 8 routed experts × f_e 2048 at t = 1, 2 B: 2·4096·16384 = 128 MiB
    assert RC.activation_fn_saving_bytes(4096, 1, 8 * 2048, 1, 1, 2) == 128 * MiB


def test_mla_up_proj_saving_hand():
    # DeepSeek-V3 (a = 128, r_q = 1536, r_kv = 512, d_qk = 192, d_v = 128), s = 4096, b = 1,
    # t = c = 1: 2·4096·(1536 + 512 + 128·(2·192 + 128)) = 8192·67,584 = 528 MiB
    assert RC.mla_up_proj_saving_bytes(4096, 1, 128, 1536, 512, 192, 128, 1, 1, False) == \
        528 * MiB
    # t = 8 without SP: the latents stay whole on each rank, the heads split:
    # 2·4096·(2048 + 65,536/8) = 8192·10,240 = 80 MiB
    assert RC.mla_up_proj_saving_bytes(4096, 1, 128, 1536, 512, 192, 128, 8, 1, False) == \
        80 * MiB
    # its GEMMs: 1536·128·192 + 512·128·(192 − 64 + 128) = 37,748,736 + 16,777,216
    assert RC.mla_up_proj_weights(7168, 128, 1536, 512, 192, 128, 64) == 54_525_952
    # without query compression (r_q = 0) the query projection reads h: 7168·128·192 + …
    assert RC.mla_up_proj_weights(7168, 128, 0, 512, 192, 128, 64) == \
        7168 * 128 * 192 + 16_777_216


def test_expert_module_savings_hand():
    # shared_experts: one shared expert of 2048, SwiGLU, 16-bit, t = 1:
    # 4096·2048·(2·2 + 2) = 48 MiB
    assert RC.shared_experts_saving_bytes(4096, 1, 2048, 3, 1, 1, 2) == 48 * MiB
    # moe: the same over the whole stored width, plus what the dispatcher keeps
    assert RC.moe_layer_saving_bytes(4096, 1, 2048, 3, 1, 1, 5 * MiB, 2) == 53 * MiB


def test_recompute_layer_fraction():
    assert RC.recompute_layer_fraction(20, 5) == 0.25
    assert RC.recompute_layer_fraction(20, 20) == 1.0


def test_fewest_layers_to_recompute():
    import numpy as np

    # L = 20, 60 GiB with all recomputed, 80 GiB capacity, 3 GiB per layer kept:
    # ⌈20 − 20/3⌉ = ⌈13.33⌉ = 14; check: 60 + (20 − 14)·3 = 78 ≤ 80, and 13 would be 81 > 80
    assert RC.fewest_layers_to_recompute(20, 60.0, 80.0, 3.0) == 14
    # plenty of room: at least 1 (partial recompute means some); no room: all 20
    got = RC.fewest_layers_to_recompute(np.array([20.0, 20.0]), np.array([10.0, 90.0]), 80.0, 3.0)
    assert got.tolist() == [1.0, 20.0]
