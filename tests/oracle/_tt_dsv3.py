"""A torchtitan-style DeepSeek-V3 block as torchtitan @ 0cfbd0b3c (2025-10-02) checkpoints it,
built for the oracle (no torchtitan code is imported or copied).

Structure (pytorch/torchtitan @ 0cfbd0b3c):
- `torchtitan/models/deepseek_v3/model/model.py`: `TransformerBlock.forward` is
  `x = x + attention(attention_norm(x)); x = x + moe(ffn_norm(x))` with `nn.RMSNorm` norms; MLA
  `Attention` with `wq` when `q_lora_rank` is 0 (the 16B flavour), `wkv_a`, `kv_norm`, `wkv_b`,
  RoPE on the rotary halves, the attention kernel and `wo`.
- `torchtitan/models/moe.py`: `TokenChoiceTopKRouter` (the gate `nn.Linear` on the 2-D tokens, an
  `mm`; softmax or sigmoid in fp32; top-k, scores gathered at the choice under the expert bias;
  histc), `TokenReorderer` (histc, argsort, scores gathered, `// top_k`), `MoE.forward` (the
  input rows gathered, routed experts, then the shared experts `FeedForward`
  `w2(silu(w1(x)) * w3(x))`, the routed outputs scaled by their scores in fp32, scatter-added).
  `GroupedExperts` runs `_run_experts_grouped_mm` (three `torch._grouped_mm`) inside the
  `expert_parallel` wrapper (`torchtitan/distributed/expert_parallel.py`: a zero row appended,
  rows permuted by local expert, outputs un-permuted).  With expert parallelism `ExpertParallel`
  wraps the experts module: the dispatch all-to-all of the routed rows before it, the combine
  all-to-all of its output after it (`all_to_all_single_autograd`, which reaches the dispatcher
  as `_c10d_functional.all_to_all_single`).
- `torchtitan/distributed/activation_checkpoint.py` and `models/deepseek_v3/infra/parallelize.py`:
  selective AC with `selective_ac_option = "op"` on a flavour with `use_flex_attn` (16B, 236B,
  671B) and the model not compiled (`compile.components = ["loss"]`) goes through
  `_apply_op_sac_to_transformer_block_with_flex`: in a MoE block the `moe` module gets op SAC and
  the `attention` module full AC; the norms and residual adds stay outside any checkpoint.  The
  op policy saves the outputs of `_op_sac_save_list` (mm, the efficient/flash SDPA ops,
  reduce_scatter, all_to_all_single, max, flex_attention) except every second mm of the region,
  and recomputes, uncounted, every mm shaped as the router gate's (the default
  `per_op_sac_force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]`,
  `torchtitan/config/job_config.py`).

Stand-ins for CUDA kernels the CPU lacks, each a custom op with the real op's saved tensors:
- `fused_rms_norm`: PyTorch's CUDA `nn.RMSNorm` (torch >= 2.9 routes `rms_norm` on CUDA to
  `aten::_fused_rms_norm`, whose autograd node `FusedRmsNormBackward0` keeps `input`, `weight` and
  the fp32 rstd `result1`: torch/csrc/autograd/generated/Functions.h of torch 2.13); on the CPU
  `rms_norm` decomposes and keeps an fp32 copy instead.
- `grouped_mm`: `torch._grouped_mm` (no CPU backward in torch 2.13): keeps its two operands.
- `all_to_all`: one EP rank's view of `all_to_all_single`: a fresh buffer of the rows the rank
  receives (`out_rows`, the busiest rank's λ·T·k for the dispatch, T·k back for the combine); the
  backward returns the input's shape.  It stands in for `_c10d_functional.all_to_all_single` in
  the SAC save list, as `flash_attention` stands in for the CUDA flash op (_torchtitan.py).
"""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from ._moe import _rotate, mla_flash_attention
from ._torchtitan import FeedForward

EPS = 1e-6


@torch.library.custom_op("plan3d_oracle::fused_rms_norm", mutates_args=())
def fused_rms_norm(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS)
    return (x.float() * rstd * weight.float()).to(x.dtype), rstd


@fused_rms_norm.register_fake
def _(x, weight):
    return torch.empty_like(x), x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)


def _rms_setup(ctx, inputs, output):
    x, weight = inputs
    ctx.save_for_backward(x, weight, output[1])


def _rms_backward(ctx, grad, _grad_rstd):
    x, weight, rstd = ctx.saved_tensors
    xf, g = x.float(), grad.float()
    normed = xf * rstd
    gw = g * weight.float()
    gx = rstd * (gw - normed * (gw * normed).mean(-1, keepdim=True))
    dw = (g * normed).reshape(-1, x.shape[-1]).sum(0)
    return gx.to(x.dtype), dw.to(weight.dtype)


fused_rms_norm.register_autograd(_rms_backward, setup_context=_rms_setup)


class FusedRMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return fused_rms_norm(x, self.weight)[0]


@torch.library.custom_op("plan3d_oracle::grouped_mm", mutates_args=())
def grouped_mm(x: torch.Tensor, w: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """x [R, d_in] sorted by expert, w [E, d_in, d_out]; rows beyond sum(counts) are padding."""
    out, start = x.new_zeros((x.shape[0], w.shape[-1])), 0
    for e, n in enumerate(counts):
        out[start:start + n] = x[start:start + n] @ w[e]
        start += n
    return out


@grouped_mm.register_fake
def _(x, w, counts):
    return x.new_empty((x.shape[0], w.shape[-1]))


def _gmm_setup(ctx, inputs, output):
    x, w, counts = inputs
    ctx.counts = counts
    ctx.save_for_backward(x, w)


def _gmm_backward(ctx, grad):
    x, w = ctx.saved_tensors
    gx, gw, start = torch.zeros_like(x), torch.zeros_like(w), 0
    for e, n in enumerate(ctx.counts):
        gx[start:start + n] = grad[start:start + n] @ w[e].transpose(0, 1)
        gw[e] = x[start:start + n].transpose(0, 1) @ grad[start:start + n]
        start += n
    return gx, gw, None


grouped_mm.register_autograd(_gmm_backward, setup_context=_gmm_setup)


@torch.library.custom_op("plan3d_oracle::all_to_all", mutates_args=())
def all_to_all(x: torch.Tensor, out_rows: int) -> torch.Tensor:
    """The rows this rank receives: out_rows of them (the input's rows repeated), a new buffer."""
    idx = torch.arange(out_rows) % max(1, x.shape[0])
    return x[idx].clone()


@all_to_all.register_fake
def _(x, out_rows):
    return x.new_empty((out_rows, x.shape[1]))


def _a2a_setup(ctx, inputs, output):
    ctx.in_rows = inputs[0].shape[0]


def _a2a_backward(ctx, grad):
    idx = torch.arange(ctx.in_rows) % max(1, grad.shape[0])
    return grad[idx].clone(), None


all_to_all.register_autograd(_a2a_backward, setup_context=_a2a_setup)


class MLA(nn.Module):
    """MLA without query compression (q_lora_rank 0, the 16B flavour)."""

    def __init__(self, dim, n_heads, kv_lora_rank, qk_nope_dim, qk_rope_dim, v_dim):
        super().__init__()
        self.n_heads, self.nope, self.rope, self.v_dim = n_heads, qk_nope_dim, qk_rope_dim, v_dim
        self.kv_lora_rank = kv_lora_rank
        self.wq = nn.Linear(dim, n_heads * (qk_nope_dim + qk_rope_dim), bias=False)
        self.wkv_a = nn.Linear(dim, kv_lora_rank + qk_rope_dim, bias=False)
        self.kv_norm = FusedRMSNorm(kv_lora_rank)
        self.wkv_b = nn.Linear(kv_lora_rank, n_heads * (qk_nope_dim + v_dim), bias=False)
        self.wo = nn.Linear(n_heads * v_dim, dim, bias=False)

    def forward(self, x, cis):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, self.nope + self.rope)
        q_nope, q_pe = torch.split(q, [self.nope, self.rope], dim=-1)
        q = torch.cat([q_nope, _rotate(q_pe, cis)], dim=-1)
        kv, k_pe = torch.split(self.wkv_a(x), [self.kv_lora_rank, self.rope], dim=-1)
        k_pe = _rotate(k_pe.unsqueeze(2), cis)
        kv = self.wkv_b(self.kv_norm(kv)).view(b, s, -1, self.nope + self.v_dim)
        k_nope, v = torch.split(kv, [self.nope, self.v_dim], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(-1, -1, self.n_heads, -1)], dim=-1)
        out, _ = mla_flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.wo(out.transpose(1, 2).contiguous().view(b, s, -1))


class MoE(nn.Module):
    """torchtitan @ 0cfbd0b3c's MoE (score after the experts, as the DeepSeek-V3 flavours set),
    seen from one rank: `rows_in` routed rows arrive from the dispatch all-to-all when `ep`."""

    def __init__(self, dim, expert_ffn, n_experts, top_k, n_shared, ep=False, rows_in=None,
                 score_func="softmax"):
        super().__init__()
        self.gate = nn.Linear(dim, n_experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(n_experts, dim, expert_ffn) * dim ** -0.5)
        self.w3 = nn.Parameter(torch.randn(n_experts, dim, expert_ffn) * dim ** -0.5)
        self.w2 = nn.Parameter(torch.randn(n_experts, expert_ffn, dim) * expert_ffn ** -0.5)
        self.shared = FeedForward(dim, n_shared * expert_ffn) if n_shared else None
        self.register_buffer("expert_bias", torch.zeros(n_experts, dtype=torch.float32))
        self.n_experts, self.top_k, self.ep, self.rows_in = n_experts, top_k, ep, rows_in
        self.score_func = score_func

    def _experts(self, rows):
        # expert_parallel wrapper: a zero row appended, rows permuted by local expert (identity
        # here: they arrive sorted) and padded to a multiple of 8, three grouped GEMMs, un-permuted
        n = rows.shape[0]
        padded = -(-(n + 1) // 8) * 8
        x = torch.vstack((rows, rows.new_zeros(rows.shape[-1])))
        perm = torch.cat([torch.arange(n), torch.full((padded - n,), n)])
        x = x[perm, :]
        counts = [n // self.n_experts] * self.n_experts
        counts[-1] += n - sum(counts)
        h = F.silu(grouped_mm(x, self.w1, counts)) * grouped_mm(x, self.w3, counts)
        out = grouped_mm(h, self.w2, counts)
        unpermuted = out.new_empty((n + 1, out.shape[-1]))
        unpermuted[perm[:n], :] = out[:n]
        return unpermuted[:-1]

    def forward(self, x):
        bs, slen, dim = x.shape
        x = x.view(-1, dim)
        scores = self.gate(x)
        scores = (torch.sigmoid(scores.to(torch.float32)) if self.score_func == "sigmoid"
                  else F.softmax(scores.to(torch.float32), dim=1))
        _, ids = torch.topk(scores + self.expert_bias, k=self.top_k, dim=1)
        top = scores.gather(dim=1, index=ids)
        torch.histc(ids.view(-1).float(), bins=self.n_experts, min=0, max=self.n_experts)
        order = torch.argsort(ids.view(-1), stable=True)
        sorted_scores = top.view(-1)[order]
        token_idx = (order // self.top_k).reshape(-1, 1).expand(-1, dim)
        routed = torch.gather(x, dim=0, index=token_idx)
        if self.ep:
            received = all_to_all(routed, self.rows_in)
            routed = all_to_all(self._experts(received), routed.shape[0])
        else:
            routed = self._experts(routed)
        out = self.shared(x) if self.shared is not None else torch.zeros_like(x)
        routed = (routed.to(torch.float32) * sorted_scores.reshape(-1, 1)).to(x.dtype)
        out = out.scatter_add(dim=0, index=token_idx, src=routed)
        return out.reshape(bs, slen, dim)


SAVE_LIST = {  # _op_sac_save_list of deepseek_v3/infra/parallelize.py @ 0cfbd0b3c, stand-ins added
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    torch.ops._c10d_functional.all_to_all_single.default,
    torch.ops.plan3d_oracle.all_to_all.default,
    torch.ops.aten.max.default,
    torch.ops.plan3d_oracle.mla_flash_attention.default,
}


def _op_sac_context(recompute_shapes=frozenset()):
    """torchtitan @ 0cfbd0b3c `_apply_op_sac`'s policy: an mm whose right operand has a shape in
    `recompute_shapes` is recomputed and not counted (`per_op_sac_force_recompute_mm_shapes_by_
    fqns`, default ["moe.router.gate"]: the gate's (h, E)); otherwise save SAVE_LIST's outputs
    except every second mm of the region (a fresh count per checkpointed call)."""
    meta = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        key = "recompute_mm_count" if ctx.is_recompute else "forward_mm_count"
        if func == torch.ops.aten.mm.default:
            if tuple(args[1].shape) in recompute_shapes:
                return CheckpointPolicy.PREFER_RECOMPUTE
            meta[key] += 1
        keep = func in SAVE_LIST and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


class _Wrapped(nn.Module):
    def __init__(self, inner, mode, recompute_shapes=frozenset()):
        super().__init__()
        self.inner, self.mode, self.shapes = inner, mode, recompute_shapes

    def forward(self, *args):
        if self.mode == "none":
            return self.inner(*args)
        kw = {} if self.mode == "full" else {
            "context_fn": lambda: _op_sac_context(self.shapes)}
        return checkpoint(self.inner, *args, use_reentrant=False, preserve_rng_state=False, **kw)


class Block(nn.Module):
    """A DeepSeek-V3 MoE block under `ac`: "none", or "flex-op" (the flex path of op SAC with the
    model not compiled: op SAC on the MoE, full AC on the attention)."""

    def __init__(self, dim, n_heads, kv_lora_rank, qk_nope, qk_rope, v_dim, expert_ffn,
                 n_experts, top_k, n_shared, ep=False, rows_in=None, ac="flex-op"):
        super().__init__()
        self.attention_norm, self.ffn_norm = FusedRMSNorm(dim), FusedRMSNorm(dim)
        attn = MLA(dim, n_heads, kv_lora_rank, qk_nope, qk_rope, v_dim)
        moe = MoE(dim, expert_ffn, n_experts, top_k, n_shared, ep, rows_in)
        self.attention = _Wrapped(attn, "full" if ac == "flex-op" else "none")
        gate = frozenset({(dim, n_experts)})  # the gate's mm right operand, weight.t()
        self.moe = _Wrapped(moe, "op" if ac == "flex-op" else "none", gate)

    def forward(self, x, cis):
        x = x + self.attention(self.attention_norm(x), cis)
        return x + self.moe(self.ffn_norm(x))
