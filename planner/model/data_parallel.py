"""Data parallelism under the ZeRO stage: the gradient (and ZeRO-3 weight) traffic per step, each
collective's time on the dp·cp group's link beside the PP and CP traffic of the same micro-batch,
hybrid sharding's cross-replica all-reduce, the expert shards' collectives over their own group,
and what of it the backward and the next forward hide (formulas/comm.py, formulas/timing.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..formulas import _ops
from ..formulas import collectives as K
from ..formulas import comm as C
from ..formulas import moe as MO
from ..formulas import overlap as O
from . import moe as MOE
from .links import collective_group, dp_replicate_of
from .nccl import Call, nccl_s, tuned, tuner_link
from .numbers import Choices, any_row, same


def dp_traffic(x, c: Choices, k: SimpleNamespace, mem: SimpleNamespace,
               note=same) -> SimpleNamespace:
    """The data-parallel bytes per GPU per step, and what the collectives run over."""
    p, m, d_shard, z = k.p, k.m, k.d_shard, int(c.zero_stage)
    moe = any_row(x.moe)
    # ZeRO-2/3 collectives run every micro-batch, except where the framework keeps a pipelined
    # stage gathered and its gradients unsharded until the last micro-batch (torchtitan's FSDP2
    # under PP): then once per step
    zero_rounds = (_ops.select(_ops.le(p, 1), m, 1)
                   if z >= 2 and c.framework.fsdp_once_per_step_under_pp else m)
    # what the GPU reduces, gathers and steps: its stages' parameters, twice under DualPipe
    held_params = mem.stage_params * k.param_copies
    held_experts = mem.stage_experts * k.param_copies if moe else 0
    # moe: expert states are sharded over the expert-data-parallel group edp = d·c·t/(ep·etp)
    edp = MO.expert_data_parallel(x.dp, k.cp, k.t, x.ep, x.etp)
    # hybrid sharding: each gradient reduce-scatter in the shard group is followed by the
    # all-reduce of the shard across the replicas (C.hsdp_replica_bytes), on its own link
    replicas, hybrid = dp_replicate_of(x)
    replica_bytes = (C.hsdp_replica_step_bytes(held_params, x.g_bytes, d_shard, replicas,
                                               zero_rounds, z) if hybrid else 0)
    dp_bytes = (C.dp_gradient_bytes(held_params, x.g_bytes, x.w_bytes, d_shard, zero_rounds, z)
                - zero3_kept_bytes(x, c, k, held_params, d_shard, zero_rounds) + replica_bytes)
    expert_bytes, edp_link = 0, None
    if moe:  # moe: the experts' gradients are reduced (and their weights gathered) over edp,
        # whose ranks sit ep·etp apart (Megatron's expert rank order etp-ep-edp): with ep·etp
        # filling a node, each node holds one edp rank and the group leaves it on one rank's NICs
        expert_bytes = C.dp_gradient_bytes(held_experts, x.g_bytes, x.w_bytes, edp, zero_rounds,
                                           z) - zero3_kept_bytes(x, c, k, held_experts, edp,
                                                                 zero_rounds)
        dp_bytes = dp_bytes + expert_bytes
        edp_link = collective_group(x, edp, x.ep * x.etp, k.links.domain)
    return SimpleNamespace(moe=moe, zero_rounds=zero_rounds, held_params=held_params,
                           held_experts=held_experts, edp=edp, replicas=replicas, hybrid=hybrid,
                           replica_bytes=replica_bytes, dp_bytes=note("dp_bytes", dp_bytes),
                           expert_bytes=expert_bytes, edp_link=edp_link)


def stage_modules(x, k: SimpleNamespace):
    """The stage's modules with gathered parameters: its layers' linear ones (attention's q, k,
    v, o and the MLP's matrices), the embedding and the output layer."""
    return k.layers * (4 + x.n_mlp) + 2


def zero3_kept_bytes(x, c: Choices, k: SimpleNamespace, params, ranks, rounds):
    """The backward gathers a framework does not issue, out of ZeRO-3's two per micro-batch:
    m·(d − 1)/d·w·(Ψ − Ψ_b), Ψ_b its backward's parameters (Framework.zero3_gathers: DeepSpeed
    keeps the forward's last R/2 elements gathered); 0 for one that gathers everything twice."""
    gathers = c.framework.zero3_gathers
    if int(c.zero_stage) != 3 or gathers is None:
        return 0
    _, (_, backward) = gathers(params, stage_modules(x, k))
    return rounds * C.ring_gather_bytes(ranks, x.w_bytes * (params - backward))


NCCL_COLL = {C.Collective.ALL_REDUCE: K.Coll.ALL_REDUCE,
             C.Collective.REDUCE_SCATTER: K.Coll.REDUCE_SCATTER,
             C.Collective.ALL_GATHER: K.Coll.ALL_GATHER}


def nccl_collectives_s(x, coll, buffer_bytes, calls, ranks, group, share, may_be_none=False):
    """`calls` collectives of buffer/calls bytes each over the group, each as NCCL's tuner
    picks and prices it (formulas/collectives.py) on the group's tuner_link at its share of the
    link: every call pays its own latency, and a small one may run LL or the tree. The node's
    network (NVLS-tree, CollNet) counts only the NICs of the group's own ranks
    (K.group_net_busbw, through tuner_link: 8 one-rank DP groups of a tp = 8 plan each get an
    eighth). `may_be_none`: `calls` may be 0 (DeepSpeed's backward, when it keeps a small
    model gathered), each call's bytes then taken over max(1, calls). Returns (seconds, the
    ledger entry explain prices again: nccl.Call)."""
    link = tuner_link(x, group, share)
    per_call = buffer_bytes / (_ops.maximum(calls, 1) if may_be_none else calls)
    one = nccl_s(NCCL_COLL[coll], per_call, ranks, link)
    return K.many_collectives_s(calls, one), Call(NCCL_COLL[coll], per_call, calls, ranks, link)


def zero_collective_s(x, c: Choices, k: SimpleNamespace, when, params, ranks, group, concurrent,
                      rounds, experts=False):
    """(share of the link, seconds, ledger, the forward's share of the seconds, the calls of the
    first collective and of the last, the seconds of the last) of the ZeRO collectives that run
    at `when`
    (ZERO_COLLECTIVES) over `ranks` ranks of `group`, for `params` parameters, beside
    `concurrent` bytes: each as many calls as the framework issues (ZeRO-3's per-layer or
    per-module gathers, buckets). The ledger names each collective for explain, with its calls
    per step (× `rounds`, the rounds per step, for a per-micro-batch one). Under ZeRO-3 the first
    collective is the forward's gather; the others run in the backward. A framework whose
    ZeRO-3 gathers differ between the passes (Framework.zero3_gathers: DeepSpeed's prefetch
    trace) gives each its calls and parameters, named apart."""
    z = int(c.zero_stage)
    if C.zero_ring_passes(z, when) == 0:  # the stage runs nothing at this point
        return 1, 0, [], 0, 1, 1, 0
    volume = C.zero_bytes(params, x.g_bytes, x.w_bytes, ranks, z, when)
    # a stage with nothing to move (one rank; a stage without MoE layers' experts) sends
    # nothing, so its share is 1, not 0/0
    sends = (1 - _ops.le(ranks, 1)) * (1 - _ops.le(params, 0) if experts else 1)
    share = C.link_share(volume, concurrent, sends)
    per_param = {"grad": x.g_bytes, "weight": x.w_bytes}
    per_layer = int(z == 3 and when is C.When.MICRO_BATCH)
    rounds = rounds if when is C.When.MICRO_BATCH else 1
    # linear modules per layer: attention's q, k, v, o and the MLP's matrices
    linear = 4 + x.n_mlp
    gathers = c.framework.zero3_gathers
    passes = (iter(gathers(params, stage_modules(x, k)))
              if per_layer and gathers is not None else None)
    total, ledger, times, counts = 0, [], [], []
    for coll, buf, w in C.ZERO_COLLECTIVES[z]:
        if w is when:
            moved, name, traced = params, f"{'EP-DP' if experts else 'DP'} {coll.label}", False
            if passes is not None and buf == "weight":
                traced = True
                calls, moved = next(passes)
                name = f"{name} {'fwd' if not times else 'bwd'}"
            else:
                calls = c.framework.dp_calls(per_layer, buf, k.layers, params, ranks, x.overlap,
                                             linear, k.v)
            t, call = nccl_collectives_s(x, coll, per_param[buf] * moved, calls, ranks, group,
                                         share, may_be_none=traced)
            total = total + t
            times.append(t)
            counts.append(calls)
            if ledger and ledger[-1].name == name:  # ZeRO-3: the backward's gathers again
                call, calls = ledger.pop(), 2 * calls
            ledger.append(call.named(name, calls * rounds))
    forward = times[0] if per_layer else 0
    return share, total, ledger, forward, counts[0], counts[-1], times[-1]


def replica_allreduce_s(x, z: int, when, k: SimpleNamespace, dp: SimpleNamespace):
    """HSDP: the shard's all-reduce across the replicas after each reduce-scatter at `when`."""
    replica = k.links.replica
    if C.hsdp_replica_rounds(z, when) == 0:
        return 0
    volume = C.hsdp_replica_bytes(dp.held_params, x.g_bytes, k.d_shard, dp.replicas, z, when)
    return C.allreduce_time_s(
        volume * C.sharp_volume_factor(dp.replicas, x.sharp * (1 - replica.inside)),
        replica.bw_allreduce, dp.replicas, replica.k, x.fast_lat, x.net_lat)


def dp_collective_times(x, c: Choices, k: SimpleNamespace, dp: SimpleNamespace):
    """ZeRO-2/3 move data every micro-batch (gradient reduce-scatter; ZeRO-3 also weight
    gathers), overlapped with that micro-batch's compute (prefetch, bucketed reduction). Each
    runs as the ZERO_COLLECTIVES table says, on the dp·cp group's link, sharing it with the PP and
    CP traffic of the same micro-batch where they cross the same link. Returns the shares, the
    seconds of each phase (the micro-batch's forward and backward collectives, the step's
    reduction and gather), the calls the framework issues in each, and the ledger."""
    # the tuner's share-free part of each group's link once, for its collectives' phases
    z, group, concurrent = int(c.zero_stage), tuned(x, k.links.dp), k.dp_concurrent_bytes
    ledger = []
    # moe: each phase's (own seconds alone on the link, exposed exchange seconds beside it) per
    # group, for the exchange's delay (dp_times, comm.flow_delay_s)
    beside = {"fwd": [], "bwd": [], C.When.STEP_REDUCE: [], C.When.STEP_GATHER: []}
    on_link = {}  # moe: the exchange's bytes on each group's link, once for its three phases

    def dp_time(when, params=dp.held_params, ranks=k.d_shard, on=group, experts=False):
        # moe: the expert exchange beside it where the schedule runs them together: its
        # hidden part shares the compute's window with the collective, its exposed part (which
        # lengthens the window by its own time) is delayed by it (MOE.beside_dp_bytes)
        if k.moe_model and experts not in on_link:
            on_link[experts] = MOE.exchange_on_link(k, on.inside)
        flow = (MOE.beside_dp_bytes(x, k, when, on.inside, on_link[experts]) if k.moe_model
                else 0)
        hidden = k.ep_hidden if k.moe_model else 0
        share, t, calls, fwd, first, last, last_s = zero_collective_s(
            x, c, k, when, params, ranks, on, concurrent + hidden * flow, dp.zero_rounds,
            experts=experts)
        if k.moe_model:
            f_s, b_s = MOE.exposed_beside_s(x, k, when, on.inside, on_link[experts])
            keep = _ops.select(x.moe, 1, 0) if experts else 1
            if when is C.When.MICRO_BATCH:
                beside["fwd"].append((keep * share * fwd, f_s))
                beside["bwd"].append((keep * share * (t - fwd), b_s))
            else:
                beside[when].append((keep * share * t, f_s + b_s))
        ledger.extend(calls)
        return share, t, fwd, first, last, last_s

    # ZeRO-2/3's last per-micro-batch collective is the gradients' reduce-scatter (zero_rs_s)
    mb_share, zero_mb_s, zero_fwd_s, fwd_calls, bwd_calls, zero_rs_s = dp_time(
        C.When.MICRO_BATCH)
    tail_share, reduce_s, _, reduce_calls, _, _ = dp_time(C.When.STEP_REDUCE)
    _, gather_s, _, gather_calls, _, _ = dp_time(C.When.STEP_GATHER)
    if dp.hybrid:  # HSDP: the shard's all-reduce across replicas after each reduce-scatter
        zero_mb_s = zero_mb_s + replica_allreduce_s(x, z, C.When.MICRO_BATCH, k, dp)
        reduce_s = reduce_s + replica_allreduce_s(x, z, C.When.STEP_REDUCE, k, dp)
    if dp.moe:
        # moe: the same collectives for the expert shards over their edp group (dp_traffic)
        edp_group = tuned(x, dp.edp_link)
        expert = []
        with np.errstate(invalid="ignore", divide="ignore"):
            for when in (C.When.MICRO_BATCH, C.When.STEP_REDUCE, C.When.STEP_GATHER):
                _, t, fwd, _, _, _ = dp_time(when, dp.held_experts, dp.edp, edp_group, True)
                expert.append((_ops.select(x.moe, t, 0), _ops.select(x.moe, fwd, 0)))
        zero_mb_s, reduce_s, gather_s = (zero_mb_s + expert[0][0], reduce_s + expert[1][0],
                                         gather_s + expert[2][0])
        zero_fwd_s = zero_fwd_s + expert[0][1]
    return SimpleNamespace(
        mb_share=mb_share, tail_share=tail_share, zero_fwd_s=zero_fwd_s,
        zero_bwd_s=zero_mb_s - zero_fwd_s, zero_rs_s=zero_rs_s, reduce_s=reduce_s,
        gather_s=gather_s, held_params=dp.held_params,
        fwd_calls=fwd_calls, bwd_calls=bwd_calls, reduce_calls=reduce_calls,
        gather_calls=gather_calls, ledger=ledger,
        beside=beside)


def exchange_delay_s(pairs, window_s, note=same, term="", phase=""):
    """moe: what the collectives of one phase (pairs of their own seconds on the link and the
    exposed exchange's beside them, per group: the dp group's, then the expert shards' edp
    group's) delay the exchange by in a window of compute (comm.flow_delay_s). Each pair is
    noted as sub-terms of `term` (O and F of `phase` and the group, terms.SUB_TERMS), so that
    the delay's formula reads min(O·F/(W + F), F) per group (0 where either is 0)."""
    total = 0
    for group, (own, flow) in zip(("dp", "edp"), pairs):
        own, flow = note(f"{term}:own,flow:{phase},{group}", (own, flow))
        total = total + C.flow_delay_s(own, flow, window_s)
    return total


def overlap_windows(x, c: Choices, k: SimpleNamespace, t: SimpleNamespace) -> SimpleNamespace:
    """What the framework gives its collectives to run beside: the stage's forward and backward
    of one micro-batch (its layers), the pipeline's p and v, the plan's overlap flag and the
    calls of each phase (dp_collective_times), the seconds of the per-micro-batch ones (the
    backward's, and its reduce-scatter's alone), the stage's gathered parameters and its
    first parameter, the word embedding's V·h/t elements — for Framework.dp_step_phases and
    dp_microbatch_phases."""
    return SimpleNamespace(fwd_s=k.layers * k.fwd_s, bwd_s=k.layers * (k.bwd_s + k.recompute_s),
                           p=k.p, v=k.v, m=k.m, overlap=x.overlap, reduce_calls=t.reduce_calls,
                           gather_calls=t.gather_calls, fwd_calls=t.fwd_calls,
                           bwd_calls=t.bwd_calls, zero_bwd_s=t.zero_bwd_s,
                           zero_rs_s=t.zero_rs_s, params=t.held_params,
                           first_params=x.vocab * k.h / k.t)


def exposed_with_slowdown_s(comm_s, phase, slowdown, noted=lambda e: e, delayed_s=0):
    """A collective run as `phase` says (frameworks.base.DPPhase, DPPiecePhase): the part the
    compute does not hide (formulas.overlap.pipelined_exposed_s or exposed_piece_s, handed to
    `noted`), and with it the slowdown the hidden part causes the compute it runs beside
    (comm.overlap_slowdown_s) and — moe — `delayed_s`, the exposed expert exchange's delay
    beside it (exchange_delay_s), at most its hidden part."""
    piece_s = getattr(phase, "exposed_s", None)  # a DPPiecePhase names its exposed piece
    exposed = noted(O.pipelined_exposed_s(comm_s, phase.window_s, phase.pieces)
                    if piece_s is None else
                    O.exposed_piece_s(comm_s, phase.window_s, piece_s, phase.pieces))
    slowed = exposed + C.overlap_slowdown_s(comm_s - exposed, phase.window_s, slowdown)
    # nothing beside it (a dense model; explain's 0 where a pair's sub-terms dropped out)
    if getattr(delayed_s, "is_zero", None) is True or (isinstance(delayed_s, int)
                                                        and delayed_s == 0):
        return slowed
    return slowed + _ops.minimum(delayed_s, comm_s - exposed)


def dp_times(x, c: Choices, k: SimpleNamespace, dp: SimpleNamespace,
             note=same) -> SimpleNamespace:
    """The data-parallel time: ZeRO-2/3's per micro-batch beyond its compute, and the step's
    reduction and gather beyond the backward and forward they overlap, each as the framework
    issues it (its DPPhases: formulas.overlap)."""
    z, m = int(c.zero_stage), k.m
    t = dp_collective_times(x, c, k, dp)
    reduce_s = note("dp_reduce_s", t.reduce_s)
    gather_s = note("dp_gather_s", t.gather_s)
    dp_share = note("dp_share", t.mb_share if z >= 2 else t.tail_share)
    zero3_mb_s = 0
    if z >= 2:  # the micro-batch's gathers beside its forward, the rest beside its backward
        if z >= 3:
            t.zero_fwd_s = note("zero_fwd_s", t.zero_fwd_s)
        t.zero_bwd_s = note("zero_bwd_s", t.zero_bwd_s)
        t.zero_rs_s = note("zero_rs_s", t.zero_rs_s)
    w = overlap_windows(x, c, k, t)
    if z >= 2:
        fwd_phase, bwd_phase = c.framework.dp_microbatch_phases(w)
        zero3_mb_s = note("zero_microbatch_exposed_s", (
            exposed_with_slowdown_s(t.zero_fwd_s, fwd_phase, x.overlap_slow, delayed_s=(
                exchange_delay_s(t.beside["fwd"], fwd_phase.window_s, note,
                                 "zero_microbatch_exposed_s", "fwd")))
            + exposed_with_slowdown_s(t.zero_bwd_s, bwd_phase, x.overlap_slow, delayed_s=(
                exchange_delay_s(t.beside["bwd"], bwd_phase.window_s, note,
                                 "zero_microbatch_exposed_s", "bwd"))))) * dp.zero_rounds / m
    note("dp_tail_s", reduce_s + gather_s)
    # the reduction beside the last micro-batch's backward, the gather of the updated weights
    # (after the optimizer step) beside the next step's first forward, each as the framework
    # issues them; what they hide under runs slower by the NCCL kernels beside it
    reduce_phase, gather_phase = c.framework.dp_step_phases(w)
    reduce_phase = reduce_phase._replace(pieces=note("dp_reduce_pieces", reduce_phase.pieces))
    gather_phase = gather_phase._replace(pieces=note("dp_gather_pieces", gather_phase.pieces))
    inline = O.inline_gathers_s(gather_s, gather_phase.inline_stages)
    # moe: the exposed exchange's wait for each beside it (0 for a dense model)
    delays = [0, 0]
    if k.moe_model:
        delays = [note(term, exchange_delay_s(t.beside[when], phase.window_s, note, term, label))
                  for term, when, phase, label in (
                      ("dp_reduce_ep_delay_s", C.When.STEP_REDUCE, reduce_phase, "rs"),
                      ("dp_gather_ep_delay_s", C.When.STEP_GATHER, gather_phase, "ag"))]
    dp_tail_exposed = note("dp_tail_exposed_s", (
        exposed_with_slowdown_s(reduce_s, reduce_phase, x.overlap_slow,
                                lambda e: note("dp_reduce_exposed_s", e), delays[0])
        + exposed_with_slowdown_s(gather_s, gather_phase, x.overlap_slow,
                                  lambda e: note("dp_gather_exposed_s", e), delays[1])
        + inline))
    return SimpleNamespace(dp_share=dp_share, zero3_mb_s=zero3_mb_s,
                           dp_tail_exposed=dp_tail_exposed,
                           dp_collectives=note("collectives", t.ledger))
