"""Collectives as NCCL's tuner prices and picks them: each algorithm and protocol's latency and
bandwidth, and the fastest of those enabled.

Source, for every constant and rule here: NVIDIA/nccl at tag v2.30.7-1 (commit 73cf112295c3),
src/graph/tuning.cc — ncclTopoTuneModel (the latency and bandwidth of each collective, algorithm
and protocol) and ncclTopoGetAlgoTime (time = latency + bytes / algorithm bandwidth) — with
src/include/enqueue.h ncclFuncMaxSendRecvCount (the bytes the tuner is asked about) and
src/include/device.h, src/enqueue.cc for send/recv. The tuner's model, as NCCL writes it:

    time = latency + B / algbw,     algbw = busbw · ratio,

B the collective's whole buffer (the all-reduce's buffer, the all-gather's output, the
reduce-scatter's input: n × the per-rank count for the last two), busbw the bus bandwidth of
the algorithm and protocol, ratio = n / nsteps for the ring, NVLS and NVLS-tree (nsteps = 2(n − 1)
for an all-reduce, n − 1 for a reduce-scatter or all-gather), 1/2 for the tree and CollNet
all-reduce, and 1 (no conversion) for the non-ring reduce-scatter and all-gather (PAT, NVLS).
The tuner then takes the smallest time over the enabled (algorithm, protocol) pairs.

Bandwidth: plan3d knows the ring/Simple bus bandwidth W of the link a group crosses (measured
nccl-tests figures in the profile, placed by planner/formulas/comm.py); NCCL's own number is
nChannels × per-channel bandwidth of the topology search, which W stands for. Each other
algorithm and protocol follows from W by the tuner's refinements (`*_busbw` below). The
per-channel caps (nChannels × perChMax…Bw) apply across nodes, with the channels the topology
search gives the group's NICs (channel_caps, search_channels: 8 × 24 GB/s for the tree over 3+
B200 nodes of eight 400 Gb/s NICs, what nccl-tests measures there); on one node, at the 16–32
channels NCCL opens on NVSwitch, they lie above W (e.g. 32 × 36.7 GB/s for Hopper ring LL128)
and are left out.

Latency: NCCL's constants (µs) per algorithm and protocol — a base latency, plus per step a
hardware latency of the link the step crosses (NVLink inside a node, the network between nodes).
`n` is the ranks, `k` the nodes NCCL counts (NVLink domains in plan3d's terms: a multi-node
NVLink rack is one NCCL node), n/k the ranks per node.

Runs on floats, numpy arrays and sympy symbols: what depends on values (PAT needs one rank per
node, the tree's correction by size, whether the group leaves the node) goes through `_ops`;
what is a property of the cluster (NVLS present, SHARP enabled) picks which candidates exist.
"""

from __future__ import annotations

import functools
from enum import Enum

from . import _ops

US = 1e-6
GB = 1e9


class Algo(Enum):
    TREE = "tree"
    RING = "ring"
    COLLNET_DIRECT = "collnet-direct"
    COLLNET_CHAIN = "collnet-chain"
    NVLS = "nvls"
    NVLS_TREE = "nvls-tree"
    PAT = "pat"


class Proto(Enum):
    """NCCL's protocols, in its order (LL, LL128, Simple): LL moves 8-byte flag+data words (low
    latency, half the bandwidth), LL128 128-byte lines with 8 bytes of flags, Simple plain
    copies with a fence per chunk."""

    LL = 0
    LL128 = 1
    SIMPLE = 2


class Coll(Enum):
    ALL_REDUCE = "all-reduce"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_GATHER = "all-gather"


class Gen(Enum):
    """The GPU generation, which picks the LL protocol's one-node ceiling (llMaxBws)."""

    VOLTA = "volta"
    AMPERE = "ampere"
    HOPPER = "hopper"
    BLACKWELL = "blackwell"


class Cpu(Enum):
    """The host CPU's vendor, which picks the multi-node LL ceiling and the network overhead."""

    INTEL = "intel"
    AMD = "amd"


class Intra(Enum):
    """The link between the GPUs of a node: NVLink (through NVSwitch) or PCIe."""

    NVLINK = "nvlink"
    PCI = "pci"


BASE_LATENCY_US = {
    Algo.TREE: (6.8, 14.0, 8.4), Algo.RING: (6.6, 14.0, 8.4),
    Algo.COLLNET_DIRECT: (0, 0, 0), Algo.COLLNET_CHAIN: (0, 0, 0),
    Algo.NVLS: (0, 0, 0), Algo.NVLS_TREE: (0, 0, 0), Algo.PAT: (8.0, 8.0, 8.0)}
"""ncclTunerConstantsDefaults.baseLatencies (µs), per algorithm (LL, LL128, Simple)."""

HW_LATENCY_US = {
    "nvlink": {Algo.TREE: (0.6, 1.25, 4.0), Algo.RING: (0.6, 1.9, 3.4),
               Algo.COLLNET_DIRECT: (0, 0, 3.7), Algo.COLLNET_CHAIN: (0, 0, 2.8),
               Algo.NVLS: (0, 0, 25), Algo.NVLS_TREE: (0, 0, 25), Algo.PAT: (0, 0, 4.0)},
    "pci": {Algo.TREE: (1.0, 1.9, 4.0), Algo.RING: (1.0, 2.5, 5.7),
            Algo.COLLNET_DIRECT: (0, 0, 3.7), Algo.COLLNET_CHAIN: (0, 0, 2.8),
            Algo.NVLS: (0, 0, 0), Algo.NVLS_TREE: (0, 0, 0), Algo.PAT: (0, 0, 4.0)},
    "net": {Algo.TREE: (5.0, 8.5, 14), Algo.RING: (2.7, 4.0, 14.0),
            Algo.COLLNET_DIRECT: (0, 0, 31), Algo.COLLNET_CHAIN: (0, 0, 30),
            Algo.NVLS: (0, 0, 18), Algo.NVLS_TREE: (0, 0, 20.9), Algo.PAT: (0, 0, 14)},
}
"""ncclTunerConstantsDefaults.hwLatencies (µs): per link kind, algorithm, (LL, LL128, Simple)."""

LL_MAX_BUSBW_GB = {
    # one node: by GPU generation (N1)
    "volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0,
}
"""llMaxBws (GB/s) on one node, by GPU generation: the LL protocol's bus bandwidth ceiling."""

LL_MAX_BUSBW_MULTINODE_GB = {"intel": (39.0, 20.4), "amd": (22.5, 19.0)}
"""llMaxBws on 2 nodes and on more (N2, N4), chosen by the host CPU's vendor: rows 0 and 1 of
the table (the tuner indexes the row by CPU vendor once the job spans nodes)."""

NVLS_EFFICIENCY = {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}
"""nvlsEfficiency: NVLS's share of the NVLink bandwidth per channel, by generation."""

NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}
"""getNetOverhead: a multi-node ring's per-step floor (×3 for Simple), by host CPU vendor."""

TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9,
     1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9))
"""treeCorrectionFactor[protocol][log2(B/64)] for B from 64 B to 256 MiB: the tree all-reduce's
bandwidth at medium sizes (applied for log2 index 0–22; 1 outside)."""

RING_PLATEAU_FACTOR = 1.4
"""ncclTopoGetAlgoTime: a multi-node ring/Simple all-reduce's latency ×1.4 on sm80+ once each
channel and rank get 64 bytes or more ("plateau effect of ring")."""

class Ceiling(Enum):
    """The tuner's per-channel bandwidth ceilings (PER_CHANNEL_MAX_GB), in the order of the caps
    tuple (channel_caps)."""

    TREE = "tree"
    TREE_LL128 = "tree_ll128"
    RING_LL128 = "ring_ll128"


NO_CAP = 1e30
"""A cap that never binds (bytes/s): one-node groups, hand-built links."""

PER_CHANNEL_MAX_GB = {
    # (N1, N2, N4): one node, two nodes, three or more (the tuner's index2)
    "tree": {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
             "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0)},
    "tree_ll128": {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
                   "hopper": (36.7, 36.7, 29.0), "blackwell": (55.6, 31.67, 20.0)},
    "ring_ll128": {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
                   "hopper": (36.7, 36.7, 36.7), "blackwell": (40.0, 40.0, 40.0)},
}
"""ncclTunerConstantsDefaults.perChMaxTreeBws, perChMaxTreeLL128Bws, perChMaxRingLL128Bws (GB/s
per channel), by generation and by nodes (N1, N2, N4 = three or more): the tuner caps the tree
all-reduce at nChannels × perChMaxTreeBw (then LL128 at nChannels × perChMaxTreeLL128Bw) and the
ring's LL128 at nChannels × perChMaxRingLL128Bw. (perChMaxNVLSTreeBws, 45.5–96 GB/s per NVLS
channel, lies above the network share each NVLS channel gets and is left out.)"""

CHANNEL_DUP_MIN_GB = 25.0
CHANNEL_DUP_MODERN_MAX_GB = 50.0
CHANNEL_DUP_MODERN_MAX_CHANNELS = 4
"""ncclTopoDupChannels: the search's channels are doubled unless a channel's bandwidth is under
25 GB/s, or (compute capability above 8.0, i.e. Hopper and later) it is under 50 GB/s with more
than 4 channels."""

P2P_LL_THRESHOLD_BYTES = 16384
"""src/enqueue.cc NCCL_P2P_LL_THRESHOLD: send/recv of up to 16 KiB use LL, larger Simple."""

P2P_PEERS_PER_BATCH = 8
"""src/include/device.h NCCL_MAX_DEV_WORK_P2P_PER_BATCH: send/recv pairs one work batch of a
channel carries at once; an all-to-all's n − 1 peers go out in ⌈(n − 1)/8⌉ such rounds."""


# ---- steps ---------------------------------------------------------------------------------

def ring_steps(coll: Coll, n_ranks):
    """nsteps: 2(n − 1) for an all-reduce (reduce-scatter then all-gather), n − 1 otherwise."""
    return (2 if coll is Coll.ALL_REDUCE else 1) * (n_ranks - 1)


def ring_inter_steps(coll: Coll, n_nodes):
    """nInterSteps: the ring steps that cross between nodes, 2(k − 1) or k − 1 (0 on one node)."""
    return (2 if coll is Coll.ALL_REDUCE else 1) * (n_nodes - 1)


def floor_log2(x):
    """log2i: ⌊log₂ x⌋ (exact for the powers of two node counts usually are)."""
    return _ops.floor(_ops.log2(x))


def one_node(n_nodes):
    """1 when the group lies in one node (NCCL's nNodes = 1), else 0."""
    return _ops.le(n_nodes, 1)


def one_rank_per_node(n_ranks, n_nodes):
    """1 when every node holds one rank of the group (ppn = 1), else 0."""
    return _ops.le(n_ranks, n_nodes)


# ---- latency (seconds) ---------------------------------------------------------------------

def ring_latency_s(coll: Coll, proto: Proto, n_ranks, n_nodes, net_overhead_us=1.0,
                   intra: Intra = Intra.NVLINK):
    """base + (nsteps − nInter)·intraLat + nInter·interLat, with intraLat raised to the network
    overhead (NET_OVERHEAD_US: 1 µs Intel, 2 µs AMD; ×3 for Simple) once the ring leaves the
    node, and interLat the network's ring latency (the tree's where ppn = 1: every step then
    crosses the network)."""
    p = proto.value
    overhead = net_overhead_us * (3 if proto is Proto.SIMPLE else 1)
    multi = 1 - one_node(n_nodes)
    intra_us = _ops.maximum(HW_LATENCY_US[intra.value][Algo.RING][p], multi * overhead)
    inter_us = _ops.select(one_rank_per_node(n_ranks, n_nodes), HW_LATENCY_US["net"][Algo.TREE][p],
                           HW_LATENCY_US["net"][Algo.RING][p])
    steps, inter = ring_steps(coll, n_ranks), ring_inter_steps(coll, n_nodes)
    return (BASE_LATENCY_US[Algo.RING][p] + (steps - inter) * intra_us + inter * inter_us) * US


def tree_latency_s(proto: Proto, n_ranks, n_nodes, intra: Intra = Intra.NVLINK):
    """All-reduce only: base + 2·((n/k − 1)·intraLat + ⌊log₂k⌋·interLat) — a chain inside each
    node, a double binary tree across the nodes, up then down."""
    p = proto.value
    return (BASE_LATENCY_US[Algo.TREE][p]
            + 2 * ((n_ranks / n_nodes - 1) * HW_LATENCY_US[intra.value][Algo.TREE][p]
                   + floor_log2(n_nodes) * HW_LATENCY_US["net"][Algo.TREE][p])) * US


def nvls_latency_s(n_nodes):
    """NVLS (Simple only): the NVLink switch's multicast, 25 µs, plus the network's 18 µs when it
    spans nodes (through CollNet)."""
    s = Proto.SIMPLE.value
    return (HW_LATENCY_US["nvlink"][Algo.NVLS][s]
            + (1 - one_node(n_nodes)) * HW_LATENCY_US["net"][Algo.NVLS][s]) * US


def nvls_tree_latency_s(n_nodes):
    """NVLS inside each node and a tree across nodes: 25 + 2·⌊log₂k⌋·20.9 µs."""
    s = Proto.SIMPLE.value
    return (HW_LATENCY_US["nvlink"][Algo.NVLS_TREE][s]
            + 2 * floor_log2(n_nodes) * HW_LATENCY_US["net"][Algo.NVLS_TREE][s]) * US


def collnet_direct_latency_s(n_ranks, n_nodes):
    """SHARP through every GPU's NIC: 2·(min(1, ppn − 1)·3.7 + (ppn − 1)·0.4) + 31 µs (the 0.4 µs
    the tuner calls arity serialisation)."""
    ppn = n_ranks / n_nodes
    return (2 * (_ops.minimum(1, ppn - 1) * HW_LATENCY_US["nvlink"][Algo.COLLNET_DIRECT][2]
                 + (ppn - 1) * 0.4) + HW_LATENCY_US["net"][Algo.COLLNET_DIRECT][2]) * US


def collnet_chain_latency_s(n_ranks, n_nodes):
    """SHARP at the end of a chain through the node: 2·(ppn − 1)·2.8 + 30 µs."""
    return (2 * (n_ranks / n_nodes - 1) * HW_LATENCY_US["nvlink"][Algo.COLLNET_CHAIN][2]
            + HW_LATENCY_US["net"][Algo.COLLNET_CHAIN][2]) * US


def pat_latency_s(n_ranks, n_nodes):
    """PAT (reduce-scatter/all-gather, one rank per node, Simple): 8 + ⌊log₂k⌋·14/3.5 + 2.8·n µs
    — logarithmic in the nodes, with the linear part the tuner keeps ("hopefully we'll manage to
    remove it")."""
    return (BASE_LATENCY_US[Algo.PAT][2]
            + floor_log2(n_nodes) * HW_LATENCY_US["net"][Algo.TREE][2] / 3.5
            + 2.8 * n_ranks) * US


# ---- the tuner's per-channel caps ------------------------------------------------------------

def search_channels(nics, nic_busbw, hopper_or_later: bool = True):
    """The channels NCCL's topology search gives a group's ring and tree graphs across nodes:
    one per NIC the group's ranks hold on a node (at least one), each at one NIC's bandwidth
    (the search's speed steps, 48 GB/s for NDR, search.cc sm90/sm100SpeedArrayInter), then
    doubled by ncclTopoDupChannels unless a channel's bandwidth is under 25 GB/s, or on Hopper
    and later under 50 GB/s with more than 4 channels (search.cc l.1036–1048 @ v2.30.7-1). Eight
    400 Gb/s NICs on an H100 or B200 node: 8 channels; one: 2; eight 200 Gb/s HDR (24 GB/s): 8.

    The count stands for the search's outcome on a rail-optimised node, one GPU per NIC, that
    plan3d assumes throughout (group_net_busbw); NIC bandwidth is the profile's per-NIC bus
    bandwidth, which lies on the same side of 25 and 50 GB/s as the search's steps."""
    m = _ops.maximum(nics, 1)
    keep = _ops.select(_ops.le(CHANNEL_DUP_MIN_GB * GB, nic_busbw), 0, 1)
    big = 1 - _ops.le(m, CHANNEL_DUP_MODERN_MAX_CHANNELS)
    slow = 1 - _ops.le(CHANNEL_DUP_MODERN_MAX_GB * GB, nic_busbw)
    # hopper_or_later as a number (1/0, or an array of them), so that rows of several
    # generations evaluate together
    modern = int(hopper_or_later) if isinstance(hopper_or_later, bool) else hopper_or_later
    return m * (2 - _ops.maximum(keep, modern * big * slow))


def per_channel_max(ceiling: Ceiling, generation: Gen):
    """The (one node, two nodes, more) per-channel ceilings of PER_CHANNEL_MAX_GB, bytes/s."""
    return tuple(v * GB for v in PER_CHANNEL_MAX_GB[ceiling.value][generation.value])


def channel_cap(n_nodes, channels, one_node_max, two_nodes_max, more_nodes_max):
    """One of the tuner's caps for a group across nodes: nChannels × the per-channel ceiling at
    its node count (N2 on two nodes, N4 on more), bytes/s. On one node it is not applied
    (NO_CAP): NCCL opens 16–32 NVLink channels there and nChannels × ceiling lies above the
    ring's W (e.g. 32 × 36.7 GB/s for Hopper's ring LL128); `channels` counts network channels,
    which a one-node group has none of."""
    return _ops.select(one_node(n_nodes), NO_CAP,
                       channels * ll_max_of(n_nodes, one_node_max, two_nodes_max, more_nodes_max))


def channel_caps(n_nodes, channels, generation: Gen) -> tuple:
    """(tree, tree LL128, ring LL128) caps for a group across nodes (channel_cap), from the
    generation's ceilings."""
    return tuple(channel_cap(n_nodes, channels, *per_channel_max(c, generation))
                 for c in Ceiling)


# ---- bus bandwidth per algorithm and protocol (bytes/s), from the ring/Simple figure W -------

def ll_max_busbw(generation: Gen, n_nodes, cpu: Cpu = Cpu.INTEL):
    """llMaxBw: the generation's figure on one node, the CPU vendor's on 2 or more nodes."""
    two, more = LL_MAX_BUSBW_MULTINODE_GB[cpu.value]
    multi = _ops.select(_ops.le(n_nodes, 2), two, more)
    return _ops.select(one_node(n_nodes), LL_MAX_BUSBW_GB[generation.value], multi) * GB


def ring_busbw(proto: Proto, busbw, ll_max, caps=None):
    """Ring: LL min(llMax, W/2), LL128 min(0.92·W, nChannels × perChMaxRingLL128Bw) (120 of
    128 bytes are data; `caps` from channel_caps, None: uncapped), Simple W."""
    if proto is Proto.LL:
        return _ops.minimum(ll_max, 0.5 * busbw)
    if proto is Proto.LL128:
        return 0.92 * busbw if caps is None else _ops.minimum(0.92 * busbw, caps[2])
    return busbw


def tree_busbw(proto: Proto, busbw, ll_max, n_nodes, caps=None):
    """Tree all-reduce: min(0.92·W, nChannels × perChMaxTreeBw), then LL min(·/3.8, llMax),
    LL128 min(· × 7/9 on one node or ×120/128 across nodes, nChannels × perChMaxTreeLL128Bw)
    (`caps` from channel_caps; None: uncapped). Across three or more nodes the cap is what the
    tree runs at: 8 channels × 24 GB/s = 192 GB/s on a B200 node of eight 400 Gb/s NICs, where
    nccl-tests measures 192–196 GB/s and the ring 389 (tests/data/nccl_at_scale.json)."""
    tree = 0.92 * busbw if caps is None else _ops.minimum(0.92 * busbw, caps[0])
    if proto is Proto.LL:
        return _ops.minimum(tree / 3.8, ll_max)
    if proto is Proto.LL128:
        ll128 = tree * _ops.select(one_node(n_nodes), 7 / 9, 120 / 128)
        return ll128 if caps is None else _ops.minimum(ll128, caps[1])
    return tree


def tree_correction(proto: Proto, buffer_bytes):
    """treeCorrectionFactor at i = ⌊log₂(B/64)⌋ for 0 ≤ i < 23, else 1, as steps at the sizes
    where the table's value changes: 1 + Σ_k (c_k − c_(k−1))·1[B ≥ 64·2^(i_k)], with 1 below
    64 B and from 2^23·64 B on."""
    table = (*TREE_CORRECTION[proto.value], 1.0)
    factor, previous = 1, 1.0
    for i, c in enumerate(table):
        if c != previous:
            factor = factor + (c - previous) * _ops.le(64 * 2 ** i, buffer_bytes)
            previous = c
    return factor


def nvls_busbw(coll: Coll, nvls_allreduce_busbw, n_ranks_per_node):
    """NVLS: the all-reduce pipelines two operations (intraBw × 2); a reduce-scatter or an
    all-gather gets intraBw·(ppn − 1)/ppn. With the profile's measured NVLS all-reduce bus
    bandwidth X₂ = 2·intraBw: all-reduce X₂, others X₂/2·(ppn − 1)/ppn."""
    if coll is Coll.ALL_REDUCE:
        return nvls_allreduce_busbw
    # ppn = 1 (one rank per node) never runs NVLS: the divisor is kept positive there
    return nvls_allreduce_busbw / 2 * _ops.maximum(n_ranks_per_node - 1, 1) / n_ranks_per_node


def nvls_tree_busbw(nvls_allreduce_busbw, net_busbw, n_nodes):
    """NVLS-tree all-reduce: min(NVLS inside, network × (2 on two nodes, else 1))."""
    return _ops.minimum(nvls_allreduce_busbw,
                        net_busbw * _ops.select(_ops.le(n_nodes, 2), 2, 1))


def collnet_direct_busbw(busbw, n_ranks_per_node, nics_per_node, hopper_or_later: bool = True):
    """CollNet-direct all-reduce: W / f with f = r − (r − 1)/2, r = GPUs per NIC ("requires all
    GPUs to have a local NIC to work at full speed"), × 0.85 on sm90+."""
    ratio = n_ranks_per_node / nics_per_node
    return busbw / (ratio - (ratio - 1) / 2) * (0.85 if hopper_or_later else 1.0)


def pat_busbw(busbw):
    """PAT: 0.75·W."""
    return 0.75 * busbw


def group_net_busbw(node_net_busbw, ranks_per_node, nics_per_gpu, nics_per_node):
    """The network bandwidth one group's collectives may use on a node: the node's network bus
    bandwidth × the share of its NICs the group's own ranks hold,

        W_net,group = W_net,node · min(1, r · NICs per GPU / NICs per node),

    r the group's ranks on the node. Groups that leave the node side by side (the t·c data-
    parallel groups of a node, one rank each) each drive their own rails: 8 one-rank DP groups
    of a tp = 8 plan on a node with 8 NICs get an eighth each; a group holding all the node's
    GPUs gets all of it. Assumes rail-aligned NICs (one per GPU or per GPU pair), as NCCL's
    topology search places them (one channel per NIC). Used by every pricing of a collective
    (NVLS-tree's network side, CollNet), the cost path's and explain's alike."""
    return node_net_busbw * _ops.minimum(1, ranks_per_node * nics_per_gpu / nics_per_node)


def algbw(coll: Coll, algo: Algo, busbw, n_ranks):
    """Bus → algorithm bandwidth: × n/nsteps for ring, NVLS, NVLS-tree; × 1/2 for tree and
    CollNet; unchanged for a non-ring reduce-scatter or all-gather."""
    if coll is not Coll.ALL_REDUCE and algo is not Algo.RING:
        return busbw
    if algo in (Algo.RING, Algo.NVLS, Algo.NVLS_TREE):
        # n = 1 moves nothing (nccl_time_s gives 0): the divisor is kept positive there
        return busbw * n_ranks / _ops.maximum(ring_steps(coll, n_ranks), 1)
    return busbw / 2


# ---- time of one collective, per algorithm and protocol, and the tuner's pick ---------------

DISABLED_S = 1e9
"""The time given to a candidate the tuner cannot use for these values (bandwidth 0 in NCCL):
large enough never to be the minimum, finite so that it multiplies by 0 on every backend."""


def ring_parts_s(coll: Coll, proto: Proto, buffer_bytes, n_ranks, n_nodes, busbw, ll_max,
                 net_overhead_us=1.0, n_channels=32, caps=None):
    """Ring, as (latency, transfer): the ring latency (×1.4 for a multi-node Simple all-reduce
    once B ≥ 64·nChannels·n) and B / (ring busbw · n/nsteps); `caps` channel_caps."""
    latency = ring_latency_s(coll, proto, n_ranks, n_nodes, net_overhead_us)
    if coll is Coll.ALL_REDUCE and proto is Proto.SIMPLE:
        plateau = (1 - one_node(n_nodes)) * _ops.le(64 * n_channels * n_ranks, buffer_bytes)
        latency = latency * (1 + (RING_PLATEAU_FACTOR - 1) * plateau)
    return latency, buffer_bytes / algbw(coll, Algo.RING, ring_busbw(proto, busbw, ll_max, caps),
                                         n_ranks)


def ring_time_s(coll: Coll, proto: Proto, buffer_bytes, n_ranks, n_nodes, busbw, ll_max,
                net_overhead_us=1.0, n_channels=32):
    """Ring: latency + transfer (ring_parts_s)."""
    latency, transfer = ring_parts_s(coll, proto, buffer_bytes, n_ranks, n_nodes, busbw, ll_max,
                                     net_overhead_us, n_channels)
    return latency + transfer


def tree_parts_s(proto: Proto, buffer_bytes, n_ranks, n_nodes, busbw, ll_max, caps=None):
    """Tree all-reduce, as (latency, transfer): the tree latency, and B / (tree busbw ·
    correction(B) / 2); `caps` channel_caps."""
    bw = tree_busbw(proto, busbw, ll_max, n_nodes, caps) * tree_correction(proto, buffer_bytes)
    return (tree_latency_s(proto, n_ranks, n_nodes),
            buffer_bytes / algbw(Coll.ALL_REDUCE, Algo.TREE, bw, n_ranks))


def tree_time_s(proto: Proto, buffer_bytes, n_ranks, n_nodes, busbw, ll_max):
    """Tree all-reduce: latency + transfer (tree_parts_s)."""
    latency, transfer = tree_parts_s(proto, buffer_bytes, n_ranks, n_nodes, busbw, ll_max)
    return latency + transfer


def _available(coll: Coll, algo: Algo, proto: Proto, nvls: bool = False, sharp: bool = False,
              ll128: bool = True) -> bool:
    """Whether the tuner weighs (algo, proto) for this collective on this cluster at all:
    all-reduce: ring and tree × (LL, LL128, Simple), NVLS and NVLS-tree (Simple) where the switch
    has NVLS, CollNet direct and chain (Simple) where SHARP is enabled; reduce-scatter and
    all-gather: ring × 3 protocols, PAT (Simple), NVLS (Simple) where present. LL128 is on by
    default on Hopper and later (ll128 = False where the path rules it out)."""
    if proto is Proto.LL128 and not ll128:
        return False
    if algo is Algo.RING:
        return True
    if proto is not Proto.SIMPLE and algo is not Algo.TREE:
        return False
    if coll is Coll.ALL_REDUCE:
        return (algo is Algo.TREE or (nvls and algo in (Algo.NVLS, Algo.NVLS_TREE))
                or (sharp and algo in (Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN)))
    return algo is Algo.PAT or (nvls and algo is Algo.NVLS)


def _enabled(on, parts):
    """(latency, transfer) where on = 1; (DISABLED_S, 0) where on = 0. `parts` a function
    giving them, called only where some row may run the candidate: an array `on` of zeros alone
    gives (DISABLED_S, 0) without it (every row's value is those numbers either way; the search
    asks for PAT on ~75 % of its chunks with no group one rank per node)."""
    if _ops.all_off(on):
        return DISABLED_S, 0
    latency, transfer = parts()
    return _ops.select(on, latency, DISABLED_S), _ops.select(on, transfer, 0)


def candidate_parts_s(coll: Coll, algo: Algo, proto: Proto, buffer_bytes, n_ranks, n_nodes,
                      busbw, ll_max, net_busbw, nvls_bw, nics_per_node, net_overhead_us=1.0,
                      collnet_efficiency=0.85, n_channels=32, caps=None):
    """One (algorithm, protocol) as the tuner prices it, split into (latency, transfer): the
    latency NCCL's tables give (per call, with its steps and hops) and B / algbw. (DISABLED_S, 0)
    where it does not apply at these values (PAT needs one rank per node, NVLS one node,
    NVLS-tree and CollNet more than one) or at all (a pair `_available` leaves out).
    ll_max = ll_max_busbw(…); net_busbw the network's ring bus bandwidth this group owns
    (group_net_busbw; NVLS-tree), nvls_bw the measured NVLS all-reduce bus bandwidth,
    collnet_efficiency CollNet-direct's 0.85 on sm90+ (1 before); caps the tuner's per-channel
    caps across nodes (channel_caps: tree, tree LL128, ring LL128; None: uncapped)."""
    if algo is Algo.RING:
        return ring_parts_s(coll, proto, buffer_bytes, n_ranks, n_nodes, busbw, ll_max,
                            net_overhead_us, n_channels, caps)
    if algo is Algo.TREE and coll is Coll.ALL_REDUCE:
        return tree_parts_s(proto, buffer_bytes, n_ranks, n_nodes, busbw, ll_max, caps)
    if proto is not Proto.SIMPLE:
        return DISABLED_S, 0
    multi = 1 - one_node(n_nodes)
    if algo is Algo.PAT and coll is not Coll.ALL_REDUCE:
        return _enabled(one_rank_per_node(n_ranks, n_nodes) * multi, lambda: (
            pat_latency_s(n_ranks, n_nodes), buffer_bytes / pat_busbw(busbw)))
    if algo is Algo.NVLS:
        return _enabled(one_node(n_nodes), lambda: (nvls_latency_s(n_nodes), buffer_bytes / algbw(
            coll, Algo.NVLS, nvls_busbw(coll, nvls_bw, n_ranks / n_nodes), n_ranks)))
    if coll is not Coll.ALL_REDUCE:
        return DISABLED_S, 0
    return _enabled(multi, lambda: _multi_node_parts_s(
        algo, buffer_bytes, n_ranks, n_nodes, busbw, net_busbw, nvls_bw, nics_per_node,
        collnet_efficiency))


def _multi_node_parts_s(algo: Algo, buffer_bytes, n_ranks, n_nodes, busbw, net_busbw, nvls_bw,
                        nics_per_node, collnet_efficiency):
    """candidate_parts_s of the all-reduce's multi-node algorithms (NVLS-tree, CollNet direct
    and chain), before _enabled keeps them to the groups across nodes."""
    ppn = n_ranks / n_nodes
    if algo is Algo.NVLS_TREE:
        latency = nvls_tree_latency_s(n_nodes)
        bw = nvls_tree_busbw(nvls_bw, net_busbw, n_nodes)
    elif algo is Algo.COLLNET_DIRECT:
        latency = collnet_direct_latency_s(n_ranks, n_nodes)
        bw = collnet_direct_busbw(busbw, ppn, nics_per_node) / 0.85 * collnet_efficiency
    else:  # CollNet chain
        latency, bw = collnet_chain_latency_s(n_ranks, n_nodes), busbw
    return latency, buffer_bytes / algbw(Coll.ALL_REDUCE, algo, bw, n_ranks)


def candidate_time_s(coll: Coll, algo: Algo, proto: Proto, buffer_bytes, n_ranks, n_nodes, busbw,
                     ll_max, net_busbw, nvls_bw, nics_per_node, net_overhead_us=1.0,
                     collnet_efficiency=0.85, n_channels=32, caps=None):
    """The time the tuner predicts for one (algorithm, protocol): latency + transfer
    (candidate_parts_s); DISABLED_S where it cannot run."""
    latency, transfer = candidate_parts_s(coll, algo, proto, buffer_bytes, n_ranks, n_nodes,
                                          busbw, ll_max, net_busbw, nvls_bw, nics_per_node,
                                          net_overhead_us, collnet_efficiency, n_channels, caps)
    return latency + transfer


@functools.lru_cache(maxsize=64)
def _candidates(coll: Coll, nvls: bool = False, sharp: bool = False, ll128: bool = True) -> tuple:
    """The (algorithm, protocol) pairs the tuner weighs for coll on this cluster (`_available`);
    kept per argument set (the search asks for them thousands of times)."""
    return tuple((a, p) for a in Algo for p in Proto if _available(coll, a, p, nvls, sharp, ll128))


def nccl_time_s(coll: Coll, buffer_bytes, n_ranks, n_nodes, busbw, ll_max, net_busbw, nvls_bw,
                nics_per_node, net_overhead_us=1.0, nvls: bool = False, sharp: bool = False,
                caps=None):
    """The tuner's pick: the smallest time over the available pairs (topoGetAlgoInfo takes the
    minimum of its cost table). One rank (n = 1) sends nothing and costs 0. `caps`: the
    per-channel caps across nodes (channel_caps). Where no row has more than one rank (an
    array of them: the search's etp = 1 groups) nothing is priced: every row is 0."""
    sends = 1 - _ops.le(n_ranks, 1)
    if _ops.all_off(sends):
        return sends
    best = _ops.smallest(
        candidate_time_s(coll, algo, proto, buffer_bytes, n_ranks, n_nodes, busbw, ll_max,
                         net_busbw, nvls_bw, nics_per_node, net_overhead_us, caps=caps)
        for algo, proto in _candidates(coll, nvls, sharp))
    return sends * best



def nccl_tests_busbw(coll: Coll, buffer_bytes, n_ranks, time_s):
    """The bus bandwidth nccl-tests reports for one call of `time_s`: algbw = B / t, B its
    "size" column (the all-reduce's buffer, the all-gather's output, the reduce-scatter's input:
    the same B the tuner is asked about here), times 2(n − 1)/n for an all-reduce and (n − 1)/n
    for a reduce-scatter or all-gather (NVIDIA/nccl-tests src/all_reduce.cu AllReduceGetBw,
    all_gather.cu, reduce_scatter.cu; doc/PERFORMANCE.md). A yardstick of the benchmark, not of
    the wire: an algorithm that moves fewer bytes (tree, NVLS, SHARP) can report more."""
    return buffer_bytes / time_s * ring_steps(coll, n_ranks) / n_ranks

# ---- point to point ---------------------------------------------------------------------------

def p2p_uses_ll(message_bytes):
    """Whether NCCL sends a point-to-point message of B bytes with LL (1) or Simple (0):
    LL where B ≤ NCCL_P2P_LL_THRESHOLD = 16 KiB (src/enqueue.cc addP2pToPlan @ v2.30.7-1,
    l.919–933: a message under 64 KiB runs on one channel, so the bytes per channel are B)."""
    return _ops.le(message_bytes, P2P_LL_THRESHOLD_BYTES)


def send_recv_latency_s(proto: Proto, inside):
    """One send/recv's latency by protocol (LL or Simple), as plan3d reads the tuner's constants
    for one step (send_recv_parts_s): the ring's base latency and one step's hardware latency of
    the link (NVLink inside the domain, inside = 1; the network otherwise)."""
    p = proto.value
    return (BASE_LATENCY_US[Algo.RING][p] + _ops.select(
        inside, HW_LATENCY_US["nvlink"][Algo.RING][p], HW_LATENCY_US["net"][Algo.RING][p])) * US


def send_recv_parts_s(message_bytes, bw, inside, ll_latency_s=None, simple_latency_s=None):
    """One send/recv of B bytes as (latency, transfer), as one ring step on its link. NCCL's
    tuner has no model of send/recv (ncclTopoTuneModel prices collectives only; a p2p task gets
    no algorithm choice): what NCCL's source fixes is the protocol, LL where the bytes per
    channel are at most NCCL_P2P_LL_THRESHOLD = 16 KiB and Simple above (src/enqueue.cc
    addP2pToPlan @ v2.30.7-1, l.919–933: a message under 64 KiB runs on one channel, so LL for
    B ≤ 16 KiB, and a larger one never qualifies), and LL's halved chunk data (l.947). The
    latency is plan3d's reading of the tuner's constants for one step of that protocol: the
    ring's base latency and one step's hardware latency (NVLink inside the domain, inside = 1;
    the network otherwise): LL 6.6 + 0.6 µs or 6.6 + 2.7 µs, Simple 8.4 + 3.4 µs or
    8.4 + 14 µs; bandwidth W/2 for LL (the LL words carry half data), W for Simple.
    `ll_latency_s`, `simple_latency_s`: the two latencies where the caller holds them as
    named numbers (send_recv_latency_s by default)."""
    ll = send_recv_latency_s(Proto.LL, inside) if ll_latency_s is None else ll_latency_s
    simple = (send_recv_latency_s(Proto.SIMPLE, inside) if simple_latency_s is None
              else simple_latency_s)
    small = p2p_uses_ll(message_bytes)
    latency = _ops.select(small, ll, simple)
    return latency, _ops.select(small, message_bytes / (0.5 * bw), message_bytes / bw)


def send_recv_time_s(message_bytes, bw, inside, ll_latency_s=None, simple_latency_s=None):
    """One send/recv of B bytes: latency + transfer (send_recv_parts_s)."""
    latency, transfer = send_recv_parts_s(message_bytes, bw, inside, ll_latency_s,
                                          simple_latency_s)
    return latency + transfer


def pipeline_messages(pp, vpp_hops):
    """Stage-boundary messages per GPU and micro-batch, averaged over the p stages: each of the
    v·p − 1 chunk boundaries is crossed forward (the activation) and backward (its gradient),
    2·(v·p − 1)/p (v = vpp_hops, model/volumes.py: (hops + 1)/p for a V schedule). A middle
    stage of 1F1B sends and receives one of each per micro-batch: Megatron pairs the send to
    one neighbour with the receive from it in one batch_isend_irecv (p2p_communication.py
    _communicate), so each pair is one message time on the link, both directions at once."""
    return 2 * (vpp_hops * pp - 1) / pp


def send_recv_base_s():
    """A send/recv's base latency (Simple): the ring's, 8.4 µs (BASE_LATENCY_US)."""
    return BASE_LATENCY_US[Algo.RING][Proto.SIMPLE.value] * US


def send_recv_step_s(inside):
    """One Simple step's hardware latency on the link: NVLink's 3.4 µs inside the domain
    (inside = 1), the network's 14 µs otherwise (HW_LATENCY_US, ring)."""
    s = Proto.SIMPLE.value
    return _ops.select(inside, HW_LATENCY_US["nvlink"][Algo.RING][s],
                       HW_LATENCY_US["net"][Algo.RING][s]) * US


def all_to_all_latency_s(n_ranks, inside, base_s=None, step_s=None):
    """An all-to-all's latency: NCCL runs it as n − 1 send/recv pairs in one group, whose work
    goes out in ⌈(n − 1)/8⌉ rounds of a batch (P2P_PEERS_PER_BATCH, src/enqueue.cc @ v2.30.7-1
    l.140–149), each a Simple step on the link, after one base latency:
    base + ⌈(n − 1)/8⌉ · step. `base_s`, `step_s` where the caller holds them as named numbers
    (send_recv_base_s, send_recv_step_s by default)."""
    base = send_recv_base_s() if base_s is None else base_s
    step = send_recv_step_s(inside) if step_s is None else step_s
    rounds = _ops.ceil((n_ranks - 1) / P2P_PEERS_PER_BATCH)
    return (1 - _ops.le(n_ranks, 1)) * (base + rounds * step)


def all_to_all_time_s(bytes_per_rank, n_ranks, bw, inside):
    """All-to-all of B bytes per rank (each peer gets B/n): latency + (n − 1)/n · B / W, W the
    per-rank bus bandwidth (nccl-tests: all-to-all busbw = algbw·(n − 1)/n)."""
    return (all_to_all_latency_s(n_ranks, inside)
            + (n_ranks - 1) / n_ranks * bytes_per_rank / bw)


ALLTOALL_RAMP_EXPONENT = 0.47
"""The exponent a of alltoall_busbw's ramp. Fitted, with W∞ and τ, to nccl-tests' alltoall_perf
on two fabrics, NCCL's latency (all_to_all_split_parts_s) taken out of each measured time:
8× H100 in one NVSwitch node (NCCL 2.29.2; the median of ten nodes, 32 MiB–16 GiB;
xxrjun/nccl-tests-cluster @ 455de4f, benchmarks/example-cluster01/.../single-node/runs/
20260128-145017/without-debug/logs/nccl_N1_G8_cnode3-0{02..11}.log) a = 0.467, and 8× GB300
over multi-node NVLink (NCCL 2.28.7, 8 MiB–16 GiB; oracle-quickstart/oci-gpu-quickstarts @
61eba7f, nvidia/GB300/README-GB300.md, "2 Hosts Single Rack") a = 0.459; a = 0.47 fits both
within 3 % at every size from 8 MiB (tests/formulas/test_collectives.py,
test_the_profiles_alltoall_curves_reproduce_their_measurements)."""


def alltoall_busbw(buffer_bytes, top_busbw, ramp_s):
    """NCCL all-to-all's bus bandwidth inside an NVLink domain at a per-rank buffer of S bytes
    (nccl-tests' size: B·n/(n − 1) for B bytes sent to the n − 1 peers), as measured:

        W(S) = W∞ / (1 + (W∞·τ / S)^a),   a = ALLTOALL_RAMP_EXPONENT

    W∞ the bus bandwidth at large messages, τ the ramp time (the bandwidth is half W∞ at
    S = W∞·τ); τ = 0: W∞ at every size. A ring all-gather on the same H100 nodes is within 10 %
    of its top at 256 MiB (326 of 362 GB/s), the all-to-all is not (306 of 348 GB/s, its ring
    all-reduce's figure 370). Indexed by the buffer, not the peers' share of it: 64 GB300 over
    NVLink measure 570.6 GB/s at 256 MiB and 651.2 at 1 GiB (the same source, "16 Hosts 1
    Rack"), as 8 ranks do at the same buffer. Empirical (the profiles' [fast] alltoall_* with
    their sources), measured from 8 MiB; below it, where NCCL sends a peer's ≤ 16 KiB with LL
    (all_to_all_split_parts_s), the curve is extrapolated. S ≥ 1 byte."""
    return top_busbw / (1 + (top_busbw * ramp_s / _ops.maximum(buffer_bytes, 1))
                        ** ALLTOALL_RAMP_EXPONENT)


def alltoall_sent_busbw(sent_bytes, n_ranks, top_busbw, ramp_s):
    """alltoall_busbw for an all-to-all over n ranks that sends B bytes a rank to its peers, at
    nccl-tests' buffer S = B·n/(n − 1) (n = 1: S = B, nothing is sent)."""
    return alltoall_busbw(sent_bytes * n_ranks / _ops.maximum(n_ranks - 1, 1), top_busbw,
                          ramp_s)


def all_to_all_split_parts_s(bytes_per_rank, n_ranks, ranks_in_domain, fast_bw, net_bw,
                             base_s=None, step_nvl_s=None, step_net_s=None):
    """One NCCL all-to-all over n ranks of which g share the sender's NVLink domain, as
    (latency, transfer), B the bytes one rank sends to its n − 1 peers (B/(n − 1) each):

        latency  = base_p + ⌈(n − 1)/8⌉ · step_p,l
        transfer = f_p · max(B·(g − 1)/(n − 1) / W_nvl, B·(n − g)/(n − 1) / W_net)

    NCCL runs the all-to-all as n − 1 send/recv pairs of one group (ncclGroupStart/End), their
    work in rounds of NCCL_MAX_DEV_WORK_P2P_PER_BATCH = 8 peers (src/enqueue.cc @ v2.30.7-1
    l.140–149); each peer's message picks its protocol as a send does (addP2pToPlan l.919–933:
    LL where B/(n − 1) ≤ NCCL_P2P_LL_THRESHOLD = 16 KiB, for every message that small runs on
    one channel, else Simple), p = LL: base 6.6 µs, step 0.6 µs NVLink / 2.7 µs network, f = 2
    (half of each LL word is flags); p = Simple: 8.4 µs, 3.4 / 14 µs, f = 1 (the ring's
    constants, as send_recv_parts_s reads them); the step is the network's once the group
    leaves the domain (g < n). The NVLink and network peers are served at once, so the slower
    part governs; W_net is the rank's own network bandwidth (its share of the node's NICs,
    group_net_busbw / r). n = 1 costs nothing. `base_s`, `step_*_s`: Simple's latencies where
    the caller holds them as named numbers."""
    p_ll = Proto.LL.value
    leaves = 1 - _ops.le(n_ranks, ranks_in_domain)
    peers = _ops.maximum(n_ranks - 1, 1)
    small = p2p_uses_ll(bytes_per_rank / peers)
    ll = (BASE_LATENCY_US[Algo.RING][p_ll] + _ops.ceil(peers / P2P_PEERS_PER_BATCH) * _ops.select(
        leaves, HW_LATENCY_US["net"][Algo.RING][p_ll], HW_LATENCY_US["nvlink"][Algo.RING][p_ll])) * US
    base = send_recv_base_s() if base_s is None else base_s
    nvl_step = send_recv_step_s(1) if step_nvl_s is None else step_nvl_s
    net_step = send_recv_step_s(0) if step_net_s is None else step_net_s
    simple = base + _ops.ceil(peers / P2P_PEERS_PER_BATCH) * _ops.select(leaves, net_step,
                                                                          nvl_step)
    one = 1 - _ops.le(n_ranks, 1)
    wire = _ops.maximum(bytes_per_rank * (ranks_in_domain - 1) / peers / fast_bw,
                        bytes_per_rank * (n_ranks - ranks_in_domain) / peers / net_bw)
    return (one * _ops.select(small, ll, simple), _ops.select(small, 2 * wire, wire))


def all_to_all_split_time_s(bytes_per_rank, n_ranks, ranks_in_domain, fast_bw, net_bw,
                            base_s=None, step_nvl_s=None, step_net_s=None):
    """One all-to-all split over NVLink and the network: latency + transfer
    (all_to_all_split_parts_s)."""
    latency, transfer = all_to_all_split_parts_s(bytes_per_rank, n_ranks, ranks_in_domain,
                                                 fast_bw, net_bw, base_s, step_nvl_s, step_net_s)
    return latency + transfer


def many_collectives_s(n_calls, one_call_s):
    """A step's worth of the same collective issued n times (per-layer gathers, buckets,
    per-micro-batch sends): n × the time of one — every call pays its own latency."""
    return n_calls * one_call_s


def ll_max_of(n_nodes, one_node_bw, two_nodes_bw, more_nodes_bw):
    """llMaxBw from a cluster's three figures (ll_max_busbw at 1, 2 and more nodes), picked by
    the nodes a group spans."""
    return _ops.select(one_node(n_nodes), one_node_bw,
                       _ops.select(_ops.le(n_nodes, 2), two_nodes_bw, more_nodes_bw))


# ---- how many collectives a framework issues ---------------------------------------------------

MEGATRON_MIN_BUCKET_PARAMS = 40_000_000
MEGATRON_BUCKET_PARAMS_PER_RANK = 1_000_000
"""Megatron-Core DDP's default bucket: max(40,000,000, 1,000,000 · dp·cp) parameters, "larger DP
sizes need larger buckets to ensure collectives do not become latency-bound"; one bucket (the
whole buffer) when the reduction does not overlap (megatron/core/distributed/
distributed_data_parallel.py and megatron/training/training.py: bucket_size None without
overlap_grad_reduce)."""


def bucketed_calls(params, bucket_params):
    """Collectives a bucketed reduction issues: ⌈Ψ / bucket⌉ (at least one)."""
    return _ops.maximum(1, _ops.ceil(params / bucket_params))


def megatron_buckets(params, dp_ranks, overlap):
    """Megatron-Core's gradient buckets (and the param-gather buckets that mirror them):
    ⌈Ψ / max(4·10⁷, 10⁶·d)⌉ with overlap, one without."""
    bucket = _ops.maximum(MEGATRON_MIN_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_RANK * dp_ranks)
    return _ops.select(overlap, bucketed_calls(params, bucket), 1)
