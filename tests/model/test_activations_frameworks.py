"""Hand-derived values of the framework activation formulas (the PyTorch oracle in tests/oracle
measures the same numbers; these run without torch).  Llama 3.1 8B: h = 4096, a = 32, k = 8,
d_h = 128, f = 14336, V = 128256; s = 8192, b = 2 (s·b = 16384 tokens), bf16."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from planner.formulas import activations as A

S, B, H, HEADS, KV, D, F, V = 8192, 2, 4096, 32, 8, 128, 14336, 128256
TOKENS = S * B


def test_torchtitan_sac_llama31_8b():
    # input 2h 8192 + wq 2·4096 8192 + wv 2·1024 2048 + w1 2f 28672 + w2 2h 8192
    # + SDPA out 8192 + lse 4a 128 = 63616 bytes a token.
    assert A.torchtitan_sac_layer_activation_bytes(S, B, H, HEADS, KV, D, F, 1, 1, False) == 63616 * TOKENS


def test_torchtitan_sac_tensor_parallel_terms():
    # t = 8 with sequence parallelism: input 8192/8 + (wq + wv + w1 + out + lse)/8
    # = (8192 + 2048 + 28672 + 8192 + 128)/8 = 47232/8 = 5904, + w2's partial sum 8192 (not split)
    # + two reduce-scatter outputs 2·8192/8 = 2048  ->  1024 + 5904 + 8192 + 2048 = 17168.
    got = A.torchtitan_sac_layer_activation_bytes(S, B, H, HEADS, KV, D, F, 8, 1, True)
    assert got == 17168 * TOKENS
    arr = A.torchtitan_sac_layer_activation_bytes(S, B, H, HEADS, KV, D, F, np.array([1.0, 8.0]), 1, True)
    assert list(arr) == [63616 * TOKENS, 17168 * TOKENS]


def test_eager_layer_llama31_8b():
    # norms 2·(4h + 2h + 2h + 4) = 2·32772 = 65544; q, K, V (repeat_kv: a heads), out 4·2·4096 =
    # 32768; lse 128; SwiGLU 4·2·14336 = 114688  ->  213128 bytes a token (52.0·h).
    assert A.eager_layer_activation_bytes(S, B, H, HEADS, HEADS, D, F, 1, 1, False) == 213128 * TOKENS
    # native GQA (K, V at k = 8 heads): 2·2·(4096 − 1024) = 12288 fewer.
    assert A.eager_layer_activation_bytes(S, B, H, HEADS, KV, D, F, 1, 1, False) == 200840 * TOKENS


def test_losses_and_heads():
    assert A.torchtitan_loss_peak_bytes(S, B, V, 1, 1) == 12 * TOKENS * V
    assert A.vocab_parallel_loss_peak_bytes(S, B, V, 8, 1) == 6 * TOKENS * V / 8
    assert A.fused_head_activation_bytes(S, B, H, 1, 1, False) == 4 * TOKENS * H
    assert A.eager_head_activation_bytes(S, B, H, 1, 1, False) == (8 * H + 4) * TOKENS


def test_loss_phase_sums_what_coexists():
    L, layer, head, loss = sp.symbols("L layer head loss", positive=True)
    assert sp.simplify(A.loss_phase_activation_bytes(L, layer, head, loss) - (L * layer + head + loss)) == 0


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_sac_keeps_less_than_korthikanti_selective(tp):
    korthikanti = A.layer_activation_bytes(S, B, H, HEADS, KV, D, F, 3, 0, tp, 1, True,
                                           A.Recompute.SELECTIVE, A.Attention.FLASH)
    sac = A.torchtitan_sac_layer_activation_bytes(S, B, H, HEADS, KV, D, F, tp, 1, True)
    assert sac < korthikanti


# torchtitan's DeepSeek-V3 16B flavour (h 2048, 64 experts of 1408, top-6, two shared experts) at
# pytorch/torchtitan#1789's local batch 4 × 4096 (T = 16384 tokens a GPU), EP 8, bf16
T16, H16, FE16, K16 = 4 * 4096, 2048, 1408, 6


def test_torchtitan_flex_sac_block_by_hand():
    from planner.formulas import moe_memory as MM

    # per token: two norms' inputs and fp32 rstd 2·(4096 + 4) = 8200; the attention's and the
    # MoE's inputs 2·4096 = 8192; shared w1 2·2816 = 5632 and w2 4096 → 26,120 B. With EP at
    # λ = 1.5: rows in 1.5·6 = 9 and out 6 a token, 4096 B each: 15·4096 = 61,440 B
    # → 87,560 B a token, 1.336 GiB a layer (tests/oracle/test_torchtitan_moe_sac.py measures it)
    rows_out = K16 * T16
    assert MM.torchtitan_flex_sac_block_bytes(T16, 0, 0, H16, FE16, 2) == 26_120 * T16
    assert MM.torchtitan_flex_sac_block_bytes(T16, 1.5 * rows_out, rows_out, H16, FE16, 2) \
        == 87_560 * T16
    # no shared experts: no mm in the MoE region is saved → 2·4100 + 2·4096 = 16,392 B a token
    assert MM.torchtitan_flex_sac_block_bytes(T16, 0, 0, H16, FE16, 0) == 16_392 * T16
    # the same on an array of λ and symbolically in the shared experts' count
    lam = np.array([1.0, 1.5])
    got = MM.torchtitan_flex_sac_block_bytes(T16, lam * rows_out, rows_out, H16, FE16, 2)
    assert list(got) == [(26_120 + 4096 * 12) * T16, 87_560 * T16]
    n_s = sp.Symbol("n_s", positive=True, integer=True)
    assert float(MM.torchtitan_flex_sac_block_bytes(1, 0, 0, H16, FE16, n_s).subs(n_s, 2)) == 26_120


def test_torchtitan_whole_block_sac_by_hand():
    from planner.formulas import moe_memory as MM

    # torchtitan >= v0.2.1 (0.2.2, 0.3.0): the whole 16B block in op SAC (16 heads, d_nope 128,
    # d_rope 64, d_v 128, r_kv 512, no q compression). Per token: the input 4096; the compiled
    # flex region's q, k 2·2·16·192 = 12,288, V's wkv_b buffer 2·16·256 = 8192, out 2·16·128 =
    # 4096, lse 4·16 = 64; topk 6·(4 + 8) = 72; wq (1st mm) 2·16·192 = 6144; the shared
    # experts' w1 (5th) 2·2816 = 5632 and w2 (7th) 4096 → 44,680 B; EP at λ = 1.5 adds
    # 15·4096 = 61,440 → 106,120 B (the flex path's 87,560 above: +21 %)
    def block(rows_in, rows_out, q_rank=0, n_s=2):
        return MM.torchtitan_sac_mla_moe_block_bytes(
            T16, rows_in, rows_out, H16, 16, q_rank, 512, 128, 64, 128, K16, FE16, n_s)

    rows_out = K16 * T16
    assert block(0, 0) == 44_680 * T16
    assert block(1.5 * rows_out, rows_out) == 106_120 * T16
    # with q compression (r_q 1536): wq_a 2·1536 = 3072, wkv_a 2·576 = 1152, wo 4096 replace
    # wq's 6144; the shared experts' parity flips: only w3 (7th) 5632 → 44,680 + 2176 − 4096
    assert block(0, 0, q_rank=1536) == 42_760 * T16
    # no shared experts: their 9728 gone
    assert block(0, 0, n_s=0) == (44_680 - 9728) * T16
    # symbolically in the shared experts' count
    n_s = sp.Symbol("n_s", positive=True, integer=True)
    got = MM.torchtitan_sac_mla_moe_block_bytes(1, 0, 0, H16, 16, 0, 512, 128, 64, 128, K16,
                                                FE16, n_s)
    assert float(got.subs(n_s, 2)) == 44_680


def test_compiled_loss_peak_by_hand():
    # the 16-bit logits the compiled graph keeps and their 16-bit gradient: 2·2·T·V, a third of
    # eager's 12·T·V; at the 16B row's T = 16384, V = 102400: 6.25 GiB against 18.75 GiB
    assert A.compiled_loss_peak_bytes(4096, 4, 102400, 1, 1) == 4 * T16 * 102400
    assert A.compiled_loss_peak_bytes(4096, 4, 102400, 1, 1) / 2**30 == 6.25
    assert A.compiled_loss_peak_bytes(4096, 4, 102400, 1, 1) * 3 \
        == A.torchtitan_loss_peak_bytes(4096, 4, 102400, 1, 1)


def test_torchtitan_dsv3_16b_layer_at_the_published_row():
    """The model layer picks the op-SAC block for a torchtitan MLA + MoE layer under selective
    recompute: the whole block in one region (torchtitan >= v0.2.1) by default,
    T·(44,680 + 4096·6·(λ + 1)) with the plan's λ (explain's A_layer; 1.50 GiB at λ = 1.19);
    with torchtitan_flex_ac (before v0.2.1) the flex path's T·(26,120 + 4096·6·(λ + 1))
    (1.22 GiB), where plan3d counted the Korthikanti-style MLA set before (3.24 GiB a layer)."""
    from pathlib import Path

    from planner.catalog import load_hardware, load_model
    from planner.model.cost import Choices, numbers, plan_costs
    from planner.schema import PlanConfig

    model = load_model(str(Path(__file__).parents[2] / "planner" / "reference" / "models"
                           / "torchtitan-deepseek-v3-16b.toml"))
    for flex, per_token in ((False, 44_680), (True, 26_120)):
        config = PlanConfig(dp=8, ep=8, mbs=4, n_micro=1, gbs=32, seq_len=4096, zero_stage=3,
                            recompute="selective", sequence_parallel=False,
                            framework="torchtitan", torchtitan_flex_ac=flex)
        r = plan_costs(numbers(model, load_hardware("h100-nvlink"), config), Choices.of(config))
        lam = r["moe_load"]
        assert lam > 1
        assert r["layer_activation_bytes"] == pytest.approx(
            T16 * (per_token + 4096 * 6 * (lam + 1)), rel=1e-12)
