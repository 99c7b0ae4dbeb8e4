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
