"""Oracle: what a torchtitan-style eager MoE layer and MLA attention keep for backward
(tests/oracle/_moe.py), counted with `saved_tensors_hooks` and deduplicated by storage, against
formulas/moe_memory.py — to the byte. Parameters, buffers and the layer's input are excluded (the
caller counts the input, as for a dense MLP). Run with torch installed (`pip install
torch==2.13.0`); skipped otherwise."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from planner.formulas import moe_memory as M  # noqa: E402

from ._measure import saved_bytes  # noqa: E402
from ._moe import MLA, GroupedExperts, MoE, rope_cis  # noqa: E402
from ._torchtitan import default_dtype  # noqa: E402

pytestmark = pytest.mark.oracle

# (h, E, k, f_e, n_s, f_s, s, b): a small DeepSeek-like shape, a Qwen3-like one without shared
# experts, and top-1
MOE_SHAPES = [(64, 8, 2, 32, 1, 32, 16, 2), (96, 16, 4, 48, 0, 0, 24, 1), (64, 4, 1, 64, 2, 16, 8, 2)]


def _measure(module, *args):
    exclude = [*module.parameters(), *module.buffers(), *args]
    return saved_bytes(module, *args, exclude=exclude)


@pytest.mark.parametrize("h, n_experts, top_k, f, n_s, f_s, s, b", MOE_SHAPES)
@pytest.mark.parametrize("route_norm", [True, False])
def test_moe_layer_saved_bytes(h, n_experts, top_k, f, n_s, f_s, s, b, route_norm):
    torch.manual_seed(0)
    with default_dtype(torch.bfloat16):
        layer = MoE(h, f, n_experts, top_k, n_shared=n_s, shared_ffn=f_s or None)
    layer.router.route_norm = route_norm
    x = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    out, packed = _measure(layer, x)
    tokens = s * b
    # without expert parallelism every copy is computed here: R = T·k
    assert packed == M.moe_saved_bytes(tokens, tokens * top_k, h, n_experts, top_k, f, f_s, n_s,
                                       int(route_norm))
    out.float().sum().backward()  # the layer really trains
    assert x.grad is not None and layer.experts.w1.grad is not None


def test_moe_hand_count():
    # h = 64, E = 8, k = 2, f = 32, one shared expert of 32, T = 32, route_norm:
    # router 32·(256 + 32 + 16 + 12) + 4·8·64 = 10,112 + 2,048 = 12,160; sort 16·64 = 1,024;
    # experts 64·2·(64 + 128) = 24,576; combine 64·(256 + 4) = 16,640; shared 32·2·4·32 = 8,192
    # → 62,592 (the oracle's count: 1,956 B a token)
    assert M.moe_saved_bytes(32, 64, 64, 8, 2, 32, 32, 1) == 62_592


@pytest.mark.parametrize("counts", [[16, 16, 16, 16], [61, 1, 1, 1], [0, 40, 0, 24]])
def test_expert_rows_under_imbalance(counts):
    """An expert-parallel rank's experts keep what their R received rows need, however the rows
    fall on them: the busiest rank's R sets the bytes, not the mean."""
    with default_dtype(torch.bfloat16):
        experts = GroupedExperts(64, 48, len(counts))
    rows = torch.randn(sum(counts), 64, dtype=torch.bfloat16, requires_grad=True)
    _, packed = saved_bytes(lambda r: experts(r, counts), rows, exclude=[*experts.parameters()])
    # R·2·(64 + 4·48) = R·512, the rows themselves included (they are the GEMMs' A)
    assert packed == M.expert_saved_bytes(sum(counts), 64, 48) == sum(counts) * 512


# (h, a, r_q, r_kv, d_n, d_r, d_v, s, b): small, and DeepSeek-V3's head shape at 4 heads
MLA_SHAPES = [(64, 4, 48, 32, 16, 8, 16, 16, 2), (256, 4, 96, 64, 128, 64, 128, 32, 1)]


@pytest.mark.parametrize("h, a, r_q, r_kv, d_n, d_r, d_v, s, b", MLA_SHAPES)
def test_mla_saved_bytes(h, a, r_q, r_kv, d_n, d_r, d_v, s, b):
    torch.manual_seed(0)
    with default_dtype(torch.bfloat16):
        attn = MLA(h, a, r_q, r_kv, d_n, d_r, d_v)
    x = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    cis = rope_cis(d_r, s)
    out, packed = saved_bytes(attn, x, cis, exclude=[*attn.parameters(), x, cis])
    assert packed == M.mla_saved_bytes(s * b, a, r_q, r_kv, d_n, d_r, d_v)
    out.float().sum().backward()
    assert attn.wkv_b.weight.grad is not None


def test_mla_hand_count():
    # T = 32, a = 4, r_q = 48, r_kv = 32, d_n = 16, d_r = 8, d_v = 16 (d_qk = 24):
    # norms 32·(192 + 4 + 192) + 32·(128 + 4 + 128) = 12,416 + 8,320 = 20,736;
    # attention 32·(2·4·(48 + 16 + 32) + 16) = 32·784 = 25,088 → 45,824 (1,432 B a token)
    assert M.mla_saved_bytes(32, 4, 48, 32, 16, 8, 16) == 45_824
