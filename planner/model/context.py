"""cp-kind: context parallelism by kind — the ring, the all-to-all (Ulysses) or both
(hierarchical): each part's bytes per layer, its link, its time and what of it is exposed."""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import _ops
from ..formulas import collectives as K
from ..formulas import comm as C
from ..formulas import context as CX
from ..formulas import timing as T
from ..formulas.choices import ContextKind
from ..placement import MEGATRON_RANK_ORDER, group_stride
from .links import p2p_group
from .nccl import all_to_all_latency, measured_a2a_busbw, send_recv_latencies
from .numbers import Choices, same


def context_kind_of(c: Choices) -> ContextKind:
    """The plan's context-parallel kind: its own, or its framework's default."""
    return c.cp_kind or c.framework.cp_kinds[0]


def context_parts(x, c: Choices, s, b, t, cp, note=same) -> SimpleNamespace:
    """Context parallelism's two parts per layer and micro-batch (formulas/context.py): an
    all-to-all over c_a ranks (a2a_layer) and a ring over the cp/c_a groups (ring_layer); the kind
    picks which are built — the ring alone (c_a = 1), the all-to-all alone (c_a = cp, Ulysses),
    or both (hierarchical, c_a = cp_a2a; the search's general form, whose c_a column also holds 1
    and cp). The parts the kind leaves out are 0."""
    kind = context_kind_of(c)
    c_a = CX.a2a_group(kind, cp, x.cp_a2a)
    shown = same if kind is ContextKind.RING else note  # new terms only where an a2a runs
    a2a = ring = 0
    if kind is not ContextKind.RING:
        a2a = shown("cp_a2a_layer_bytes", CX.a2a_layer_bytes(
            s, b, x.n_heads, x.n_kv_heads, x.head_dim, t, cp, c_a, x.act_bytes))
    if kind is not ContextKind.ALL_TO_ALL:
        ring = CX.ring_layer_bytes(s, b, x.n_kv_heads, x.head_dim, t, cp, c_a, x.act_bytes)
        if kind is ContextKind.HIERARCHICAL:
            ring = note("cp_ring_layer_bytes", ring)
    layer = (a2a + ring if kind is ContextKind.HIERARCHICAL
             else a2a if kind is ContextKind.ALL_TO_ALL else ring)
    # the K/V chunk each ring step passes (the same size for the plain ring and hierarchical)
    chunk = CX.kv_chunk_bytes(s, b, x.n_kv_heads, x.head_dim, t, cp, x.act_bytes)
    return SimpleNamespace(kind=kind, c_a=c_a, a2a_layer=a2a, ring_layer=ring, layer=layer,
                           chunk=chunk)


def context_links(x, parts: SimpleNamespace, g: SimpleNamespace, t, cp, p,
                  order=MEGATRON_RANK_ORDER) -> SimpleNamespace:
    """Where each part's ranks sit. The all-to-all group is c_a consecutive ranks of the cp group
    (stride t in the tp-cp-dp-pp order: inside the NVLink domain when t·c_a fits it, as
    Megatron's create_hierarchical_groups makes its first level, core/parallel_state.py @
    d98e8a64dd l.378-433); the ring joins the cp/c_a ranks holding the same place in each group
    (stride t·c_a). The plain kinds use the whole cp group (group_links)."""
    if parts.kind is not ContextKind.HIERARCHICAL:
        return SimpleNamespace(a2a=g.cp, ring=g.cp)
    stride = group_stride(dict(tp=t, cp=cp, dp=x.dp, pp=p), ("cp",), order)
    return SimpleNamespace(a2a=p2p_group(x, parts.c_a, stride, g.domain),
                           ring=p2p_group(x, cp / parts.c_a, stride * parts.c_a, g.domain))


def context_part_traffic(layers, parts: SimpleNamespace, links: SimpleNamespace) -> list[tuple]:
    """(bytes per micro-batch, link group) of each part the kind runs: the all-to-all's, then the
    ring's, each on the link where its own group's ranks sit."""
    out = []
    if parts.kind is not ContextKind.RING:
        out.append((layers * parts.a2a_layer, links.a2a))
    if parts.kind is not ContextKind.ALL_TO_ALL:
        out.append((layers * parts.ring_layer, links.ring))
    return out


def a2a_busbw(x, parts: SimpleNamespace, link: SimpleNamespace, share) -> object:
    """The bus bandwidth of one of CP's all-to-alls, a2a_layer/8 bytes a rank: inside the NVLink
    domain the measured all-to-all's (nccl.measured_a2a_busbw over c_a ranks), across it the
    link's; at the part's share of its link.
    The eight calls are priced at their mean size; Q's and the output's are a/k times K's and
    V's, and W rises with the size, so this overstates their time a little under GQA."""
    ramped = measured_a2a_busbw(x, parts.a2a_layer / 8, parts.c_a, link.bw)
    return _ops.select(link.inside, ramped, link.bw) * share.a2a


def context_time(x, parts: SimpleNamespace, links: SimpleNamespace, share, window,
                 note=same) -> tuple:
    """(time, exposed time) of one layer's context-parallel traffic, forward and backward.

    The all-to-all part is exposed: its all-to-alls sit between the QKV projection and the
    attention core, and between the core and the output projection, with nothing to hide under
    (Jacobs et al. 2023 §3.2; Transformer Engine runs them on its cp stream, but the attention
    waits for Q, K and V: context_parallel.py @ d0067d0, AttnFuncWithCPAndQKVOA2A); α–β with
    8·(c_a − 1) exchanges. The ring part overlaps the attention blocks step by step, forward and
    backward (`window`), and its NCCL kernels slow the attention they hide under
    (C.overlap_slowdown_s). Each at its part's share of its own link (`share.a2a`,
    `share.ring`: the same for the plain kinds). Each call pays NCCL's latency (issue 22): an
    all-to-all its base and one step per round of 8 peers (K.all_to_all_latency_s), each ring
    step's K/V chunk one send/recv (K.send_recv_time_s: LL up to 16 KiB, Simple above)."""
    shown = same if parts.kind is ContextKind.RING else note
    total, exposed = [], []
    if parts.kind is not ContextKind.RING:
        # eight all-to-alls (Q, K, V and the output, forward and backward), each one call
        a2a_s = shown("cp_a2a_layer_s", parts.a2a_layer / a2a_busbw(x, parts, links.a2a, share)
                      + 8 * all_to_all_latency(x, parts.c_a, links.a2a.inside))
        total.append(a2a_s)
        exposed.append(a2a_s)
    if parts.kind is not ContextKind.ALL_TO_ALL:
        # 3·(c/c_a − 1) steps, each one send/recv of a K/V chunk on the ring's link
        ring_s = CX.ring_messages(x.cp, parts.c_a) * K.send_recv_time_s(
            parts.chunk, links.ring.bw * share.ring, links.ring.inside,
            *send_recv_latencies(x, links.ring.inside))
        if parts.kind is ContextKind.HIERARCHICAL:
            ring_s = note("cp_ring_layer_s", ring_s)
        total.append(ring_s)
        exposed.append(T.exposed_time_s(ring_s, window)
                       + C.overlap_slowdown_s(ring_s, window, x.overlap_slow))
    return sum(total[1:], total[0]), sum(exposed[1:], exposed[0])
