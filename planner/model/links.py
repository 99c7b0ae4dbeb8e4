"""Links and collectives: where each parallel group's ranks sit (the framework's rank order), which
link each group crosses, and the bus bandwidth its collectives get (formulas/comm.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..formulas import _ops
from ..formulas import comm as C
from ..placement import MEGATRON_RANK_ORDER, group_stride


def collective_group(x, size, stride, domain):
    """One group of `size` ranks `stride` apart: whether it lies inside an NVLink domain, its
    ranks per domain r, the domains k it spans, and the bus bandwidth of its ring collectives
    (bw) and all-reduces (bw_allreduce: NVLS inside the domain where the profile has it)."""
    inside = C.inside_domain(stride * size, domain)
    r = C.ranks_per_domain(size, stride, domain, inside)
    oversub = C.oversubscription_factor(stride * size, x.pod, x.oversub)
    crossing = C.cross_domain_busbw(r, x.nics_per_gpu, x.net_bw, x.fast_bw, oversub)
    return SimpleNamespace(inside=inside, r=r, k=C.domains_spanned(size, r),
                           bw=C.group_busbw(inside, x.fast_bw, crossing),
                           bw_allreduce=C.group_busbw(inside, nvls_or_ring_bw(x), crossing))


def nvls_or_ring_bw(x):
    """An all-reduce's bus bandwidth inside the domain: the profile's measured NVLS figure where
    the switch has NVLS (x.nvls = 1), else the ring's x.fast_bw — taken from x here, not frozen
    when the profile is read, so that a calibrated x.fast_bw reaches it."""
    return _ops.select(x.nvls, x.nvls_bw, x.fast_bw)


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
    cp_group = p2p_group(x, cp, group_stride(degrees, ("cp",), order), domain)
    dp_stride, shard = group_stride(degrees, ("cp", "dp"), order), shard_group_ranks(x, cp)
    replicas, hybrid = dp_replicate_of(x)
    return SimpleNamespace(
        domain=domain,
        tp=collective_group(x, t, group_stride(degrees, ("tp",), order), domain),
        cp=cp_group,
        dp=collective_group(x, shard, dp_stride, domain),
        pp=SimpleNamespace(inside=pp_inside, r=1, k=1, bw=pp_bw, bw_allreduce=pp_bw),
        replica=(collective_group(x, replicas, dp_stride * shard, domain) if hybrid else None))


def p2p_group(x, size, stride, domain):
    """A group of `size` ranks `stride` apart whose traffic goes point to point (ring attention's
    K/V passes, an all-to-all's pairwise exchanges): placed as collective_group places it, but a
    hop that leaves the domain runs at one rank's own NICs (C.p2p_busbw)."""
    group = collective_group(x, size, stride, domain)
    group.bw = C.group_busbw(group.inside, x.fast_bw, C.p2p_busbw(
        x.nics_per_gpu, x.net_bw, x.fast_bw,
        C.oversubscription_factor(stride * size, x.pod, x.oversub)))
    return group
