"""Oracle: `--recompute-modules layernorm` and `moe_act`, Megatron-Core's output-discarding
checkpoints (no Megatron code copied).

Megatron-Core recomputes a separate norm module and the routed experts' activation function with
`CheckpointWithoutOutput` (megatron/core/tensor_parallel/random.py @ d98e8a64dd;
transformer_layer.py l.475-530, moe/experts.py activation_recompute): the function runs without
autograd, keeps only its inputs, and once its consumer (the next linear layer) has saved the
output, the output's storage is freed (`discard_output_and_register_recompute`: storage resized to
0) and refilled by a rerun before the backward. The emulation below does the same: `_Discarding`
runs the function under no_grad saving its inputs, and `discard` resizes the output's storage to 0
after the consumer ran.

Measured: the bytes of the distinct storages autograd packed during the forward, read after it
(a discarded storage then holds 0 bytes), the block's input and the parameters excluded; the
difference with and without the checkpoint is what the module drops. Exact, less the fp32 norm
statistics the formulas omit (4 B per token per norm).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from planner.formulas import moe as MO  # noqa: E402
from planner.formulas import recompute as RC  # noqa: E402

from ._fused import Linear, SwiGLU, _norm  # noqa: E402

pytestmark = pytest.mark.oracle

H, F_E, TOP_K, S, B = 256, 352, 2, 64, 2


class Norm(torch.autograd.Function):
    """A norm that is a module of its own (a MoE layer's pre-MLP norm in Transformer Engine's
    spec): saves its input and its fp32 rsigma."""

    @staticmethod
    def forward(ctx, x, w):
        out, (rsigma,) = _norm(x, w, None, True)
        ctx.save_for_backward(x, rsigma, w)
        return out


class _Discarding(torch.autograd.Function):
    """The output-discarding checkpoint's forward: the function without autograd, its inputs
    kept for the rerun."""

    @staticmethod
    def forward(ctx, fn, *inputs):
        ctx.fn = fn
        ctx.save_for_backward(*inputs)
        with torch.no_grad():
            return fn(*inputs)


def _packed_bytes_after(run, exclude):
    """Run the forward `run()` and return the bytes its packed storages hold afterwards."""
    excluded = {t.untyped_storage()._cdata for t in exclude}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st._cdata not in excluded:
            seen[st._cdata] = st
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()  # noqa: F841 (the graph lives while out does)
        return sum(st.nbytes() for st in seen.values())


def _norm_then_fc1(recompute: bool):
    x = torch.randn(S, B, H, dtype=torch.bfloat16, requires_grad=True)
    w_norm = torch.ones(H, dtype=torch.bfloat16)
    w_fc1 = torch.randn(2 * F_E, H, dtype=torch.bfloat16, requires_grad=True)

    def run():
        if not recompute:
            return Linear.apply(Norm.apply(x, w_norm), w_fc1, None)
        normed = _Discarding.apply(lambda t: Norm.apply(t, w_norm), x)
        out = Linear.apply(normed, w_fc1, None)
        normed.untyped_storage().resize_(0)  # discard_output_and_register_recompute
        return out

    return _packed_bytes_after(run, [x, w_norm, w_fc1])


def _act_then_fc2(recompute: bool):
    rows = S * B * TOP_K  # each token in its top-k experts' rows (balanced: λ = 1)
    fc1_out = torch.randn(rows, 2 * F_E, dtype=torch.bfloat16, requires_grad=True)
    w_fc2 = torch.randn(H, F_E, dtype=torch.bfloat16, requires_grad=True)

    def run():
        if not recompute:
            return Linear.apply(SwiGLU.apply(fc1_out), w_fc2, None)
        act = _Discarding.apply(SwiGLU.apply, fc1_out)
        out = Linear.apply(act, w_fc2, None)
        act.untyped_storage().resize_(0)
        return out

    return _packed_bytes_after(run, [w_fc2])


def test_layernorm_drops_the_norm_output():
    # one norm: its 16-bit output 2·s·b·h = 2·128·256 = 65,536 B, plus its fp32 rsigma 4·s·b =
    # 512 B that the formula leaves out
    drop = _norm_then_fc1(False) - _norm_then_fc1(True)
    assert drop == RC.layernorm_saving_bytes(S, B, H, 1, 1, False, 2, n_norms=1) + 4 * S * B
    assert drop == 65_536 + 512


def test_moe_act_drops_the_activation_output():
    # the experts' activation output, fc2's saved input: 2 B · s·b · k·f_e = 2·128·704 =
    # 180,224 B; the activation's input (fc1's output) stays, saved by the checkpoint instead
    drop = _act_then_fc2(False) - _act_then_fc2(True)
    width = MO.routed_ffn_width(F_E, TOP_K, imbalance=1)
    assert drop == RC.activation_fn_saving_bytes(S, B, width, 1, 1, 2)
    assert drop == 180_224
