"""The step: its time (the schedule's, the data-parallel tail and the optimizer, bounded below by
the busiest link), and what plan_costs reports — exposed times, throughput, MFU, the links'
bandwidths, shares and utilisation (formulas/timing.py, formulas/comm.py)."""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import _ops
from ..formulas import comm as C
from ..formulas import offload as OF
from ..formulas import reliability as R
from ..formulas import timing as T
from .numbers import Choices, same


def link_busy_s(x, c: Choices, k: SimpleNamespace, dp: SimpleNamespace, note=same):
    """The seconds per step each link (NVLink, network) is busy, per GPU: each kind of traffic
    at its own bandwidth (a MoE model's expert shards on their edp group's link, which may
    leave the node on fewer NICs than the dp group's)."""
    dp_busy = (dp.dp_bytes - dp.replica_bytes - dp.expert_bytes) / k.links.dp.bw
    nvlink_busy = k.nvlink_busy_mb * k.m + k.dp_inside * dp_busy
    network_busy = k.network_busy_mb * k.m + (1 - k.dp_inside) * dp_busy
    if dp.edp_link is not None:
        expert_busy = dp.expert_bytes / dp.edp_link.bw
        nvlink_busy = nvlink_busy + dp.edp_link.inside * expert_busy
        network_busy = network_busy + (1 - dp.edp_link.inside) * expert_busy
    if dp.hybrid:  # the cross-replica all-reduce on the replica group's link
        replica_busy = dp.replica_bytes / k.links.replica.bw
        nvlink_busy = nvlink_busy + k.links.replica.inside * replica_busy
        network_busy = network_busy + (1 - k.links.replica.inside) * replica_busy
    return note("nvlink_busy_s", nvlink_busy), note("network_busy_s", network_busy)


def step_time(x, c: Choices, k: SimpleNamespace, dp: SimpleNamespace, opt: SimpleNamespace,
              sched: SimpleNamespace, note=same) -> SimpleNamespace:
    """The step time: the schedule's slots of the stage's micro-batch, the exposed data-parallel
    tail, the optimizer step and the wait for the slowest GPU; no less than the busiest link's
    time."""
    nvlink_busy, network_busy = link_busy_s(x, c, k, dp, note)
    # stragglers: every rank waits for the slowest of the job's N at the step's synchronisation
    # (the DP reduction, or the pipeline's flush); the schedule's slots run at the slowest
    # stage's compute, so the spread scales slots · its compute per micro-batch
    straggler = note("straggler_s", R.straggler_s(sched.slots * k.compute_mb_s,
                                                   x.dp * k.t * k.p * k.cp, x.speed_cv))
    link_floor = _ops.maximum(nvlink_busy, network_busy)
    if c.offload:  # offload: the host copies share the GPU's host link with its NIC's traffic
        link_floor = _ops.maximum(link_floor, note("host_link_busy_s", OF.host_link_busy_s(
            opt.offload.d2h_bytes, opt.offload.h2d_bytes, x.host_bw, x.dram_bw, network_busy,
            x.net_bw, x.nic_on_host_link)))
    step_s = note("step_s", _ops.maximum(
        T.step_time_s(sched.stage_mb_s, sched.slots, dp.dp_tail_exposed,
                      opt.optimizer_s + opt.offload.step_s) + straggler,
        link_floor))
    return SimpleNamespace(step_s=step_s, nvlink_busy=nvlink_busy, network_busy=network_busy,
                           straggler_s=straggler)


def exposed_times(x, c: Choices, k: SimpleNamespace, dp: SimpleNamespace,
                  note=same) -> SimpleNamespace:
    """Each parallelism's exposed time per step."""
    m = k.m
    tp = note("tp_exposed_s", m * k.tp_mb_s)
    cp = note("cp_exposed_s", m * k.cp_mb_s)
    pp = note("pp_exposed_s", m * k.pp_mb_s)
    dp_ = note("dp_exposed_s", m * dp.zero3_mb_s + dp.dp_tail_exposed)
    ep = m * k.ep_mb_s  # moe
    if dp.moe:
        ep = note("ep_exposed_s", ep)
    return SimpleNamespace(tp=tp, cp=cp, pp=pp, dp=dp_, ep=ep)


def reported(x, c: Choices, k: SimpleNamespace, mem, dp, opt, sched, step, note=same) -> dict:
    """Every quantity plan_costs reports, by name."""
    m, g, step_s, offload = k.m, k.links, step.step_s, opt.offload
    n_gpus = x.dp * k.t * k.p * k.cp
    ex = exposed_times(x, c, k, dp, note)
    return dict(
        n_params=k.n_params, vocab_padded=k.vocab_padded, stage_layers=k.layers,
        params_first_stage=k.params_first, params_last_stage=k.params_last,
        stage_params=mem.stage_params, is_first_stage=mem.is_first,
        # the most loaded GPU's pipeline rank, its kind (0 first, 1 last, 2 middle) and the
        # micro-batches it holds in flight at its peak
        peak_rank=mem.rank, peak_stage=mem.kind, inflight_peak=mem.inflight,
        weights_bytes=mem.weights, gradients_bytes=mem.grads, optimizer_bytes=mem.optimizer,
        activations_bytes=mem.activations, overhead_bytes=mem.overhead,
        total_bytes=mem.total_bytes, capacity_bytes=x.capacity, layer_activation_bytes=k.layer_act,
        allocated_bytes=mem.allocated_bytes, reserved_bytes=mem.reserved_bytes,
        inflight_first=k.inflight_first, inflight_last=k.inflight_last,
        dp_bytes=dp.dp_bytes, tp_bytes=k.tp_bytes, pp_bytes=k.pp_bytes, cp_bytes=k.cp_bytes,
        bubble_fraction=sched.bubble, model_flops=k.model_flops, hardware_flops=k.hardware_flops,
        compute_s=note("compute_s", m * k.compute_mb_s), tp_exposed_s=ex.tp,
        cp_exposed_s=ex.cp, pp_exposed_s=ex.pp, dp_exposed_s=ex.dp,
        exposed_comm_s=ex.tp + ex.cp + ex.pp + ex.dp + ex.ep,
        bubble_s=note("bubble_s", sched.stage_mb_s * (sched.slots - m)),
        optimizer_s=opt.optimizer_s, step_s=step_s, stage_microbatch_s=sched.stage_mb_s,
        straggler_s=step.straggler_s,
        forward_layer_s=k.fwd_s, layer_forward_total_s=k.layer_fwd_total,
        layer_backward_total_s=k.layer_bwd_total,
        tokens_per_s=note("tokens_per_s", T.tokens_per_s(x.gbs, k.s, step_s)),
        mfu=note("mfu", T.mfu(k.model_flops, step_s, n_gpus, x.peak_flops)),
        hfu=T.mfu(k.hardware_flops, step_s, n_gpus, x.peak_flops),
        model_flops_causal=k.model_flops_causal,
        mfu_causal=note("mfu_causal", T.mfu(k.model_flops_causal, step_s, n_gpus, x.peak_flops)),
        # which link each kind of traffic crosses: 1 = inside the NVLink domain, 0 = network
        tp_inside=k.tp_inside, cp_inside=k.cp_inside, dp_inside=k.dp_inside, pp_inside=k.pp_inside,
        # moe: expert parallelism's traffic, exposed time and link; expert parameters per GPU
        ep_bytes=k.ep_bytes, ep_exposed_s=ex.ep, ep_inside=k.ep_inside, moe_load=k.lam,
        expert_stage_params=mem.stage_experts,
        # the bus bandwidth each group's collectives get, its share of the link, and how busy
        # each link is (C.link_share, C.link_utilisation)
        tp_busbw=g.tp.bw, cp_busbw=g.cp.bw, dp_busbw=g.dp.bw, pp_busbw=g.pp.bw,
        tp_share=k.tp_share, cp_share=k.cp_share, dp_share=dp.dp_share, pp_share=k.pp_share,
        tp_ranks_per_domain=g.tp.r, cp_ranks_per_domain=g.cp.r, dp_ranks_per_domain=g.dp.r,
        nvlink_busy_s=step.nvlink_busy, network_busy_s=step.network_busy,
        nvlink_utilisation=C.link_utilisation(step.nvlink_busy, step_s),
        network_utilisation=C.link_utilisation(step.network_busy, step_s),
        # offload: host memory per GPU and what it can take; the step's exposed offload time
        host_bytes=mem.host_bytes, host_capacity_bytes=x.host_capacity if c.offload else 0,
        offload_s=(note("offload_s", offload.step_s + m * offload.mb_s) if c.offload else 0),
        offload_d2h_bytes=offload.d2h_bytes, offload_h2d_bytes=offload.h2d_bytes,
    )
