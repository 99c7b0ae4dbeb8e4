"""Links and collectives per micro-batch: where each group's ranks sit, the share of its link each
group's traffic gets beside the others', how busy each link is, and the time of the tensor-,
context- and expert-parallel collectives with what of it compute does not hide
(formulas/comm.py, formulas/timing.py, formulas/moe.py)."""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import _ops
from ..formulas import collectives as K
from ..formulas import comm as C
from ..formulas import context as CX
from ..formulas import timing as T
from ..formulas.choices import ContextKind, Schedule
from . import moe as MOE
from .context import a2a_busbw, context_links, context_part_traffic, context_time
from .links import group_links
from .nccl import Call, nccl_s, send_recv_latencies, tuner_link
from .numbers import Choices, same


def placement(x, c: Choices, k: SimpleNamespace, note=same) -> SimpleNamespace:
    """Where each group's ranks sit, before any traffic is priced on them: each group's link
    (group_links, in the framework's rank order) and, moe, whether the expert exchange's ep·etp
    span stays inside one NVLink domain (ep_inside; 0 for a dense model). The memory reads these
    of the layout beside the degrees (model/runtime.py: the communicators' buffers, the
    point-to-point FIFOs), so they are a concern of their own, ahead of the collectives'."""
    g = group_links(x, k.t, k.cp, k.p, c.framework.rank_order)
    ep_inside = x.moe * C.inside_domain(x.ep * x.etp, g.domain) if k.moe_model else 0
    return SimpleNamespace(links=g, ep_inside=ep_inside)


def link_shares(x, c: Choices, k: SimpleNamespace, note=same) -> SimpleNamespace:
    """The share of each group's link (placement: Megatron's rank order unless the
    framework has its own) each group's traffic gets, and each link's busy time per
    micro-batch."""
    t, cp, p, layers, g = k.t, k.cp, k.p, k.layers, k.links  # g: placement
    cp_links = context_links(x, k.cp_parts, g, t, cp, p, c.framework.rank_order)  # cp-kind
    tp_inside, cp_inside, dp_inside, pp_inside = g.tp.inside, g.cp.inside, g.dp.inside, g.pp.inside
    # traffic of one micro-batch, for the groups that share a link in the same window
    tp_mb_bytes = layers * (k.fwd_passes + 1) * k.tp_layer
    pp_mb_bytes = C.pp_step_bytes(p, 1, k.v_hops, k.boundary)
    # cp-kind: CP's traffic by part, each on its own link (one part for the ring or Ulysses,
    # the all-to-all and the ring for the hierarchical kind)
    cp_traffic = context_part_traffic(layers, k.cp_parts, cp_links)

    def cp_beside(inside):  # CP's bytes per micro-batch on the link a group crosses
        return sum(C.same_link(inside, link.inside) * v for v, link in cp_traffic)

    def cp_part_share(part_bytes, inside):  # a part that moves nothing (c_a = 1 or cp) gets 1
        return C.link_share(part_bytes, C.same_link(inside, tp_inside) * tp_mb_bytes
                            + C.same_link(inside, pp_inside) * pp_mb_bytes,
                            (1 - _ops.le(cp, 1)) * (1 - _ops.le(part_bytes, 0)))

    tp_share = note("tp_share", C.link_share(tp_mb_bytes, cp_beside(tp_inside),
                                             1 - _ops.le(t, 1)))
    shares = [cp_part_share(v, link.inside) for v, link in cp_traffic]
    cp_shares = SimpleNamespace(a2a=shares[0], ring=shares[-1])
    # the share shown: the part that moves more (the only one for the ring or Ulysses)
    cp_share = note("cp_share", shares[0] if len(shares) == 1 else _ops.select(
        _ops.le(cp_traffic[0][0], cp_traffic[1][0]), shares[1], shares[0]))
    pp_share = note("pp_share", C.link_share(pp_mb_bytes, cp_beside(pp_inside),
                                             1 - _ops.le(p, 1)))
    # moe: the expert exchange's bytes per micro-batch by link and pass, for the collectives
    # that run beside it (MOE.beside_dp_bytes); PP's sends beside it are priced once, as PP's
    # own exposed time (MOE.pp_beside_exchange)
    ep = expert_traffic(x, c, k, g.domain)
    # each link's busy time per micro-batch from TP, CP and PP, at their own bandwidths
    # cp-kind: each part on its own link
    busy = [tp_mb_bytes / g.tp.bw, *(v / link.bw for v, link in cp_traffic),
            pp_mb_bytes / g.pp.bw]
    inside = [tp_inside, *(link.inside for _, link in cp_traffic), pp_inside]
    return SimpleNamespace(
        cp_links=cp_links, tp_inside=tp_inside, cp_inside=cp_inside,
        dp_inside=dp_inside, pp_inside=pp_inside, pp_mb_bytes=pp_mb_bytes, tp_share=tp_share,
        cp_shares=cp_shares, cp_share=cp_share, pp_share=pp_share,
        nvlink_busy_mb=sum(i * b for i, b in zip(inside, busy)),
        network_busy_mb=sum((1 - i) * b for i, b in zip(inside, busy)),
        # what runs beside the data-parallel collectives on their link, per micro-batch (the
        # expert exchange's by phase: MOE.beside_dp_bytes)
        dp_concurrent_bytes=C.same_link(dp_inside, pp_inside) * pp_mb_bytes
        + cp_beside(dp_inside), ep_traffic=ep.by_pass, ep_deepep=ep.deepep)


def expert_traffic(x, c: Choices, k: SimpleNamespace, domain) -> SimpleNamespace:
    """moe: the bytes one GPU's expert exchange sends per micro-batch on NVLink (nvl) and the
    network (net), summed over the stage's MoE layers, and by pass (by_pass:
    MOE.exchange_traffic's fields, the same sums); zeros for a dense model. `deepep`: DeepEP's
    calls (MOE.deepep_calls), which expert_all_to_all prices as they are."""
    if not k.moe_model:
        zero = SimpleNamespace(fwd_nvl=0, fwd_net=0, bwd_nvl=0, bwd_net=0)
        return SimpleNamespace(nvl=0, net=0, by_pass=zero, deepep=None)
    deepep = MOE.deepep_calls(x, domain, k.moe_tokens, k.lam)
    t = MOE.exchange_traffic(x, c.moe_dispatcher, domain, k.moe_tokens, k.lam, k.ep_passes,
                             deepep)
    layers = x.moe * k.moe_last
    by_pass = SimpleNamespace(**{name: layers * v for name, v in vars(t).items()})
    return SimpleNamespace(nvl=by_pass.fwd_nvl + by_pass.bwd_nvl,
                           net=by_pass.fwd_net + by_pass.bwd_net, by_pass=by_pass,
                           deepep=deepep)


def tensor_and_context_times(x, c: Choices, k: SimpleNamespace, note=same) -> SimpleNamespace:
    """TP's collectives per layer and direction, what of them the backward hides, one layer's
    time as a per-layer benchmark sees it, and CP's exposed time per layer."""
    t, g = k.t, k.links
    # each TP collective's buffer: one micro-batch's b·s·h activations of the layer (c-split),
    # t times the t-split boundary message; NCCL's tuner picks each call's algorithm (NVLS or
    # the ring inside the domain; ring, tree, NVLS-tree or CollNet across nodes), every call
    # paying its own latency (formulas/collectives.py, model/nccl.py)
    link, buffer = tuner_link(x, g.tp, k.tp_share), t * k.boundary
    if c.sequence_parallel:  # two all-gather + reduce-scatter pairs per direction
        kinds = ((K.Coll.ALL_GATHER, "TP all-gather"), (K.Coll.REDUCE_SCATTER, "TP reduce-scatter"))
    else:  # two all-reduces per direction
        kinds = ((K.Coll.ALL_REDUCE, "TP all-reduce"),)
    tp_dir_s = sum(2 * nccl_s(coll, buffer, t, link) for coll, _ in kinds)
    # calls per step: 2 per layer, direction and forward pass (recompute reruns the forward's)
    calls = 2 * k.layers * k.m * (k.fwd_passes + 1)
    note("collectives", [Call(coll, buffer, calls, t, link, name) for coll, name in kinds])
    tp_dir_s = note("tp_layer_s", tp_dir_s)
    # forward all-reduces sit on the critical path; the backward's overlap the weight-gradient
    # GEMMs (Megatron's asynchronous TP all-reduce), which take as long as the forward matmuls
    tp_bwd_exposed = (T.exposed_time_s(tp_dir_s, k.mm_s) if c.framework.tp_backward_overlap
                      else tp_dir_s)
    # cp-kind: the all-to-all part exposed, the ring part under the attention products, forward
    # and backward (context_time)
    cp_window = (1 + k.att_bwd) * k.att_s
    _, cp_layer_exposed = context_time(x, k.cp_parts, k.cp_links, k.cp_shares, cp_window, note)
    note("collectives", context_calls(x, k))
    return SimpleNamespace(
        tp_layer_exposed=k.fwd_passes * tp_dir_s + tp_bwd_exposed,
        # one layer as a per-layer benchmark sees it (Korthikanti 2022 Table 4): forward, and
        # backward with its recomputation
        layer_fwd_total=k.fwd_s + tp_dir_s,
        layer_bwd_total=k.bwd_s + k.recompute_s + (k.fwd_passes - 1) * tp_dir_s + tp_bwd_exposed,
        cp_layer_exposed=cp_layer_exposed)


def expert_all_to_all(x, c: Choices, k: SimpleNamespace, note=same) -> SimpleNamespace:
    """moe: expert parallelism's exchange, per MoE layer and micro-batch: every collective the
    plan's dispatcher issues (model/moe.py exchange_s: Megatron's all-to-alls of tokens and
    probabilities and its token-count all-gather, the all-gather dispatcher's gathers and
    reduce-scatters, or DeepEP's dispatch and combine), forward (rerun under full recompute)
    and backward, each call at NCCL's latency and on the links its group crosses. Exposed unless
    the plan overlaps it with another micro-batch's compute (Megatron's 1F1B merge, DualPipe);
    0 for a dense model."""
    if not k.moe_model:
        return SimpleNamespace(ep_mb_s=0, ep_bytes=0)
    m, g, moe_tokens, lam = k.m, k.links, k.moe_tokens, k.lam
    ep_span_inside = k.ep_inside  # the ep·etp span inside a domain (placement)
    one, layer, calls = MOE.exchange_s(x, c.moe_dispatcher, g.domain, moe_tokens, lam,
                                       k.ep_passes, k.ep_deepep)
    a2a_s = note("all_to_all_s", one)  # one token dispatch, as before
    layer_s = note("ep_layer_s", layer)
    note("collectives", MOE.noted_calls(x, c.moe_dispatcher, g.domain, calls, k.moe_last * m))
    ep_layer_exposed = x.moe * MOE.shared_overlap_exposed_s(x, k, MOE.exposed_exchange_s(
        x, c.moe_dispatcher, c.schedule is Schedule.DUALPIPEV, layer_s, k.fwd_s + k.bwd_s, k.p,
        k.v), c.moe_dispatcher)
    # the share of the exchange compute hides (what crowds the window of the data-parallel
    # collectives beside it: MOE.beside_dp_bytes)
    ep_hidden = MOE.hidden_share(x, layer_s, ep_layer_exposed)
    # the exchange keeps its link busy too (on NVLink when the ep·etp group fits a domain, else
    # counted on the network, whose NICs it leaves on)
    ep_busy_mb = x.moe * k.moe_last * layer_s
    t = k.ep_traffic  # the stage's MoE layers' bytes per micro-batch, from the calls priced
    return SimpleNamespace(
        ep_mb_s=k.moe_last * ep_layer_exposed, all_to_all_s=a2a_s, ep_hidden=ep_hidden,
        ep_bytes=note("ep_bytes", m * (t.fwd_nvl + t.fwd_net + t.bwd_nvl + t.bwd_net)),
        nvlink_busy_mb=k.nvlink_busy_mb + ep_span_inside * ep_busy_mb,
        network_busy_mb=k.network_busy_mb + (1 - ep_span_inside) * ep_busy_mb)


def pipeline_sends_s(x, k: SimpleNamespace, note=same):
    """PP's point-to-point time per micro-batch on a GPU: K.pipeline_messages messages of one
    stage boundary each (the b·s·h activation split over t and c, or its gradient), each a
    send/recv NCCL runs with its own latency and protocol (K.send_recv_time_s: LL up to 16 KiB,
    Simple above), on the pipeline link at PP's share of it. Noted for explain as one row."""
    g, p = k.links, k.p
    link = SimpleNamespace(bw=g.pp.bw * k.pp_share, inside=k.pp_inside)
    sends = K.pipeline_messages(p, k.v_hops)
    note("collectives", [Call(None, k.boundary, k.m * sends, p, link, "PP send/recv")])
    return sends * K.send_recv_time_s(k.boundary, link.bw, link.inside,
                                      *send_recv_latencies(x, link.inside))


def context_calls(x, k: SimpleNamespace) -> list:
    """CP's calls per step for explain, as context_time prices them: the ring's send/recv of one
    K/V chunk, 3·(c/c_a − 1) per layer and micro-batch, and the all-to-all's eight calls per
    layer and micro-batch (Call.buffer_bytes: what one rank sends in one, a2a_layer / 8). The
    parts a kind does not run carry no calls."""
    parts, links, share, lm = k.cp_parts, k.cp_links, k.cp_shares, k.layers * k.m
    out = []
    if parts.kind is not ContextKind.RING:
        out.append(Call(None, parts.a2a_layer / 8, 8 * lm, parts.c_a, SimpleNamespace(
            bw=a2a_busbw(x, parts, links.a2a, share), inside=links.a2a.inside), "CP all-to-all",
            p2p="all-to-all"))
    if parts.kind is not ContextKind.ALL_TO_ALL:
        out.append(Call(None, parts.chunk, CX.ring_messages(x.cp, parts.c_a) * lm,
                        x.cp / parts.c_a, SimpleNamespace(bw=links.ring.bw * share.ring,
                                                          inside=links.ring.inside),
                        "CP ring send/recv"))
    return out
