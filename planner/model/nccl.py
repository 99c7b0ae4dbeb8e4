"""NCCL's tuner for one cluster (beside model/collectives.py, the links and collectives concern):
which GPU generation, host CPU and switch features a profile has, turned into the arguments of
planner/formulas/collectives.py, and — for one plan, on floats — the algorithm and protocol the
tuner picks, for `explain`."""

from __future__ import annotations

from dataclasses import dataclass

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
    NVLS on the switch (with its measured all-reduce bus bandwidth), SHARP, NICs per node."""

    generation: K.Gen
    cpu: K.Cpu
    nvls_bw: float | None
    sharp: bool
    nics_per_node: float
    net_busbw: float

    @classmethod
    def of(cls, hw: HardwareProfile) -> Cluster:
        # Grace (Arm) hosts take NCCL's Intel/default row; EPYC hosts of AMD platforms the AMD one
        cpu = K.Cpu.AMD if "AMD" in hw.gpu.upper() else K.Cpu.INTEL
        return cls(generation=generation_of(hw), cpu=cpu,
                   nvls_bw=hw.fast.nvls_busbw_bytes_per_s, sharp=hw.topology.sharp,
                   nics_per_node=hw.nics_per_gpu * hw.node_gpus,
                   net_busbw=hw.network.busbw_bytes_per_s * hw.nics_per_gpu * hw.node_gpus)


def candidates(coll: K.Coll, cluster: Cluster) -> list:
    """The (algorithm, protocol) pairs the tuner weighs for coll on this cluster."""
    return K._candidates(coll, cluster.nvls_bw is not None, cluster.sharp)


def nccl_pick(coll: K.Coll, buffer_bytes: float, n_ranks: float, n_nodes: float, busbw: float,
              cluster: Cluster) -> tuple[K.Algo, K.Proto, float]:
    """For one plan (floats): the (algorithm, protocol) the tuner picks and its time (s)."""
    ll_max = float(K.ll_max_busbw(cluster.generation, n_nodes, cluster.cpu))
    times = {(a, p): float(K.candidate_time_s(
        coll, a, p, buffer_bytes, n_ranks, n_nodes, busbw, ll_max, cluster.net_busbw,
        cluster.nvls_bw or busbw, cluster.nics_per_node, K.NET_OVERHEAD_US[cluster.cpu.value]))
        for a, p in candidates(coll, cluster)}
    algo, proto = min(times, key=times.get)
    return algo, proto, times[(algo, proto)]
