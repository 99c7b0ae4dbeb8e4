"""torchtitan 0.3.0's own DeepSeek-V3 block under its own `SelectiveAC`, on the CPU, and what
the per-op policy caches for the backward (imported only by test_torchtitan030_sac.py, after
`pytest.importorskip("torchtitan")`; /work/venv-launch holds torchtitan 0.3.0, torch 2.13).

torchtitan's code runs unchanged: the block built by `models/deepseek_v3/__init__.py`
`_build_dsv3_layers` (flex attention, `moe_comm_backend` "standard": no expert parallelism),
wrapped by `distributed/activation_checkpoint.py` `SelectiveAC._wrap_block` with its default
config (`_get_default_save_ops`, every second mm/linear recomputed, `force_recompute_mm_shapes_
by_fqns = ["moe.router.gate"]`). What a checkpointed block keeps is its input (the checkpoint's)
and the outputs of the ops the policy marks MUST_SAVE, held in the selective-checkpoint cache
(torch/utils/checkpoint.py `_CachingTorchDispatchMode.storage`); everything else is rerun.
`create_selective_checkpoint_contexts` is wrapped to record that cache, which is summed by
storage.  (A TorchDispatchMode counter as in _measure.py would stop Dynamo compiling the
attention region, so the cache itself is read.)

Stand-ins for what the CPU lacks, each with the CUDA path's saved tensors:
- the compiled flex region: torch 2.13 has no flex-attention backward on the CPU, and Inductor
  cannot lower its forward for training there. torchtitan compiles `flex_attention` with
  `wrap_inductor_compiled_regions` (models/common/attention.py `FlexAttention`), so the region
  reaches SAC as one `inductor_compiled_code` op — in the save list — whose outputs are the
  AOT forward graph's: the attention output and the tensors its backward reads (q, k, v, out,
  the fp32 log-sum-exp, as `flex_attention_backward` takes them).  `flash_region` below is
  compiled by Inductor with the same option; its backward reads q, k, v, out and lse, so the
  partitioner saves the same set.
- `torch._grouped_mm` (no CPU backward): tests/oracle/_tt_dsv3.py `grouped_mm` (not in the save
  list, as `_grouped_mm` is not).
- the router gate's fp32 autocast (CPU autocast has no fp32): the gate computed on fp32 copies,
  so its scores, and the top-k values the policy saves, are fp32 as on CUDA.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
import torchtitan.distributed.activation_checkpoint as TAC
from torch import nn
from torch.nn.attention.flex_attention import create_block_mask
from torch.utils._pytree import tree_leaves
from torchtitan.models.common import ComplexRoPE
from torchtitan.models.common.attention import FlexAttention
from torchtitan.models.common.moe import GroupedExperts, TokenChoiceTopKRouter
from torchtitan.models.deepseek_v3 import _build_dsv3_layers

from ._tt_dsv3 import grouped_mm

warnings.filterwarnings("ignore", module="torch")


@torch.library.custom_op("plan3d_oracle::flash_region", mutates_args=())
def flash_region(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention on [b, a, s, d] (d_v may differ): (out, fp32 lse)."""
    scores = (q.float() @ k.float().transpose(-2, -1)) * q.shape[-1] ** -0.5
    causal = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).triu(1)
    scores = scores.masked_fill(causal, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return (torch.softmax(scores, dim=-1) @ v.float()).to(q.dtype), lse


@flash_region.register_fake
def _(q, k, v):
    b, a, s, _ = q.shape
    return q.new_empty((b, a, s, v.shape[-1])), q.new_empty((b, a, s), dtype=torch.float32)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs, *output)


def _backward(ctx, grad_out, _grad_lse):
    """Flash attention's backward: P from the scores and lse, delta from out."""
    q, k, v, out, lse = ctx.saved_tensors
    scale = q.shape[-1] ** -0.5
    qf, kf, vf, go = q.float(), k.float(), v.float(), grad_out.float()
    causal = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).triu(1)
    p = torch.exp((qf @ kf.transpose(-2, -1) * scale).masked_fill(causal, float("-inf"))
                  - lse.unsqueeze(-1))
    dv = p.transpose(-2, -1) @ go
    dp = go @ vf.transpose(-2, -1)
    ds = p * (dp - (go * out.float()).sum(-1, keepdim=True))
    return ((ds @ kf * scale).to(q.dtype), (ds.transpose(-2, -1) @ qf * scale).to(k.dtype),
            dv.to(v.dtype))


flash_region.register_autograd(_backward, setup_context=_setup)

_REGION = torch.compile(lambda q, k, v: flash_region(q, k, v)[0],
                        options={"wrap_inductor_compiled_regions": True})


def _compiled_region(q, k, v, **_):
    return _REGION(q, k, v), None


def _grouped(self, *, A, B_t, offs):
    counts = torch.diff(offs, prepend=offs.new_zeros(1)).tolist()
    return grouped_mm(A, B_t, counts)


def _patch(mp, caches):
    """The stand-ins, and the SAC cache of every checkpointed call recorded in `caches`."""
    orig = TAC.create_selective_checkpoint_contexts

    def recording(policy):
        contexts = orig(policy)
        caches.append(contexts[0].storage)
        return contexts

    mp.setattr(TAC, "create_selective_checkpoint_contexts", recording)
    mp.setattr(FlexAttention, "compiled_flex_attn", staticmethod(_compiled_region))
    mp.setattr(GroupedExperts, "_grouped_mm", _grouped)


def _block(dims):
    h, a, r_q, r_kv, d_n, d_r, d_v, f_e, n_e, k, n_s, s, _ = dims
    cfg = _build_dsv3_layers(
        n_layers=1, n_dense_layers=0, dim=h, n_heads=a, q_lora_rank=r_q, kv_lora_rank=r_kv,
        qk_nope_head_dim=d_n, qk_rope_head_dim=d_r, v_head_dim=d_v, mscale=1.0,
        dense_hidden_dim=4 * h, moe_hidden_dim=f_e, num_experts=n_e, num_shared_experts=n_s,
        router_top_k=k, router_score_func="softmax", attn_backend="flex",
        moe_comm_backend="standard", non_blocking_capacity_factor=None,
        rope=ComplexRoPE.Config(dim=d_r, max_seq_len=s, theta=10000.0))[0]
    model = nn.Module()
    model.layers = nn.ModuleDict({"0": cfg.build()})
    for p in model.parameters():
        nn.init.normal_(p, std=0.05)
        p.data = p.data.bfloat16()
    for mod in model.modules():
        if isinstance(mod, TokenChoiceTopKRouter):  # CUDA's fp32 autocast of the gate
            gate = mod.gate
            gate.forward = (lambda g: lambda x: F.linear(x.float(), g.weight.float()))(gate)
    return model


def sac_cache_bytes(dims, backward=False):
    """One DeepSeek-V3 MoE block at `dims` = (h, a, r_q, r_kv, d_n, d_r, d_v, f_e, E, k, n_s,
    s, b) under torchtitan 0.3.0's SelectiveAC: the bytes its selective-checkpoint cache holds
    after the forward, by storage; with `backward`, the backward runs too and the weights'
    gradients are returned beside."""
    from pytest import MonkeyPatch

    caches: list = []
    with MonkeyPatch.context() as mp:
        _patch(mp, caches)
        torch.manual_seed(0)
        model = _block(dims)
        TAC.SelectiveAC(TAC.SelectiveAC.Config()).apply(model)
        h, s, b = dims[0], dims[-2], dims[-1]
        mask = create_block_mask(lambda b_, h_, q, kv: q >= kv, b, None, s, s, device="cpu")
        x = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
        y = model.layers["0"](x, mask, None)
        seen: dict[int, int] = {}
        for storage in caches:
            for entries in storage.values():
                for entry in entries.values():
                    for t in tree_leaves(entry):
                        t = getattr(t, "val", t)  # torch's _VersionWrapper
                        if isinstance(t, torch.Tensor):
                            seen.setdefault(t.untyped_storage()._cdata, t.untyped_storage().nbytes())
        grads = None
        if backward:
            y.float().sum().backward()
            grads = {n: p.grad for n, p in model.named_parameters()}
    return sum(seen.values()), grads
