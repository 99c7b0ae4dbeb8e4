"""The cost model of one plan, composed from the formulas — written once, for every backend.

`plan_costs(x, c)` takes the plan's numbers `x` (floats for one plan, float64 arrays for the
search, sympy symbols for `explain`) and its discrete choices `c`, and returns every quantity the
planner reports, by name. estimate.py, search.py and explain.py are thin adapters over it, so the
three can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from types import SimpleNamespace

import numpy as np

from ..formulas import _ops
from ..formulas import activations as A
from ..formulas import comm as C
from ..formulas import context as CX
from ..formulas import flops as F
from ..formulas import memory as M
from ..formulas import moe as MO
from ..formulas import offload as OF
from ..formulas import params as P
from ..formulas import pipeline as PL
from ..formulas import timing as T
from ..formulas.choices import Attention, ContextKind, Precision, Recompute, Schedule, ZeroStage
from ..frameworks import FRAMEWORKS
from ..frameworks.base import ActivationStyle, Framework, LossKind
from ..placement import MEGATRON_RANK_ORDER, group_stride
from ..schema import HardwareProfile, ModelSpec, PlanConfig

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
ACT_BYTES = 2  # 16-bit activations (fp8 GEMMs still keep most saved tensors in 16-bit)
WEIGHT_BYTES = 2  # 16-bit weights; under fp8, Transformer Engine keeps them in 16-bit and casts


@dataclass(frozen=True)
class Choices:
    """The discrete half of a plan: each picks which expressions are built."""

    zero_stage: ZeroStage
    recompute: Recompute
    schedule: Schedule
    sequence_parallel: bool
    attention: Attention
    framework: Framework = FRAMEWORKS["megatron"]
    cp_kind: ContextKind | None = None  # cp-kind: None is the framework's default kind
    # offload: whether the plan offloads anything to host memory (then the offload expressions
    # are built; otherwise none), and whether the parameters live there
    offload: bool = False
    offload_params: bool = False

    @classmethod
    def of(cls, config: PlanConfig) -> Choices:
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls) if f.name != "framework"},
                   framework=FRAMEWORKS[config.framework])


def model_numbers(model: ModelSpec, seq_len: int | None = None) -> dict:
    """A model's numbers under the names plan_costs reads. A learned position table holds
    max(positions, seq_len) rows: the job runs sequences of seq_len (Megatron's emitted
    --max-position-embeddings is that maximum)."""
    positions = model.positions if seq_len is None else max(model.positions, seq_len)
    return dict(
        n_layers=model.n_layers, hidden=model.hidden, n_heads=model.n_heads,
        n_kv_heads=model.kv_heads, head_dim=model.dim_head, ffn=model.ffn, vocab=model.vocab,
        n_mlp=model.n_mlp_matrices, bias=int(model.bias), norm_width=model.norm_width,
        learned_positions=model.learned_positions, positions=positions,
        tied=int(model.tied_embeddings), dropout=int(model.dropout),
        rotary=1 - model.learned_positions, n_experts=model.n_experts, top_k=model.top_k,
        router_experts=model.router_experts,
        **moe_numbers(model),  # moe: MoE/MLA numbers, neutral for a dense model
    )


def moe_numbers(model: ModelSpec) -> dict:
    """A MoE or MLA model's numbers (moe helper). `moe_mla` = 1 sends plan_costs down the MoE/MLA
    expressions; for a dense multi-head model every term built from these is multiplied by 0 or
    selected away, so its numbers do not change."""
    attn_sharded, attn_replicated = model.attention_params_split
    h, n, bias, nw = model.hidden, model.n_mlp_matrices, int(model.bias), model.norm_width
    shared = P.shared_expert_params(h, model.shared_expert_ffn, n, model.n_shared_experts)
    mla = model.is_mla
    attn_matmul = (F.mla_matmul_weights(h, model.n_heads, model.q_lora_rank or 0,
                                        model.kv_lora_rank, model.qk_nope_head_dim,
                                        model.qk_rope_head_dim, model.v_head_dim,
                                        int(model.q_lora_rank is not None))
                   if mla else P.attention_weight_params(h, model.n_heads, model.kv_heads,
                                                         model.dim_head))
    return dict(
        moe_mla=int(model.is_moe or mla), moe=int(model.is_moe), mla=int(mla),
        total_params=model.n_params, n_moe_layers=model.n_moe_layers,
        first_k_dense=model.first_k_dense, moe_freq=model.moe_layer_freq,
        # per layer, what TP splits and what it replicates (norms, row biases, MLA down-projections,
        # the router); a MoE layer's routed experts apart, split ep·etp ways
        dense_sharded=attn_sharded + n * h * model.ffn + bias * (n - 1) * model.ffn,
        dense_replicated=attn_replicated + bias * h + P.norm_params(h, nw),
        moe_sharded=attn_sharded + shared,
        moe_replicated=attn_replicated + P.router_params(h, model.router_experts)
        + P.norm_params(h, nw),
        expert_layer=model.n_experts * P.expert_params(h, model.expert_ffn, n, bias),
        expert_ffn=model.expert_ffn, n_shared=model.n_shared_experts,
        shared_ffn=model.shared_expert_ffn,
        # weights a token meets (FLOPs): attention, the dense MLP, one expert, the shared experts
        attn_matmul=attn_matmul, dense_matmul=n * h * model.ffn,
        expert_matmul=n * h * model.expert_ffn, shared_matmul=shared,
        # the MLP GEMMs beside the experts that the non-expert wave quantisation weighs
        ne_ffn=model.n_shared_experts * model.shared_expert_ffn if model.n_shared_experts
        else model.ffn,
        q_rank=model.q_lora_rank or 0, kv_rank=model.kv_lora_rank or 0,
        rope_dim=model.qk_rope_head_dim or 0, v_dim=model.value_head_dim,
    )


def attention_precision(precision: Precision) -> Precision:
    """The precision attention and the LM head run in: 16-bit even in an fp8 plan (Transformer
    Engine casts only the linear layers to fp8)."""
    return Precision.BF16 if precision is Precision.FP8 else precision


def hardware_numbers(hw: HardwareProfile, precision: Precision) -> dict:
    """A profile's numbers in base units, for one precision (attention and the LM head at
    attention_precision's)."""
    sixteen = attention_precision(precision)
    return dict(
        peak_flops=hw.peak_flops_per_s(precision), gemm_eff=hw.gemm_efficiency(precision),
        peak_flops_16=hw.peak_flops_per_s(sixteen), gemm_eff_16=hw.gemm_efficiency(sixteen),
        hbm_bw=hw.hbm_bytes_per_s, hbm_eff=hw.efficiency.hbm,
        fast_bw=hw.fast.busbw_bytes_per_s, fast_lat=hw.fast.latency_s,
        net_bw=hw.network.busbw_bytes_per_s, net_lat=hw.network.latency_s,
        kernel_s=hw.efficiency.kernel_overhead_us * 1e-6,
        n_sm=hw.sm_count or 0, tile_rows=hw.gemm_tile[0], tile_cols=hw.gemm_tile[1],
        reserved=hw.runtime.reserved_gib * 2**30, frag=hw.runtime.fragmentation_fraction,
        capacity=hw.capacity_bytes,
        **topology_numbers(hw),
        **host_numbers(hw),  # offload
    )


def host_numbers(hw: HardwareProfile) -> dict:
    """offload: the host's memory per GPU, its host link and DRAM bandwidth (schema.Host), in base
    units; zeros for a profile without a [host] section (no plan offloads there:
    estimate.check_config refuses it)."""
    host = hw.host
    if host is None:
        return dict(host_capacity=0.0, host_bw=0.0, dram_bw=0.0, nic_on_host_link=0.0)
    return dict(host_capacity=host.memory_bytes, host_bw=host.link_bytes_per_s,
                dram_bw=host.dram_bytes_per_s, nic_on_host_link=float(host.nic_shares_link))


NO_POD = 2.0**40
"""A pod size no job reaches: full bisection bandwidth everywhere."""


def topology_numbers(hw: HardwareProfile) -> dict:
    """The profile's network topology in base units (schema.Topology): the GPUs a job uses per
    NVLink domain, NICs per GPU, the full-bisection pod and the oversubscription above it, SHARP,
    NVLS (its all-reduce bandwidth; the ring figure where the switch has none), and the slowdown
    of compute that runs beside a collective."""
    nvls = hw.fast.nvls_busbw_bytes_per_s
    return dict(
        domain=hw.domain_gpus_used, nics_per_gpu=hw.nics_per_gpu,
        pod=hw.topology.pod_gpus or NO_POD, oversub=hw.topology.oversubscription,
        sharp=int(hw.topology.sharp), nvls_bw=hw.fast.busbw_bytes_per_s if nvls is None else nvls,
        overlap_slow=C.OVERLAP_COMPUTE_SLOWDOWN,
    )


def config_numbers(config: PlanConfig) -> dict:
    """A plan's numeric degrees and sizes."""
    return dict(
        dp=config.dp, tp=config.tp, pp=config.pp, cp=config.cp, vpp=config.vpp, mbs=config.mbs,
        n_micro=config.n_micro, gbs=config.gbs, seq_len=config.seq_len,
        dp_replicate=config.dp_replicate,  # hybrid sharding: 1 unless dp_shard < dp
        **dtype_numbers(FRAMEWORKS[config.framework], config.grad_dtype),
        overlap=int(config.overlap_grad_reduce), fp8=int(config.precision is Precision.FP8),
        # moe: expert parallelism (1, 1 and no a2a for a dense model)
        ep=config.ep, etp=config.etp, moe_load=config.moe_load_factor,
        a2a_overlap=int(config.moe_a2a_overlap),
        cp_a2a=config.cp_a2a or 1,  # cp-kind: the hierarchical kind's all-to-all group
        # offload: the optimizer fraction and the activation layers on the host
        offload_optimizer=config.offload_optimizer,
        offload_activations=config.offload_activations,
    )


def dtype_numbers(framework: Framework, grad_dtype: str) -> dict:
    """Bytes per element the plan's tensors take: 16-bit weights as gathered and computed with,
    gradients as the framework reduces them (torchtitan always in fp32), 16-bit activations."""
    return dict(w_bytes=WEIGHT_BYTES, g_bytes=framework.grad_bytes(BYTES[grad_dtype]),
                act_bytes=ACT_BYTES)


def numbers(model: ModelSpec, hw: HardwareProfile, config: PlanConfig) -> SimpleNamespace:
    """Everything plan_costs needs for one plan, as plain floats."""
    return SimpleNamespace(**model_numbers(model, config.seq_len),
                           **hardware_numbers(hw, config.precision), **config_numbers(config))


def _same(name, value):
    return value


def _flag(value) -> bool:
    """A model indicator (moe, mla) as a Python truth: any row's, where tests stack models into
    arrays (a dense row then takes the MoE expressions, which give it exactly 0)."""
    return bool(np.any(np.asarray(value)))


def _collective_group(x, size, stride, domain):
    """One group of `size` ranks `stride` apart: whether it lies inside an NVLink domain, its
    ranks per domain r, the domains k it spans, and the bus bandwidth of its ring collectives
    (bw) and all-reduces (bw_allreduce: NVLS inside the domain where the profile has it)."""
    inside = C.inside_domain(stride * size, domain)
    r = C.ranks_per_domain(size, stride, domain, inside)
    oversub = C.oversubscription_factor(stride * size, x.pod, x.oversub)
    crossing = C.cross_domain_busbw(r, x.nics_per_gpu, x.net_bw, x.fast_bw, oversub)
    return SimpleNamespace(inside=inside, r=r, k=C.domains_spanned(size, r),
                           bw=C.group_busbw(inside, x.fast_bw, crossing),
                           bw_allreduce=C.group_busbw(inside, x.nvls_bw, crossing))


def dp_replicate_of(x):
    """Hybrid sharding (HSDP): the replicas r = dp/dp_shard of the plan(s) in x (1 where x does
    not say), and whether any plan replicates (then the shard group and the cross-replica
    all-reduce are built; otherwise the expressions are today's, unchanged)."""
    r = getattr(x, "dp_replicate", 1)
    if isinstance(r, (int, float, np.ndarray)):
        return r, bool(np.any(np.asarray(r, dtype=float) > 1))
    return r, True  # a symbol: the general expressions


def shard_group_ranks(x, cp):
    """The ranks ZeRO shards over: the shard group dp_shard·cp = dp·cp/r under hybrid
    sharding, all dp·cp data-parallel ranks otherwise."""
    r, hybrid = dp_replicate_of(x)
    return x.dp / r * cp if hybrid else x.dp * cp


def group_links(x, t, cp, p, order=MEGATRON_RANK_ORDER) -> SimpleNamespace:
    """Each parallel group's placement and link, from the rank order (Megatron's tp-cp-dp-pp
    unless a framework passes its own): TP, CP, the data-parallel (dp·cp) gradient group, and the
    pipeline neighbours (a point-to-point send; inside when two adjacent stages share a domain).
    Under hybrid sharding `dp` is the shard group (dp_shard·cp consecutive data-parallel ranks:
    torchtitan's mesh ["pp", "dp_replicate", "dp_shard", "cp", "tp"], Megatron's intra-instance
    slice of the dp-cp ranks) and `replica` the r ranks holding the same shard, one shard group
    apart."""
    degrees = dict(tp=t, cp=cp, dp=x.dp, pp=p)
    domain = C.job_domain_gpus(x.domain, x.dp * t * cp * p)
    pp_stride = group_stride(degrees, ("pp",), order)
    pp_inside = C.inside_domain(2 * pp_stride, domain)
    pp_bw = C.group_busbw(pp_inside, x.fast_bw, C.p2p_busbw(
        x.nics_per_gpu, x.net_bw, x.fast_bw,
        C.oversubscription_factor(2 * pp_stride, x.pod, x.oversub)))
    # ring attention sends point to point: a hop that leaves the domain runs at one rank's NICs
    cp_group = _p2p_group(x, cp, group_stride(degrees, ("cp",), order), domain)
    dp_stride, shard = group_stride(degrees, ("cp", "dp"), order), shard_group_ranks(x, cp)
    replicas, hybrid = dp_replicate_of(x)
    return SimpleNamespace(
        domain=domain,
        tp=_collective_group(x, t, group_stride(degrees, ("tp",), order), domain),
        cp=cp_group,
        dp=_collective_group(x, shard, dp_stride, domain),
        pp=SimpleNamespace(inside=pp_inside, r=1, k=1, bw=pp_bw, bw_allreduce=pp_bw),
        replica=(_collective_group(x, replicas, dp_stride * shard, domain) if hybrid else None))


# ---- cp-kind: context parallelism by kind ------------------------------------------------------

def _p2p_group(x, size, stride, domain):
    """A group of `size` ranks `stride` apart whose traffic goes point to point (ring attention's
    K/V passes, an all-to-all's pairwise exchanges): placed as _collective_group places it, but a
    hop that leaves the domain runs at one rank's own NICs (C.p2p_busbw)."""
    group = _collective_group(x, size, stride, domain)
    group.bw = C.group_busbw(group.inside, x.fast_bw, C.p2p_busbw(
        x.nics_per_gpu, x.net_bw, x.fast_bw,
        C.oversubscription_factor(stride * size, x.pod, x.oversub)))
    return group


def context_kind_of(c: Choices) -> ContextKind:
    """The plan's context-parallel kind: its own, or its framework's default."""
    return c.cp_kind or c.framework.cp_kinds[0]


def context_parts(x, c: Choices, s, b, t, cp, note=_same) -> SimpleNamespace:
    """Context parallelism's two parts per layer and micro-batch (formulas/context.py): an
    all-to-all over c_a ranks (a2a_layer) and a ring over the cp/c_a groups (ring_layer); the kind
    picks which are built — the ring alone (c_a = 1), the all-to-all alone (c_a = cp, Ulysses),
    or both (hierarchical, c_a = cp_a2a; the search's general form, whose c_a column also holds 1
    and cp). The parts the kind leaves out are 0."""
    kind = context_kind_of(c)
    c_a = CX.a2a_group(kind, cp, x.cp_a2a)
    shown = _same if kind is ContextKind.RING else note  # new terms only where an a2a runs
    a2a = ring = 0
    if kind is not ContextKind.RING:
        a2a = shown("cp_a2a_layer_bytes", CX.a2a_layer_bytes(
            s, b, x.n_heads, x.n_kv_heads, x.head_dim, t, cp, c_a, x.act_bytes))
    if kind is not ContextKind.ALL_TO_ALL:
        ring = CX.ring_layer_bytes(s, b, x.n_kv_heads, x.head_dim, t, cp, c_a, x.act_bytes)
        if kind is ContextKind.HIERARCHICAL:
            ring = note("cp_ring_layer_bytes", ring)
    layer = (a2a + ring if kind is ContextKind.HIERARCHICAL
             else a2a if kind is ContextKind.ALL_TO_ALL else ring)
    return SimpleNamespace(kind=kind, c_a=c_a, a2a_layer=a2a, ring_layer=ring, layer=layer)


def context_links(x, parts: SimpleNamespace, g: SimpleNamespace, t, cp, p,
                  order=MEGATRON_RANK_ORDER) -> SimpleNamespace:
    """Where each part's ranks sit. The all-to-all group is c_a consecutive ranks of the cp group
    (stride t in the tp-cp-dp-pp order: inside the NVLink domain when t·c_a fits it, as
    Megatron's create_hierarchical_groups makes its first level, core/parallel_state.py @
    d98e8a64dd l.378-433); the ring joins the cp/c_a ranks holding the same place in each group
    (stride t·c_a). The plain kinds use the whole cp group (group_links)."""
    if parts.kind is not ContextKind.HIERARCHICAL:
        return SimpleNamespace(a2a=g.cp, ring=g.cp)
    stride = group_stride(dict(tp=t, cp=cp, dp=x.dp, pp=p), ("cp",), order)
    return SimpleNamespace(a2a=_p2p_group(x, parts.c_a, stride, g.domain),
                           ring=_p2p_group(x, cp / parts.c_a, stride * parts.c_a, g.domain))


def context_part_traffic(layers, parts: SimpleNamespace, links: SimpleNamespace) -> list[tuple]:
    """(bytes per micro-batch, link group) of each part the kind runs: the all-to-all's, then the
    ring's, each on the link where its own group's ranks sit."""
    out = []
    if parts.kind is not ContextKind.RING:
        out.append((layers * parts.a2a_layer, links.a2a))
    if parts.kind is not ContextKind.ALL_TO_ALL:
        out.append((layers * parts.ring_layer, links.ring))
    return out


def context_time(x, parts: SimpleNamespace, links: SimpleNamespace, share, window,
                 note=_same) -> tuple:
    """(time, exposed time) of one layer's context-parallel traffic, forward and backward.

    The all-to-all part is exposed: its all-to-alls sit between the QKV projection and the
    attention core, and between the core and the output projection, with nothing to hide under
    (Jacobs et al. 2023 §3.2; Transformer Engine runs them on its cp stream, but the attention
    waits for Q, K and V: context_parallel.py @ d0067d0, AttnFuncWithCPAndQKVOA2A); α–β with
    8·(c_a − 1) exchanges. The ring part overlaps the attention blocks step by step, forward and
    backward (`window`), and its NCCL kernels slow the attention they hide under
    (C.overlap_slowdown_s). Each at its part's share of its own link (`share.a2a`,
    `share.ring`: the same for the plain kinds)."""
    shown = _same if parts.kind is ContextKind.RING else note
    total, exposed = [], []
    if parts.kind is not ContextKind.RING:
        a2a_s = shown("cp_a2a_layer_s", C.collective_time_s(
            parts.a2a_layer, links.a2a.bw * share.a2a, CX.a2a_messages(parts.c_a),
            _ops.select(links.a2a.inside, x.fast_lat, x.net_lat)))
        total.append(a2a_s)
        exposed.append(a2a_s)
    if parts.kind is not ContextKind.ALL_TO_ALL:
        ring_s = C.ring_time_s(parts.ring_layer, links.ring.bw * share.ring, x.cp / parts.c_a,
                               links.ring.k, 3, x.fast_lat, x.net_lat)
        if parts.kind is ContextKind.HIERARCHICAL:
            ring_s = note("cp_ring_layer_s", ring_s)
        total.append(ring_s)
        exposed.append(T.exposed_time_s(ring_s, window)
                       + C.overlap_slowdown_s(ring_s, window, x.overlap_slow))
    return sum(total[1:], total[0]), sum(exposed[1:], exposed[0])


def plan_costs(x, c: Choices, note=_same) -> dict:
    """Every reported quantity of a plan. `x` holds numbers (any backend), `c` the choices.

    `note(name, value)` is called on each named intermediate (see TERMS) and its return value is
    used downstream: the identity for numbers; `explain` records the expression and hands back a
    symbol, so that every term's formula is shown in terms of the terms before it.

    Composed of two halves, so that the search can share the first among the ZeRO stages:
    layout_costs (what the ZeRO stage does not change) and zero_costs (what it does)."""
    return zero_costs(x, c, layout_costs(x, c, note), note)


def layout_costs(x, c: Choices, note=_same) -> SimpleNamespace:
    """The half of plan_costs that the ZeRO stage does not change (c.zero_stage is not read):
    parameters, activations, FLOPs, the layer times, TP/CP/PP traffic and the links. Returns every
    intermediate, by its name, for zero_costs."""
    L, h, s, b, t, p, cp, v, m = (x.n_layers, x.hidden, x.seq_len, x.mbs, x.tp, x.pp, x.cp, x.vpp,
                                  x.n_micro)
    # ZeRO and the gradient reduction span data × context parallel ranks; under hybrid sharding
    # the shard group dp_shard·cp, the gradients then all-reduced across dp/dp_shard replicas
    d_shard = shard_group_ranks(x, cp)
    single_stage = _ops.le(p, 1)
    # the fullest GPU's layers: ⌈L/p⌉ where the framework places layers freely (Megatron's
    # pipeline layout), v·⌈L/(p·v)⌉ where each of its v chunks is cut the same
    layers = note("stage_layers", P.layers_per_gpu(L, p) if c.framework.stage_split == "flexible"
                  else P.layers_per_stage(L, p, v))

    # ---- parameters -------------------------------------------------------------------------
    # moe: a MoE/MLA model (any row's, when models are stacked) builds its own expressions, and
    # pick() selects them row by row: a dense row gets exactly the dense value. A dense model
    # builds nothing more than before.
    moe_model = _flag(x.moe_mla)

    def pick(moe_value, dense_value):
        return _ops.select(x.moe_mla, moe_value(), dense_value) if moe_model else dense_value

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
    note_moe = note if moe_model else _same  # expert terms shown for MoE/MLA models only
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

    expert_first = moe_first * x.expert_layer / expert_shard
    expert_last = moe_last * x.expert_layer / expert_shard

    params_first = note("params_first_stage", pick(lambda: moe_stage(1, both_ends, moe_first),
                                                   stage(1, both_ends)))
    params_last = note("params_last_stage", pick(lambda: moe_stage(0, single_stage, moe_last),
                                                 stage(0, single_stage)))
    # moe: the layer ZeRO-3 gathers is a MoE layer (its experts counted with the replicated part,
    # as they are not divided by t)
    layer_sharded = pick(lambda: _ops.select(x.moe, x.moe_sharded, x.dense_sharded),
                         layer_sharded)
    layer_replicated = pick(lambda: _ops.select(
        x.moe, x.moe_replicated + x.expert_layer / expert_shard, x.dense_replicated),
        layer_replicated)

    # ---- activations, as the plan's framework saves them -------------------------------------
    # a token's MLP activations are kept in each of the top-k experts it is routed to
    routed_ffn = x.ffn * x.top_k
    # moe: a MoE layer stores k routed expert widths (× the busiest rank's load) and the shared
    # experts'; an MLA layer its own tensors (formulas/moe.py); the dispatcher keeps the k − 1
    # extra token copies and the router's scores
    moe_width = MO.routed_ffn_width(x.expert_ffn, x.top_k, x.shared_ffn, x.n_shared, x.moe_load)
    routed_ffn = pick(lambda: _ops.select(x.moe, moe_width, x.ffn), routed_ffn)
    conv = c.framework.memory

    def saved(recompute):
        if conv.activations is ActivationStyle.EAGER and recompute is not Recompute.FULL:
            # eager PyTorch blocks (torchtitan): SDPA sees K and V repeated to all a heads
            if recompute is Recompute.SELECTIVE:
                return A.torchtitan_sac_layer_activation_bytes(
                    s, b, h, x.n_heads, x.n_kv_heads, x.head_dim, routed_ffn, t, cp,
                    c.sequence_parallel, x.act_bytes)
            return A.eager_layer_activation_bytes(s, b, h, x.n_heads, x.n_heads, x.head_dim,
                                                  routed_ffn, t, cp, c.sequence_parallel,
                                                  x.act_bytes)
        return A.layer_activation_bytes(
            s, b, h, x.n_heads, x.n_kv_heads, x.head_dim, routed_ffn, x.n_mlp, x.dropout, t, cp,
            c.sequence_parallel, recompute, c.attention, x.act_bytes)

    def moe_mla_act(recompute):
        if not moe_model:
            return 0
        mla = MO.mla_layer_activation_bytes(
            s, b, h, x.n_heads, x.q_rank, x.kv_rank, x.head_dim, x.rope_dim, x.v_dim, routed_ffn,
            x.n_mlp, x.dropout, t, cp, c.sequence_parallel, recompute, c.attention, x.act_bytes)
        dispatch = 0 if recompute is Recompute.FULL else x.moe * MO.moe_dispatch_activation_bytes(
            s, b, h, x.router_experts, x.top_k, t, cp, c.sequence_parallel, x.moe_load,
            x.act_bytes)
        return x.mla * mla + dispatch

    not_mla = 1 - x.mla if moe_model else 1  # moe: an MLA layer's activations replace these
    # under an fp8 recipe Transformer Engine keeps linear layers' inputs in 1 byte, not 2
    fp8_saving = (x.fp8 * conv.fp8_saves_linear_inputs * (x.act_bytes - 1)
                  * A.fp8_linear_input_bytes(s, b, h, x.n_heads, x.head_dim, routed_ffn, t, cp,
                                             c.sequence_parallel)
                  if c.recompute is not Recompute.FULL else 0)
    layer_act = note("layer_activation_bytes", not_mla * (saved(c.recompute) - fp8_saving)
                     + moe_mla_act(c.recompute))
    # the layer under backward recomputes what it did not save: under full recompute all of its
    # activations are alive for a moment, under selective the rest of them
    working_act = (not_mla * saved(Recompute.NONE) + moe_mla_act(Recompute.NONE)
                   if c.recompute is Recompute.FULL else
                   not_mla * (saved(Recompute.NONE) - saved(c.recompute))
                   + moe_mla_act(Recompute.NONE) - moe_mla_act(c.recompute)
                   if c.recompute is Recompute.SELECTIVE else 0)
    # and its activation gradients: the residual stream's and the MLP intermediates'
    grad_act = note("backward_gradient_bytes", A.backward_gradient_bytes(
        s, b, h, routed_ffn, x.n_mlp, t, cp, x.act_bytes))
    # the loss's buffers and a layer's backward are not alive together, so a step's allocated
    # peak is the larger of the two phases (tests/oracle/test_step_peak.py), but the reserved
    # memory torchtitan measured for 70B at tp 8 is matched by their sum (−4.8 %), not by the
    # larger (−24.7 %), for a cause not established: plan3d counts both, erring toward "does not
    # fit" (formulas.activations.backward_phase_activation_bytes)
    bwd_phase = working_act + grad_act
    inflight_first = note("inflight_first", PL.in_flight_first_stage(p, m, v, c.schedule))
    inflight_last = note("inflight_last", PL.in_flight_last_stage(p, m, v, c.schedule))
    embed_act = A.embedding_activation_bytes(s, b, h, x.dropout, t, cp, c.sequence_parallel)
    logits_act = note("logits_bytes", A.logits_activation_bytes(s, b, vocab_padded, t, cp))
    # the stage holding the loss: the final norm's and LM head's saved inputs, and the loss at
    # its peak (the framework's cross entropy: vocab-parallel on 16-bit logits, or fp32 upcast)
    head_act = (A.eager_head_activation_bytes if conv.activations is ActivationStyle.EAGER
                else A.fused_head_activation_bytes)(s, b, h, t, cp, c.sequence_parallel,
                                                    x.act_bytes)
    loss_act = note("loss_bytes", head_act + (
        A.torchtitan_loss_peak_bytes(s, b, vocab_padded, t, cp)
        if conv.loss is LossKind.FP32_UPCAST
        else A.vocab_parallel_loss_peak_bytes(s, b, vocab_padded, t, cp, x.act_bytes)))
    act_first = (inflight_first * (layers * layer_act + embed_act) + both_ends * loss_act
                 + bwd_phase)
    act_last = inflight_last * layers * layer_act + loss_act + bwd_phase
    # moe: the dispatcher's send and receive buffers of the all-to-all in flight,
    # 2·T·k·load·h·act with T = b·s/(c·t) tokens per GPU (0 for a dense model)
    moe_tokens = b * s / (cp * t)
    if moe_model:
        dispatch_buffers = note_moe("moe_dispatch_buffer_bytes", x.moe * 2 * moe_tokens
                                    * x.top_k * x.moe_load * h * x.act_bytes)
        act_first = act_first + dispatch_buffers
        act_last = act_last + dispatch_buffers

    # ---- communication volume per GPU per step, and the bubble --------------------------------
    tp_layer = note("tp_layer_bytes", C.tp_layer_bytes(s, b, h, t, cp, x.act_bytes))
    fwd_passes = 2 if c.recompute is Recompute.FULL else 1
    tp_bytes = note("tp_bytes", C.tp_step_bytes(layers, m, tp_layer, fwd_passes))
    boundary = note("pp_boundary_bytes", C.pp_boundary_bytes(s, b, h, t, cp, x.act_bytes))
    # chunk boundaries a micro-batch crosses between GPUs: v·p − 1, or 2(p − 1) down and back up
    # a V (ZB-V, DualPipeV); pp_step_bytes counts v·p − 1, so a V passes v = (hops + 1)/p
    v_hops = (PL.pipeline_hops(p, v, c.schedule) + 1) / p
    pp_bytes = note("pp_bytes", C.pp_step_bytes(p, m, v_hops, boundary))
    # cp-kind: ring attention, all-to-all over the heads (Ulysses) or both (hierarchical), as
    # the plan's kind (or its framework's default) says: context_parts
    cp_parts = context_parts(x, c, s, b, t, cp, note)
    cp_layer = cp_parts.layer
    cp_bytes = note("cp_bytes", C.cp_step_bytes(layers, m, cp_layer))
    # the bubble needs the stage's F, B and W times for the split-backward schedules: zero_costs
    param_copies = note("parameter_copies", PL.parameter_copies(c.schedule))  # DualPipe: 2

    # ---- FLOPs per step ---------------------------------------------------------------------
    attn_w = P.attention_weight_params(h, x.n_heads, x.n_kv_heads, x.head_dim)
    mlp_w = P.mlp_weight_params(h, x.ffn, x.n_mlp)
    active = F.matmul_weight_params_active(attn_w, mlp_w, x.top_k, h * x.router_experts)
    mm_seq = F.layer_matmul_flops(s, 1, active)  # forward, per sequence
    att_seq = F.layer_attention_flops(s, 1, x.n_heads, x.head_dim)
    head_seq = F.head_flops(s, 1, x.vocab, h)
    causal_skip = 1 if c.attention is Attention.FLASH else 0
    # moe: MoE/MLA model FLOPs count the active weights (a MoE layer's k routed and the shared
    # experts, the router; a dense layer's MLP) and MLA's d_qk/d_v attention products
    n_moe_layers = x.moe * x.n_moe_layers
    dense_mm_seq = F.layer_matmul_flops(s, 1, x.attn_matmul + x.dense_matmul)
    moe_mm_seq = F.layer_matmul_flops(s, 1, F.moe_matmul_weights_active(
        x.attn_matmul, x.expert_matmul, x.top_k, x.shared_matmul, h * x.router_experts))
    mean_mm_seq = ((L - n_moe_layers) * dense_mm_seq + n_moe_layers * moe_mm_seq) / L

    def att_flops(skip):
        return _ops.select(x.mla,
                           F.mla_attention_flops(s, 1, x.n_heads, x.head_dim, x.v_dim, skip),
                           F.layer_attention_flops(s, 1, x.n_heads, x.head_dim, skip))

    model_flops = note("model_flops", pick(lambda: F.mixed_model_flops(
        x.gbs, L - n_moe_layers, n_moe_layers, dense_mm_seq, moe_mm_seq, att_flops(0), head_seq),
        F.model_flops(x.gbs, s, L, mm_seq, att_seq, head_seq)))
    # the same under the causal convention (the unmasked half of the square, as Megatron-Core logs)
    att_causal = F.layer_attention_flops(s, 1, x.n_heads, x.head_dim, F.MFU_CONVENTIONS["causal"])
    model_flops_causal = note("model_flops_causal", pick(lambda: F.mixed_model_flops(
        x.gbs, L - n_moe_layers, n_moe_layers, dense_mm_seq, moe_mm_seq,
        att_flops(F.MFU_CONVENTIONS["causal"]), head_seq),
        F.model_flops(x.gbs, s, L, mm_seq, att_causal, head_seq)))
    # hardware FLOPs are what runs: a causal flash kernel skips the masked half of the square,
    # and recomputation runs (part of) the forward again
    att_run = F.layer_attention_flops(s, 1, x.n_heads, x.head_dim, causal_skip)
    shares = {Recompute.NONE: (0, 0), Recompute.SELECTIVE: (0, 1), Recompute.FULL: (1, 1)}
    att_run_moe = att_flops(causal_skip)  # moe
    hardware_flops = note("hardware_flops", pick(
        lambda: F.mixed_model_flops(x.gbs, L - n_moe_layers, n_moe_layers, dense_mm_seq,
                                    moe_mm_seq, att_run_moe, head_seq)
        + F.recompute_flops(x.gbs, L, mean_mm_seq, att_run_moe, *shares[c.recompute])
        + F.flash_backward_flops(x.gbs, L, att_run_moe, causal_skip),
        F.model_flops(x.gbs, s, L, mm_seq, att_run, head_seq)
        + F.recompute_flops(x.gbs, L, mm_seq, att_run, *shares[c.recompute])
        + F.flash_backward_flops(x.gbs, L, att_run, causal_skip)))

    # ---- time: one micro-batch on the slowest (last) stage, per GPU ----------------------------
    materialised = 1 if c.attention is Attention.CLASSIC else 0
    sp_divisor = t if c.sequence_parallel else 1
    tokens = b * s / cp
    # a profile without an SM count (n_sm = 0) leaves wave quantisation out: w = 1
    has_sm = 1 - _ops.le(x.n_sm, 0)
    wave = note("wave_efficiency", _ops.select(has_sm, T.layer_gemm_wave_efficiency(
        tokens, h, x.n_heads, x.n_kv_heads, x.head_dim, x.ffn, x.n_mlp, t,
        _ops.maximum(x.n_sm, 1), x.tile_rows, x.tile_cols, tokens * x.top_k / x.n_experts), 1))
    # moe: a MoE/MLA layer's GEMMs (the time sizes a MoE layer, a stage's heaviest): the
    # non-expert weights over t at their own wave quantisation, the expert GEMMs per GPU as
    # T·k·load tokens through one expert each (etp splits the expert and gathers etp× the
    # tokens), as grouped GEMMs of expert_tokens rows per local expert
    def moe_mm_s():
        ne_weights = _ops.select(x.moe, x.attn_matmul + x.shared_matmul + h * x.router_experts,
                                 x.attn_matmul + x.dense_matmul)
        # (shown as the layer's wave efficiency in place of the dense one, which is not used)
        ne_wave = note("wave_efficiency", _ops.select(has_sm, T.layer_gemm_wave_efficiency(
            tokens, h, x.n_heads, x.n_kv_heads, x.head_dim, x.ne_ffn, x.n_mlp, t,
            _ops.maximum(x.n_sm, 1), x.tile_rows, x.tile_cols), 1))
        rows_per_expert = MO.expert_tokens(moe_tokens * x.etp, x.top_k, x.ep, x.n_experts,
                                           x.moe_load)
        expert_wave = note_moe("expert_wave_efficiency", _ops.select(
            has_sm * x.moe, MO.expert_layer_wave_efficiency(
                rows_per_expert, h, x.expert_ffn, x.n_mlp, x.etp,
                MO.local_experts(x.n_experts, x.ep), _ops.maximum(x.n_sm, 1), x.tile_rows,
                x.tile_cols), 1))
        expert_s = note_moe("expert_matmul_s", x.moe * T.compute_time_s(
            F.layer_matmul_flops(moe_tokens * x.top_k * x.moe_load, 1, x.expert_matmul),
            x.peak_flops, x.gemm_eff * expert_wave))
        return (T.compute_time_s(F.layer_matmul_flops(s, b, ne_weights) / (t * cp), x.peak_flops,
                                 x.gemm_eff * ne_wave) + expert_s)

    mm_s = note("matmul_s", pick(moe_mm_s, T.compute_time_s(
        F.layer_matmul_flops(s, b, active) / (t * cp), x.peak_flops, x.gemm_eff * wave)))
    att_fwd = F.layer_attention_flops(s, b, x.n_heads, x.head_dim, causal_skip)
    att_fwd = pick(lambda: _ops.select(x.mla, F.mla_attention_flops(  # moe: MLA's d_qk, d_v
        s, b, x.n_heads, x.head_dim, x.v_dim, causal_skip), att_fwd), att_fwd)
    att_s = note("attention_s", T.compute_time_s(att_fwd / (t * cp), x.peak_flops_16,
                                                 x.gemm_eff_16))
    elem_s = note("elementwise_s", T.memory_bound_time_s(T.layer_elementwise_bytes(
        s, b, h, routed_ffn, x.n_mlp, x.n_heads, x.n_kv_heads, x.head_dim, x.dropout,
        x.rotary, t, cp, sp_divisor, x.act_bytes), x.hbm_bw, x.hbm_eff))
    core_s = note("attention_core_s", T.memory_bound_time_s(T.attention_core_bytes(
        s, b, x.n_heads, t, cp, x.dropout, materialised, x.act_bytes), x.hbm_bw, x.hbm_eff))
    launch_s = T.kernel_overhead_s(T.KERNELS_PER_LAYER_FORWARD, x.kernel_s)
    fwd_s = note("forward_layer_s", mm_s + att_s + elem_s + core_s + launch_s)
    att_bwd = T.FLASH_BACKWARD_FACTOR if c.attention is Attention.FLASH else T.CLASSIC_BACKWARD_FACTOR
    bwd_s = note("backward_layer_s", T.backward_layer_s(fwd_s - att_s, att_s, att_bwd))
    recompute_s = note("recompute_layer_s", {Recompute.NONE: 0, Recompute.SELECTIVE: att_s + core_s,
                                             Recompute.FULL: fwd_s}[c.recompute])

    # ---- links: where each group's ranks sit (Megatron's order), what each collective gets ------
    g = group_links(x, t, cp, p, c.framework.rank_order)
    cp_links = context_links(x, cp_parts, g, t, cp, p, c.framework.rank_order)  # cp-kind
    tp_inside, cp_inside, dp_inside, pp_inside = g.tp.inside, g.cp.inside, g.dp.inside, g.pp.inside
    # traffic of one micro-batch, for the groups that share a link in the same window
    tp_mb_bytes = layers * (fwd_passes + 1) * tp_layer
    pp_mb_bytes = C.pp_step_bytes(p, 1, v_hops, boundary)
    # cp-kind: CP's traffic by part, each on its own link (one part for the ring or Ulysses,
    # the all-to-all and the ring for the hierarchical kind)
    cp_traffic = context_part_traffic(layers, cp_parts, cp_links)

    def cp_beside(inside):  # CP's bytes per micro-batch on the link a group crosses
        return sum(C.same_link(inside, link.inside) * v for v, link in cp_traffic)

    def cp_part_share(part_bytes, inside):  # a part that moves nothing (c_a = 1 or cp) gets 1
        return C.link_share(part_bytes, C.same_link(inside, tp_inside) * tp_mb_bytes
                            + C.same_link(inside, pp_inside) * pp_mb_bytes,
                            (1 - _ops.le(cp, 1)) * (1 - _ops.le(part_bytes, 0)))

    tp_share = note("tp_share", C.link_share(tp_mb_bytes, cp_beside(tp_inside),
                                             1 - _ops.le(t, 1)))
    shares = [cp_part_share(v, link.inside) for v, link in cp_traffic]
    cp_shares = SimpleNamespace(a2a=shares[0], ring=shares[-1])
    # the share shown: the part that moves more (the only one for the ring or Ulysses)
    cp_share = note("cp_share", shares[0] if len(shares) == 1 else _ops.select(
        _ops.le(cp_traffic[0][0], cp_traffic[1][0]), shares[1], shares[0]))
    pp_share = note("pp_share", C.link_share(pp_mb_bytes, cp_beside(pp_inside),
                                             1 - _ops.le(p, 1)))
    # each link's busy time per micro-batch from TP, CP and PP, at their own bandwidths
    # cp-kind: each part on its own link
    busy = [tp_mb_bytes / g.tp.bw, *(v / link.bw for v, link in cp_traffic),
            pp_mb_bytes / g.pp.bw]
    inside = [tp_inside, *(link.inside for _, link in cp_traffic), pp_inside]
    nvlink_busy_mb = sum(i * b for i, b in zip(inside, busy))
    network_busy_mb = sum((1 - i) * b for i, b in zip(inside, busy))
    # what runs beside the data-parallel collectives on their link, per micro-batch
    dp_concurrent = C.same_link(dp_inside, pp_inside) * pp_mb_bytes + cp_beside(dp_inside)
    if c.sequence_parallel:  # two all-gather + reduce-scatter pairs per direction
        tp_dir_s = C.ring_time_s(tp_layer, g.tp.bw * tp_share, t, g.tp.k, 4, x.fast_lat,
                                 x.net_lat)
    else:  # two all-reduces per direction: NVLS inside the domain, ring or tree
        tp_dir_s = 2 * C.allreduce_time_s(
            tp_layer / 2 * C.sharp_volume_factor(t, x.sharp * (1 - tp_inside)),
            g.tp.bw_allreduce * tp_share, t, g.tp.k, x.fast_lat, x.net_lat)
    tp_dir_s = note("tp_layer_s", tp_dir_s)
    # forward all-reduces sit on the critical path; the backward's overlap the weight-gradient
    # GEMMs (Megatron's asynchronous TP all-reduce), which take as long as the forward matmuls
    tp_bwd_exposed = (T.exposed_time_s(tp_dir_s, mm_s) if c.framework.tp_backward_overlap
                      else tp_dir_s)
    tp_layer_exposed = fwd_passes * tp_dir_s + tp_bwd_exposed
    # one layer as a per-layer benchmark sees it (Korthikanti 2022 Table 4): forward, and backward
    # with its recomputation
    layer_fwd_total = fwd_s + tp_dir_s
    layer_bwd_total = bwd_s + recompute_s + (fwd_passes - 1) * tp_dir_s + tp_bwd_exposed

    # cp-kind: the all-to-all part exposed, the ring part under the attention products, forward
    # and backward (context_time)
    cp_window = (1 + att_bwd) * att_s
    cp_layer_s, cp_layer_exposed = context_time(x, cp_parts, cp_links, cp_shares, cp_window,
                                                note)

    # ---- moe: expert-parallel all-to-all, per MoE layer and micro-batch: dispatch and combine
    # forward, their transposes backward (4), plus with etp > 1 the all-gather of the tokens
    # over the etp ranks and its reduce-scatter (4 × (etp − 1)·T·k·load·h·act on NVLink: etp
    # sits inside the domain). Exposed unless overlapped with another micro-batch's compute
    ep_mb_s = ep_bytes = ep_span_inside = 0
    if moe_model:
        a2a_bytes = MO.all_to_all_bytes(moe_tokens, x.top_k, h, x.ep, x.act_bytes, x.moe_load)
        etp_bytes = (x.etp - 1) * moe_tokens * x.top_k * x.moe_load * h * x.act_bytes
        ep_span_inside = x.moe * C.inside_domain(x.ep * x.etp, g.domain)
        a2a_s = note_moe("all_to_all_s", MO.all_to_all_time_s(
            a2a_bytes, x.ep, MO.ep_ranks_in_domain(x.ep, x.etp, g.domain), x.fast_bw, x.net_bw,
            _ops.select(ep_span_inside, x.fast_lat, x.net_lat)))
        etp_s = etp_bytes / x.fast_bw + (1 - _ops.le(x.etp, 1)) * x.fast_lat
        ep_layer_exposed = x.moe * MO.overlapped_all_to_all_s(4 * (a2a_s + etp_s), fwd_s + bwd_s,
                                                              x.a2a_overlap)
        ep_mb_s = moe_last * ep_layer_exposed
        ep_bytes = note_moe("ep_bytes", x.moe * m * moe_last * 4 * (a2a_bytes + etp_bytes))
        # the all-to-all keeps its link busy too (on NVLink when the ep·etp group fits a
        # domain, else counted on the network, whose NICs it leaves on)
        ep_busy_mb = x.moe * moe_last * 4 * (a2a_s + etp_s)
        nvlink_busy_mb = nvlink_busy_mb + ep_span_inside * ep_busy_mb
        network_busy_mb = network_busy_mb + (1 - ep_span_inside) * ep_busy_mb

    head_s = note("head_s", T.head_time_s(F.head_flops(s, b, vocab_padded, h) / (t * cp),
                                          logits_act, x.peak_flops_16, x.gemm_eff_16, x.hbm_bw,
                                          x.hbm_eff))

    pp_mb_s = C.collective_time_s(pp_mb_bytes, g.pp.bw * pp_share, 2 * (v_hops * p - 1) / p,
                                  _ops.select(pp_inside, x.fast_lat, x.net_lat))

    compute_mb_s = note("compute_microbatch_s", layers * (fwd_s + bwd_s + recompute_s) + head_s)
    tp_mb_s = layers * tp_layer_exposed
    cp_mb_s = layers * cp_layer_exposed
    # the split-backward schedules' W (Qi et al. 2024 §2): the weight-gradient GEMMs, which run the
    # forward matmuls' FLOPs; F is the forward with its TP all-reduces, B the rest of the stage
    wgrad_mb_s = note("wgrad_microbatch_s", layers * mm_s)
    fwd_mb_s = note("forward_microbatch_s", layers * layer_fwd_total)

    # every intermediate goes to zero_costs by its own name (no list to keep in step): it reads
    # what it needs, and a new intermediate needs no edit here
    links, dp_concurrent_bytes, ep_inside = g, dp_concurrent, ep_span_inside
    return SimpleNamespace(**{name: value for name, value in locals().items()
                              if name not in ("x", "c", "note")})


def zero_costs(x, c: Choices, k: SimpleNamespace, note=_same) -> dict:
    """The half of plan_costs that depends on the ZeRO stage, on layout_costs' intermediates `k`:
    the memory of the most loaded stage, data-parallel traffic and its exposed time, the optimizer
    step, and the step time, throughput and MFU they lead to."""
    t, p, cp, v, m, d_shard, layers = k.t, k.p, k.cp, k.v, k.m, k.d_shard, k.layers
    z = int(c.zero_stage)
    # ---- memory of the most loaded stage, as the plan's framework lays it out ----------------
    conv = c.framework.memory
    states = conv.states(c.zero_stage, x.g_bytes)
    # data-parallel sharding on one rank falls back to no sharding (FSDP's NO_SHARD)
    shards = 1 - _ops.le(d_shard, 1)
    single_stage = _ops.le(p, 1)
    layer_w = M.layer_gpu_params(k.layer_sharded, k.layer_replicated, t)
    end_w = k.vocab_padded * x.hidden / t  # the embedding or the LM head on one GPU
    pp_w, pp_g = conv.pp_unsharded

    # moe: expert states are sharded over the expert-data-parallel group edp = d·c·t/(ep·etp)
    edp = MO.expert_data_parallel(x.dp, cp, t, x.ep, x.etp)
    moe = _flag(x.moe)

    def buffers(psi, ends):
        """What the framework holds beside the model states and activations, for a stage of psi
        parameters per GPU with `ends` embedding/head matrices: gathered ZeRO-3 layers, weights
        and gradients kept unsharded across a pipelined step, fixed buckets, fp8 weight copies."""
        # fp8 copies of the layers' linear weights (not of the embedding or the head)
        held = (conv.bucket_bytes(c.zero_stage)
                + conv.fp8_weight_bytes * x.fp8 * layers * k.layer_sharded / t)
        if z == 3:
            # the layer computed and those prefetched; under pp > 1 where the framework keeps the
            # stage gathered, the whole stage instead
            gathered = M.gathered_layers_bytes(layer_w, x.w_bytes, conv.gathered_layers)
            whole = M.unsharded_stage_bytes(psi, pp_w)
            held = held + shards * (_ops.select(single_stage, gathered,
                                                _ops.maximum(gathered, whole))
                                    + int(conv.head_unsharded) * ends * x.w_bytes * end_w
                                    + M.gathered_layers_bytes(layer_w, x.g_bytes,
                                                              conv.reduce_buffer_layers))
        if z == 2 and conv.zero2_keeps_weights_gathered:
            held = held + shards * M.unsharded_stage_bytes(psi, x.w_bytes)
        if z >= 2:
            held = held + shards * (1 - single_stage) * M.unsharded_stage_bytes(psi, pp_g)
        return held

    def memory(psi, act, ends, psi_e=0, act_host=0):
        # the model states (weights, gradients, optimizer) as the framework keeps them; DualPipe
        # holds two copies of its stages (DeepSeek-V3 report, Table 2)
        psi, psi_e = psi * k.param_copies, psi_e * k.param_copies
        w = M.state_bytes(psi, states.weight_bytes, d_shard, states.weight_sharded)
        g = M.state_bytes(psi, states.grad_bytes, d_shard, states.grad_sharded)
        o = M.state_bytes(psi, states.optimizer_bytes, d_shard, states.optimizer_sharded)
        if moe:  # moe: the stage's routed experts (psi_e per GPU after ep·etp), sharded over edp
            w = w + M.state_bytes(psi_e, states.weight_bytes, edp, states.weight_sharded)
            g = g + M.state_bytes(psi_e, states.grad_bytes, edp, states.grad_sharded)
            o = o + M.state_bytes(psi_e, states.optimizer_bytes, edp, states.optimizer_sharded)
        host = act_host
        if c.offload:  # offload: the states that move to host memory leave the device
            w, g, o, host_states = offload_states(x, c, states, conv, w, g, o)
            host = host + host_states
        held = buffers(psi, ends)
        allocated = w + g + o + act + held
        frag = x.frag if conv.fragmentation is None else conv.fragmentation
        # the allocator's slack is on what the step allocates and frees, not on the model
        # states, which sit in buffers allocated once
        slack = frag * (act + held)
        overhead = M.runtime_overhead_bytes(x.reserved, frag, act + held)
        return w, g, o, act, overhead + held, allocated, allocated + slack, host

    first_ends = _ops.select(_ops.maximum(single_stage, PL.ends_on_first_gpu(c.schedule)),
                             2 - x.tied, 1)
    act_first, act_last, act_host_first, act_host_last = k.act_first, k.act_last, 0, 0
    if c.offload:  # offload: N layers' activations of each micro-batch in flight on the host
        act_host_first = OF.activation_offload_saved_bytes(x.offload_activations, k.layer_act,
                                                           k.inflight_first)
        act_host_last = OF.activation_offload_saved_bytes(x.offload_activations, k.layer_act,
                                                          k.inflight_last)
        act_first, act_last = act_first - act_host_first, act_last - act_host_last
    first = memory(k.params_first, act_first, first_ends, k.expert_first, act_host_first)
    last = memory(k.params_last, act_last, first_ends, k.expert_last, act_host_last)
    is_first = _ops.le(sum(last[:5]), sum(first[:5]))  # 1 where the first stage is the most loaded
    worst = [_ops.select(is_first, f_, l_) for f_, l_ in zip(first, last)]
    stage_params = note("stage_params", _ops.select(is_first, k.params_first, k.params_last))
    stage_experts = _ops.select(is_first, k.expert_first, k.expert_last)  # moe
    if moe:  # moe: the expert parameters per GPU, shown for MoE models
        stage_experts = note("expert_stage_params", stage_experts)
    weights = note("weights_bytes", worst[0])
    grads = note("gradients_bytes", worst[1])
    optimizer = note("optimizer_bytes", worst[2])
    activations = note("activations_bytes", worst[3])
    overhead = note("overhead_bytes", worst[4])
    total_bytes = note("total_bytes", weights + grads + optimizer + activations + overhead)
    allocated_bytes, reserved_bytes = worst[5], worst[6]
    host_bytes = note("host_bytes", worst[7]) if c.offload else 0  # offload

    # ZeRO-2/3 collectives run every micro-batch, except where the framework keeps a pipelined
    # stage gathered and its gradients unsharded until the last micro-batch (torchtitan's FSDP2
    # under PP): then once per step
    fw = c.framework
    zero_rounds = (_ops.select(_ops.le(p, 1), m, 1)
                   if z >= 2 and fw.fsdp_once_per_step_under_pp else m)
    # what the GPU reduces, gathers and steps: its stages' parameters, twice under DualPipe
    held_params = stage_params * k.param_copies
    held_experts = stage_experts * k.param_copies if moe else 0
    # hybrid sharding: each gradient reduce-scatter in the shard group is followed by the
    # all-reduce of the shard across the replicas (C.hsdp_replica_bytes), on its own link
    replicas, hybrid = dp_replicate_of(x)
    replica_bytes = (C.hsdp_replica_step_bytes(held_params, x.g_bytes, d_shard, replicas,
                                               zero_rounds, z) if hybrid else 0)
    dp_bytes = C.dp_gradient_bytes(held_params, x.g_bytes, x.w_bytes, d_shard, zero_rounds,
                                   z) + replica_bytes
    if moe:  # moe: the experts' gradients are reduced (and their weights gathered) over edp
        dp_bytes = dp_bytes + C.dp_gradient_bytes(held_experts, x.g_bytes, x.w_bytes, edp,
                                                  zero_rounds, z)
    dp_bytes = note("dp_bytes", dp_bytes)

    # ZeRO-2/3 move data every micro-batch (gradient reduce-scatter; ZeRO-3 also weight gathers),
    # overlapped with that micro-batch's compute (prefetch, bucketed reduction). Each runs as the
    # ZERO_COLLECTIVES table says, on the dp·cp group's link, sharing it with the PP and CP
    # traffic of the same micro-batch where they cross the same link
    dp, concurrent = k.links.dp, k.dp_concurrent_bytes

    def dp_time(when, params=held_params, ranks=d_shard, group=dp, inside=k.dp_inside):
        if C.zero_ring_passes(z, when) == 0:  # the stage runs nothing at this point
            return 1, 0
        volume = C.zero_bytes(params, x.g_bytes, x.w_bytes, ranks, z, when)
        # a stage with nothing to move (one rank; a stage without MoE layers' experts) sends
        # nothing, so its share is 1, not 0/0
        sends = (1 - _ops.le(ranks, 1)) * (1 - _ops.le(params, 0) if params is held_experts else 1)
        share = C.link_share(volume, concurrent, sends)
        if C.zero_allreduce(z, when):
            return share, C.allreduce_time_s(
                volume * C.sharp_volume_factor(ranks, x.sharp * (1 - inside)),
                group.bw_allreduce * share, ranks, group.k, x.fast_lat, x.net_lat)
        return share, C.ring_time_s(volume, group.bw * share, ranks, group.k,
                                    C.zero_ring_passes(z, when), x.fast_lat, x.net_lat)

    mb_share, zero_mb_s = dp_time(C.When.MICRO_BATCH)
    tail_share, reduce_s = dp_time(C.When.STEP_REDUCE)
    _, gather_s = dp_time(C.When.STEP_GATHER)
    if hybrid:  # HSDP: the shard's all-reduce across replicas after each reduce-scatter
        replica = k.links.replica

        def replica_time(when):
            if C.hsdp_replica_rounds(z, when) == 0:
                return 0
            volume = C.hsdp_replica_bytes(held_params, x.g_bytes, d_shard, replicas, z, when)
            return C.allreduce_time_s(
                volume * C.sharp_volume_factor(replicas, x.sharp * (1 - replica.inside)),
                replica.bw_allreduce, replicas, replica.k, x.fast_lat, x.net_lat)

        zero_mb_s = zero_mb_s + replica_time(C.When.MICRO_BATCH)
        reduce_s = reduce_s + replica_time(C.When.STEP_REDUCE)
    if moe:
        # moe: the same collectives for the expert shards over their edp group, whose ranks sit
        # ep·etp apart (Megatron's expert rank order etp-ep-edp): with ep·etp filling a node, each
        # node holds one edp rank and the group leaves it on one rank's NICs
        edp_group = _collective_group(x, edp, x.ep * x.etp, k.links.domain)
        with np.errstate(invalid="ignore", divide="ignore"):
            expert = [_ops.select(x.moe, dp_time(when, held_experts, edp, edp_group,
                                                 edp_group.inside)[1], 0)
                      for when in (C.When.MICRO_BATCH, C.When.STEP_REDUCE, C.When.STEP_GATHER)]
        zero_mb_s, reduce_s, gather_s = (zero_mb_s + expert[0], reduce_s + expert[1],
                                         gather_s + expert[2])
    reduce_s = note("dp_reduce_s", reduce_s)
    gather_s = note("dp_gather_s", gather_s)
    dp_share = note("dp_share", mb_share if z >= 2 else tail_share)
    zero3_mb_s = ((T.exposed_time_s(zero_mb_s, k.compute_mb_s)
                   + C.overlap_slowdown_s(zero_mb_s, k.compute_mb_s, x.overlap_slow))
                  * zero_rounds / m if z >= 2 else 0)
    note("dp_tail_s", reduce_s + gather_s)
    # with overlap the reduction runs under the last micro-batch's backward pass, and the gather
    # of the updated weights (after the optimizer step) under the next step's first forward pass
    # (Megatron's --overlap-grad-reduce and --overlap-param-gather, taken as set together); what
    # they hide under runs slower by the NCCL kernels beside it
    overlap = x.overlap * int(fw.dp_overlap(c.zero_stage))  # what the framework overlaps
    bwd_window = overlap * layers * (k.bwd_s + k.recompute_s)
    fwd_window = overlap * layers * k.fwd_s
    dp_tail_exposed = note("dp_tail_exposed_s", (
        T.exposed_time_s(reduce_s, bwd_window)
        + C.overlap_slowdown_s(reduce_s, bwd_window, x.overlap_slow)
        + T.exposed_time_s(gather_s, fwd_window)
        + C.overlap_slowdown_s(gather_s, fwd_window, x.overlap_slow)))

    opt_shard = d_shard if z >= 1 else 1
    opt_bytes = T.optimizer_step_bytes(held_params, x.g_bytes, x.w_bytes, opt_shard)
    if moe:  # moe: the expert shards' Adam step, over edp under ZeRO ≥ 1
        opt_bytes = opt_bytes + T.optimizer_step_bytes(held_experts, x.g_bytes, x.w_bytes,
                                                       edp if z >= 1 else 1)
    if c.offload:  # offload: the GPU steps only the optimizer states it keeps
        opt_bytes = OF.device_optimizer_bytes(opt_bytes, x.offload_optimizer)
    optimizer_s = note("optimizer_s", T.memory_bound_time_s(opt_bytes, x.hbm_bw, x.hbm_eff))
    offload = SimpleNamespace(step_s=0, mb_s=0, d2h_bytes=0, h2d_bytes=0)
    if c.offload:  # offload: host-link copies and the CPU step (formulas/offload.py)
        psi_o = held_params / opt_shard + (held_experts / (edp if z >= 1 else 1) if moe else 0)
        offload = offload_times(x, c, k, states, psi_o, held_params, zero_rounds, note)

    stage_mb_s = note("stage_microbatch_s", k.compute_mb_s + k.tp_mb_s + k.cp_mb_s + k.pp_mb_s + zero3_mb_s
                      + k.ep_mb_s + offload.mb_s)  # moe: + exposed all-to-all; offload
    bgrad_mb_s = stage_mb_s - k.fwd_mb_s - k.wgrad_mb_s  # B: the backward less its W
    times = (c.schedule, k.fwd_mb_s, bgrad_mb_s, k.wgrad_mb_s)
    bubble = note("bubble_fraction", PL.bubble_fraction(p, m, v, *times))
    slots = PL.pipeline_slots(p, m, v, *times)
    # the busiest link bounds the step: each link's traffic at its own bandwidth, per GPU
    g = k.links
    dp_busy = (dp_bytes - replica_bytes) / dp.bw
    nvlink_busy = k.nvlink_busy_mb * m + k.dp_inside * dp_busy
    network_busy = k.network_busy_mb * m + (1 - k.dp_inside) * dp_busy
    if hybrid:  # the cross-replica all-reduce on the replica group's link
        replica_busy = replica_bytes / k.links.replica.bw
        nvlink_busy = nvlink_busy + k.links.replica.inside * replica_busy
        network_busy = network_busy + (1 - k.links.replica.inside) * replica_busy
    nvlink_busy = note("nvlink_busy_s", nvlink_busy)
    network_busy = note("network_busy_s", network_busy)
    link_floor = _ops.maximum(nvlink_busy, network_busy)
    if c.offload:  # offload: the host copies share the GPU's host link with its NIC's traffic
        link_floor = _ops.maximum(link_floor, note("host_link_busy_s", OF.host_link_busy_s(
            offload.d2h_bytes, offload.h2d_bytes, x.host_bw, x.dram_bw, network_busy, x.net_bw,
            x.nic_on_host_link)))
    step_s = note("step_s", _ops.maximum(
        T.step_time_s(stage_mb_s, slots, dp_tail_exposed, optimizer_s + offload.step_s),
        link_floor))
    n_gpus = x.dp * t * p * cp

    tp_exposed = note("tp_exposed_s", m * k.tp_mb_s)
    cp_exposed = note("cp_exposed_s", m * k.cp_mb_s)
    pp_exposed = note("pp_exposed_s", m * k.pp_mb_s)
    dp_exposed = note("dp_exposed_s", m * zero3_mb_s + dp_tail_exposed)
    ep_exposed = m * k.ep_mb_s  # moe
    if moe:
        ep_exposed = note("ep_exposed_s", ep_exposed)
    return dict(
        n_params=k.n_params, vocab_padded=k.vocab_padded, stage_layers=layers,
        params_first_stage=k.params_first, params_last_stage=k.params_last, stage_params=stage_params,
        is_first_stage=is_first,
        weights_bytes=weights, gradients_bytes=grads, optimizer_bytes=optimizer,
        activations_bytes=activations, overhead_bytes=overhead, total_bytes=total_bytes,
        capacity_bytes=x.capacity, layer_activation_bytes=k.layer_act,
        allocated_bytes=allocated_bytes, reserved_bytes=reserved_bytes,
        inflight_first=k.inflight_first, inflight_last=k.inflight_last,
        dp_bytes=dp_bytes, tp_bytes=k.tp_bytes, pp_bytes=k.pp_bytes, cp_bytes=k.cp_bytes,
        bubble_fraction=bubble, model_flops=k.model_flops, hardware_flops=k.hardware_flops,
        compute_s=note("compute_s", m * k.compute_mb_s), tp_exposed_s=tp_exposed,
        cp_exposed_s=cp_exposed, pp_exposed_s=pp_exposed, dp_exposed_s=dp_exposed,
        exposed_comm_s=tp_exposed + cp_exposed + pp_exposed + dp_exposed + ep_exposed,
        bubble_s=note("bubble_s", stage_mb_s * (slots - m)), optimizer_s=optimizer_s,
        step_s=step_s, stage_microbatch_s=stage_mb_s, forward_layer_s=k.fwd_s,
        layer_forward_total_s=k.layer_fwd_total, layer_backward_total_s=k.layer_bwd_total,
        tokens_per_s=note("tokens_per_s", T.tokens_per_s(x.gbs, k.s, step_s)),
        mfu=note("mfu", T.mfu(k.model_flops, step_s, n_gpus, x.peak_flops)),
        hfu=T.mfu(k.hardware_flops, step_s, n_gpus, x.peak_flops),
        model_flops_causal=k.model_flops_causal,
        mfu_causal=note("mfu_causal", T.mfu(k.model_flops_causal, step_s, n_gpus, x.peak_flops)),
        # which link each kind of traffic crosses: 1 = inside the NVLink domain, 0 = network
        tp_inside=k.tp_inside, cp_inside=k.cp_inside, dp_inside=k.dp_inside, pp_inside=k.pp_inside,
        # moe: expert parallelism's traffic, exposed time and link; expert parameters per GPU
        ep_bytes=k.ep_bytes, ep_exposed_s=ep_exposed, ep_inside=k.ep_inside,
        expert_stage_params=stage_experts,
        # the bus bandwidth each group's collectives get, its share of the link, and how busy
        # each link is (C.link_share, C.link_utilisation)
        tp_busbw=g.tp.bw, cp_busbw=g.cp.bw, dp_busbw=dp.bw, pp_busbw=g.pp.bw,
        tp_share=k.tp_share, cp_share=k.cp_share, dp_share=dp_share, pp_share=k.pp_share,
        tp_ranks_per_domain=g.tp.r, cp_ranks_per_domain=g.cp.r, dp_ranks_per_domain=dp.r,
        nvlink_busy_s=nvlink_busy, network_busy_s=network_busy,
        nvlink_utilisation=C.link_utilisation(nvlink_busy, step_s),
        network_utilisation=C.link_utilisation(network_busy, step_s),
        # offload: host memory per GPU and what it can take; the step's exposed offload time
        host_bytes=host_bytes, host_capacity_bytes=x.host_capacity if c.offload else 0,
        offload_s=(note("offload_s", offload.step_s + m * offload.mb_s) if c.offload else 0),
        offload_d2h_bytes=offload.d2h_bytes, offload_h2d_bytes=offload.h2d_bytes,
    )


def offload_states(x, c: Choices, states, conv, w, g, o):
    """offload: the device's weights, gradients and optimizer bytes after offload, and the host
    bytes they take. The optimizer: a fraction f of its states, with the host gradient buffer the
    CPU step reads (formulas.offload); the parameters (FSDP2 CPUOffloadPolicy, ZeRO-3
    offload_param): all three sharded states, f = 1."""
    f = x.offload_optimizer
    host = OF.host_optimizer_bytes(o, f, states.optimizer_bytes, conv.host_grad_bytes)
    if c.offload_params:
        return 0, 0, OF.device_optimizer_bytes(o, f), host + w + g
    if offloads_grads(c, conv):  # DeepSpeed ZeRO-2/3: the gradient partition goes along
        return w, OF.device_optimizer_bytes(g, f), OF.device_optimizer_bytes(o, f), host + f * g
    return w, g, OF.device_optimizer_bytes(o, f), host


def offloads_grads(c: Choices, conv) -> bool:
    """offload: the framework moves the offloaded parameters' gradient partition to the host with
    their optimizer states (MemoryConventions.offload_grads_from_zero)."""
    return int(c.zero_stage) >= conv.offload_grads_from_zero


def offload_times(x, c: Choices, k: SimpleNamespace, states, psi_o, held_params, zero_rounds,
                  note=_same) -> SimpleNamespace:
    """offload: what offload adds to the step (step_s: the offloaded optimizer step, after the
    backward; mb_s: per micro-batch, the copies compute does not hide) and the bytes per step
    each way over the host link. psi_o: the parameters whose optimizer state this GPU holds;
    held_params: the stage's parameters it computes with."""
    f, z, m = x.offload_optimizer, int(c.zero_stage), k.m
    # the optimizer step: f·Ψ_o gradients down, the CPU's Adam, f·Ψ_o weights up (with the
    # parameters on the host the weights stay there: the next forward's gathers fetch them)
    step_d2h = OF.optimizer_d2h_bytes(psi_o * states.optimizer_bytes, f, states.optimizer_bytes,
                                      x.g_bytes)
    step_h2d = 0 if c.offload_params else OF.optimizer_h2d_bytes(
        psi_o * states.optimizer_bytes, f, states.optimizer_bytes, x.w_bytes)
    cpu_s = note("cpu_optimizer_s", OF.cpu_step_s(f * psi_o, x.dram_bw))
    backward_window = k.layers * (k.bwd_s + k.recompute_s)  # the last micro-batch's backward
    mb_d2h = mb_h2d = mb_s = 0
    if c.offload_params:
        # the weight shard up for each gather, the gradient shard down, each ZeRO round
        w = M.state_bytes(held_params, states.weight_bytes, k.d_shard,
                          states.weight_sharded)
        g = M.state_bytes(held_params, states.grad_bytes, k.d_shard, states.grad_sharded)
        mb_h2d, mb_d2h = OF.param_offload_h2d_bytes(w, 2 if z == 3 else 1), g
        step_d2h = 0  # the gradients went down with each round
        mb_s = OF.param_offload_exposed_s(OF.link_time_s(mb_h2d, x.host_bw, x.dram_bw),
                                          OF.link_time_s(mb_d2h, x.host_bw, x.dram_bw),
                                          k.compute_mb_s) * zero_rounds / m
        mb_h2d, mb_d2h = mb_h2d * zero_rounds / m, mb_d2h * zero_rounds / m
    elif offloads_grads(c, c.framework.memory):
        # the offloaded gradient partition goes down each ZeRO round, under its backward; from
        # the second round on, what the host accumulated comes up first to be added on the GPU
        # (DeepSpeed stage_1_and_2.py `async_accumulate_grad_in_cpu_via_gpu` @ edaa72212)
        g = f * M.state_bytes(held_params, states.grad_bytes, k.d_shard, states.grad_sharded)
        up = g * (zero_rounds - 1) / zero_rounds  # per round, averaged over the step's rounds
        mb_d2h, mb_h2d, step_d2h = g * zero_rounds / m, up * zero_rounds / m, 0
        mb_s = OF.param_offload_exposed_s(OF.link_time_s(up, x.host_bw, x.dram_bw),
                                          OF.link_time_s(g, x.host_bw, x.dram_bw),
                                          k.compute_mb_s) * zero_rounds / m
    # the pipelined step's copies and CPU Adam share the host's DRAM
    dram_s = OF.host_dram_step_s(f * psi_o, step_d2h + step_h2d,
                                 c.framework.offload_conversion_bytes, x.dram_bw)
    step_s = note("offload_step_s", OF.optimizer_step_offload_s(
        OF.link_time_s(step_d2h, x.host_bw, x.dram_bw), cpu_s,
        OF.link_time_s(step_h2d, x.host_bw, x.dram_bw), backward_window,
        int(c.framework.offload_pipelined), dram_s))
    # activations: N layers out in the forward and back in the backward, per micro-batch
    act = OF.activation_offload_bytes(x.offload_activations, k.layer_act)
    n = x.offload_activations
    mb_s = note("offload_microbatch_s", mb_s + OF.activation_offload_exposed_s(
        OF.link_time_s(act, x.host_bw, x.dram_bw), n * k.fwd_s, n * (k.bwd_s + k.recompute_s)))
    return SimpleNamespace(
        step_s=step_s, mb_s=mb_s,
        d2h_bytes=note("offload_d2h_bytes", step_d2h + m * (mb_d2h + act)),
        h2d_bytes=note("offload_h2d_bytes", step_h2d + m * (mb_h2d + act)))
