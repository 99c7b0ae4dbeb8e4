"""The cost model of one plan, composed from the formulas — written once, for every backend.

`plan_costs(x, c)` takes the plan's numbers `x` (floats for one plan, float64 arrays for the
search, sympy symbols for `explain`) and its discrete choices `c`, and returns every quantity the
planner reports, by name. estimate.py, search.py and explain.py are thin adapters over it, so the
three can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from types import SimpleNamespace

from .formulas import _ops
from .formulas import activations as A
from .formulas import comm as C
from .formulas import flops as F
from .formulas import memory as M
from .formulas import params as P
from .formulas import pipeline as PL
from .formulas import timing as T
from .formulas.choices import Attention, Precision, Recompute, Schedule, ZeroStage
from .placement import MEGATRON_RANK_ORDER, group_stride
from .schema import HardwareProfile, ModelSpec, PlanConfig

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MASTER_BYTES = 4  # fp32 master weights
MOMENT_BYTES = 8  # Adam m and v in fp32
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

    @classmethod
    def of(cls, config: PlanConfig) -> Choices:
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})


def model_numbers(model: ModelSpec) -> dict:
    """A model's numbers under the names plan_costs reads."""
    return dict(
        n_layers=model.n_layers, hidden=model.hidden, n_heads=model.n_heads,
        n_kv_heads=model.kv_heads, head_dim=model.dim_head, ffn=model.ffn, vocab=model.vocab,
        n_mlp=model.n_mlp_matrices, bias=int(model.bias), norm_width=model.norm_width,
        learned_positions=model.learned_positions, positions=model.positions,
        tied=int(model.tied_embeddings), dropout=int(model.dropout),
        rotary=1 - model.learned_positions, n_experts=model.n_experts, top_k=model.top_k,
        router_experts=model.router_experts,
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
    )


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
        w_bytes=WEIGHT_BYTES, g_bytes=BYTES[config.grad_dtype], act_bytes=ACT_BYTES,
        overlap=int(config.overlap_grad_reduce),
    )


def numbers(model: ModelSpec, hw: HardwareProfile, config: PlanConfig) -> SimpleNamespace:
    """Everything plan_costs needs for one plan, as plain floats."""
    return SimpleNamespace(**model_numbers(model), **hardware_numbers(hw, config.precision),
                           **config_numbers(config))


def _same(name, value):
    return value


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


def group_links(x, t, cp, p, order=MEGATRON_RANK_ORDER) -> SimpleNamespace:
    """Each parallel group's placement and link, from the rank order (Megatron's tp-cp-dp-pp
    unless a framework passes its own): TP, CP, the data-parallel (dp·cp) gradient group, and the
    pipeline neighbours (a point-to-point send; inside when two adjacent stages share a domain)."""
    degrees = dict(tp=t, cp=cp, dp=x.dp, pp=p)
    domain = C.job_domain_gpus(x.domain, x.dp * t * cp * p)
    pp_stride = group_stride(degrees, ("pp",), order)
    pp_inside = C.inside_domain(2 * pp_stride, domain)
    pp_bw = C.group_busbw(pp_inside, x.fast_bw, C.p2p_busbw(
        x.nics_per_gpu, x.net_bw, x.fast_bw,
        C.oversubscription_factor(2 * pp_stride, x.pod, x.oversub)))
    cp_group = _collective_group(x, cp, group_stride(degrees, ("cp",), order), domain)
    # ring attention sends point to point: a hop that leaves the domain runs at one rank's NICs
    cp_group.bw = C.group_busbw(cp_group.inside, x.fast_bw, C.p2p_busbw(
        x.nics_per_gpu, x.net_bw, x.fast_bw,
        C.oversubscription_factor(group_stride(degrees, ("cp",), order) * cp, x.pod, x.oversub)))
    return SimpleNamespace(
        domain=domain,
        tp=_collective_group(x, t, group_stride(degrees, ("tp",), order), domain),
        cp=cp_group,
        dp=_collective_group(x, x.dp * cp, group_stride(degrees, ("cp", "dp"), order), domain),
        pp=SimpleNamespace(inside=pp_inside, r=1, k=1, bw=pp_bw, bw_allreduce=pp_bw))


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
    parameters, activations, FLOPs, the layer times, TP/CP/PP traffic and the links. Returns the
    intermediates zero_costs needs, by name."""
    L, h, s, b, t, p, cp, v, m = (x.n_layers, x.hidden, x.seq_len, x.mbs, x.tp, x.pp, x.cp, x.vpp,
                                  x.n_micro)
    d_shard = x.dp * cp  # ZeRO and the gradient reduction span data × context parallel ranks
    single_stage = _ops.le(p, 1)
    layers = note("stage_layers", P.layers_per_stage(L, p, v))

    # ---- parameters -------------------------------------------------------------------------
    n_params = note("n_params", P.model_params(
        L, h, x.n_heads, x.n_kv_heads, x.head_dim, x.ffn, x.n_mlp, x.bias, x.norm_width, x.vocab,
        x.positions, x.learned_positions, x.tied, x.n_experts, x.router_experts))
    layer_sharded = P.layer_sharded_params(h, x.n_heads, x.n_kv_heads, x.head_dim, x.ffn, x.n_mlp,
                                           x.bias, x.n_experts, x.router_experts)
    layer_replicated = P.layer_replicated_params(h, x.bias, x.norm_width, x.n_experts)
    vocab_padded = note("vocab_padded", P.padded_vocab(x.vocab, t))
    positions = P.position_embedding_params(x.positions, h, x.learned_positions)

    def stage(first):
        return P.stage_params_per_gpu(layers, t, layer_sharded, layer_replicated, vocab_padded, h,
                                      positions, x.norm_width, x.tied, first, single_stage)

    params_first = note("params_first_stage", stage(1))
    params_last = note("params_last_stage", stage(0))

    # ---- activations ------------------------------------------------------------------------
    # a token's MLP activations are kept in each of the top-k experts it is routed to
    routed_ffn = x.ffn * x.top_k
    layer_act = note("layer_activation_bytes", A.layer_activation_bytes(
        s, b, h, x.n_heads, x.n_kv_heads, x.head_dim, routed_ffn, x.n_mlp, x.dropout, t, cp,
        c.sequence_parallel, c.recompute, c.attention, x.act_bytes))
    # under full recompute, the layer being recomputed holds all its activations for a moment
    working_act = (A.layer_activation_bytes(
        s, b, h, x.n_heads, x.n_kv_heads, x.head_dim, routed_ffn, x.n_mlp, x.dropout, t, cp,
        c.sequence_parallel, Recompute.NONE, c.attention, x.act_bytes)
        if c.recompute is Recompute.FULL else 0)
    inflight_first = note("inflight_first", PL.in_flight_first_stage(p, m, v, c.schedule))
    inflight_last = note("inflight_last", PL.in_flight_last_stage(p, m, v, c.schedule))
    embed_act = A.embedding_activation_bytes(s, b, h, x.dropout, t, cp, c.sequence_parallel)
    logits_act = note("logits_bytes", A.logits_activation_bytes(s, b, vocab_padded, t, cp))
    act_first = (inflight_first * (layers * layer_act + embed_act) + single_stage * logits_act
                 + working_act)
    act_last = inflight_last * layers * layer_act + logits_act + working_act

    # ---- communication volume per GPU per step, and the bubble --------------------------------
    tp_layer = note("tp_layer_bytes", C.tp_layer_bytes(s, b, h, t, cp, x.act_bytes))
    fwd_passes = 2 if c.recompute is Recompute.FULL else 1
    tp_bytes = note("tp_bytes", C.tp_step_bytes(layers, m, tp_layer, fwd_passes))
    boundary = note("pp_boundary_bytes", C.pp_boundary_bytes(s, b, h, t, cp, x.act_bytes))
    pp_bytes = note("pp_bytes", C.pp_step_bytes(p, m, v, boundary))
    cp_layer = C.cp_layer_bytes(s, b, x.n_kv_heads, x.head_dim, t, cp, x.act_bytes)
    cp_bytes = note("cp_bytes", C.cp_step_bytes(layers, m, cp_layer))
    bubble = note("bubble_fraction", PL.bubble_fraction(p, m, v))

    # ---- FLOPs per step ---------------------------------------------------------------------
    attn_w = P.attention_weight_params(h, x.n_heads, x.n_kv_heads, x.head_dim)
    mlp_w = P.mlp_weight_params(h, x.ffn, x.n_mlp)
    active = F.matmul_weight_params_active(attn_w, mlp_w, x.top_k, h * x.router_experts)
    mm_seq = F.layer_matmul_flops(s, 1, active)  # forward, per sequence
    att_seq = F.layer_attention_flops(s, 1, x.n_heads, x.head_dim)
    head_seq = F.head_flops(s, 1, x.vocab, h)
    model_flops = note("model_flops", F.model_flops(x.gbs, s, L, mm_seq, att_seq, head_seq))
    # hardware FLOPs are what runs: a causal flash kernel skips the masked half of the square,
    # and recomputation runs (part of) the forward again
    causal_skip = 1 if c.attention is Attention.FLASH else 0
    att_run = F.layer_attention_flops(s, 1, x.n_heads, x.head_dim, causal_skip)
    shares = {Recompute.NONE: (0, 0), Recompute.SELECTIVE: (0, 1), Recompute.FULL: (1, 1)}
    hardware_flops = note("hardware_flops", F.model_flops(x.gbs, s, L, mm_seq, att_run, head_seq)
                          + F.recompute_flops(x.gbs, L, mm_seq, att_run, *shares[c.recompute])
                          + F.flash_backward_flops(x.gbs, L, att_run, causal_skip))

    # ---- time: one micro-batch on the slowest (last) stage, per GPU ----------------------------
    materialised = 1 if c.attention is Attention.CLASSIC else 0
    sp_divisor = t if c.sequence_parallel else 1
    tokens = b * s / cp
    # a profile without an SM count (n_sm = 0) leaves wave quantisation out: w = 1
    has_sm = 1 - _ops.le(x.n_sm, 0)
    wave = note("wave_efficiency", _ops.select(has_sm, T.layer_gemm_wave_efficiency(
        tokens, h, x.n_heads, x.n_kv_heads, x.head_dim, x.ffn, x.n_mlp, t,
        _ops.maximum(x.n_sm, 1), x.tile_rows, x.tile_cols, tokens * x.top_k / x.n_experts), 1))
    mm_s = note("matmul_s", T.compute_time_s(F.layer_matmul_flops(s, b, active) / (t * cp),
                                             x.peak_flops, x.gemm_eff * wave))
    att_s = note("attention_s", T.compute_time_s(
        F.layer_attention_flops(s, b, x.n_heads, x.head_dim, causal_skip) / (t * cp),
        x.peak_flops_16, x.gemm_eff_16))
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
    g = group_links(x, t, cp, p)
    tp_inside, cp_inside, dp_inside, pp_inside = g.tp.inside, g.cp.inside, g.dp.inside, g.pp.inside
    # traffic of one micro-batch, for the groups that share a link in the same window
    tp_mb_bytes = layers * (fwd_passes + 1) * tp_layer
    cp_mb_bytes = layers * cp_layer
    pp_mb_bytes = C.pp_step_bytes(p, 1, v, boundary)
    tp_share = note("tp_share", C.link_share(
        tp_mb_bytes, C.same_link(tp_inside, cp_inside) * cp_mb_bytes, 1 - _ops.le(t, 1)))
    cp_share = note("cp_share", C.link_share(
        cp_mb_bytes, C.same_link(cp_inside, tp_inside) * tp_mb_bytes
        + C.same_link(cp_inside, pp_inside) * pp_mb_bytes, 1 - _ops.le(cp, 1)))
    pp_share = note("pp_share", C.link_share(
        pp_mb_bytes, C.same_link(pp_inside, cp_inside) * cp_mb_bytes, 1 - _ops.le(p, 1)))
    # each link's busy time per micro-batch from TP, CP and PP, at their own bandwidths
    busy = [tp_mb_bytes / g.tp.bw, cp_mb_bytes / g.cp.bw, pp_mb_bytes / g.pp.bw]
    inside = [tp_inside, cp_inside, pp_inside]
    nvlink_busy_mb = sum(i * b for i, b in zip(inside, busy))
    network_busy_mb = sum((1 - i) * b for i, b in zip(inside, busy))
    # what runs beside the data-parallel collectives on their link, per micro-batch
    dp_concurrent = (C.same_link(dp_inside, pp_inside) * pp_mb_bytes
                     + C.same_link(dp_inside, cp_inside) * cp_mb_bytes)
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
    tp_bwd_exposed = T.exposed_time_s(tp_dir_s, mm_s)
    tp_layer_exposed = fwd_passes * tp_dir_s + tp_bwd_exposed
    # one layer as a per-layer benchmark sees it (Korthikanti 2022 Table 4): forward, and backward
    # with its recomputation
    layer_fwd_total = fwd_s + tp_dir_s
    layer_bwd_total = bwd_s + recompute_s + (fwd_passes - 1) * tp_dir_s + tp_bwd_exposed

    cp_layer_s = C.ring_time_s(cp_layer, g.cp.bw * cp_share, cp, g.cp.k, 3, x.fast_lat,
                               x.net_lat)
    # ring attention passes K/V while the attention products run, forward and backward; the
    # NCCL kernels slow the attention they hide under (C.overlap_slowdown_s)
    cp_window = (1 + att_bwd) * att_s
    cp_layer_exposed = (T.exposed_time_s(cp_layer_s, cp_window)
                        + C.overlap_slowdown_s(cp_layer_s, cp_window, x.overlap_slow))

    head_s = note("head_s", T.head_time_s(F.head_flops(s, b, vocab_padded, h) / (t * cp),
                                          logits_act, x.peak_flops_16, x.gemm_eff_16, x.hbm_bw,
                                          x.hbm_eff))

    pp_mb_s = C.collective_time_s(pp_mb_bytes, g.pp.bw * pp_share, 2 * (v * p - 1) / p,
                                  _ops.select(pp_inside, x.fast_lat, x.net_lat))

    compute_mb_s = note("compute_microbatch_s", layers * (fwd_s + bwd_s + recompute_s) + head_s)
    tp_mb_s = layers * tp_layer_exposed
    cp_mb_s = layers * cp_layer_exposed

    return SimpleNamespace(
        L=L, s=s, t=t, p=p, cp=cp, v=v, m=m, d_shard=d_shard, layers=layers, n_params=n_params,
        layer_sharded=layer_sharded, layer_replicated=layer_replicated, vocab_padded=vocab_padded,
        params_first=params_first, params_last=params_last, layer_act=layer_act,
        act_first=act_first, act_last=act_last, inflight_first=inflight_first,
        inflight_last=inflight_last, tp_bytes=tp_bytes, pp_bytes=pp_bytes, cp_bytes=cp_bytes,
        bubble=bubble, model_flops=model_flops, hardware_flops=hardware_flops, fwd_s=fwd_s,
        bwd_s=bwd_s, recompute_s=recompute_s, layer_fwd_total=layer_fwd_total,
        layer_bwd_total=layer_bwd_total, compute_mb_s=compute_mb_s, tp_mb_s=tp_mb_s,
        cp_mb_s=cp_mb_s, pp_mb_s=pp_mb_s, tp_inside=tp_inside,
        cp_inside=cp_inside, dp_inside=dp_inside, pp_inside=pp_inside,
        links=g, fwd_passes=fwd_passes, tp_dir_s=tp_dir_s, cp_layer_s=cp_layer_s,
        tp_mb_bytes=tp_mb_bytes, cp_mb_bytes=cp_mb_bytes, pp_mb_bytes=pp_mb_bytes,
        tp_share=tp_share, cp_share=cp_share, pp_share=pp_share,
        dp_concurrent_bytes=dp_concurrent, nvlink_busy_mb=nvlink_busy_mb,
        network_busy_mb=network_busy_mb)


def zero_costs(x, c: Choices, k: SimpleNamespace, note=_same) -> dict:
    """The half of plan_costs that depends on the ZeRO stage, on layout_costs' intermediates `k`:
    the memory of the most loaded stage, data-parallel traffic and its exposed time, the optimizer
    step, and the step time, throughput and MFU they lead to."""
    t, p, cp, v, m, d_shard, layers = k.t, k.p, k.cp, k.v, k.m, k.d_shard, k.layers
    z = int(c.zero_stage)
    # ---- memory of the most loaded stage -----------------------------------------------------
    # ZeRO-3 materialises whole layers, except on a single rank, where FSDP falls back to NO_SHARD
    prefetch = (M.zero3_prefetch_bytes(k.layer_sharded, k.layer_replicated, t, x.w_bytes)
                * (1 - _ops.le(d_shard, 1)) if c.zero_stage is ZeroStage.PARAMETERS else 0)

    def memory(psi, act):
        # the model states (weights, gradients, optimizer) are exactly ZeRO's; ZeRO-3's gathered
        # layers are transient buffers and are counted with the runtime's
        w = M.weight_bytes(psi, x.w_bytes, d_shard, z)
        g = M.gradient_bytes(psi, x.g_bytes, d_shard, z)
        o = M.optimizer_bytes(psi, MASTER_BYTES, MOMENT_BYTES, d_shard, z)
        overhead = M.runtime_overhead_bytes(x.reserved, x.frag, w + g + o + act + prefetch)
        return w, g, o, act, overhead + prefetch

    first, last = memory(k.params_first, k.act_first), memory(k.params_last, k.act_last)
    is_first = _ops.le(sum(last), sum(first))  # 1 where the first stage is the most loaded
    worst = [_ops.select(is_first, f_, l_) for f_, l_ in zip(first, last)]
    stage_params = note("stage_params", _ops.select(is_first, k.params_first, k.params_last))
    weights = note("weights_bytes", worst[0])
    grads = note("gradients_bytes", worst[1])
    optimizer = note("optimizer_bytes", worst[2])
    activations = note("activations_bytes", worst[3])
    overhead = note("overhead_bytes", worst[4])
    total_bytes = note("total_bytes", weights + grads + optimizer + activations + overhead)

    dp_bytes = note("dp_bytes", C.dp_gradient_bytes(stage_params, x.g_bytes, x.w_bytes, d_shard, m,
                                                    z))

    # ZeRO-2/3 move data every micro-batch (gradient reduce-scatter; ZeRO-3 also weight gathers),
    # overlapped with that micro-batch's compute (prefetch, bucketed reduction). Each runs as the
    # ZERO_COLLECTIVES table says, on the dp·cp group's link, sharing it with the PP and CP
    # traffic of the same micro-batch where they cross the same link
    dp, concurrent = k.links.dp, k.dp_concurrent_bytes

    def dp_time(when):
        if C.zero_ring_passes(z, when) == 0:  # the stage runs nothing at this point
            return 1, 0
        volume = C.zero_bytes(stage_params, x.g_bytes, x.w_bytes, d_shard, z, when)
        share = C.link_share(volume, concurrent, 1 - _ops.le(d_shard, 1))
        if C.zero_allreduce(z, when):
            return share, C.allreduce_time_s(
                volume * C.sharp_volume_factor(d_shard, x.sharp * (1 - k.dp_inside)),
                dp.bw_allreduce * share, d_shard, dp.k, x.fast_lat, x.net_lat)
        return share, C.ring_time_s(volume, dp.bw * share, d_shard, dp.k,
                                    C.zero_ring_passes(z, when), x.fast_lat, x.net_lat)

    mb_share, zero_mb_s = dp_time(C.When.MICRO_BATCH)
    tail_share, reduce_s = dp_time(C.When.STEP_REDUCE)
    _, gather_s = dp_time(C.When.STEP_GATHER)
    dp_share = note("dp_share", mb_share if z >= 2 else tail_share)
    zero3_mb_s = (T.exposed_time_s(zero_mb_s, k.compute_mb_s)
                  + C.overlap_slowdown_s(zero_mb_s, k.compute_mb_s, x.overlap_slow)
                  if z >= 2 else 0)
    note("dp_tail_s", reduce_s + gather_s)
    # with overlap the reduction runs under the last micro-batch's backward pass, and the gather
    # of the updated weights (after the optimizer step) under the next step's first forward pass
    # (Megatron's --overlap-grad-reduce and --overlap-param-gather, taken as set together); what
    # they hide under runs slower by the NCCL kernels beside it
    bwd_window = x.overlap * layers * (k.bwd_s + k.recompute_s)
    fwd_window = x.overlap * layers * k.fwd_s
    dp_tail_exposed = (T.exposed_time_s(reduce_s, bwd_window)
                       + C.overlap_slowdown_s(reduce_s, bwd_window, x.overlap_slow)
                       + T.exposed_time_s(gather_s, fwd_window)
                       + C.overlap_slowdown_s(gather_s, fwd_window, x.overlap_slow))

    opt_shard = d_shard if z >= 1 else 1
    optimizer_s = note("optimizer_s", T.memory_bound_time_s(
        T.optimizer_step_bytes(stage_params, x.g_bytes, x.w_bytes, opt_shard), x.hbm_bw, x.hbm_eff))

    stage_mb_s = note("stage_microbatch_s", k.compute_mb_s + k.tp_mb_s + k.cp_mb_s + k.pp_mb_s + zero3_mb_s)
    slots = PL.pipeline_slots(p, m, v)
    # the busiest link bounds the step: each link's traffic at its own bandwidth, per GPU
    g = k.links
    dp_busy = dp_bytes / dp.bw
    nvlink_busy = note("nvlink_busy_s", k.nvlink_busy_mb * m + k.dp_inside * dp_busy)
    network_busy = note("network_busy_s", k.network_busy_mb * m + (1 - k.dp_inside) * dp_busy)
    step_s = note("step_s", _ops.maximum(
        T.step_time_s(stage_mb_s, slots, dp_tail_exposed, optimizer_s),
        _ops.maximum(nvlink_busy, network_busy)))
    n_gpus = x.dp * t * p * cp

    tp_exposed = note("tp_exposed_s", m * k.tp_mb_s)
    cp_exposed = note("cp_exposed_s", m * k.cp_mb_s)
    pp_exposed = note("pp_exposed_s", m * k.pp_mb_s)
    dp_exposed = note("dp_exposed_s", m * zero3_mb_s + dp_tail_exposed)
    return dict(
        n_params=k.n_params, vocab_padded=k.vocab_padded, stage_layers=layers,
        params_first_stage=k.params_first, params_last_stage=k.params_last, stage_params=stage_params,
        is_first_stage=is_first,
        weights_bytes=weights, gradients_bytes=grads, optimizer_bytes=optimizer,
        activations_bytes=activations, overhead_bytes=overhead, total_bytes=total_bytes,
        capacity_bytes=x.capacity, layer_activation_bytes=k.layer_act,
        inflight_first=k.inflight_first, inflight_last=k.inflight_last,
        dp_bytes=dp_bytes, tp_bytes=k.tp_bytes, pp_bytes=k.pp_bytes, cp_bytes=k.cp_bytes,
        bubble_fraction=k.bubble, model_flops=k.model_flops, hardware_flops=k.hardware_flops,
        compute_s=note("compute_s", m * k.compute_mb_s), tp_exposed_s=tp_exposed,
        cp_exposed_s=cp_exposed, pp_exposed_s=pp_exposed, dp_exposed_s=dp_exposed,
        exposed_comm_s=tp_exposed + cp_exposed + pp_exposed + dp_exposed,
        bubble_s=note("bubble_s", stage_mb_s * (p - 1) / v), optimizer_s=optimizer_s,
        step_s=step_s, stage_microbatch_s=stage_mb_s, forward_layer_s=k.fwd_s,
        layer_forward_total_s=k.layer_fwd_total, layer_backward_total_s=k.layer_bwd_total,
        tokens_per_s=note("tokens_per_s", T.tokens_per_s(x.gbs, k.s, step_s)),
        mfu=note("mfu", T.mfu(k.model_flops, step_s, n_gpus, x.peak_flops)),
        hfu=T.mfu(k.hardware_flops, step_s, n_gpus, x.peak_flops),
        # which link each kind of traffic crosses: 1 = inside the NVLink domain, 0 = network
        tp_inside=k.tp_inside, cp_inside=k.cp_inside, dp_inside=k.dp_inside, pp_inside=k.pp_inside,
        # the bus bandwidth each group's collectives get, its share of the link, and how busy
        # each link is (C.link_share, C.link_utilisation)
        tp_busbw=g.tp.bw, cp_busbw=g.cp.bw, dp_busbw=dp.bw, pp_busbw=g.pp.bw,
        tp_share=k.tp_share, cp_share=k.cp_share, dp_share=dp_share, pp_share=k.pp_share,
        tp_ranks_per_domain=g.tp.r, cp_ranks_per_domain=g.cp.r, dp_ranks_per_domain=dp.r,
        nvlink_busy_s=nvlink_busy, network_busy_s=network_busy,
        nvlink_utilisation=C.link_utilisation(nvlink_busy, step_s),
        network_utilisation=C.link_utilisation(network_busy, step_s),
    )
