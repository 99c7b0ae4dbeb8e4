"""Oracle: a whole torchtitan-style training step's peak against the composed formula.

The model (tests/oracle/_torchtitan.py: embedding, L blocks, final RMSNorm, LM head) runs
torchtitan's step (forward, `cross_entropy(pred.float())`, `del pred`, backward) at Llama 3.1
8B's width, s = 8192, b = 2, V = 128256, with L = 2 blocks, through FakeTensorMode.  The peak is
the largest live total of storages created during the step (LiveStorages; parameters, tokens and
labels excluded), and it must equal, within 5 %,

    activations.loss_phase_activation_bytes(L, layer, head, loss)

with layer = the per-mode layer formula, head = eager_head_activation_bytes and loss =
torchtitan_loss_peak_bytes.  5 % (the issue's bar): the composition omits per-token scalars and
assumes the peak is inside the loss's backward, where no parameter gradient exists yet.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from planner.formulas import activations as A  # noqa: E402

from ._measure import LiveStorages  # noqa: E402
from ._torchtitan import Transformer, default_dtype, train_step  # noqa: E402

pytestmark = pytest.mark.oracle

H, HEADS, KV, FFN, S, B, V, L = 4096, 32, 8, 14336, 8192, 2, 128256, 2


def _step_peak(ac):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        with default_dtype(torch.bfloat16):
            model = Transformer(V, H, L, HEADS, KV, FFN, S, ac=ac)
        tokens = torch.randint(0, V, (B, S))
        labels = torch.randint(0, V, (B, S))
        with LiveStorages(exclude=[*model.parameters(), *model.buffers(), tokens, labels]) as live:
            train_step(model, tokens, labels)
    return live.peak_bytes


def _layer(ac):
    if ac == "none":
        return A.eager_layer_activation_bytes(S, B, H, HEADS, HEADS, H // HEADS, FFN, 1, 1, False)
    if ac == "op":
        return A.torchtitan_sac_layer_activation_bytes(S, B, H, HEADS, KV, H // HEADS, FFN, 1, 1, False)
    return A.layer_activation_bytes(S, B, H, HEADS, KV, H // HEADS, FFN, 3, 0, 1, 1, False,
                                    A.Recompute.FULL, A.Attention.FLASH)


@pytest.mark.parametrize("ac", ["none", "op", "full"])
def test_step_peak_is_the_loss_phase(ac):
    composed = A.loss_phase_activation_bytes(
        L, _layer(ac), A.eager_head_activation_bytes(S, B, H, 1, 1, False),
        A.torchtitan_loss_peak_bytes(S, B, V, 1, 1))
    assert _step_peak(ac) == pytest.approx(composed, rel=0.05)


def test_pytorch_mem_tracker_agrees():
    """PyTorch's own `torch.distributed._tools.mem_tracker.MemTracker` (which runs on the CPU
    and on fake tensors) sees the same peak: its total less parameters and buffers equals the
    live-storage peak within 0.1 %, and the composed formula within 5 %."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    with FakeTensorMode():
        with default_dtype(torch.bfloat16):
            model = Transformer(V, H, L, HEADS, KV, FFN, S, ac="op")
        tokens = torch.randint(0, V, (B, S))
        labels = torch.randint(0, V, (B, S))
        tracker = MemTracker()
        tracker.track_external(model)
        with tracker:
            train_step(model, tokens, labels)
    (peak,) = tracker.get_tracker_snapshot("peak").values()
    by_kind = {str(kind).rsplit(".", 1)[-1]: n for kind, n in peak.items()}
    step_bytes = by_kind["Total"] - by_kind["PARAM"] - by_kind["BUFFER"]
    assert step_bytes == pytest.approx(_step_peak("op"), rel=1e-3)
    composed = A.loss_phase_activation_bytes(
        L, _layer("op"), A.eager_head_activation_bytes(S, B, H, 1, 1, False),
        A.torchtitan_loss_peak_bytes(S, B, V, 1, 1))
    assert step_bytes == pytest.approx(composed, rel=0.05)


def _backward_phase_peak(ac, n_layers, vocab):
    """The step's peak with a vocabulary small enough that a layer's backward, not the loss, sets
    it; each parameter's gradient is dropped once accumulated (as FSDP's reduce-scatter frees the
    unsharded gradient), since plan3d counts gradients with the model states."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        with default_dtype(torch.bfloat16):
            model = Transformer(vocab, H, n_layers, HEADS, KV, FFN, S, ac=ac)
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None))
        tokens = torch.randint(0, vocab, (B, S))
        labels = torch.randint(0, vocab, (B, S))
        with LiveStorages(exclude=[*model.parameters(), *model.buffers(), tokens, labels]) as live:
            train_step(model, tokens, labels)
    return live.peak_bytes


@pytest.mark.parametrize("ac, rel", [("full", 1e-6), ("op", 0.05), ("none", 0.05)])
def test_backward_phase_peak(ac, rel):
    # V = 1024, L = 4: the loss is ~0.1 GiB and a layer's backward sets the peak. Composed:
    # L·layer + what the layer under backward recomputes (its whole no-AC set under full AC, the
    # rest of it under SAC) + its activation gradients act·sb·(h + 2f) = 8·act·sbh at f = 3.5h.
    # Measured: exact under full AC; no AC and SAC ~3.5 % above (a few fp32 norm-backward and
    # recompute temporaries the composition leaves out).
    none = A.eager_layer_activation_bytes(S, B, H, HEADS, HEADS, H // HEADS, FFN, 1, 1, False)
    working = {"full": none, "op": none - _layer("op"), "none": 0}[ac]
    gradients = A.backward_gradient_bytes(S, B, H, FFN, 3, 1, 1)
    assert gradients == 2 * S * B * (H + 2 * FFN) == 8 * 2 * S * B * H
    composed = A.backward_phase_activation_bytes(4, _layer(ac), working, gradients)
    peak = _backward_phase_peak(ac, 4, 1024)
    assert peak == pytest.approx(composed, rel=rel)
    assert peak >= composed  # what is left out only adds
