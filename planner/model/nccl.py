"""NCCL's tuner for one cluster (beside model/collectives.py, the links and collectives concern):
which GPU generation, host CPU and switch features a profile has, turned into the arguments of
planner/formulas/collectives.py; the bandwidths one group's collectives get (tuner_link, the one
place the cost path and `explain` take them from); and — for one plan, on floats — the algorithm
and protocol the tuner picks, with its latency and transfer parts, for `explain`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

from ..formulas import _ops
from ..formulas import collectives as K
from ..schema import HardwareProfile


def generation_of(hw: HardwareProfile) -> K.Gen:
    """The NCCL generation of a profile's GPU: A100 Ampere, H100/H200/H800 Hopper, B200/B300/
    GB200/GB300 Blackwell. AMD GPUs run RCCL, whose tuner has its own tables; Hopper's are taken
    for them (an approximation said here, not a measurement)."""
    name = hw.gpu.upper()
    if "A100" in name:
        return K.Gen.AMPERE
    if any(tag in name for tag in ("B200", "B300", "GB200", "GB300")):
        return K.Gen.BLACKWELL
    return K.Gen.HOPPER


@dataclass(frozen=True)
class Cluster:
    """What the tuner needs to know of the cluster beyond the group: generation, host CPU vendor,
    NVLS on the switch (with its measured all-reduce bus bandwidth), SHARP, NICs per node (the
    network's bandwidth is the plan's x.net_bw, which calibration may change: tuner_link)."""

    generation: K.Gen
    cpu: K.Cpu
    nvls_bw: float | None
    sharp: bool
    nics_per_node: float

    @classmethod
    def of(cls, hw: HardwareProfile) -> Cluster:
        # Grace (Arm) hosts take NCCL's Intel/default row; EPYC hosts of AMD platforms the AMD one
        cpu = K.Cpu.AMD if "AMD" in hw.gpu.upper() else K.Cpu.INTEL
        return cls(generation=generation_of(hw), cpu=cpu,
                   nvls_bw=hw.fast.nvls_busbw_bytes_per_s, sharp=hw.topology.sharp,
                   nics_per_node=hw.nics_per_gpu * hw.node_gpus)


def tuner_link(x, group, share) -> SimpleNamespace:
    """What the tuner is told of one group's link, on any backend: the domains it spans, the bus
    bandwidth of its ring (group.bw) and of NVLS at its share of the link, the LL ceiling for
    its node count, and the network bandwidth its own ranks' NICs give (K.group_net_busbw): the
    node's whole network (the per-NIC bus bandwidth x.net_bw × its NICs) only for a group that
    holds all the node's GPUs. Every bandwidth here is built from x's link figures, so a
    calibrated x.fast_bw or x.net_bw (planner/calibrate.py) reaches the tuner. `x` the plan's numbers
    (numbers.nccl_numbers), `group` a links.collective_group, or the same with its share-free
    part already worked out (tuned: a group several collectives run on), `share` its
    C.link_share."""
    own = group.tuner if hasattr(group, "tuner") else group_tuner(x, group)
    return SimpleNamespace(
        n_nodes=own.n_nodes, busbw=own.bw * share, ll_max=own.ll_max,
        net_busbw=own.net_busbw * share, nvls_bw=own.nvls_bw * share,
        nics_per_node=own.nics_per_node, net_overhead_us=own.net_overhead_us, nvls=own.nvls,
        sharp=own.sharp,
        caps=None if own.caps is None else tuple(cap * share for cap in own.caps))


def group_tuner(x, group) -> SimpleNamespace:
    """tuner_link's part that the share of the link does not change (its bandwidths and caps
    before they are taken at the share)."""
    return SimpleNamespace(
        n_nodes=group.k, bw=group.bw,
        ll_max=K.ll_max_of(group.k, x.ll_max_one, x.ll_max_two, x.ll_max_many),
        net_busbw=K.group_net_busbw(x.net_bw * x.nics_per_node, group.r, x.nics_per_gpu,
                                    x.nics_per_node),
        nvls_bw=x.nvls_bw, nics_per_node=x.nics_per_node,
        net_overhead_us=x.net_overhead_us, nvls=x.nvls, sharp=x.sharp,
        caps=channel_caps(x, group))


def tuned(x, group) -> SimpleNamespace:
    """The group with tuner_link's share-free part worked out once (group.tuner), for a group
    whose collectives are priced at several shares (the data-parallel ones: one per phase)."""
    return SimpleNamespace(**vars(group), tuner=group_tuner(x, group))


def channel_caps(x, group):
    """The tuner's per-channel caps on the group's tree and LL128 bandwidths across nodes
    (K.channel_cap), with the channels NCCL's search gives the NICs the group's own ranks hold
    on a node (K.search_channels: min(NICs per node, r · NICs per GPU)), before they are taken
    at the group's share of the link as its bandwidths are (tuner_link); None where x does not
    carry the ceilings (a hand-built x: uncapped)."""
    if not hasattr(x, "pc_tree_n"):
        return None
    nics = _ops.minimum(x.nics_per_node, group.r * x.nics_per_gpu)
    channels = K.search_channels(nics, x.net_bw, x.nccl_modern)
    return tuple(K.channel_cap(group.k, channels, getattr(x, f"pc_{c.value}_1"),
                               getattr(x, f"pc_{c.value}_2"), getattr(x, f"pc_{c.value}_n"))
                 for c in K.Ceiling)


def any_on(flag) -> bool:
    """A cluster flag (NVLS, SHARP) as the tuner's candidate list needs it: on when any row has
    it (a search's rows share one profile)."""
    import numpy as np

    return bool(np.any(np.asarray(flag, dtype=float) > 0))


def nccl_s(coll: K.Coll, buffer_bytes, n_ranks, link: SimpleNamespace):
    """One collective of `buffer_bytes` over `n_ranks` ranks as the tuner picks and prices it
    (K.nccl_time_s), on the group's tuner_link; any backend."""
    return K.nccl_time_s(coll, buffer_bytes, n_ranks, link.n_nodes, link.busbw, link.ll_max,
                         link.net_busbw, link.nvls_bw, link.nics_per_node, link.net_overhead_us,
                         nvls=any_on(link.nvls), sharp=any_on(link.sharp),
                         caps=getattr(link, "caps", None))


@dataclass(frozen=True)
class Pick:
    """The tuner's choice for one call, on floats: algorithm, protocol, and the call's time split
    into NCCL's latency (per call) and the transfer (B / algorithm bandwidth)."""

    algo: K.Algo
    proto: K.Proto
    latency_s: float
    transfer_s: float

    @property
    def time_s(self) -> float:
        return self.latency_s + self.transfer_s


def nccl_pick(coll: K.Coll, buffer_bytes: float, n_ranks: float,
              link: SimpleNamespace, algo: K.Algo | None = None) -> Pick | None:
    """For one plan (floats): the (algorithm, protocol) the tuner picks on the group's
    tuner_link — the same inputs nccl_s prices — and its latency and transfer; None for one rank
    (nothing sent). `algo`: the tuner's pick among that algorithm's protocols only (what
    NCCL_ALGO=<algo> leaves it); None where the cluster does not offer it."""
    if n_ranks <= 1:
        return None
    parts = {(a, p): tuple(float(v) for v in K.candidate_parts_s(
        coll, a, p, buffer_bytes, n_ranks, link.n_nodes, link.busbw, link.ll_max,
        link.net_busbw, link.nvls_bw, link.nics_per_node, link.net_overhead_us,
        caps=getattr(link, "caps", None)))
        for a, p in K._candidates(coll, any_on(link.nvls), any_on(link.sharp))
        if algo is None or a is algo}
    parts = {ap: v for ap, v in parts.items() if sum(v) < K.DISABLED_S}
    if not parts:
        return None
    algo, proto = min(parts, key=lambda ap: sum(parts[ap]))
    return Pick(algo, proto, *parts[(algo, proto)])


@dataclass(frozen=True)
class Call:
    """One kind of collective of a step, as the cost path priced it (any backend): the tuner's
    collective (None for a point-to-point send/recv), the bytes of one call, the calls per step,
    the ranks, and the link it was priced on (tuner_link; for a send/recv: bw and inside).
    Noted under "collectives" (a list) so that explain can show the tuner's pick for each."""

    coll: K.Coll | None
    buffer_bytes: Any
    calls: Any
    ranks: Any
    link: SimpleNamespace
    name: str = ""
    # for coll None: "send/recv", "all-to-all" (bytes sent per rank; split over NVLink and the
    # network where the link has in_domain) or "deepep" (the link holds one call's time_s)
    p2p: str = "send/recv"

    def named(self, name: str, calls_per_step) -> Call:
        return replace(self, name=name, calls=calls_per_step)


def priced(call: Call) -> Pick | None:
    """The pick and parts of one call of a noted Call, on floats: the tuner's (nccl_pick) for a
    collective, the LL/Simple send of K.send_recv_parts_s for a point-to-point one."""
    if call.coll is not None:
        return nccl_pick(call.coll, float(call.buffer_bytes), float(call.ranks), call.link)
    if float(call.ranks) <= 1 or float(call.calls) == 0:
        return None
    if call.p2p == "deepep":  # DeepEP's kernels: one time and its latency, no NCCL protocol
        latency = float(getattr(call.link, "latency_s", 0.0))
        return Pick(K.Algo.RING, K.Proto.SIMPLE, latency, float(call.link.time_s) - latency)
    if call.p2p == "all-to-all" and hasattr(call.link, "in_domain"):  # split NVLink/network
        parts = K.all_to_all_split_parts_s(
            float(call.buffer_bytes), float(call.ranks), float(call.link.in_domain),
            float(call.link.fast_bw), float(call.link.net_bw))
        small = K.p2p_uses_ll(float(call.buffer_bytes) / max(float(call.ranks) - 1, 1))
        return Pick(K.Algo.RING, K.Proto.LL if small else K.Proto.SIMPLE, float(parts[0]),
                    float(parts[1]))
    if call.p2p == "all-to-all":  # the bytes each rank sends, over its per-rank bandwidth
        return Pick(K.Algo.RING, K.Proto.SIMPLE,
                    float(K.all_to_all_latency_s(float(call.ranks), float(call.link.inside))),
                    float(call.buffer_bytes) / float(call.link.bw))
    latency, transfer = K.send_recv_parts_s(float(call.buffer_bytes), float(call.link.bw),
                                            float(call.link.inside))
    small = K.p2p_uses_ll(float(call.buffer_bytes))
    return Pick(K.Algo.RING, K.Proto.LL if small else K.Proto.SIMPLE, float(latency),
                float(transfer))


def send_recv_latencies(x, inside) -> tuple:
    """(LL, Simple) latency of one send/recv on a link, from the plan's named numbers
    (numbers.nccl_numbers: K.send_recv_latency_s, base + step), any backend."""
    return (_ops.select(inside, x.sr_ll_nvl, x.sr_ll_net),
            x.sr_base + _ops.select(inside, x.sr_step_nvl, x.sr_step_net))


def measured_a2a_busbw(x, sent_bytes, n_ranks, ring_bw):
    """One NCCL all-to-all's bus bandwidth inside the NVLink domain over n ranks sending B bytes
    a rank (K.alltoall_sent_busbw), W∞ the profile's all-to-all share of the link's ring
    figure — the ring's figure at every size where the profile has no all-to-all curve; the
    plan's named numbers, any backend."""
    return K.alltoall_sent_busbw(sent_bytes, n_ranks, ring_bw * x.a2a_share, x.a2a_ramp_s)


def all_to_all_latency(x, n_ranks, inside):
    """One NCCL all-to-all's latency over n ranks (K.all_to_all_latency_s) from the plan's named
    numbers, any backend."""
    return K.all_to_all_latency_s(n_ranks, inside, x.sr_base,
                                  _ops.select(inside, x.sr_step_nvl, x.sr_step_net))
