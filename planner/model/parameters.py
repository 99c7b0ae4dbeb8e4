"""Parameters: the degrees and the fullest GPU's layers, the model's parameter count, and what
each pipeline stage's GPU holds (its first and last stages; MoE experts apart, over ep·etp)."""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import _ops
from ..formulas import moe as MO
from ..formulas import moe_mtp as MTP
from ..formulas import params as P
from ..formulas import pipeline as PL
from . import moe as MOE
from .links import shard_group_ranks
from .numbers import Choices, any_row, moe_picker, same


def stage_layout(x, c: Choices, note=same) -> SimpleNamespace:
    """The degrees by the papers' letters, the ZeRO group and the fullest GPU's layers."""
    L, h, s, b, t, p, cp, v, m = (x.n_layers, x.hidden, x.seq_len, x.mbs, x.tp, x.pp, x.cp, x.vpp,
                                  x.n_micro)
    # ZeRO and the gradient reduction span data × context parallel ranks; under hybrid sharding
    # the shard group dp_shard·cp, the gradients then all-reduced across dp/dp_shard replicas
    d_shard = shard_group_ranks(x, cp)
    single_stage = _ops.le(p, 1)
    # moe: a MoE/MLA model (any row's, when models are stacked) builds its own expressions; the
    # tokens a GPU feeds a MoE layer per micro-batch, T = b·s/(c·t), and λ, the busiest
    # expert-parallel rank's share of their routed copies over the mean (model/moe.py)
    moe_model = any_row(x.moe_mla)
    # moe: D multi-token-prediction modules where the framework trains them (Megatron), each a
    # layer slot of the split, on the last stage (formulas/moe_mtp.py)
    depth = (note("mtp_depth", x.mtp * x.mtp_on) if moe_model and c.framework.trains_mtp
             else 0)
    # the fullest GPU's layers: ⌈(L + D)/p⌉ where the framework places layers freely
    # (Megatron's pipeline layout, whose last chunk holds the D modules), v·⌈L/(p·v)⌉ where each
    # of its v chunks is cut the same
    layers = note("stage_layers", P.layers_per_gpu(L + depth, p)
                  if c.framework.stage_split == "flexible" else P.layers_per_stage(L, p, v))
    moe_tokens = b * s / (cp * t)
    lam = note("moe_load", MOE.load(x, moe_tokens)) if moe_model else 1
    return SimpleNamespace(L=L, h=h, s=s, b=b, t=t, p=p, cp=cp, v=v, m=m, d_shard=d_shard,
                           single_stage=single_stage, layers=layers, moe_model=moe_model,
                           mtp_depth=depth,
                           moe_tokens=moe_tokens, lam=lam)


def parameters(x, c: Choices, k: SimpleNamespace, note=same) -> SimpleNamespace:
    """The parameter count, each end stage's parameters per GPU, and a layer's sharded and
    replicated parts (what ZeRO-3 gathers)."""
    L, h, t, layers, single_stage = k.L, k.h, k.t, k.layers, k.single_stage
    pick = moe_picker(x, k.moe_model)
    n_params = note("n_params", pick(lambda: x.total_params, P.model_params(
        L, h, x.n_heads, x.n_kv_heads, x.head_dim, x.ffn, x.n_mlp, x.bias, x.norm_width, x.vocab,
        x.positions, x.learned_positions, x.tied, x.n_experts, x.router_experts)))
    layer_sharded = P.layer_sharded_params(h, x.n_heads, x.n_kv_heads, x.head_dim, x.ffn, x.n_mlp,
                                           x.bias, x.n_experts, x.router_experts)
    layer_replicated = P.layer_replicated_params(h, x.bias, x.norm_width, x.n_experts)
    vocab_padded = note("vocab_padded", P.padded_vocab(x.vocab, t))
    positions = P.position_embedding_params(x.positions, h, x.learned_positions)

    # the first GPU holds both ends (embedding, head, loss) on one stage, and in a V (ZB-V,
    # DualPipeV) or DualPipe, where it also runs the model's last stage
    both_ends = _ops.maximum(single_stage, PL.ends_on_first_gpu(c.schedule))

    def stage(first, both):
        return P.stage_params_per_gpu(layers, t, layer_sharded, layer_replicated, vocab_padded, h,
                                      positions, x.norm_width, x.tied, first, both)

    # ---- moe: MoE/MLA parameters. The stage's MoE layers (first stage: layers [0, L_s), last:
    # [L − L_s, L)) hold their non-expert part over t and their routed experts over ep·etp,
    # apart (expert_first/last), for their own ZeRO group; a dense model selects stage() as is
    moe_model = k.moe_model
    moe_first = (MO.moe_layers_in_span(0, layers, x.first_k_dense, x.moe_freq, x.moe)
                 if moe_model else 0)
    moe_last = (MO.moe_layers_in_span(L - layers, L, x.first_k_dense, x.moe_freq, x.moe)
                if moe_model else 0)
    expert_shard = MO.expert_state_shard(x.ep, x.etp)

    def moe_stage(first, both, n_moe):
        return (P.stage_params_per_gpu(layers, t, x.dense_sharded, x.dense_replicated,
                                       vocab_padded, h, positions, x.norm_width, x.tied, first,
                                       both)
                + n_moe * ((x.moe_sharded - x.dense_sharded) / t
                           + x.moe_replicated - x.dense_replicated))

    # moe: the multi-token-prediction modules sit on the last stage, each in a layer slot of
    # the split (stage_layout; a MoE layer where the model's last is) with, beside it, eh_proj,
    # norms and the embedding copy their lookups need (formulas/moe_mtp.py)
    mtp_params = (MTP.mtp_extra_params(k.mtp_depth, h, vocab_padded, t, x.norm_width)
                  if moe_model else 0)
    expert_first = moe_first * x.expert_layer / expert_shard
    expert_last = moe_last * x.expert_layer / expert_shard

    params_first = note("params_first_stage", pick(lambda: moe_stage(1, both_ends, moe_first),
                                                   stage(1, both_ends)))
    params_last = note("params_last_stage", pick(
        lambda: moe_stage(0, single_stage, moe_last) + mtp_params, stage(0, single_stage)))
    # moe: the layer ZeRO-3 gathers is a MoE layer (its experts counted with the replicated part,
    # as they are not divided by t)
    layer_sharded = pick(lambda: _ops.select(x.moe, x.moe_sharded, x.dense_sharded),
                         layer_sharded)
    layer_replicated = pick(lambda: _ops.select(
        x.moe, x.moe_replicated + x.expert_layer / expert_shard, x.dense_replicated),
        layer_replicated)
    return SimpleNamespace(n_params=n_params, vocab_padded=vocab_padded, both_ends=both_ends,
                           moe_last=moe_last, expert_first=expert_first, expert_last=expert_last,
                           params_first=params_first, params_last=params_last,
                           layer_sharded=layer_sharded, layer_replicated=layer_replicated)
