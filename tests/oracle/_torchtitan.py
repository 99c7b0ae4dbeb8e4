"""A torchtitan-style eager Llama built for the oracle (no torchtitan code is imported or copied).

Structure follows torchtitan `torchtitan/models/llama/model.py @ ba24697` (Dec 2024, the code
behind `docs/performance.md`'s and the H100 benchmark's Llama 3.1 8B rows): RMSNorm computed
as `_norm(x.float()).type_as(x) * weight`, RoPE in complex fp32, `repeat_kv` before
`F.scaled_dot_product_attention(is_causal=True)`, `output.transpose(1, 2).contiguous()`, and
FeedForward `w2(silu(w1(x)) * w3(x))`; blocks `h = x + attn(norm(x)); out = h + ffn(norm(h))`.
torchtitan HEAD (`torchtitan/models/common/attention.py @ b5bcd76`) passes `enable_gqa` to SDPA
instead of repeating K and V (`repeat_kv=False` here) and uses `nn.RMSNorm`.

Activation checkpointing follows `torchtitan/parallelisms/parallelize_llama.py @ ba24697`
(`_apply_ac_to_transformer_block`): full AC wraps each block in a non-reentrant checkpoint;
op-level selective AC uses `create_selective_checkpoint_contexts` with `_save_list` (mm, the
flash/efficient SDPA ops, reduce_scatter, abs, max) and recomputes every second mm. HEAD
(`torchtitan/distributed/activation_checkpoint.py @ b5bcd76`) keeps the same rule.

On the CPU, `aten._scaled_dot_product_flash_attention_for_cpu` returns its output in
[b, a, s, d] memory order, so `transpose(1, 2).contiguous()` would copy; CUDA's flash kernel
(`aten._scaled_dot_product_flash_attention`, FA2 `mha_fwd`) writes [b, s, a, d] and returns a
transposed view, so the copy is free and `wo` saves the SDPA output itself. `flash_attention`
below is a custom op that mimics the CUDA kernel: same output layout, same saved tensors
(q, k, v, out and the fp32 log-sum-exp), K and V at their own head count (FA2 handles GQA
natively); the SAC policy treats it as the CUDA flash op.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts


@torch.library.custom_op("plan3d_oracle::flash_attention", mutates_args=())
def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention on [b, heads, s, d] inputs; returns (out [b, a, s, d] viewing a
    [b, s, a, d] buffer, lse fp32 [b, a, s]) like CUDA's flash SDPA."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)[:2]
    return out.transpose(1, 2).contiguous().transpose(1, 2), lse.float()


@flash_attention.register_fake
def _(q, k, v):
    b, a, s, d = q.shape
    return q.new_empty((b, s, a, d)).transpose(1, 2), q.new_empty((b, a, s), dtype=torch.float32)


def _flash_setup(ctx, inputs, output):
    q, k, v = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)


def _flash_backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    rep = q.shape[1] // k.shape[1]
    kr, vr = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, q, kr, vr, out, lse, 0.0, True)
    b, _, s, d = k.shape
    dk = dk.view(b, k.shape[1], rep, s, d).sum(2)
    dv = dv.view(b, k.shape[1], rep, s, d).sum(2)
    return dq, dk, dv


flash_attention.register_autograd(_flash_backward, setup_context=_flash_setup)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self._norm(x.float()).type_as(x) * self.weight


def rope_freqs(head_dim: int, seq_len: int, theta: float = 500000.0) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    t = torch.arange(seq_len, dtype=torch.float32)
    return torch.polar(torch.ones(seq_len, head_dim // 2, dtype=torch.float32), torch.outer(t, freqs))


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    f = freqs_cis[: xq.shape[1]].view(1, xq.shape[1], 1, xq_.shape[-1])
    return (torch.view_as_real(xq_ * f).flatten(3).type_as(xq),
            torch.view_as_real(xk_ * f).flatten(3).type_as(xk))


def repeat_kv(x, n_rep: int):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return x.unsqueeze(3).expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(
        bs, slen, n_kv_heads * n_rep, head_dim)


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, repeat_kv: bool):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, dim // n_heads
        self.n_rep = n_heads // n_kv_heads if repeat_kv else 1
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, freqs_cis):
        bs, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bs, seqlen, -1, self.head_dim)
        xk = xk.view(bs, seqlen, -1, self.head_dim)
        xv = xv.view(bs, seqlen, -1, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        keys, values = repeat_kv(xk, self.n_rep), repeat_kv(xv, self.n_rep)
        output, _ = flash_attention(xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2))
        output = output.transpose(1, 2).contiguous().view(bs, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, ffn, repeat_kv=True):
        super().__init__()
        self.attention = Attention(dim, n_heads, n_kv_heads, repeat_kv)
        self.feed_forward = FeedForward(dim, ffn)
        self.attention_norm = RMSNorm(dim)
        self.ffn_norm = RMSNorm(dim)

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


# `_save_list` of torchtitan parallelize_llama.py @ ba24697, with the CUDA flash op stood in for.
SAVE_LIST = {
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.plan3d_oracle.flash_attention.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    torch.ops.aten.abs.default,
    torch.ops.aten.max.default,
}


def _op_sac_context():
    """torchtitan's op-level SAC policy: save the ops in SAVE_LIST except every second mm."""
    meta = {"forward_mm_count": 0, "recompute_mm_count": 0}

    def policy(ctx, func, *args, **kwargs):
        key = "recompute_mm_count" if ctx.is_recompute else "forward_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[key] += 1
        keep = func in SAVE_LIST and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


class Checkpointed(nn.Module):
    """A block under torchtitan's AC: mode "full" or "op" (op-level selective)."""

    def __init__(self, block: nn.Module, mode: str):
        super().__init__()
        self.block, self.mode = block, mode

    def forward(self, x, freqs_cis):
        if self.mode == "full":
            return checkpoint(self.block, x, freqs_cis, use_reentrant=False, preserve_rng_state=False)
        return checkpoint(self.block, x, freqs_cis, use_reentrant=False, preserve_rng_state=False,
                          context_fn=_op_sac_context)


def wrap(block: nn.Module, ac: str) -> nn.Module:
    """ac: "none", "op" (selective) or "full"."""
    return block if ac == "none" else Checkpointed(block, ac)


class Transformer(nn.Module):
    def __init__(self, vocab, dim, n_layers, n_heads, n_kv_heads, ffn, seq_len, ac="none", repeat_kv=True):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.register_buffer("freqs_cis", rope_freqs(dim // n_heads, seq_len), persistent=False)
        self.layers = nn.ModuleList(
            wrap(TransformerBlock(dim, n_heads, n_kv_heads, ffn, repeat_kv), ac) for _ in range(n_layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.freqs_cis)
        return self.output(self.norm(h))


def loss_fn(pred, labels):
    """torchtitan train.py @ ba24697: cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))."""
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def train_step(model, tokens, labels):
    """torchtitan's step: forward, loss, `del pred` ("need to free before bwd"), backward."""
    pred = model(tokens)
    loss = loss_fn(pred, labels)
    del pred
    loss.backward()
    return loss


@contextlib.contextmanager
def default_dtype(dtype):
    """Build modules directly in `dtype` (FakeTensorMode cannot convert them afterwards)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def init_(model: nn.Module) -> nn.Module:
    for p in model.parameters():
        nn.init.normal_(p, std=1 / math.sqrt(p.shape[-1]))
    return model
