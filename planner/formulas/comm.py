"""Communication volume per GPU per step, and the time a collective takes on a link.

Volumes are the bytes one GPU sends. A ring all-reduce of B bytes over n ranks sends
2(n − 1)/n · B per rank (reduce-scatter then all-gather, each (n − 1)/n · B); a reduce-scatter or
an all-gather alone sends (n − 1)/n · B (Patarasuk & Yuan 2009; NCCL's "bus bandwidth" is defined
so that time = this volume / busbw).

Which link a collective crosses, and at what bandwidth, follows from where the group's ranks sit
(planner/placement.py gives the strides): inside an NVLink domain, the domain's bus bandwidth;
across domains, the NICs of all the group's ranks in a domain (cross_domain_busbw); latency by
the algorithm NCCL picks (ring_latency_s, tree_latency_s); links shared by concurrent groups
(link_share); compute slowed by the collectives hidden beside it (overlap_slowdown_s). README,
"The communication model", states the model and its sources.
"""

from __future__ import annotations

from enum import Enum

from . import _ops


def ring_allreduce_bytes(n_ranks, buffer_bytes):
    """2(n − 1)/n · B: what each rank sends in a ring all-reduce of a B-byte buffer."""
    return 2 * (n_ranks - 1) / n_ranks * buffer_bytes


def ring_gather_bytes(n_ranks, buffer_bytes):
    """(n − 1)/n · B: each rank's share of a ring reduce-scatter or all-gather of B bytes."""
    return (n_ranks - 1) / n_ranks * buffer_bytes


class Collective(Enum):
    """The collectives plan3d prices, each with its ring passes of n − 1 steps (NCCL
    src/graph/tuning.cc: nsteps = 2(n − 1) for an all-reduce, n − 1 for a reduce-scatter or an
    all-gather) and the bytes each rank sends per byte of buffer, (passes)·(n − 1)/n."""

    ALL_REDUCE = ("all-reduce", 2)
    REDUCE_SCATTER = ("reduce-scatter", 1)
    ALL_GATHER = ("all-gather", 1)

    def __init__(self, label, passes):
        self.label = label
        self.passes = passes


class When(Enum):
    """When a data-parallel collective runs: every micro-batch (overlapping its compute), once per
    step after the last backward (the gradient reduction), or once per step after the optimizer
    step (the gather of the updated weights)."""

    MICRO_BATCH = "per micro-batch"
    STEP_REDUCE = "per step, reduction"
    STEP_GATHER = "per step, weight gather"


ZERO_COLLECTIVES = {
    0: ((Collective.ALL_REDUCE, "grad", When.STEP_REDUCE),),
    1: ((Collective.REDUCE_SCATTER, "grad", When.STEP_REDUCE),
        (Collective.ALL_GATHER, "weight", When.STEP_GATHER)),
    2: ((Collective.REDUCE_SCATTER, "grad", When.MICRO_BATCH),
        (Collective.ALL_GATHER, "weight", When.STEP_GATHER)),
    3: ((Collective.ALL_GATHER, "weight", When.MICRO_BATCH),
        (Collective.ALL_GATHER, "weight", When.MICRO_BATCH),
        (Collective.REDUCE_SCATTER, "grad", When.MICRO_BATCH)),
}
"""Which collectives each ZeRO stage runs over its d = dp·cp ranks: (collective, buffer —
g or w bytes per parameter —, when). The one table both the volumes and the latency steps come
from (Rajbhandari 2020 §5; Megatron-LM distributed optimizer; DeepSpeed ZeRO-2; FSDP):

  ZeRO 0: all-reduce of the gradients once per step (under the last backward);
  ZeRO 1: reduce-scatter of the gradients into the shards, all-gather of the updated weights;
  ZeRO 2: reduce-scatter every micro-batch (sharded gradients cannot accumulate locally:
          DeepSpeed ZeRO-2, FSDP without no_sync), all-gather of the updated weights;
  ZeRO 3: all-gather of the weights for the forward and again for the backward, and the
          gradients' reduce-scatter, every micro-batch."""


def _zero_collectives(zero_stage, when):
    """The (collective, buffer) pairs a ZeRO stage runs at `when` (ZERO_COLLECTIVES)."""
    return [(coll, buf) for coll, buf, w in ZERO_COLLECTIVES[int(zero_stage)] if w is when]


def zero_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage, when):
    """Bytes each rank sends for the ZeRO stage's collectives at `when`:
    Σ passes · (d − 1)/d · (g or w)·Ψ over ZERO_COLLECTIVES."""
    per_param = {"grad": bytes_per_grad, "weight": bytes_per_weight}
    return sum((coll.passes * ring_gather_bytes(dp_shard, per_param[buf] * params)
                for coll, buf in _zero_collectives(zero_stage, when)), 0)


def zero_ring_passes(zero_stage, when):
    """Ring passes (of d − 1 steps each, for the latency term) of the stage's collectives at
    `when`: an all-reduce is two, a reduce-scatter or all-gather one (ZERO_COLLECTIVES)."""
    return sum(coll.passes for coll, _ in _zero_collectives(zero_stage, when))


def zero_allreduce(zero_stage, when):
    """1 when the collective at `when` is an all-reduce (NCCL may then run a tree, and SHARP and
    NVLS apply), else 0."""
    return int(any(coll is Collective.ALL_REDUCE for coll, _ in _zero_collectives(zero_stage, when)))


def zero_microbatch_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage):
    """Data-parallel traffic each micro-batch causes, over the d = dp·cp ranks of a shard:
    ZeRO 0/1 none; ZeRO 2 (d−1)/d · gΨ; ZeRO 3 (d−1)/d · (2wΨ + gΨ) (ZERO_COLLECTIVES)."""
    return zero_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage,
                      When.MICRO_BATCH)


def zero_step_reduce_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage):
    """The gradient reduction once per step, after the last micro-batch's backward (which it
    overlaps, bucket by bucket, under overlap_grad_reduce): ZeRO 0 2(d−1)/d · gΨ; ZeRO 1
    (d−1)/d · gΨ; ZeRO 2, 3 none (reduced every micro-batch)."""
    return zero_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage,
                      When.STEP_REDUCE)


def zero_step_gather_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage):
    """The all-gather of the updated weight shards once per step, after the optimizer step (so it
    cannot overlap the backward; Megatron's --overlap-param-gather hides it under the next step's
    forward): ZeRO 1, 2: (d−1)/d · wΨ;  ZeRO 0, 3: none."""
    return zero_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage,
                      When.STEP_GATHER)


def zero_step_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage):
    """Data-parallel traffic once per step, after the last micro-batch: the reduction and the
    weight gather above.

    ZeRO 0: all-reduce of the gradients                       2(d−1)/d · gΨ
    ZeRO 1: reduce-scatter gradients + all-gather new weights   (d−1)/d · (g + w)Ψ
    ZeRO 2: all-gather of the updated weights                   (d−1)/d · wΨ
    ZeRO 3: none (the weights stay sharded)."""
    return (zero_step_reduce_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage)
            + zero_step_gather_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard,
                                     zero_stage))


def dp_gradient_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, n_micro, zero_stage):
    """Data-parallel traffic per GPU per step: m · per-micro-batch + per-step.

    ZeRO 0: 2(d−1)/d·gΨ;  ZeRO 1: (d−1)/d·(g + w)Ψ (= ZeRO 0's at g = w);
    ZeRO 2: (d−1)/d·(m·g + w)Ψ;  ZeRO 3: (d−1)/d·m·(2w + g)Ψ — with m = 1 and g = w, 3(d−1)/d·wΨ,
    the paper's 1.5× (Rajbhandari 2020 §7.2.2)."""
    return (n_micro * zero_microbatch_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard,
                                            zero_stage)
            + zero_step_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage))


def hsdp_replica_bytes(params, bytes_per_grad, dp_shard, dp_replicate, zero_stage, when):
    """Hybrid sharding's second level (HSDP): each gradient reduce-scatter the ZeRO stage runs at
    `when` inside the shard group of s ranks (ZERO_COLLECTIVES, over s instead of d) is followed
    by an all-reduce of each rank's 1/s shard across the r = d/s replicas holding the same shard:
    2(r − 1)/r · gΨ/s per reduce-scatter. The whole reduction is then
    (s − 1)/s · gΨ + 2(r − 1)/r · gΨ/s per rank, of which only the second crosses between shard
    groups; r = 1 gives 0 (the flat reduction). Weight gathers stay inside the shard group.

    Sources: torchtitan docs/fsdp.md (HSDP: data_parallel_replicate_degree ×
    data_parallel_shard_degree); PyTorch FSDP2 `fully_shard(mesh=2-D (replicate, shard))`
    (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce: the
    reduce-scatter, then an all-reduce on `all_reduce_group`, "not None iff HSDP"; taken at every
    reduction, as without set_requires_all_reduce(False)); Megatron-Core partial distributed optimizer
    (megatron/core/distributed/param_and_grad_buffer.py @ d98e8a64dd:
    num_distributed_optimizer_instances > 1, reduce-scatter in the instance, all-reduce across
    instances); Wang et al. 2023, ZeRO++ §3.2 (hpZ) for the intra-node partition idea."""
    return hsdp_replica_rounds(zero_stage, when) * ring_allreduce_bytes(
        dp_replicate, bytes_per_grad * params / dp_shard)


def hsdp_replica_step_bytes(params, bytes_per_grad, dp_shard, dp_replicate, n_micro, zero_stage):
    """HSDP's cross-replica traffic per GPU per step: n_micro · the per-micro-batch all-reduce
    (ZeRO 2, 3) + the once-per-step one (ZeRO 1): 2(r − 1)/r · gΨ/s per reduction round
    (hsdp_replica_bytes)."""
    return (n_micro * hsdp_replica_bytes(params, bytes_per_grad, dp_shard, dp_replicate,
                                         zero_stage, When.MICRO_BATCH)
            + hsdp_replica_bytes(params, bytes_per_grad, dp_shard, dp_replicate, zero_stage,
                                 When.STEP_REDUCE))


def hsdp_replica_rounds(zero_stage, when):
    """The gradient reduce-scatters the stage runs at `when`, each followed by HSDP's
    cross-replica all-reduce (0: nothing to all-reduce then)."""
    return sum(1 for coll, buf in _zero_collectives(zero_stage, when)
               if coll is Collective.REDUCE_SCATTER and buf == "grad")


def tp_layer_bytes(seq_len, mbs, hidden, tp, cp, act_bytes=2):
    """Tensor-parallel traffic per layer per micro-batch in one direction (forward or backward):
    two all-reduces of the b·s·h activation (after attention and after the MLP; Shoeybi 2019),
    or with sequence parallelism two all-gather + reduce-scatter pairs of the same total volume:
    2 · 2(t − 1)/t · act·bsh = 8·bsh·(t − 1)/t bytes in 16-bit."""
    return 2 * ring_allreduce_bytes(tp, act_bytes * seq_len / cp * mbs * hidden)


def tp_step_bytes(layers_per_stage, n_micro, tp_layer, forward_passes):
    """Per step: each of the stage's layers, each micro-batch, forward passes (1, or 2 under full
    recompute) plus one backward: (L/p) · m · (passes + 1) · per-layer volume."""
    return layers_per_stage * n_micro * (forward_passes + 1) * tp_layer


def pp_boundary_bytes(seq_len, mbs, hidden, tp, cp, act_bytes=2):
    """One stage-boundary message: the b·s·h activation, split over the t ranks of the stage
    (Megatron's scatter/gather optimisation, Narayanan 2021 §4.1), act·bsh/(t·c)."""
    return act_bytes * seq_len / cp * mbs * hidden / tp


def cp_step_bytes(stage_layers, n_micro, cp_layer):
    """Context-parallel traffic per GPU per step: every layer of the stage, every micro-batch."""
    return stage_layers * n_micro * cp_layer


def pp_step_bytes(pp, n_micro, vpp, boundary_bytes):
    """Per GPU per step, averaged over the stages: v·p − 1 chunk boundaries, each crossed by every
    micro-batch forward (activation) and backward (its gradient), over p GPUs:
    2·m·(v·p − 1)/p · boundary.  Zero at p = 1, v = 1."""
    return 2 * n_micro * (vpp * pp - 1) / pp * boundary_bytes


def collective_time_s(volume_bytes, bandwidth_bytes_per_s, n_steps, latency_s):
    """α–β cost: volume / bandwidth + steps · latency, with bandwidth the achievable NCCL bus
    bandwidth of the link the group crosses."""
    return volume_bytes / bandwidth_bytes_per_s + n_steps * latency_s


def inside_domain(group_span, domain_size):
    """1 when every group of consecutive ranks spanning group_span GPUs stays inside one fast
    (NVLink) domain — the span fits and tiles the domain evenly (a 48-rank span in a 72-GPU NVL72
    domain straddles two domains for every other group) — 0 when it must cross the network."""
    return _ops.le(group_span, domain_size) * _ops.divides(group_span, domain_size)


# ---- placement: which GPUs a group's ranks sit on ------------------------------------------------

def ranks_per_domain(group_size, stride, domain_gpus, inside):
    """Ranks of one group inside one NVLink domain of `domain_gpus` consecutive GPUs (ranks are
    placed on GPUs in order): all g of them when the group lies inside a domain (inside =
    inside_domain(s·g, D): its span fits and tiles the domain); otherwise max(1, min(D/s, g/2)) —
    D/s when the domain holds whole runs of the group, 1 when its stride passes a whole domain,
    and g/2 for a group that straddles a domain boundary (the worse-placed half sets the pace)."""
    return _ops.select(inside, group_size,
                       _ops.maximum(1, _ops.minimum(domain_gpus / stride, group_size / 2)))


def domains_spanned(group_size, ranks_in_domain):
    """NVLink domains one group's ranks lie in: k = g / r."""
    return group_size / ranks_in_domain


def job_domain_gpus(domain_gpus, n_gpus):
    """GPUs of the job inside one NVLink domain: min(D, N). A job smaller than a domain (64 GPUs
    of an NVL72 rack) is one domain; a job on partly filled racks passes the GPUs it uses per rack
    as D (e.g. 64 of 72)."""
    return _ops.minimum(domain_gpus, n_gpus)


# ---- links: the bandwidth a group's collective gets ----------------------------------------------

def oversubscription_factor(group_span, pod_gpus, ratio):
    """The network's oversubscription seen by a group: 1 within a full-bisection pod of
    `pod_gpus` GPUs, `ratio` (e.g. 7 for 1:7) for a group that spans more (Llama 3: full
    bisection within 3,072 GPUs, 1:7 above; Dubey et al. 2024 §3.3.1)."""
    return _ops.select(_ops.le(group_span, pod_gpus), 1, ratio)


def cross_domain_busbw(ranks_in_domain, nics_per_gpu, nic_busbw, fast_busbw, oversubscription):
    """Per-rank bus bandwidth of a collective whose group leaves the NVLink domain:
    min(W_nvl, r·ν·W_nic / o).

    NCCL builds one ring (or tree) per channel and spreads the channels over the node's NICs
    (NCCL_CROSS_NIC, PXN); a ring enters and leaves each domain once, so the bytes that cross
    a domain's boundary equal one rank's own — and they cross on the NICs of all r ranks the group
    has in the domain (ν NICs per GPU). Each rank's share thus moves at r·ν NICs' bandwidth, never
    faster than the NVLink hops that carry the same bytes inside the domain. r = 1 (one rank per
    node, TP inside it) gives one NIC, the classic figure (NVIDIA/nccl-tests#290: 46–48 GB/s per
    400 Gb/s NIC); r = 8 on an 8-GPU node, 8 NICs (≈ 370 GB/s busbw on 2+ DGX H100 nodes)."""
    return _ops.minimum(fast_busbw, ranks_in_domain * nics_per_gpu * nic_busbw / oversubscription)


def p2p_busbw(nics_per_gpu, nic_busbw, fast_busbw, oversubscription):
    """Bandwidth of a pipeline send between domains: each rank sends its own share over its own
    NIC(s), min(W_nvl, ν·W_nic / o)."""
    return _ops.minimum(fast_busbw, nics_per_gpu * nic_busbw / oversubscription)


def group_busbw(inside, fast_busbw, crossing_busbw):
    """The bus bandwidth a group's collective runs at: the domain's NVLink figure inside it,
    the cross-domain figure otherwise."""
    return _ops.select(inside, fast_busbw, crossing_busbw)


def sharp_volume_factor(n_ranks, sharp_on):
    """In-network reduction (SHARP, NCCL CollNet) of an all-reduce across the network: each rank
    sends its buffer once to the switch and receives the result once, B instead of 2(n − 1)/n · B
    (Graham et al. 2016, "Scalable Hierarchical Aggregation Protocol"): the bandwidth term scales
    by n / (2(n − 1)) where sharp_on = 1."""
    return _ops.select(sharp_on, n_ranks / (2 * _ops.maximum(n_ranks - 1, 1)), 1)


# ---- latency: the algorithm NCCL picks ----------------------------------------------------------

TREE_BANDWIDTH_FACTOR = 0.92
"""NCCL's tree all-reduce runs at 0.92 of the ring's bus bandwidth (NVIDIA/nccl
src/graph/tuning.cc, ncclTopoTuneModel: busBw = min(busBw·.92, …) for NCCL_ALGO_TREE)."""


def ring_latency_s(n_ranks, n_domains, passes, fast_latency_s, net_latency_s):
    """A ring's latency: per pass, n − 1 steps, of which k − 1 cross between domains at the
    network's α and n − k stay on NVLink (NVIDIA/nccl src/graph/tuning.cc: ring latency
    (nsteps − nInterSteps)·intraLat + nInterSteps·interLat). Linear in the ranks."""
    return passes * ((n_ranks - n_domains) * fast_latency_s + (n_domains - 1) * net_latency_s)


def tree_latency_s(n_ranks, n_domains, fast_latency_s, net_latency_s):
    """NCCL's tree all-reduce latency: a chain inside each domain and a double binary tree across
    domains, up and down: 2·((n/k − 1)·α_nvl + log₂k·α_net) (NVIDIA/nccl src/graph/tuning.cc).
    Logarithmic in the domains."""
    return 2 * ((n_ranks / n_domains - 1) * fast_latency_s
                + _ops.log2(n_domains) * net_latency_s)


def allreduce_time_s(volume_bytes, busbw, n_ranks, n_domains, fast_latency_s, net_latency_s):
    """An all-reduce as NCCL runs it: the faster of the ring (V/W + its latency) and the tree
    (V/(0.92·W) + its latency) — NCCL's tuner picks the algorithm its model predicts fastest at the
    message size (tuning.cc): the tree for small buffers over many nodes, the ring for large."""
    ring = volume_bytes / busbw + ring_latency_s(n_ranks, n_domains, 2, fast_latency_s,
                                                 net_latency_s)
    tree = (volume_bytes / (TREE_BANDWIDTH_FACTOR * busbw)
            + tree_latency_s(n_ranks, n_domains, fast_latency_s, net_latency_s))
    return _ops.minimum(ring, tree)


def ring_time_s(volume_bytes, busbw, n_ranks, n_domains, passes, fast_latency_s, net_latency_s):
    """A ring collective (reduce-scatter, all-gather, or the passes of ring attention):
    V/W + ring latency."""
    return volume_bytes / busbw + ring_latency_s(n_ranks, n_domains, passes, fast_latency_s,
                                                 net_latency_s)


# ---- shared links and overlap -------------------------------------------------------------------

def same_link(inside_a, inside_b):
    """1 when two groups' traffic crosses the same kind of link (both inside the NVLink domain,
    or both across the network), else 0."""
    return 1 - (inside_a - inside_b) ** 2  # = a·b + (1 − a)(1 − b) for a, b ∈ {0, 1}


def link_share(own_bytes, concurrent_bytes, sends):
    """The share of a link one group's traffic gets while others run on it in the same window:
    a link that always carries what is queued finishes all of it at the sum's pace, so each
    flow's bytes move at V/(V + Σ others) of the bandwidth (fluid, work-conserving link). A group
    that sends nothing (sends = 0: its degree is 1, or it has nothing of its own to move) is
    given 1, so that its zero bytes take zero time."""
    return (own_bytes + 1 - sends) / (own_bytes + sends * concurrent_bytes + 1 - sends)


def flow_delay_s(own_s, flow_s, window_s):
    """Time an exposed flow (one the compute waits for: the expert exchange, flow_s alone on the
    link) loses to a collective hidden beside it on the same link (own_s: its own bytes alone on
    the link) in a phase of window_s of compute: the collective's pieces spread over the phase,
    whose wall time the flow lengthens by its own, so they meet for flow/(window + flow) of the
    collective's time, and a fair link gives the two half each while they do (max-min
    fairness): the flow waits as long, at most its own time:
        min(own·flow/(window + flow), flow)
    0 where nothing flows beside it."""
    return _ops.minimum(own_s * flow_s / _ops.maximum(window_s + flow_s, 1e-12), flow_s)


OVERLAP_COMPUTE_SLOWDOWN = 0.189
"""Compute running beside an NCCL collective runs slower: the collective's kernels hold SMs
(one CTA per channel) and share HBM bandwidth. Lee et al. 2025, "Characterizing
Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning" (arXiv 2507.03114),
measure an average compute slowdown of 18.9 % (max 40 %) across GPT and Llama training on
A100, H100, MI250 and MI210 against the same compute alone."""


def overlap_slowdown_s(comm_s, window_s, slowdown):
    """Time the hidden part of a collective adds to the compute it runs beside:
    σ · min(comm, window) (σ = OVERLAP_COMPUTE_SLOWDOWN)."""
    return slowdown * _ops.minimum(comm_s, window_s)


def link_utilisation(busy_s, step_s):
    """The share of the step a link is busy: (Σ time of the traffic on it at its bandwidth) /
    step time."""
    return busy_s / step_s
