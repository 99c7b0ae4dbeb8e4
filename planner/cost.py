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
from .frameworks import FRAMEWORKS
from .frameworks.base import ActivationStyle, Framework, LossKind
from .schema import HardwareProfile, ModelSpec, PlanConfig

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
        hbm_bw=hw.hbm_bytes_per_s, hbm_eff=hw.efficiency.hbm, domain=hw.gpus_per_domain,
        fast_bw=hw.fast.busbw_bytes_per_s, fast_lat=hw.fast.latency_s,
        net_bw=hw.network.busbw_bytes_per_s, net_lat=hw.network.latency_s,
        kernel_s=hw.efficiency.kernel_overhead_us * 1e-6,
        n_sm=hw.sm_count or 0, tile_rows=hw.gemm_tile[0], tile_cols=hw.gemm_tile[1],
        reserved=hw.runtime.reserved_gib * 2**30, frag=hw.runtime.fragmentation_fraction,
        capacity=hw.capacity_bytes,
    )


def config_numbers(config: PlanConfig) -> dict:
    """A plan's numeric degrees and sizes."""
    return dict(
        dp=config.dp, tp=config.tp, pp=config.pp, cp=config.cp, vpp=config.vpp, mbs=config.mbs,
        n_micro=config.n_micro, gbs=config.gbs, seq_len=config.seq_len,
        **dtype_numbers(FRAMEWORKS[config.framework], config.grad_dtype),
        overlap=int(config.overlap_grad_reduce), fp8=int(config.precision is Precision.FP8),
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
    # the fullest GPU's layers: ⌈L/p⌉ where the framework places layers freely (Megatron's
    # pipeline layout), v·⌈L/(p·v)⌉ where each of its v chunks is cut the same
    layers = note("stage_layers", P.layers_per_gpu(L, p) if c.framework.stage_split == "flexible"
                  else P.layers_per_stage(L, p, v))

    # ---- parameters -------------------------------------------------------------------------
    n_params = note("n_params", P.model_params(
        L, h, x.n_heads, x.n_kv_heads, x.head_dim, x.ffn, x.n_mlp, x.bias, x.norm_width, x.vocab,
        x.positions, x.learned_positions, x.tied, x.n_experts, x.router_experts))
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

    params_first = note("params_first_stage", stage(1, both_ends))
    params_last = note("params_last_stage", stage(0, single_stage))

    # ---- activations, as the plan's framework saves them -------------------------------------
    # a token's MLP activations are kept in each of the top-k experts it is routed to
    routed_ffn = x.ffn * x.top_k
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

    # under an fp8 recipe Transformer Engine keeps linear layers' inputs in 1 byte, not 2
    fp8_saving = (x.fp8 * conv.fp8_saves_linear_inputs * (x.act_bytes - 1)
                  * A.fp8_linear_input_bytes(s, b, h, x.n_heads, x.head_dim, routed_ffn, t, cp,
                                             c.sequence_parallel)
                  if c.recompute is not Recompute.FULL else 0)
    layer_act = note("layer_activation_bytes", saved(c.recompute) - fp8_saving)
    # under full recompute, the layer being recomputed holds all its activations for a moment
    working_act = saved(Recompute.NONE) if c.recompute is Recompute.FULL else 0
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
                 + working_act)
    act_last = inflight_last * layers * layer_act + loss_act + working_act

    # ---- communication volume per GPU per step, and the bubble --------------------------------
    tp_layer = note("tp_layer_bytes", C.tp_layer_bytes(s, b, h, t, cp, x.act_bytes))
    fwd_passes = 2 if c.recompute is Recompute.FULL else 1
    tp_bytes = note("tp_bytes", C.tp_step_bytes(layers, m, tp_layer, fwd_passes))
    boundary = note("pp_boundary_bytes", C.pp_boundary_bytes(s, b, h, t, cp, x.act_bytes))
    pp_bytes = note("pp_bytes", C.pp_step_bytes(p, m, v, boundary))
    cp_layer = C.cp_layer_bytes(s, b, x.n_kv_heads, x.head_dim, t, cp, x.act_bytes)
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
    model_flops = note("model_flops", F.model_flops(x.gbs, s, L, mm_seq, att_seq, head_seq))
    # the same under the causal convention (the unmasked half of the square, as Megatron-Core logs)
    att_causal = F.layer_attention_flops(s, 1, x.n_heads, x.head_dim, F.MFU_CONVENTIONS["causal"])
    model_flops_causal = note("model_flops_causal",
                              F.model_flops(x.gbs, s, L, mm_seq, att_causal, head_seq))
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

    tp_inside = C.inside_domain(t, x.domain)
    tp_bw = C.on_link(tp_inside, x.fast_bw, x.net_bw)
    tp_lat = C.on_link(tp_inside, x.fast_lat, x.net_lat)
    tp_dir_s = note("tp_layer_s", C.collective_time_s(tp_layer, tp_bw, 4 * (t - 1), tp_lat))
    # forward all-reduces sit on the critical path; the backward's overlap the weight-gradient
    # GEMMs (Megatron's asynchronous TP all-reduce), which take as long as the forward matmuls
    tp_bwd_exposed = T.exposed_time_s(tp_dir_s, mm_s)
    tp_layer_exposed = fwd_passes * tp_dir_s + tp_bwd_exposed
    # one layer as a per-layer benchmark sees it (Korthikanti 2022 Table 4): forward, and backward
    # with its recomputation
    layer_fwd_total = fwd_s + tp_dir_s
    layer_bwd_total = bwd_s + recompute_s + (fwd_passes - 1) * tp_dir_s + tp_bwd_exposed

    cp_inside = C.inside_domain(t * cp, x.domain)
    cp_bw = C.on_link(cp_inside, x.fast_bw, x.net_bw)
    cp_lat = C.on_link(cp_inside, x.fast_lat, x.net_lat)
    cp_layer_s = C.collective_time_s(cp_layer, cp_bw, 3 * (cp - 1), cp_lat)
    # ring attention passes K/V while the attention products run, forward and backward
    cp_layer_exposed = T.exposed_time_s(cp_layer_s, (1 + att_bwd) * att_s)

    head_s = note("head_s", T.head_time_s(F.head_flops(s, b, vocab_padded, h) / (t * cp),
                                          logits_act, x.peak_flops_16, x.gemm_eff_16, x.hbm_bw,
                                          x.hbm_eff))

    pp_span = C.pp_neighbour_span(t, cp, x.dp)
    pp_inside = C.inside_domain(pp_span, x.domain)
    pp_bw = C.on_link(pp_inside, x.fast_bw, x.net_bw)
    pp_lat = C.on_link(pp_inside, x.fast_lat, x.net_lat)
    pp_mb_s = C.collective_time_s(C.pp_step_bytes(p, 1, v, boundary), pp_bw, 2 * (v * p - 1) / p,
                                  pp_lat)

    compute_mb_s = note("compute_microbatch_s", layers * (fwd_s + bwd_s + recompute_s) + head_s)
    tp_mb_s = layers * tp_layer_exposed
    cp_mb_s = layers * cp_layer_exposed
    # the split-backward schedules' W (Qi et al. 2024 §2): the weight-gradient GEMMs, which run the
    # forward matmuls' FLOPs; F is the forward with its TP all-reduces, B the rest of the stage
    wgrad_mb_s = note("wgrad_microbatch_s", layers * mm_s)
    fwd_mb_s = note("forward_microbatch_s", layers * layer_fwd_total)

    dp_span = C.dp_group_span(t, cp, x.dp)
    dp_inside = C.inside_domain(dp_span, x.domain)
    dp_bw = C.on_link(dp_inside, x.fast_bw, x.net_bw)
    dp_lat = C.on_link(dp_inside, x.fast_lat, x.net_lat)
    return SimpleNamespace(
        L=L, s=s, t=t, p=p, cp=cp, v=v, m=m, d_shard=d_shard, layers=layers, n_params=n_params,
        layer_sharded=layer_sharded, layer_replicated=layer_replicated, vocab_padded=vocab_padded,
        params_first=params_first, params_last=params_last, layer_act=layer_act,
        act_first=act_first, act_last=act_last, inflight_first=inflight_first,
        inflight_last=inflight_last, tp_bytes=tp_bytes, pp_bytes=pp_bytes, cp_bytes=cp_bytes,
        model_flops=model_flops, hardware_flops=hardware_flops, fwd_s=fwd_s,
        model_flops_causal=model_flops_causal,
        bwd_s=bwd_s, recompute_s=recompute_s, layer_fwd_total=layer_fwd_total,
        layer_bwd_total=layer_bwd_total, compute_mb_s=compute_mb_s, tp_mb_s=tp_mb_s,
        cp_mb_s=cp_mb_s, pp_mb_s=pp_mb_s, dp_bw=dp_bw, dp_lat=dp_lat, tp_inside=tp_inside,
        cp_inside=cp_inside, dp_inside=dp_inside, pp_inside=pp_inside,
        param_copies=param_copies, wgrad_mb_s=wgrad_mb_s, fwd_mb_s=fwd_mb_s)


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

    def memory(psi, act, ends):
        # the model states (weights, gradients, optimizer) as the framework keeps them; DualPipe
        # holds two copies of its stages (DeepSeek-V3 report, Table 2)
        psi = psi * k.param_copies
        w = M.state_bytes(psi, states.weight_bytes, d_shard, states.weight_sharded)
        g = M.state_bytes(psi, states.grad_bytes, d_shard, states.grad_sharded)
        o = M.state_bytes(psi, states.optimizer_bytes, d_shard, states.optimizer_sharded)
        held = buffers(psi, ends)
        allocated = w + g + o + act + held
        frag = x.frag if conv.fragmentation is None else conv.fragmentation
        # the allocator's slack is on what the step allocates and frees, not on the model
        # states, which sit in buffers allocated once
        slack = frag * (act + held)
        overhead = M.runtime_overhead_bytes(x.reserved, frag, act + held)
        return w, g, o, act, overhead + held, allocated, allocated + slack

    first_ends = _ops.select(_ops.maximum(single_stage, PL.ends_on_first_gpu(c.schedule)),
                             2 - x.tied, 1)
    first = memory(k.params_first, k.act_first, first_ends)
    last = memory(k.params_last, k.act_last, first_ends)
    is_first = _ops.le(sum(last[:5]), sum(first[:5]))  # 1 where the first stage is the most loaded
    worst = [_ops.select(is_first, f_, l_) for f_, l_ in zip(first, last)]
    stage_params = note("stage_params", _ops.select(is_first, k.params_first, k.params_last))
    weights = note("weights_bytes", worst[0])
    grads = note("gradients_bytes", worst[1])
    optimizer = note("optimizer_bytes", worst[2])
    activations = note("activations_bytes", worst[3])
    overhead = note("overhead_bytes", worst[4])
    total_bytes = note("total_bytes", weights + grads + optimizer + activations + overhead)
    allocated_bytes, reserved_bytes = worst[5], worst[6]

    dp_bytes = note("dp_bytes", C.dp_gradient_bytes(stage_params, x.g_bytes, x.w_bytes, d_shard, m,
                                                    z))

    # ZeRO-2/3 move data every micro-batch (gradient reduce-scatter; ZeRO-3 also weight gathers),
    # overlapped with that micro-batch's compute (prefetch, bucketed reduction)
    ring_steps = d_shard - 1
    zero_mb_bytes = C.zero_microbatch_bytes(stage_params, x.g_bytes, x.w_bytes, d_shard, z)
    zero_mb_s = (C.collective_time_s(zero_mb_bytes, k.dp_bw,
                                     C.ZERO_MICROBATCH_RING_PASSES[z] * ring_steps, k.dp_lat)
                 if z >= 2 else 0)
    zero3_mb_s = T.exposed_time_s(zero_mb_s, k.compute_mb_s) if z >= 2 else 0
    reduce_passes, gather_passes = C.ZERO_STEP_RING_PASSES[z]
    reduce_s = note("dp_reduce_s", C.collective_time_s(C.zero_step_reduce_bytes(
        stage_params, x.g_bytes, x.w_bytes, d_shard, z), k.dp_bw, reduce_passes * ring_steps,
        k.dp_lat))
    gather_s = note("dp_gather_s", C.collective_time_s(C.zero_step_gather_bytes(
        stage_params, x.g_bytes, x.w_bytes, d_shard, z), k.dp_bw, gather_passes * ring_steps,
        k.dp_lat))
    note("dp_tail_s", reduce_s + gather_s)
    # with overlap the reduction runs under the last micro-batch's backward pass, and the gather
    # of the updated weights (after the optimizer step) under the next step's first forward pass
    # (Megatron's --overlap-grad-reduce and --overlap-param-gather, taken as set together)
    dp_tail_exposed = note("dp_tail_exposed_s", (
        T.exposed_time_s(reduce_s, x.overlap * layers * (k.bwd_s + k.recompute_s))
        + T.exposed_time_s(gather_s, x.overlap * layers * k.fwd_s)))

    opt_shard = d_shard if z >= 1 else 1
    optimizer_s = note("optimizer_s", T.memory_bound_time_s(
        T.optimizer_step_bytes(stage_params, x.g_bytes, x.w_bytes, opt_shard), x.hbm_bw, x.hbm_eff))

    stage_mb_s = note("stage_microbatch_s", k.compute_mb_s + k.tp_mb_s + k.cp_mb_s + k.pp_mb_s + zero3_mb_s)
    bgrad_mb_s = stage_mb_s - k.fwd_mb_s - k.wgrad_mb_s  # B: the backward less its W
    times = (c.schedule, k.fwd_mb_s, bgrad_mb_s, k.wgrad_mb_s)
    bubble = note("bubble_fraction", PL.bubble_fraction(p, m, v, *times))
    slots = PL.pipeline_slots(p, m, v, *times)
    step_s = note("step_s", T.step_time_s(stage_mb_s, slots, dp_tail_exposed, optimizer_s))
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
        allocated_bytes=allocated_bytes, reserved_bytes=reserved_bytes,
        inflight_first=k.inflight_first, inflight_last=k.inflight_last,
        dp_bytes=dp_bytes, tp_bytes=k.tp_bytes, pp_bytes=k.pp_bytes, cp_bytes=k.cp_bytes,
        bubble_fraction=bubble, model_flops=k.model_flops, hardware_flops=k.hardware_flops,
        compute_s=note("compute_s", m * k.compute_mb_s), tp_exposed_s=tp_exposed,
        cp_exposed_s=cp_exposed, pp_exposed_s=pp_exposed, dp_exposed_s=dp_exposed,
        exposed_comm_s=tp_exposed + cp_exposed + pp_exposed + dp_exposed,
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
    )
