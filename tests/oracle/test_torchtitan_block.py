"""Oracle: what a torchtitan-style eager Llama block keeps for backward, per AC mode.

Per-layer bytes are measured as live storages after the forward of two stacked blocks minus one
(so a block's input counts only where something keeps it), and, without AC, also as the bytes
autograd packs for backward (`saved_tensors_hooks`, deduplicated by storage); both must agree.
Small real bf16 tensors check the arithmetic exactly; FakeTensorMode runs Llama 3.1 8B's
realistic shape (s = 8192, b = 2) without allocating.  Tolerance 1 %: the formulas leave out
nothing that the oracle finds (they agree to the byte at these shapes).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from planner.formulas import activations as A  # noqa: E402

from ._measure import LiveStorages, saved_bytes  # noqa: E402
from ._torchtitan import TransformerBlock, default_dtype, rope_freqs, wrap  # noqa: E402

pytestmark = pytest.mark.oracle

SMALL = dict(hidden=256, n_heads=8, n_kv_heads=2, ffn=704, seq_len=64, mbs=2)
LLAMA31_8B = dict(hidden=4096, n_heads=32, n_kv_heads=8, ffn=14336, seq_len=8192, mbs=2)


def _stack_live_bytes(dims, ac, n_layers, repeat_kv):
    with default_dtype(torch.bfloat16):
        blocks = torch.nn.ModuleList(
            wrap(TransformerBlock(dims["hidden"], dims["n_heads"], dims["n_kv_heads"], dims["ffn"], repeat_kv), ac)
            for _ in range(n_layers))
    freqs = rope_freqs(dims["hidden"] // dims["n_heads"], dims["seq_len"])
    x0 = torch.randn(dims["mbs"], dims["seq_len"], dims["hidden"], dtype=torch.bfloat16, requires_grad=True)
    with LiveStorages(exclude=[*blocks.parameters(), x0, freqs]) as live:
        y = x0
        for block in blocks:
            y = block(y, freqs)
    return live.live_bytes(), blocks, x0, freqs


def measured_layer_bytes(dims, ac, repeat_kv=True, fake=False):
    """What one more block adds to the live storages after forward (steady state of a stack)."""
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            one, two = (_stack_live_bytes(dims, ac, n, repeat_kv)[0] for n in (1, 2))
    else:
        one, two = (_stack_live_bytes(dims, ac, n, repeat_kv)[0] for n in (1, 2))
    return two - one


def formula_bytes(dims, ac, repeat_kv=True):
    h, a, k, f, s, b = (dims[x] for x in ("hidden", "n_heads", "n_kv_heads", "ffn", "seq_len", "mbs"))
    if ac == "none":
        return A.eager_layer_activation_bytes(s, b, h, a, a if repeat_kv else k, h // a, f, tp=1, cp=1,
                                              sequence_parallel=False)
    if ac == "op":
        return A.torchtitan_sac_layer_activation_bytes(s, b, h, a, k, h // a, f, tp=1, cp=1,
                                                       sequence_parallel=False)
    return A.layer_activation_bytes(s, b, h, a, k, h // a, f, 3, 0, 1, 1, False, A.Recompute.FULL,
                                    A.Attention.FLASH)


@pytest.mark.parametrize("repeat_kv", [True, False])
@pytest.mark.parametrize("ac", ["none", "op", "full"])
def test_small_block_matches_formula(ac, repeat_kv):
    measured = measured_layer_bytes(SMALL, ac, repeat_kv)
    assert measured == pytest.approx(formula_bytes(SMALL, ac, repeat_kv), rel=0.01)


def test_small_block_by_hand():
    # h = 256, a = 8 (repeat_kv: K, V at 8 heads), d_h = 32, f = 704, s·b = 128 tokens, bf16.
    # none: norms 2·(4h + 2h + 2h + 4) = 4104; q, K, V, out 4·2·256 = 2048; lse 4·8 = 32;
    #       SwiGLU 4·2·704 = 5632  ->  11816 bytes per token.
    # op:   input 512 + wq 512 + wv 2·64 = 128 + w1 1408 + w2 512 + out 512 + lse 32 = 3616.
    # full: the input, 2·256 = 512.
    tokens = SMALL["seq_len"] * SMALL["mbs"]
    assert measured_layer_bytes(SMALL, "none") == 11816 * tokens
    assert measured_layer_bytes(SMALL, "op") == 3616 * tokens
    assert measured_layer_bytes(SMALL, "full") == 512 * tokens


def test_saved_tensor_hooks_agree_with_live_storages():
    """Without AC, the bytes autograd packs (input included, parameters excluded) equal what one
    more block keeps alive."""
    _, blocks, x0, freqs = _stack_live_bytes(SMALL, "none", 1, True)
    _, packed = saved_bytes(blocks[0], x0, freqs, exclude=[*blocks.parameters(), freqs])
    assert packed == measured_layer_bytes(SMALL, "none")


@pytest.mark.parametrize("ac", ["none", "op", "full"])
def test_llama31_8b_shape(ac):
    """Llama 3.1 8B, s = 8192, b = 2, t = 1, through FakeTensorMode."""
    measured = measured_layer_bytes(LLAMA31_8B, ac, fake=True)
    assert measured == pytest.approx(formula_bytes(LLAMA31_8B, ac), rel=0.01)


def test_sac_keeps_046_of_the_korthikanti_selective_set():
    # Korthikanti selective (SwiGLU, no dropout, t = 1): 8sbh + 2sb(d_h(2a + 2k) + 3f)
    # = sb(32768 + 2·(10240 + 43008)) = 139264·sb; torchtitan op-SAC 63616·sb: 0.457.
    d = LLAMA31_8B
    korthikanti = A.layer_activation_bytes(d["seq_len"], d["mbs"], d["hidden"], d["n_heads"], d["n_kv_heads"],
                                           128, d["ffn"], 3, 0, 1, 1, False, A.Recompute.SELECTIVE,
                                           A.Attention.FLASH)
    ratio = measured_layer_bytes(LLAMA31_8B, "op", fake=True) / korthikanti
    assert ratio == pytest.approx(63616 / 139264, rel=1e-6)
