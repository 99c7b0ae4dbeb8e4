"""Parameters: the degrees and the fullest GPU's layers, the model's parameter count, and what
each pipeline stage's GPU holds (its first and last stages; MoE experts apart, over ep·etp)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..formulas import _ops
from ..formulas import moe as MO
from ..formulas import moe_mtp as MTP
from ..formulas import params as P
from ..formulas import pipeline as PL
from ..formulas.choices import Schedule
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

    # ---- moe: MoE/MLA parameters. The MoE layers a pipeline rank holds (split_moe_layers: the
    # first rank's, the last's, the middle ranks') hold their non-expert part over t and their
    # routed experts over ep·etp, apart (expert_*), for their own ZeRO group; a dense model
    # selects stage() as is
    moe_model = k.moe_model
    moe_first, moe_end, middle = (split_moe_layers(x, c, k, note) if moe_model
                                  else (0, 0, ()))
    # the MoE layers the step's time counts on the slowest stage (model/collectives.py): the
    # fullest stage's L_s layers, taken at the model's end
    moe_last = (note("moe_layers_timed",
                     MO.moe_layers_in_span(L - layers, L, x.first_k_dense, x.moe_freq, x.moe,
                                           x.moe_phase))
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
    expert_last = moe_end * x.expert_layer / expert_shard

    params_first = note("params_first_stage", pick(lambda: moe_stage(1, both_ends, moe_first),
                                                   stage(1, both_ends)))
    params_last = note("params_last_stage", pick(
        lambda: moe_stage(0, single_stage, moe_end) + mtp_params, stage(0, single_stage)))
    # moe: each middle rank that may hold the most: its layers alone (no embedding, head or
    # norm), its MoE layers' experts apart; none for a dense model, whose middle stages hold the
    # first's layers with fewer micro-batches in flight and no embedding
    dense_layers = P.layer_params_per_gpu(layers, t, x.dense_sharded, x.dense_replicated) \
        if moe_model else 0
    middle = tuple(SimpleNamespace(
        rank=r.rank, valid=r.valid, experts=r.moe * x.expert_layer / expert_shard,
        params=dense_layers + r.moe * ((x.moe_sharded - x.dense_sharded) / t
                                       + x.moe_replicated - x.dense_replicated))
        for r in middle)
    # moe: the layer ZeRO-3 gathers is a MoE layer (its experts counted with the replicated part,
    # as they are not divided by t)
    layer_sharded = pick(lambda: _ops.select(x.moe, x.moe_sharded, x.dense_sharded),
                         layer_sharded)
    layer_replicated = pick(lambda: _ops.select(
        x.moe, x.moe_replicated + x.expert_layer / expert_shard, x.dense_replicated),
        layer_replicated)
    return SimpleNamespace(n_params=n_params, vocab_padded=vocab_padded, both_ends=both_ends,
                           moe_last=moe_last, expert_first=expert_first, expert_last=expert_last,
                           params_first=params_first, params_last=params_last, middle=middle,
                           layer_sharded=layer_sharded, layer_replicated=layer_replicated)


def split_ends(x, c: Choices, k: SimpleNamespace):
    """(layers counted, lead, trail, V placement) of the framework's pipeline split for
    MO.moe_layers_on_rank: Megatron places L + D slots (the D MTP modules last) through its
    layout, or, for p ∤ L with one chunk and no MTP, ⌈L/p⌉ on every middle stage
    (PL.uneven_end_slots); torchtitan weighs the embedding and the output as a layer each where
    its S stages do not divide L (split_end_slots); the V schedules place chunks r and
    2p − 1 − r on rank r."""
    L, p, v = k.L, k.p, k.v
    v_shape = c.schedule in (Schedule.ZBV, Schedule.DUALPIPEV)
    if c.framework.stage_split == "flexible":
        lead, trail = PL.uneven_end_slots(L, p)
        uneven = _ops.le(v, 1) * _ops.le(k.mtp_depth, 0)
        return L + k.mtp_depth, uneven * lead, uneven * trail, v_shape
    weight = c.framework.split_end_slots
    if not weight:
        return L, 0, 0, v_shape
    n_chunks = 2 * p if v_shape else p * v
    ends = weight * (1 - _ops.divides(n_chunks, L))
    return L, ends, ends, v_shape


def split_moe_layers(x, c: Choices, k: SimpleNamespace, note=same):
    """moe: the MoE layers of the first pipeline rank, of the last, and of each middle rank
    r = 1 … min(k + f, p − 2) (k = first_k_dense, f = moe_layer_freq) with its micro-batches
    in flight. Past rank k + f a rank's first chunk starts at or after layer k, so with f = 1
    it holds no more MoE layers than rank k + 1 and fewer micro-batches in flight: the heaviest
    middle rank is among these (for f > 1 up to one MoE layer of the rank past them may be
    missed). Returns (first, last, (SimpleNamespace(rank, valid, moe, inflight), …)), valid 0
    for a rank the plan does not have (r > p − 2)."""
    n_layers, lead, trail, v_shape = split_ends(x, c, k)

    def on_rank(rank):
        return MO.moe_layers_on_rank(n_layers, x.first_k_dense, x.moe_freq, k.p, k.v, rank,
                                     lead, trail, int(v_shape), x.moe, x.moe_phase)

    first = note("moe_layers_first", on_rank(0))
    last = note("moe_layers_last", on_rank(k.p - 1))
    middle = []
    for r in range(1, int(np.max(x.first_k_dense + x.moe_freq)) + 1):
        middle.append(SimpleNamespace(rank=r, valid=_ops.le(r, k.p - 2), moe=on_rank(r)))
    return first, last, tuple(middle)
