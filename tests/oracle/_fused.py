"""A Megatron-Core layer as its fused kernels run it, for the oracle (no Megatron/TE code copied).

Each kernel is a custom autograd Function that saves exactly what the fused kernel saves, and
recomputes from those tensors in backward:

- `LayerNormLinear`: Transformer Engine `transformer_engine/pytorch/module/layernorm_linear.py`
  (Megatron's `TELayerNormColumnParallelLinear` for QKV and fc1) saves the norm's input, the
  norm's output (the GEMM input), and the fp32 statistics (mu and rsigma for LayerNorm, rsigma
  for RMSNorm), besides the weights.
- `FlashAttention`: TE `DotProductAttention` → FusedAttention/flash-attn (`flash_attn_func`)
  saves q, k (k heads: GQA is native), v, the output and the fp32 softmax log-sum-exp [b, a, s];
  dropout inside it is replayed from the RNG state, no mask is stored.
- `Linear`: TE `Linear` (`TERowParallelLinear` for proj and fc2) saves its input.
- `BiasDropoutAdd`: Megatron `megatron/core/fusions/fused_bias_dropout.py` keeps only the dropout
  mask (1 byte per element); with dropout 0 it keeps nothing.
- `BiasGeLU`: Megatron `megatron/core/fusions/fused_bias_gelu.py` (`GeLUFunction`) saves the fc1
  output before the bias, and the bias.
- `SwiGLU`: Megatron `megatron/core/fusions/fused_bias_swiglu.py` (`SwiGLUFunction`) saves its
  2f-wide input [gate | up].
- Fused RoPE (TE `FusedRoPEFunc`) saves only the frequencies: RoPE'd q and k are new tensors.

Assumed (as plan3d's formula does): q, k and v reach attention as separate tensors; Megatron's
`get_query_key_value_tensors` splits one QKV buffer, and where v stays a view of it the whole
buffer would stay alive (not modelled; see the oracle's report).
Layouts are Megatron's [s, b, h].  `recompute="selective"` checkpoints the core attention as
Megatron's `_checkpointed_attention_forward` does (`tensor_parallel.checkpoint`, reentrant: it
saves q, k, v and re-runs the kernel); "full" checkpoints the whole layer (its input only).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


def _up(x):
    """The kernels' fp32 math for 16-bit tensors (float64 stays float64 for gradcheck)."""
    return x.float() if x.element_size() < 4 else x


def _norm(x, w, b, rms: bool, eps=1e-5):
    xf = x.float() if x.element_size() < 4 else x
    if rms:
        rsigma = torch.rsqrt(xf.pow(2).mean(-1) + eps)
        return (xf * rsigma[..., None] * _up(w)).to(x.dtype), (rsigma,)
    mu = xf.mean(-1)
    rsigma = torch.rsqrt((xf - mu[..., None]).pow(2).mean(-1) + eps)
    return ((xf - mu[..., None]) * rsigma[..., None] * _up(w) + _up(b)).to(x.dtype), (mu, rsigma)


def _replay(fn, saved_inputs, grads):
    """Backward by re-running `fn` with autograd on the saved inputs (values, not bytes, matter)."""
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(t.is_floating_point()) if t is not None else None
                  for t in saved_inputs]
        outs = fn(*leaves)
        outs = outs if isinstance(outs, tuple) else (outs,)
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
        wrt = [t for t in leaves if t is not None and t.requires_grad]
        got = iter(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True))
    return tuple(next(got) if t is not None and t.requires_grad else None for t in leaves)


class LayerNormLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w_norm, b_norm, weight, bias, rms):
        ln_out, stats = _norm(x, w_norm, b_norm, rms)
        ctx.rms = rms
        ctx.save_for_backward(x, ln_out, *stats, w_norm, b_norm, weight, bias)
        return F.linear(ln_out, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, _ln_out, *rest = ctx.saved_tensors
        w_norm, b_norm, weight, bias = rest[-4:]
        return (*_replay(lambda x, wn, bn, w, b: F.linear(_norm(x, wn, bn, ctx.rms)[0], w, b),
                         (x, w_norm, b_norm, weight, bias), (grad,)), None)


class FlashAttention(torch.autograd.Function):
    @staticmethod
    def _attn(q, k, v):  # [s, b, heads, d] in and out; causal
        rep = q.shape[2] // k.shape[2]
        qb, kb, vb = (t.permute(1, 2, 0, 3) for t in (q, k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)))
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(qb, kb, vb, 0.0, True)[:2]
        return out.permute(2, 0, 1, 3).contiguous(), _up(lse)

    @staticmethod
    def forward(ctx, q, k, v):
        out, lse = FlashAttention._attn(q, k, v)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, _out, _lse = ctx.saved_tensors
        return _replay(lambda q, k, v: FlashAttention._attn(q, k, v)[0], (q, k, v), (grad,))


class Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight, bias)
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        return _replay(F.linear, ctx.saved_tensors, (grad,))


class BiasDropoutAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, residual, p):
        ctx.p = p
        y = x if bias is None else x + bias
        if p > 0:
            mask = torch.rand_like(y, dtype=torch.float32) >= p  # bool: 1 byte per element
            ctx.save_for_backward(mask)
            y = y * mask / (1 - p)
        ctx.has_bias = bias is not None
        return residual + y

    @staticmethod
    def backward(ctx, grad):
        g = grad * ctx.saved_tensors[0] / (1 - ctx.p) if ctx.p > 0 else grad
        gb = g.sum((0, 1)) if ctx.has_bias else None
        return g, gb, grad, None


class BiasGeLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias):
        ctx.save_for_backward(x, bias)
        return F.gelu(x + bias, approximate="tanh")

    @staticmethod
    def backward(ctx, grad):
        return _replay(lambda x, b: F.gelu(x + b, approximate="tanh"), ctx.saved_tensors, (grad,))


class SwiGLU(torch.autograd.Function):
    @staticmethod
    def _f(x):
        gate, up = x.chunk(2, -1)
        return F.silu(gate) * up

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return SwiGLU._f(x)

    @staticmethod
    def backward(ctx, grad):
        return _replay(SwiGLU._f, ctx.saved_tensors, (grad,))


class FusedRoPE(torch.autograd.Function):
    """TE FusedRoPEFunc: rotates q or k ([s, b, heads, d]); saves only the frequencies."""

    @staticmethod
    def _rotate(x, freqs):
        cos, sin = freqs.cos()[:, None, None, :], freqs.sin()[:, None, None, :]
        x1, x2 = x.chunk(2, -1)
        rot = torch.cat((-x2, x1), -1)
        return (_up(x) * cos + _up(rot) * sin).to(x.dtype)

    @staticmethod
    def forward(ctx, x, freqs):
        ctx.save_for_backward(freqs)
        return FusedRoPE._rotate(x, freqs)

    @staticmethod
    def backward(ctx, grad):
        (freqs,) = ctx.saved_tensors
        return FusedRoPE._rotate(grad, -freqs), None


class FusedLayer(nn.Module):
    """One Megatron-Core transformer layer, TE spec.  gpt: LayerNorm, biases, GELU, MHA, dropout;
    llama: RMSNorm, no biases, SwiGLU, GQA, RoPE, no dropout."""

    def __init__(self, kind, hidden, n_heads, n_kv_heads, ffn, recompute="none", dropout=0.1):
        super().__init__()
        self.kind, self.recompute, self.p = kind, recompute, (dropout if kind == "gpt" else 0.0)
        self.a, self.k, self.d = n_heads, n_kv_heads, hidden // n_heads
        bias = kind == "gpt"
        z = lambda *shape: nn.Parameter(torch.randn(*shape) * 0.02)  # noqa: E731
        self.n1_w, self.n2_w = nn.Parameter(torch.ones(hidden)), nn.Parameter(torch.ones(hidden))
        self.n1_b, self.n2_b = (nn.Parameter(torch.zeros(hidden)), nn.Parameter(torch.zeros(hidden))) if bias else (None, None)
        self.qkv_w = z((n_heads + 2 * n_kv_heads) * self.d, hidden)
        self.qkv_b = z((n_heads + 2 * n_kv_heads) * self.d) if bias else None
        self.proj_w, self.proj_b = z(hidden, n_heads * self.d), (z(hidden) if bias else None)
        mlp_out = ffn if kind == "gpt" else 2 * ffn
        self.fc1_w, self.fc1_b = z(mlp_out, hidden), (z(mlp_out) if bias else None)
        self.fc2_w, self.fc2_b = z(hidden, ffn), (z(hidden) if bias else None)

    def _core(self, q, k, v):
        return FlashAttention.apply(q, k, v)

    def _layer(self, x, freqs):
        s, b, _ = x.shape
        rms = self.kind == "llama"
        qkv = LayerNormLinear.apply(x, self.n1_w, self.n1_b, self.qkv_w, self.qkv_b, rms)
        q, k, v = qkv.split([self.a * self.d, self.k * self.d, self.k * self.d], -1)
        q = q.reshape(s, b, self.a, self.d)
        k, v = k.reshape(s, b, self.k, self.d), v.contiguous().view(s, b, self.k, self.d)
        if rms:
            q, k = FusedRoPE.apply(q, freqs), FusedRoPE.apply(k, freqs)
        else:
            q, k = q.contiguous(), k.contiguous()
        if self.recompute == "selective":  # Megatron's checkpointed core attention
            out = checkpoint(self._core, q, k, v, use_reentrant=True)
        else:
            out = self._core(q, k, v)
        attn = Linear.apply(out.view(s, b, -1), self.proj_w, None)
        h = BiasDropoutAdd.apply(attn, self.proj_b, x, self.p)
        fc1 = LayerNormLinear.apply(h, self.n2_w, self.n2_b, self.fc1_w, None, rms)
        act = BiasGeLU.apply(fc1, self.fc1_b) if self.kind == "gpt" else SwiGLU.apply(fc1)
        return BiasDropoutAdd.apply(Linear.apply(act, self.fc2_w, None), self.fc2_b, h, self.p)

    def forward(self, x, freqs):
        if self.recompute == "full":
            return checkpoint(self._layer, x, freqs, use_reentrant=True)
        return self._layer(x, freqs)
