"""A MoE layer's costs as a plan runs it (moe helper, issue 23): the busiest expert-parallel
rank's load, the router's and the permutation's memory-bound work and kernels, the exchange by
dispatcher on its links, and what the overlap leaves exposed. model/cost.py calls these on the
plan's numbers `x`; the maths lives in formulas/moe_layer.py, moe_dispatch.py and moe_step.py.
"""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import _ops
from ..formulas import collectives as K
from ..formulas import comm as C
from ..formulas import moe as MO
from ..formulas import moe_dispatch as D
from ..formulas import moe_step as S
from ..formulas import timing as T
from ..formulas.moe_layer import MAX_VIOLATION, ROUTER_PASSES, Balancing, Dispatcher
from ..formulas.moe_step import A2AOverlap
from ..schema import ModelSpec, PlanConfig
from .links import collective_group
from .nccl import Call, nccl_s, tuner_link

DEFAULT_DISPATCHER = Dispatcher.ALL_TO_ALL
"""The dispatcher a plan uses unless it names one: Megatron-Core's --moe-token-dispatcher-type
default is alltoall (megatron/core/transformer/transformer_config.py @ d98e8a64dd); torchtitan's
expert parallelism runs an all-to-all too (torchtitan/models/common/token_dispatcher.py @
b5bcd76, AllToAllTokenDispatcher)."""

DEEPEP_COMM_SMS = 24
"""SMs DeepEP's normal kernels hold while they run in training (formulas.moe_dispatch
.DEEPEP_SMS["v1"]; Megatron's flex dispatcher sets DeepEP's num_sms to 24 by default)."""


def model_numbers(model: ModelSpec) -> dict:
    """The model's numbers the MoE terms read: its balancing's measured skew and its
    group-limited routing (1 and 1 without groups)."""
    return dict(max_vio=MAX_VIOLATION[Balancing(model.balancing)],
                expert_groups=model.n_expert_groups or 1, topk_groups=model.topk_groups or 1)


def load_numbers(imbalance: float | None, capacity_factor: float | None, forced: bool,
                 mtp: bool = True) -> dict:
    """A plan's or a request's load settings as numbers: the λ it fixes (0: derived), the
    capacity factor that caps it (0: dropless), forced balance; and whether the model's
    multi-token-prediction modules train (`mtp_on`; the search: yes)."""
    given = 1.0 if forced else (imbalance or 0.0)
    return dict(moe_load_given=given, moe_cap=capacity_factor or 0.0, moe_forced=int(forced),
                mtp_on=int(mtp), shared_overlap=0)


def overlap_problem(ep, pp, vpp, full_recompute, dispatcher: str | None) -> str | None:
    """Why Megatron-Core refuses --overlap-moe-expert-parallel-comm for a layout, or None: it
    needs expert parallelism, virtual stages when pp > 1, no full recomputation, and the
    all-to-all or flex dispatcher (transformer_config.py __post_init__ @ d98e8a64dd)."""
    if ep <= 1:
        return "the all-to-all overlap needs expert parallelism (ep > 1)"
    if pp > 1 and vpp <= 1:
        return "the all-to-all overlap needs virtual stages (--vpp > 1) when pp > 1"
    if full_recompute:
        return "the all-to-all overlap runs without full recomputation"
    if dispatcher == Dispatcher.ALL_GATHER.value:
        return "the all-to-all overlap runs with the alltoall or deepep dispatcher"
    return None


def overlap_admissible(space: dict, full_recompute: bool):
    """overlap_problem on the search's columns: every candidate that does not overlap, and the
    overlapped ones where Megatron runs the overlap."""
    ep, pp, vpp = space["ep"], space["pp"], space["vpp"]
    return (space["a2a_overlap"] == 0) | ((ep > 1) & ((pp <= 1) | (vpp > 1))
                                          & (not full_recompute))


def config_numbers(config: PlanConfig) -> dict:
    """A plan's load settings and whether it dispatches by DeepEP (`deepep`, 0 or 1: the search
    carries it as a column, so one choice group weighs both dispatchers)."""
    return dict(**{**load_numbers(config.moe_imbalance, config.moe_capacity_factor,
                                  config.moe_forced_balance, config.mtp),
                   "shared_overlap": int(config.moe_shared_expert_overlap)},
                a2a_overlap=int(config.moe_a2a_overlap),
                deepep=int(config.moe_dispatcher == Dispatcher.DEEPEP.value))


def _by_dispatcher(x, dispatcher: Dispatcher, term):
    """term(dispatcher) for the plan's dispatcher, or DeepEP's where the candidate's `deepep`
    column says so (the search weighs both in one pass)."""
    chosen = term(dispatcher)
    if dispatcher is Dispatcher.DEEPEP:
        return chosen
    return _ops.select(x.deepep, term(Dispatcher.DEEPEP), chosen)


def dispatcher_of(name: str | None) -> Dispatcher:
    return DEFAULT_DISPATCHER if name is None else Dispatcher(name)


def load(x, tokens):
    """λ of the plan's MoE layers: the fixed value, else moe_step.layer_load (the model's
    balancing skew over ep ranks plus the micro-batch's sampling noise); a capacity factor caps
    it (tokens beyond it drop)."""
    derived = S.layer_load(x.max_vio, x.ep, x.n_experts, tokens * x.etp, x.top_k, 0)
    lam = _ops.select(_ops.le(x.moe_load_given, 0), derived, x.moe_load_given)
    return _ops.select(_ops.le(x.moe_cap, 0), lam, _ops.minimum(lam, x.moe_cap))


def forward_extra_s(x, dispatcher: Dispatcher, tokens, lam, tp, streams=0):
    """One MoE layer's forward time outside its GEMMs and its exchange: the router's and the
    permutation's HBM traffic (moe_step.memory_bound_bytes) at the profile's memory-bound
    efficiency, and the kernels the router, the dispatch and the experts launch
    (moe_step.layer_kernels; one GEMM per local expert where the framework runs its grouped
    GEMMs on `streams` > 0 streams) at the profile's per-kernel overhead. The backward's share
    follows the layer's (backward_layer_s doubles it)."""
    passes = ROUTER_PASSES[(Balancing.AUX_LOSS, False)]
    local = MO.local_experts(x.n_experts, x.ep)
    per_expert = int(streams > 0)

    def term(kind: Dispatcher):
        moved = S.memory_bound_bytes(tokens, x.top_k, x.hidden, x.n_experts, local, kind,
                                     passes, tp, x.ep, lam, x.act_bytes)
        return (T.memory_bound_time_s(moved, x.hbm_bw, x.hbm_eff)
                + T.kernel_overhead_s(S.layer_kernels(kind, False, local, per_expert),
                                      x.kernel_s))

    return _by_dispatcher(x, dispatcher, term)


def ep_link(x, domain) -> SimpleNamespace:
    """The EP group's links for an all-to-all (model/nccl.py Call link): its ranks per NVLink
    domain g (etp apart: MO.ep_ranks_in_domain), whether it stays inside one, NVLink's bus
    bandwidth, and each rank's own network bandwidth — its ranks' share of the node's NICs,
    K.group_net_busbw over the g_n = min(g, GPUs per node) ranks a node holds, per rank and
    over the oversubscription above a full-bisection pod: ν·W_nic/o on rail-aligned NICs. NCCL's
    maintainers: an all-to-all "cannot aggregate the bandwidth of multiple NICs", its busbw is a
    single NIC's per GPU beyond a few nodes, N/(N − 1)× it on N nodes as the NVLink peers take
    their share (NVIDIA/nccl-tests#267, #130) — the max of the two parts here."""
    in_domain = MO.ep_ranks_in_domain(x.ep, x.etp, domain)
    per_node = _ops.minimum(in_domain, x.nics_per_node / x.nics_per_gpu)
    oversub = C.oversubscription_factor(x.ep * x.etp, x.pod, x.oversub)
    net = K.group_net_busbw(x.net_bw * x.nics_per_node, per_node, x.nics_per_gpu,
                            x.nics_per_node) / (per_node * oversub)
    return SimpleNamespace(in_domain=in_domain, inside=_ops.le(x.ep, in_domain),
                           n_nodes=S.ep_nodes(x.ep, in_domain), fast_bw=x.fast_bw, net_bw=net,
                           bw=x.fast_bw)


def exchange_calls(x, dispatcher: Dispatcher, domain, tokens, lam, fwd_passes) -> list:
    """The collectives the dispatcher issues in one MoE layer per micro-batch (moe_dispatch
    .EXCHANGE_CALLS, Megatron-Core's dispatchers), each as (Call, time of one call): the
    all-to-alls on the EP group's links (ep_link; K.all_to_all_split_time_s: NCCL's per-peer
    rounds and protocol), the all-gathers and reduce-scatters over the tp·ep or etp ranks as
    NCCL's tuner picks them (nccl_s on the group's tuner_link). Call.calls holds the calls per
    layer and micro-batch: forward ones × fwd_passes (full recompute reruns them), backward
    ones once."""
    groups = {D.Group.TP_EP: x.ep * x.etp, D.Group.ETP: x.etp}
    links = {name: tuner_link(x, collective_group(x, n, 1, domain), 1)
             for name, n in groups.items()}
    ep = ep_link(x, domain)
    out = []
    for name, coll, group, row, fwd, bwd in D.EXCHANGE_CALLS[dispatcher.value]:
        sent = D.exchange_rows(row, group, tokens, x.top_k, x.ep, lam) * D.exchange_row_bytes(
            row, x.hidden, x.n_experts, x.act_bytes, MO.ROUTER_SCORE_BYTES)
        calls = fwd * fwd_passes + bwd
        if coll == "all-to-all":
            one = K.all_to_all_split_time_s(sent, x.ep, ep.in_domain, ep.fast_bw, ep.net_bw,
                                            x.sr_base, x.sr_step_nvl, x.sr_step_net)
            out.append((Call(None, sent, calls, x.ep, ep, name, p2p="all-to-all"), one))
            continue
        kind = K.Coll(coll)
        buffer = groups[group] * sent  # an all-gather's output, a reduce-scatter's input
        out.append((Call(kind, buffer, calls, groups[group], links[group], name),
                    nccl_s(kind, buffer, groups[group], links[group])))
    return out


def deepep_exchange_s(x, domain, tokens, lam, tp):
    """One DeepEP dispatch (or combine) of the busiest rank (moe_step.dispatch_time_s), with the
    EP ranks that share an NVLink domain and the node limit of group-limited routing; with
    etp > 1, the all-gather of the tokens over the etp ranks on NVLink beside it."""
    in_domain = MO.ep_ranks_in_domain(x.ep, x.etp, domain)
    max_nodes = S.node_limit(S.ep_nodes(x.ep, in_domain), x.expert_groups, x.topk_groups)
    one = S.dispatch_time_s(
        Dispatcher.DEEPEP, tokens, x.top_k, x.hidden, x.ep, in_domain, tp, max_nodes, x.fast_bw,
        x.net_bw, x.fast_lat, x.net_lat, lam, x.act_bytes, x.fast_link_bw, x.net_link_bw)
    etp = ((x.etp - 1) * tokens * x.top_k * lam * x.hidden * x.act_bytes / x.fast_bw
           + (1 - _ops.le(x.etp, 1)) * x.fast_lat)
    return one + etp


def exchange_s(x, dispatcher: Dispatcher, domain, tokens, lam, tp, fwd_passes=1):
    """(one token dispatch, the layer's whole exchange per micro-batch, the calls) by
    dispatcher: NCCL's calls (exchange_calls) for the all-to-all and all-gather dispatchers,
    summed over a layer's calls; DeepEP's dispatch (deepep_exchange_s), 2·fwd_passes + 2 of them
    a layer (dispatch and combine, forward and backward) — or DeepEP's where the candidate's
    `deepep` column says so. The calls, each with the time of one, are what noted_calls lists."""
    one_d = deepep_exchange_s(x, domain, tokens, lam, tp)
    layer_d = (2 * fwd_passes + 2) * one_d
    if dispatcher is Dispatcher.DEEPEP:
        return one_d, layer_d, []
    calls = exchange_calls(x, dispatcher, domain, tokens, lam, fwd_passes)
    first = calls[0][1]  # the tokens' all-to-all or all-gather
    layer = sum(call.calls * one for call, one in calls)
    return _ops.select(x.deepep, one_d, first), _ops.select(x.deepep, layer_d, layer), calls


def noted_calls(x, dispatcher: Dispatcher, domain, tokens, lam, one_s, calls, fwd_passes,
                per_step):
    """The step's expert-parallel calls for explain's table (model/nccl.py Call, calls per
    step = per layer and micro-batch × per_step): NCCL's for the all-to-all and all-gather
    dispatchers (exchange_s's calls), DeepEP's dispatch and combine (one_s each) as one row."""
    if dispatcher is Dispatcher.DEEPEP:
        sent = tokens * x.top_k * lam * x.hidden * x.act_bytes
        return [Call(None, sent, (2 * fwd_passes + 2) * per_step, x.ep,
                     SimpleNamespace(time_s=one_s, n_nodes=S.ep_nodes(
                         x.ep, MO.ep_ranks_in_domain(x.ep, x.etp, domain))),
                     "EP DeepEP dispatch/combine", p2p="deepep")]
    return [call.named(call.name, call.calls * per_step) for call, _ in calls]


def shared_overlap_exposed_s(x, k, exposed):
    """What --moe-shared-expert-overlap leaves of the layer's exposed exchange
    (moe_step.shared_overlap_exposed_s): the shared experts' forward GEMMs, 2·T·n_s·n·h·f_s
    FLOPs on the GPU's tokens over t, hide the forward's dispatch and combine, their backward the
    backward's."""
    shared_fwd_s = T.compute_time_s(2 * k.b * k.s / k.cp * x.shared_matmul / k.t, x.peak_flops,
                                    x.gemm_eff)
    return S.shared_overlap_exposed_s(exposed, shared_fwd_s, x.shared_overlap)


def exposed_exchange_s(x, dispatcher: Dispatcher, dualpipe: bool, layer_exchange, window_s):
    """A layer's exchange per micro-batch (exchange_s: every call, forward and backward) as
    the plan's overlap leaves them (moe_step.exposed_exchange_s): none, Megatron's
    1F1B merge (--overlap-moe-expert-parallel-comm), or DualPipe's with a V schedule; DeepEP
    holds its SMs while it hides."""
    kind = A2AOverlap.DUALPIPE if dualpipe else A2AOverlap.MERGED_1F1B
    deepep = 1 if dispatcher is Dispatcher.DEEPEP else x.deepep
    sms = DEEPEP_COMM_SMS * deepep
    hidden = S.exposed_exchange_s(layer_exchange, window_s, kind, x.n_micro, sms,
                                  _ops.maximum(x.n_sm, sms + 1))
    return _ops.select(x.a2a_overlap, hidden, layer_exchange)
