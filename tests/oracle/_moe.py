"""A torchtitan-style eager MoE layer and MLA attention built for the oracle (no torchtitan code is
imported or copied).

Structure follows torchtitan @ b5bcd76 (pytorch/torchtitan):
- `torchtitan/models/common/moe.py`: `TokenChoiceTopKRouter` (gate GEMM under fp32 autocast,
  sigmoid or softmax scores, an optional per-expert bias added for the choice only, top-k,
  scores gathered at the chosen experts, optional normalisation), `MoE.forward` (routing map by
  scatter, routed experts, shared experts added), `GroupedExperts` (w2(silu(x·w1) * (x·w3)) on
  the expert-sorted rows, one grouped GEMM each).
- `torchtitan/models/common/token_dispatcher.py`: `LocalTokenDispatcher` (argsort of the expert
  ids, the rows gathered by token index; combine: the expert outputs scaled by their scores in
  fp32, then scatter-added into a zero (T, D) tensor).
- `torchtitan/models/deepseek_v3/model.py`: MLA `Attention.forward` (q = wq_b(q_norm(wq_a(x))),
  [c_KV; k_R] = wkv_a(x), RoPE on q_R and k_R, k_nope and v from wkv_b(kv_norm(c_KV)), k_R
  broadcast to every head, SDPA, wo).

`torch._grouped_mm` has no CPU backward in torch 2.13, so the grouped GEMM is a loop of `mm` over
each expert's row slice, concatenated: autograd keeps the same tensors as the CUDA grouped GEMM
(the row block, a view of the sorted input, and the weights; the outputs are not kept).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._torchtitan import FeedForward, RMSNorm


@torch.library.custom_op("plan3d_oracle::mla_flash_attention", mutates_args=())
def mla_flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention on [b, a, s, d] inputs whose V is narrower than Q and K (MLA's d_v <
    d_qk), standing in for the CUDA flash kernel: returns (out [b, a, s, d_v] viewing a
    [b, s, a, d_v] buffer, the fp32 log-sum-exp [b, a, s]) and keeps q, k, v, out and lse."""
    scores = (q.float() @ k.float().transpose(-2, -1)) * q.shape[-1] ** -0.5
    causal = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).triu(1)
    scores = scores.masked_fill(causal, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = (torch.softmax(scores, dim=-1) @ v.float()).to(q.dtype)
    return out.transpose(1, 2).contiguous().transpose(1, 2), lse


@mla_flash_attention.register_fake
def _(q, k, v):
    b, a, s, _ = q.shape
    return (q.new_empty((b, s, a, v.shape[-1])).transpose(1, 2),
            q.new_empty((b, a, s), dtype=torch.float32))


def _mla_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs, *output)


def _mla_backward(ctx, grad_out, grad_lse):
    q, k, v, _, _ = ctx.saved_tensors
    with torch.enable_grad():
        leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*leaves, is_causal=True)
        grads = torch.autograd.grad(out, leaves, grad_out.float())
    return tuple(g.to(t.dtype) for g, t in zip(grads, (q, k, v)))


mla_flash_attention.register_autograd(_mla_backward, setup_context=_mla_setup)


class Router(nn.Module):
    def __init__(self, dim, n_experts, top_k, score_func="sigmoid", route_norm=True):
        super().__init__()
        self.gate = nn.Linear(dim, n_experts, bias=False)
        self.n_experts, self.top_k, self.score_func, self.route_norm = (
            n_experts, top_k, score_func, route_norm)

    def forward(self, x, expert_bias=None):
        scores = F.linear(x.float(), self.gate.weight.float())  # fp32 autocast of the gate
        scores = torch.sigmoid(scores) if self.score_func == "sigmoid" else F.softmax(scores, dim=-1)
        choice = scores if expert_bias is None else scores + expert_bias
        _, ids = torch.topk(choice, k=self.top_k, dim=-1, sorted=False)
        top = scores.gather(dim=-1, index=ids)
        if self.route_norm:
            top = top / (top.sum(dim=-1, keepdim=True) + 1e-20)
        return top, ids, scores


class GroupedExperts(nn.Module):
    def __init__(self, dim, hidden_dim, n_experts):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(n_experts, dim, hidden_dim) * dim ** -0.5)
        self.w3 = nn.Parameter(torch.randn(n_experts, dim, hidden_dim) * dim ** -0.5)
        self.w2 = nn.Parameter(torch.randn(n_experts, hidden_dim, dim) * hidden_dim ** -0.5)

    @staticmethod
    def _grouped_mm(x, w, counts):
        out, start = [], 0
        for e, n in enumerate(counts):
            out.append(x[start:start + n] @ w[e])
            start += n
        return torch.cat(out)

    def forward(self, x, counts):
        h = F.silu(self._grouped_mm(x, self.w1, counts)) * self._grouped_mm(x, self.w3, counts)
        return self._grouped_mm(h, self.w2, counts)


class MoE(nn.Module):
    """Router → sort by expert → grouped experts → score and scatter-add → + shared experts."""

    def __init__(self, dim, expert_ffn, n_experts, top_k, n_shared=1, shared_ffn=None,
                 score_func="sigmoid", bias_balancing=True):
        super().__init__()
        self.router = Router(dim, n_experts, top_k, score_func)
        self.experts = GroupedExperts(dim, expert_ffn, n_experts)
        self.shared = FeedForward(dim, n_shared * (shared_ffn or expert_ffn)) if n_shared else None
        self.register_buffer("expert_bias", torch.zeros(n_experts) if bias_balancing else None)
        self.top_k, self.n_experts = top_k, n_experts

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        top, ids, _ = self.router(x, self.expert_bias)
        counts = torch.bincount(ids.view(-1), minlength=self.n_experts).tolist()
        order = torch.argsort(ids.view(-1), stable=True)
        sorted_scores = top.view(-1)[order]
        token_of_row = order // self.top_k
        routed = self.experts(x[token_of_row], counts)
        routed = (routed.float() * sorted_scores.reshape(-1, 1)).to(routed.dtype)
        out = torch.zeros_like(x).scatter_add(
            0, token_of_row.reshape(-1, 1).expand(-1, shape[-1]), routed)
        if self.shared is not None:
            out = out + self.shared(x)
        return out.reshape(shape)


def rope_cis(rope_dim: int, seq_len: int, theta: float = 10000.0) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, rope_dim, 2).float() / rope_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), freqs)
    return torch.polar(torch.ones_like(angles), angles)


def _rotate(x, cis):
    """Complex RoPE on [b, s, heads, d_r] (torchtitan's apply_rotary_emb for DeepSeek-V3)."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * cis.view(1, x.shape[1], 1, -1)).flatten(3).type_as(x)


class MLA(nn.Module):
    def __init__(self, dim, n_heads, q_lora_rank, kv_lora_rank, qk_nope_dim, qk_rope_dim, v_dim):
        super().__init__()
        self.n_heads, self.nope, self.rope, self.v_dim = n_heads, qk_nope_dim, qk_rope_dim, v_dim
        self.kv_lora_rank = kv_lora_rank
        qk = qk_nope_dim + qk_rope_dim
        self.wq_a = nn.Linear(dim, q_lora_rank, bias=False)
        self.q_norm = RMSNorm(q_lora_rank)
        self.wq_b = nn.Linear(q_lora_rank, n_heads * qk, bias=False)
        self.wkv_a = nn.Linear(dim, kv_lora_rank + qk_rope_dim, bias=False)
        self.kv_norm = RMSNorm(kv_lora_rank)
        self.wkv_b = nn.Linear(kv_lora_rank, n_heads * (qk_nope_dim + v_dim), bias=False)
        self.wo = nn.Linear(n_heads * v_dim, dim, bias=False)

    def forward(self, x, cis):
        b, s, _ = x.shape
        q = self.wq_b(self.q_norm(self.wq_a(x))).view(b, s, self.n_heads, -1)
        q_nope, q_pe = torch.split(q, [self.nope, self.rope], dim=-1)
        kv, k_pe = torch.split(self.wkv_a(x), [self.kv_lora_rank, self.rope], dim=-1)
        q = torch.cat([q_nope, _rotate(q_pe, cis)], dim=-1)
        k_pe = _rotate(k_pe.unsqueeze(2), cis)
        kv = self.wkv_b(self.kv_norm(kv)).view(b, s, self.n_heads, self.nope + self.v_dim)
        k_nope, v = torch.split(kv, [self.nope, self.v_dim], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(-1, -1, self.n_heads, -1)], dim=-1)
        out, _ = mla_flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))
