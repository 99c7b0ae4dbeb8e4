"""Oracle: `--recompute-modules layernorm`, `moe_act` and `mla_up_proj`, Megatron-Core's
output-discarding checkpoints (no Megatron code copied).

Megatron-Core recomputes a separate norm module and the routed experts' activation function with
`CheckpointWithoutOutput` (megatron/core/tensor_parallel/random.py @ d98e8a64dd;
transformer_layer.py l.475-530, moe/experts.py activation_recompute, multi_latent_attention.py
`qkv_up_proj_and_rope_apply` under `recompute_up_proj`): the function runs without
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


class _Rope(torch.autograd.Function):
    """RoPE as Transformer Engine's fused MLA kernels run it: a fixed linear map that keeps only
    its cos/sin tables (constants, not counted); here a sign flip, which keeps nothing."""

    @staticmethod
    def forward(ctx, x):
        return -x

    @staticmethod
    def backward(ctx, grad):
        return -grad


A, R_Q, R_KV, D_N, D_R, D_V = 4, 96, 64, 32, 16, 32  # a small DeepSeek-like MLA


def _mla_up_then_core(recompute: bool):
    """Megatron-Core's MLA from the pre-norm latents c_Q and [c_KV; k_R] (the down-projections'
    outputs) to the attention core: each up-projection a norm fused into a linear
    (TELayerNormColumnParallelLinear: its input, fp32 rsigma and normed output saved), RoPE on
    the rotary parts, Q = [q_n; q_r], K = [k_n; k_r], V made contiguous, then the flash core
    (keeps q, k, v, its output and the fp32 log-sum-exp)."""
    from ._moe import mla_flash_attention

    d_qk = D_N + D_R
    q_c = torch.randn(S, B, R_Q, dtype=torch.bfloat16, requires_grad=True)
    kv_combined = torch.randn(S, B, R_KV + D_R, dtype=torch.bfloat16, requires_grad=True)
    kv_c, k_r = torch.split(kv_combined, [R_KV, D_R], dim=-1)  # views of one storage
    weights = [torch.ones(R_Q, dtype=torch.bfloat16), torch.ones(R_KV, dtype=torch.bfloat16),
               torch.randn(A * d_qk, R_Q, dtype=torch.bfloat16, requires_grad=True),
               torch.randn(A * (D_N + D_V), R_KV, dtype=torch.bfloat16, requires_grad=True)]
    w_qn, w_kvn, w_q, w_kv = weights

    def up_proj(q_c, kv_c, k_r):
        q = Linear.apply(Norm.apply(q_c, w_qn), w_q, None).view(S, B, A, d_qk)
        kv = Linear.apply(Norm.apply(kv_c, w_kvn), w_kv, None).view(S, B, A, D_N + D_V)
        q_n, q_r = torch.split(q, [D_N, D_R], dim=-1)
        k_n, v = torch.split(kv, [D_N, D_V], dim=-1)
        query = torch.cat([q_n, _Rope.apply(q_r)], dim=-1)
        k_r = _Rope.apply(k_r).unsqueeze(-2).expand(-1, -1, A, -1)
        return query, torch.cat([k_n, k_r], dim=-1), v.contiguous()

    def run():
        qkv = (_Discarding.apply(up_proj, q_c, kv_c, k_r) if recompute
               else up_proj(q_c, kv_c, k_r))
        # [s, b, a, d] → [b, a, s, d] views, as the core reads them
        out, _ = mla_flash_attention(*(t.permute(1, 2, 0, 3) for t in qkv))
        if recompute:
            for t in qkv:  # discard_output_and_register_recompute(core_attn_out)
                t.untyped_storage().resize_(0)
        return out

    return _packed_bytes_after(run, weights)


def test_mla_up_proj_drops_q_k_v_and_the_normed_latents():
    # the normed latents 2·s·b·(r_q + r_kv) = 2·128·160 = 40,960 B and Q, K, V
    # 2·s·b·a·(2·d_qk + d_v) = 2·128·4·(96 + 32) = 131,072 B: 172,032 B, plus the two norms'
    # fp32 rsigma 2·4·s·b = 1,024 B the formula leaves out; the latents themselves (and k_R,
    # a view of c_KV's storage) stay, kept by the checkpoint instead of the norms
    drop = _mla_up_then_core(False) - _mla_up_then_core(True)
    assert drop == RC.mla_up_proj_saving_bytes(S, B, A, R_Q, R_KV, D_N + D_R, D_V, 1, 1,
                                               False) + 2 * 4 * S * B
    assert drop == 172_032 + 1_024
