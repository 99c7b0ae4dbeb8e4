"""Oracle: what a torchtitan DeepSeek-V3 MoE + MLA block keeps for backward under its per-op
selective AC (torchtitan @ 0cfbd0b3c, flex-attention flavours, model not compiled:
tests/oracle/_tt_dsv3.py), and what torchtitan's compiled loss keeps and makes.

The block is measured as in test_torchtitan_block.py: live storages after the forward of two
stacked blocks minus one, parameters and buffers excluded, so a block's input counts where
something keeps it (the next block's first norm).  Expert parallelism is one rank's view: the
dispatch all-to-all brings `rows_in` rows (the busiest rank's λ·T·k; λ = 1.5 here), the combine
sends T·k back.  The oracle's block was checked once against torchtitan's own at 0cfbd0b3c
(`TransformerBlock` wrapped by `_apply_op_sac_to_transformer_block_with_flex`) on the CPU
without expert parallelism, the same stand-ins patched in: equal bytes at the three shapes
below.  torchtitan 0.3.0, where installed, is not that code (its `SelectiveAC` wraps the whole
block and saves `linear`, `topk` and PyTorch's compute-intensive ops), so it is not imported
here: test_torchtitan030_sac.py measures that release's block.
Tolerance: exact (the formula leaves nothing out at these shapes).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from planner.formulas import activations as A  # noqa: E402
from planner.formulas import moe_memory as M  # noqa: E402

from ._measure import LiveStorages, saved_bytes  # noqa: E402
from ._moe import rope_cis  # noqa: E402
from ._torchtitan import default_dtype  # noqa: E402
from ._tt_dsv3 import Block  # noqa: E402

pytestmark = pytest.mark.oracle

# (h, a, r_kv, d_n, d_r, d_v, f_e, E, k, n_s, s, b): small DeepSeek-like shapes, one with two
# shared experts and top-6 like the 16B flavour, one without shared experts
SHAPES = [(64, 4, 32, 16, 8, 16, 32, 8, 2, 1, 16, 2), (96, 2, 48, 24, 8, 16, 24, 16, 4, 2, 8, 3),
          (128, 4, 64, 32, 16, 32, 48, 8, 6, 2, 16, 1), (64, 2, 32, 16, 8, 16, 32, 8, 2, 0, 16, 2)]


def _live(n_blocks, dims, ep, rows_in):
    h, a, r, dn, dr, dv, f, n_e, k, n_s, s, b = dims
    torch.manual_seed(0)
    with default_dtype(torch.bfloat16):
        blocks = torch.nn.ModuleList(
            Block(h, a, r, dn, dr, dv, f, n_e, k, n_s, ep=ep, rows_in=rows_in)
            for _ in range(n_blocks))
    cis = rope_cis(dr, s)
    x0 = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    with LiveStorages(exclude=[*blocks.parameters(), *blocks.buffers(), x0, cis]) as live:
        y = x0
        for block in blocks:
            y = block(y, cis)
        kept = live.live_bytes()
    y.float().sum().backward()  # the checkpointed blocks really train
    assert blocks[0].moe.inner.w1.grad is not None
    return kept


def measured_block_bytes(dims, ep=False, load=1.0):
    t, k = dims[-2] * dims[-1], dims[8]
    rows_in = int(load * t * k)
    return _live(2, dims, ep, rows_in) - _live(1, dims, ep, rows_in)


@pytest.mark.parametrize("dims", SHAPES)
@pytest.mark.parametrize("ep, load", [(False, 1.0), (True, 1.0), (True, 1.5)])
def test_block_matches_formula(dims, ep, load):
    h, n_s, f, k = dims[0], dims[9], dims[6], dims[8]
    tokens = dims[-2] * dims[-1]
    rows_out = tokens * k if ep else 0
    formula = M.torchtitan_flex_sac_block_bytes(tokens, load * rows_out, rows_out, h, f, n_s)
    assert measured_block_bytes(dims, ep, load) == formula


def test_block_by_hand():
    # h = 64, f_e = 32, one shared expert, k = 2, T = 32 tokens, bf16, EP with R_in = 96:
    # per token: two norms 2·(128 + 4) = 264; attention input 128; MoE input 128; shared w1
    # 2·32 = 64; shared w2 128 → 712 B, 32 · 712 = 22,784; rows (96 + 64)·128 = 20,480
    # → 43,264 (the router's mm is recomputed, uncounted; the grouped GEMMs are not saved)
    assert measured_block_bytes(SHAPES[0], ep=True, load=1.5) == 43_264
    assert M.torchtitan_flex_sac_block_bytes(32, 96, 64, 64, 32, 1) == 43_264


def test_the_16b_flavour_at_the_published_runs_shape():
    """DeepSeek-V3 16B's block (h 2048, 16 heads, r_kv 512, 64 experts of 1408, top-6, two shared)
    at pytorch/torchtitan#1789's local batch 4 × 4096, EP with λ = 1.5, through FakeTensorMode:
    T·(5·4096 + 8 + 2·2816) + 4096·(1.5 + 1)·6·T = 87,560·T = 1.34 GiB a layer."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    dims = (2048, 16, 512, 128, 64, 128, 1408, 64, 6, 2, 4096, 4)
    tokens = 4096 * 4
    with FakeTensorMode():
        measured = measured_block_bytes(dims, ep=True, load=1.5)
    assert measured == M.torchtitan_flex_sac_block_bytes(
        tokens, 1.5 * 6 * tokens, 6 * tokens, 2048, 1408, 2) == 87_560 * tokens


def _compiled_loss():
    def cross_entropy_loss(pred, labels):  # torchtitan components/loss.py @ 0cfbd0b3c
        return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
    return torch.compile(cross_entropy_loss)


def test_compiled_loss_keeps_the_logits_and_makes_one_16_bit_gradient():
    from torch._inductor.utils import run_and_get_code

    s, b, v = 16, 2, 512
    pred = torch.randn(b, s, v, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, v, (b, s))
    loss_fn = _compiled_loss()

    def step():
        loss, kept = saved_bytes(loss_fn, pred, labels, exclude=[labels])
        loss.backward()
        return kept

    with torch._inductor.config.patch(fx_graph_cache=False):  # compile here, not from a cache
        kept, codes = run_and_get_code(step)  # the forward's and the backward's code
    # the 16-bit logits (2·s·b·V) and per-row fp32 values (two of 4 B) and a scalar: nothing
    # vocabulary-wide in fp32, where eager keeps 4·s·b·V (test_loss_and_head.py)
    assert 2 * s * b * v <= kept <= 2 * s * b * v + 2 * 4 * s * b + 64
    wide = [line for code in codes for line in code.splitlines()
            if "empty_strided" in line and f"{s * b}, {v}" in line]
    assert len(wide) == 1 and "bfloat16" in wide[0]  # the gradient, written once
    assert pred.grad.dtype == torch.bfloat16
    # peak in the loss's backward: the saved logits + their gradient = 2·act·s·b·V
    assert kept + pred.grad.untyped_storage().nbytes() == pytest.approx(
        A.compiled_loss_peak_bytes(s, b, v, 1, 1), rel=0.01)
