"""The cost model of one plan, composed from the formulas — written once, for every backend.

`plan_costs(x, c)` takes the plan's numbers `x` (floats for one plan, float64 arrays for the
search, sympy symbols for `explain`) and its discrete choices `c`, and returns every quantity the
planner reports, by name. estimate.py, search.py and explain.py are thin adapters over it, so the
three can never disagree.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..formulas import _ops
from ..formulas import comm as C
from ..formulas import memory as M
from ..formulas import moe as MO
from ..formulas import offload as OF
from ..formulas import pipeline as PL
from ..formulas import timing as T
from .activations import activations
from .collectives import expert_all_to_all, link_shares, tensor_and_context_times
from .flops import flops
from .layer_time import layer_times
from .links import collective_group, dp_replicate_of
from .microbatch import microbatch_times
from .numbers import Choices, any_row, merged, numbers, same
from .offload import offload_states, offload_times
from .parameters import parameters, stage_layout
from .volumes import volumes

__all__ = ["Choices", "numbers", "plan_costs", "layout_costs", "zero_costs"]


def plan_costs(x, c: Choices, note=same) -> dict:
    """Every reported quantity of a plan. `x` holds numbers (any backend), `c` the choices.

    `note(name, value)` is called on each named intermediate (see TERMS) and its return value is
    used downstream: the identity for numbers; `explain` records the expression and hands back a
    symbol, so that every term's formula is shown in terms of the terms before it.

    Composed of two halves, so that the search can share the first among the ZeRO stages:
    layout_costs (what the ZeRO stage does not change) and zero_costs (what it does)."""
    return zero_costs(x, c, layout_costs(x, c, note), note)


def layout_costs(x, c: Choices, note=same) -> SimpleNamespace:
    """The half of plan_costs that the ZeRO stage does not change (c.zero_stage is not read):
    parameters, activations, communication volumes, FLOPs, the layer times, the links and the
    collectives' times. Returns every intermediate, by its name, for zero_costs."""
    k = stage_layout(x, c, note)  # the degrees and the fullest GPU's layers
    for concern in (parameters, activations, volumes, flops, layer_times, link_shares,
                    tensor_and_context_times, expert_all_to_all, microbatch_times):
        k = merged(k, concern(x, c, k, note))
    return k


def zero_costs(x, c: Choices, k: SimpleNamespace, note=same) -> dict:
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
    moe = any_row(x.moe)

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
        edp_group = collective_group(x, edp, x.ep * x.etp, k.links.domain)
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
