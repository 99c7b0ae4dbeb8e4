"""Oracle: the loss peaks and the final norm + LM-head inputs.

The loss peak is the largest live total (LiveStorages, at op boundaries) from the 16-bit logits'
creation through the loss's backward into them, the logits themselves included.  Small real
tensors and, through FakeTensorMode, Llama 3.1 8B's s = 8192, b = 2, V = 128256.  Tolerance 1 %:
what the formulas leave out is per token (the loss, the max and sums, targets), 1/V of the rest.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from planner.formulas import activations as A  # noqa: E402

from ._fused import LayerNormLinear  # noqa: E402
from ._loss import VocabParallelCrossEntropy  # noqa: E402
from ._measure import LiveStorages, saved_bytes  # noqa: E402
from ._torchtitan import RMSNorm, default_dtype, loss_fn  # noqa: E402

pytestmark = pytest.mark.oracle

SMALL = (64, 2, 1000)  # s, b, V
LLAMA31_8B = (8192, 2, 128256)


def _fake():
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


def _torchtitan_loss_peak(s, b, v):
    leaf = torch.randn(b, s, v, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, v, (b, s))
    with LiveStorages(exclude=[leaf, labels]) as live:
        pred = leaf * 1  # the head's 16-bit output
        loss = loss_fn(pred, labels)
        del pred  # torchtitan: "need to free to before bwd to avoid peaking memory"
        loss.backward()
    return live.peak_bytes


def _megatron_loss_peak(s, b, v, ce):
    leaf = torch.randn(s, b, v, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, v, (s, b))
    with LiveStorages(exclude=[leaf, labels]) as live:
        logits = leaf * 1  # the output layer's 16-bit logits, alive through the loss's forward
        loss = ce(logits, labels)
        del logits  # GPTModel.forward returns the loss; the logits go out of scope
        loss.sum().backward()
    return live.peak_bytes


def test_torchtitan_loss_small_by_hand():
    # s·b·V = 128 000 elements: three fp32 tensors = 12 · 128 000 = 1 536 000 bytes, plus per-token
    # leftovers (loss scalars, nll's total weight) that stay under 1 %.
    peak = _torchtitan_loss_peak(*SMALL)
    assert peak == pytest.approx(12 * 64 * 2 * 1000, rel=0.01)
    assert peak == pytest.approx(A.torchtitan_loss_peak_bytes(*SMALL[:2], SMALL[2], 1, 1), rel=0.01)


def test_torchtitan_loss_llama31_8b():
    with _fake():
        peak = _torchtitan_loss_peak(*LLAMA31_8B)
    assert peak == pytest.approx(A.torchtitan_loss_peak_bytes(*LLAMA31_8B, 1, 1), rel=0.01)


def test_torchtitan_loss_matches_cross_entropy_values():
    torch.manual_seed(0)
    pred = torch.randn(2, 5, 11)
    labels = torch.randint(0, 11, (2, 5))
    assert loss_fn(pred, labels).item() == pytest.approx(
        F.cross_entropy(pred.reshape(10, 11), labels.reshape(10)).item())


def test_vocab_parallel_loss_small():
    # 16-bit logits 2 + fp32 copy/softmax 4 = 6 bytes per element: 6 · 128 000 = 768 000.
    peak = _megatron_loss_peak(*SMALL, VocabParallelCrossEntropy.apply)
    assert peak == pytest.approx(6 * 64 * 2 * 1000, rel=0.01)
    assert peak == pytest.approx(A.vocab_parallel_loss_peak_bytes(*SMALL[:2], SMALL[2], 1, 1), rel=0.01)


def test_vocab_parallel_loss_llama31_8b():
    with _fake():
        peak = _megatron_loss_peak(*LLAMA31_8B, VocabParallelCrossEntropy.apply)
    assert peak == pytest.approx(A.vocab_parallel_loss_peak_bytes(*LLAMA31_8B, 1, 1), rel=0.01)


def test_emulation_agrees_with_megatron_core(megatron_one_rank):
    """The emulation and megatron-core's own `vocab_parallel_cross_entropy` give the same losses,
    gradients and peak bytes (the logits' s·b·V terms)."""
    from megatron.core.tensor_parallel.cross_entropy import vocab_parallel_cross_entropy

    torch.manual_seed(0)
    logits = torch.randn(8, 2, 50, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, 50, (8, 2))
    ours = VocabParallelCrossEntropy.apply(logits, labels)
    (g_ours,) = torch.autograd.grad(ours.sum(), logits)
    theirs = vocab_parallel_cross_entropy(logits, labels)
    (g_theirs,) = torch.autograd.grad(theirs.sum(), logits)
    assert torch.allclose(ours, theirs) and torch.equal(g_ours, g_theirs)
    # Peaks agree to a few bytes per token (index temporaries), not per vocabulary entry.
    s, b, _ = SMALL
    assert abs(_megatron_loss_peak(*SMALL, vocab_parallel_cross_entropy)
               - _megatron_loss_peak(*SMALL, VocabParallelCrossEntropy.apply)) <= 8 * s * b


def test_fused_head_inputs():
    # Megatron final norm (TE keeps its input) + output layer (keeps the normed input):
    # 2 · 2sbh, plus fp32 mu and rsigma (8 bytes per token, < 0.1 % at h = 4096).
    s, b, h = 8192, 2, 4096
    with _fake():
        with default_dtype(torch.bfloat16):
            x = torch.randn(s, b, h, requires_grad=True)
            w, bias, head = torch.ones(h), torch.zeros(h), torch.randn(128256, h)
        _, packed = saved_bytes(LayerNormLinear.apply, x, w, bias, head, None, False, exclude=[w, bias, head])
    assert packed == pytest.approx(A.fused_head_activation_bytes(s, b, h, 1, 1, False), rel=0.01)


def test_eager_head_inputs():
    # torchtitan: RMSNorm's fp32 copy 4sbh, rstd 4sb, normed 2sbh, the head's input 2sbh; the
    # last block's output itself is not kept (x.float() saves nothing).  h = 256, s·b = 128:
    # (16·256/2 + 4) · 128 = (2048 + 4) · 128.
    with default_dtype(torch.bfloat16):
        norm, head = RMSNorm(256), torch.nn.Linear(256, 1000, bias=False)
        x = torch.randn(2, 64, 256, requires_grad=True)
    _, packed = saved_bytes(lambda x: head(norm(x)), x, exclude=[*norm.parameters(), *head.parameters()])
    assert packed == (8 * 256 + 4) * 128
    assert packed == pytest.approx(A.eager_head_activation_bytes(64, 2, 256, 1, 1, False), rel=1e-9)
