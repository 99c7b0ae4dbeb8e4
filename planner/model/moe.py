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
from ..formulas import pipeline as PL
from ..formulas import timing as T
from ..formulas.moe_layer import MAX_VIOLATION, ROUTER_PASSES, Balancing, Dispatcher
from ..formulas.moe_step import A2AOverlap
from ..schema import ModelSpec, PlanConfig
from .links import collective_group
from .nccl import Call, measured_a2a_busbw, nccl_s, tuner_link

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

    def term(kind: Dispatcher):
        moved = S.memory_bound_bytes(tokens, x.top_k, x.hidden, x.n_experts, local, kind,
                                     passes, tp, x.ep, lam, x.act_bytes)
        return (T.memory_bound_time_s(moved, x.hbm_bw, x.hbm_eff)
                + T.kernel_overhead_s(_layer_kernels(x, kind, streams), x.kernel_s))

    return _by_dispatcher(x, dispatcher, term)


def _layer_kernels(x, kind: Dispatcher, streams):
    """moe_step.layer_kernels of the plan's layer under dispatcher `kind`: one GEMM launch per
    local expert where the framework runs its grouped GEMMs on `streams` > 0 streams."""
    return S.layer_kernels(kind, False, MO.local_experts(x.n_experts, x.ep), int(streams > 0))


def forward_kernels(x, dispatcher: Dispatcher, streams=0):
    """Kernels one MoE layer's forward launches: a fused layer's (timing.KERNELS_PER_LAYER_
    FORWARD) and those the router, the dispatch and the experts add (moe_step.layer_kernels)."""
    return T.KERNELS_PER_LAYER_FORWARD + _by_dispatcher(
        x, dispatcher, lambda kind: _layer_kernels(x, kind, streams))


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


def on_link(inside, nvlink, network):
    """The NVLink value where `inside` = 1, the network's where 0: i·nvlink + (1 − i)·network
    (_ops.select: on arrays one np.where, not three passes over the grid)."""
    return _ops.select(inside, nvlink, network)


def _nccl_rows(x, dispatcher: Dispatcher, tokens, lam):
    """EXCHANGE_CALLS of the NCCL dispatchers with the bytes of one call: (name, collective,
    group, bytes one rank sends to the others in one call, forward calls, backward calls). An
    all-to-all's are its rows for other ranks (moe_dispatch.exchange_rows); an all-gather's or
    reduce-scatter's the (n − 1)/n of its n·rows buffer that leaves the rank."""
    groups = {D.Group.EP: x.ep, D.Group.TP_EP: x.ep * x.etp, D.Group.ETP: x.etp}
    for name, coll, group, row, fwd, bwd in D.EXCHANGE_CALLS[dispatcher.value]:
        per_rank = D.exchange_rows(row, group, tokens, x.top_k, x.ep, lam) * D.exchange_row_bytes(
            row, x.hidden, x.n_experts, x.act_bytes, MO.ROUTER_SCORE_BYTES)
        sent = per_rank if coll == "all-to-all" else (groups[group] - 1) * per_rank
        yield name, coll, group, groups[group], per_rank, sent, fwd, bwd


DEEPEP_CALLS = (("EP DeepEP dispatch", 1, False, 1, 0), ("EP DeepEP combine", 0, True, 1, 0),
                ("EP DeepEP dispatch bwd", 0, True, 0, 1),
                ("EP DeepEP combine bwd", 1, True, 0, 1))
"""DeepEP's normal-kernel calls per MoE layer and micro-batch, as (name, whether its slots are
the dispatch's, cached layout, forward calls, backward calls): forward the dispatch (its layout
notified anew) and the combine; backward the dispatch's gradient by a combine kernel and the
combine's by a dispatch kernel, both on the forward's handle (DeepEP docs/legacy.md @
dd758caf45, `dispatch_backward`/`combine_backward`: "the backward process of MoE dispatch is
actually a combine"; the combine's backward dispatches BF16 gradients)."""


def deepep_calls(x, domain, tokens, lam):
    """DeepEP's calls of one MoE layer and micro-batch for the busiest rank (DEEPEP_CALLS), each
    as (name, forward calls, backward calls, RDMA bytes, NVLink bytes of one call, whether its
    layout is cached): its de-duplicated RDMA copies (one per remote node reached, node-limited)
    and NVLink forwarding of DeepEP's token slots (moe_step.deepep_call_bytes: the
    probabilities and routing metadata ride with each token; BF16, no FP8 scales)."""
    in_domain = MO.ep_ranks_in_domain(x.ep, x.etp, domain)
    max_nodes = S.node_limit(S.ep_nodes(x.ep, in_domain), x.expert_groups, x.topk_groups)
    out = []
    for name, slots, cached, fwd, bwd in DEEPEP_CALLS:
        rdma, nvl = S.deepep_call_bytes(tokens, x.top_k, x.hidden, x.ep, in_domain, max_nodes,
                                        lam, x.act_bytes, 0, slots)
        out.append((name, fwd, bwd, rdma, nvl, cached))
    return out


def deepep_etp_bytes(x, tokens, lam):
    """With etp > 1, the bytes one rank sends in the all-gather of its λ·T·k received tokens
    over the etp ranks after each DeepEP call (on NVLink): (etp − 1)·λ·T·k·h·act."""
    return (x.etp - 1) * tokens * x.top_k * lam * x.hidden * x.act_bytes


def exchange_traffic(x, dispatcher: Dispatcher, domain, tokens, lam, fwd_passes, deepep=None):
    """Bytes one GPU sends in one MoE layer's exchange per micro-batch, by link and pass, from
    the calls priced (the NCCL dispatchers' EXCHANGE_CALLS, DeepEP's DEEPEP_CALLS, or DeepEP's
    where the candidate's `deepep` column says so): an all-to-all's split over its NVLink and
    network peers, (g − 1)/(ep − 1) and (ep − g)/(ep − 1); an all-gather's or reduce-scatter's
    on its group's link; DeepEP's RDMA copies on the network and its forwarding on NVLink. The
    forward's calls once in the forward pass; full recompute's reruns of them (fwd_passes − 1
    more) run in the backward pass, with its own. Returns SimpleNamespace(fwd_nvl, fwd_net,
    bwd_nvl, bwd_net). `deepep`: deepep_calls(x, domain, tokens, lam) where the caller holds
    them (exchange_s prices the same calls)."""
    calls_d = deepep_calls(x, domain, tokens, lam) if deepep is None else deepep
    deepep, etp = [0, 0, 0, 0], deepep_etp_bytes(x, tokens, lam)
    for _, fwd, bwd, rdma, nvl, _ in calls_d:
        nvl = nvl + etp
        for i, calls in ((0, fwd), (2, bwd + fwd * (fwd_passes - 1))):
            deepep[i], deepep[i + 1] = deepep[i] + calls * nvl, deepep[i + 1] + calls * rdma
    if dispatcher is Dispatcher.DEEPEP:
        return SimpleNamespace(**dict(zip(("fwd_nvl", "fwd_net", "bwd_nvl", "bwd_net"), deepep)))
    in_domain = MO.ep_ranks_in_domain(x.ep, x.etp, domain)
    peers = _ops.maximum(x.ep - 1, 1)
    nccl = [0, 0, 0, 0]
    for _, coll, _, n, _, sent, fwd, bwd in _nccl_rows(x, dispatcher, tokens, lam):
        if coll == "all-to-all":
            nvl, net = sent * (in_domain - 1) / peers, sent * (x.ep - in_domain) / peers
        else:
            inside = C.inside_domain(n, domain)
            nvl, net = inside * sent, (1 - inside) * sent
        for i, calls in ((0, fwd), (2, bwd + fwd * (fwd_passes - 1))):
            nccl[i], nccl[i + 1] = nccl[i] + calls * nvl, nccl[i + 1] + calls * net
    return SimpleNamespace(**{name: _ops.select(x.deepep, d, n) for name, d, n in zip(
        ("fwd_nvl", "fwd_net", "bwd_nvl", "bwd_net"), deepep, nccl)})


def traffic_bytes(traffic) -> object:
    """All the bytes of exchange_traffic: forward and backward, NVLink and network."""
    return traffic.fwd_nvl + traffic.fwd_net + traffic.bwd_nvl + traffic.bwd_net


# Why the pipeline's sends take no share from the expert exchange (and it none from them).
# Megatron-Core's interleaved schedule runs them together by default
# (--overlap-p2p-communication, on unless --no-overlap-p2p-communication, forced off without
# virtual stages: training/arguments.py @ d98e8a64dd): forward_backward_pipelining_with_
# interleaving issues each chunk's send and receive asynchronously after its pass
# (pp_post_forward/pp_post_backward, send_forward_recv_forward(overlap_p2p_comm=True)) and waits
# for them only before the pass that needs them, so they cross the NICs during the next pass,
# whose MoE layers exchange tokens. On a fair link the exchange, which the compute waits for, is
# slowed by at most the sends' own bytes (max-min fairness), while the sends hide under
# that pass; plan3d already prices the sends once, exposed (model/collectives.py
# pipeline_sends_s), so the step holds t_ep + t_pp either way — a share on both would count the
# sends' bytes two or three times, more than a serial link costs. Elsewhere they do not meet:
# with --overlap-moe-expert-parallel-comm the merged 1F1B sends after the merged layers
# (models/common/model_chunk_schedule_plan.py `run`: the forward's on the communication stream
# behind the all-to-alls, the backward's beside the first layer's weight gradient); 1F1B without
# virtual stages waits for every send before the next pass (p2p_communication.py wait_on_reqs),
# as torch.distributed.pipelining's schedules, which torchtitan runs, do at each step's end
# (`_wait_batch_p2p`).


def hidden_share(x, layer_s, exposed_s):
    """The share of a layer's exchange that compute hides (the a2a overlaps, the shared experts),
    1 − min(1, exposed/exchange); 0 where nothing hides it."""
    return 1 - _ops.minimum(1, exposed_s / _ops.maximum(x.moe * layer_s, 1e-12))


def exchange_on_link(k, inside):
    """The stage's exchange bytes per micro-batch on one link (NVLink where `inside` = 1, the
    network where 0), (forward, backward) (k.ep_traffic: exchange_traffic over the stage's MoE
    layers)."""
    t = k.ep_traffic
    return on_link(inside, t.fwd_nvl, t.fwd_net), on_link(inside, t.bwd_nvl, t.bwd_net)


def beside_dp_bytes(x, k, when, inside, on_link=None):
    """The expert exchange's bytes per micro-batch on a data-parallel group's link (NVLink where
    `inside` = 1) that run beside its collectives at `when` (comm.When; Megatron-Core @
    d98e8a64dd): with --overlap-grad-reduce each bucket's reduction starts in the last
    micro-batch's backward as its gradients are ready (param_and_grad_buffer.py
    register_grad_ready), beside that backward's exchange; with --overlap-param-gather the
    next step's gathers run beside the first forward's (the forward pre-hook dispatches the
    next bucket's); without the overlap (x.overlap = 0) they run after the backward or in the
    optimizer step, beside nothing. ZeRO-2/3's per-micro-batch collectives run beside a whole
    micro-batch's. One micro-batch's bytes, as link_shares counts PP's and CP's beside them.
    model/data_parallel.py splits them by what compute does of the exchange (hidden_share): the
    part it hides runs in the collective's window and takes a share of its link
    (comm.link_share); the exposed part lengthens that window by its own time, so it takes
    none, and is itself delayed by the collective (exposed_beside_s). `on_link`: the
    exchange_on_link(k, inside) the caller holds already (a group's three phases share it)."""
    fwd, bwd = exchange_on_link(k, inside) if on_link is None else on_link
    if when is C.When.MICRO_BATCH:
        return fwd + bwd
    return x.overlap * (bwd if when is C.When.STEP_REDUCE else fwd)


def exposed_beside_s(x, k, when, inside, on_link=None):
    """(forward, backward) seconds of the exposed exchange per micro-batch on a data-parallel
    group's link beside its collectives at `when` (beside_dp_bytes by pass): the exposed
    exchange k.ep_mb_s apportioned by its bytes, the exposed share of those on the link
    (`on_link` as beside_dp_bytes)."""
    fwd, bwd = exchange_on_link(k, inside) if on_link is None else on_link
    per_byte = k.ep_mb_s / _ops.maximum(traffic_bytes(k.ep_traffic), 1)
    if when is C.When.MICRO_BATCH:
        return per_byte * fwd, per_byte * bwd
    on = x.overlap * per_byte
    return (0, on * bwd) if when is C.When.STEP_REDUCE else (on * fwd, 0)


def exchange_calls(x, dispatcher: Dispatcher, domain, tokens, lam, fwd_passes, link) -> list:
    """The collectives the dispatcher issues in one MoE layer per micro-batch (moe_dispatch
    .EXCHANGE_CALLS, Megatron-Core's dispatchers), each as (Call, time of one call): the
    all-to-alls on the EP group's links (`link`: ep_link; K.all_to_all_split_time_s: NCCL's
    per-peer rounds and protocol), the all-gathers and reduce-scatters over the tp·ep or etp
    ranks as NCCL's tuner picks them (nccl_s on the group's tuner_link). Call.calls holds the
    calls per layer and micro-batch: forward ones × fwd_passes (full recompute reruns them),
    backward ones once."""
    links = {name: tuner_link(x, collective_group(x, n, 1, domain), 1)
             for name, n in ((D.Group.TP_EP, x.ep * x.etp), (D.Group.ETP, x.etp))}
    out = []
    for name, coll, group, n, per_rank, _, fwd, bwd in _nccl_rows(x, dispatcher, tokens, lam):
        calls = fwd * fwd_passes + bwd
        if coll == "all-to-all":  # NVLink at the measured all-to-all's rate for its size
            sized = SimpleNamespace(**{**vars(link), "fast_bw": measured_a2a_busbw(
                x, per_rank, x.ep, link.fast_bw)})
            one = K.all_to_all_split_time_s(per_rank, x.ep, link.in_domain, sized.fast_bw,
                                            link.net_bw, x.sr_base, x.sr_step_nvl, x.sr_step_net)
            out.append((Call(None, per_rank, calls, x.ep, sized, name, p2p="all-to-all"), one))
            continue
        kind = K.Coll(coll)
        buffer = n * per_rank  # an all-gather's output, a reduce-scatter's input
        out.append((Call(kind, buffer, calls, n, links[group], name),
                    nccl_s(kind, buffer, n, links[group])))
    return out


def deepep_exchange_s(x, domain, tokens, lam, fwd_passes, deepep=None):
    """DeepEP's calls of one MoE layer and micro-batch for the busiest rank: each of
    deepep_calls as (name, calls per layer and micro-batch, latency, time of one call, bytes it
    sends), by moe_step.deepep_call_time_s at DeepEP's efficiency of the links' nominal rates,
    with its synchronisations' latencies (deepep_call_latency_s); with etp > 1, after each, the
    all-gather of the tokens over the etp ranks on NVLink (deepep_etp_bytes at NVLink's bus
    bandwidth, one NVLink latency). `deepep` as exchange_traffic."""
    nodes = S.ep_nodes(x.ep, MO.ep_ranks_in_domain(x.ep, x.etp, domain))
    etp_bytes = deepep_etp_bytes(x, tokens, lam)
    etp_lat = (1 - _ops.le(x.etp, 1)) * x.fast_lat
    runs = 1 - _ops.le(x.ep, 1)  # ep = 1 exchanges nothing: no kernel, no latency
    out = []
    for name, fwd, bwd, rdma, nvl, cached in (deepep_calls(x, domain, tokens, lam)
                                               if deepep is None else deepep):
        lat = S.deepep_call_latency_s(nodes, cached, x.fast_lat, x.net_lat)
        one = S.deepep_call_time_s(rdma, nvl, nodes, cached, x.net_link_bw, x.fast_link_bw,
                                   x.fast_lat, x.net_lat)
        out.append((name, fwd * fwd_passes + bwd, runs * lat + etp_lat,
                    runs * one + etp_bytes / x.fast_bw + etp_lat, rdma + nvl + etp_bytes))
    return out


def exchange_s(x, dispatcher: Dispatcher, domain, tokens, lam, fwd_passes, deepep=None):
    """(one token dispatch, the layer's whole exchange per micro-batch, the calls) by
    dispatcher: NCCL's calls (exchange_calls, each (Call, time of one)) for the all-to-all
    and all-gather dispatchers, summed over a layer's calls; DeepEP's (deepep_exchange_s) — or
    DeepEP's where the candidate's `deepep` column says so. The calls are what noted_calls
    lists. `deepep`: deepep_calls(x, domain, tokens, lam) where the caller holds them."""
    deepep = deepep_exchange_s(x, domain, tokens, lam, fwd_passes, deepep)
    one_d, layer_d = deepep[0][3], sum(n * t for _, n, _, t, _ in deepep)
    if dispatcher is Dispatcher.DEEPEP:
        return one_d, layer_d, deepep
    calls = exchange_calls(x, dispatcher, domain, tokens, lam, fwd_passes, ep_link(x, domain))
    first = calls[0][1]  # the tokens' all-to-all or all-gather
    layer = sum(call.calls * one for call, one in calls)
    return _ops.select(x.deepep, one_d, first), _ops.select(x.deepep, layer_d, layer), calls


def noted_calls(x, dispatcher: Dispatcher, domain, calls, per_step):
    """The step's expert-parallel calls for explain's table (model/nccl.py Call, calls per
    step = per layer and micro-batch × per_step): NCCL's for the all-to-all and all-gather
    dispatchers, DeepEP's four kernels (the link holds one call's time and latency), as
    exchange_s priced them."""
    if dispatcher is Dispatcher.DEEPEP:
        nodes = S.ep_nodes(x.ep, MO.ep_ranks_in_domain(x.ep, x.etp, domain))
        return [Call(None, sent, n * per_step, x.ep, SimpleNamespace(
            time_s=one, latency_s=lat, n_nodes=nodes), name, p2p="deepep")
            for name, n, lat, one, sent in calls]
    return [call.named(call.name, call.calls * per_step) for call, _ in calls]


def shared_overlap_exposed_s(x, k, exposed, dispatcher: Dispatcher):
    """What --moe-shared-expert-overlap leaves of the layer's exposed exchange
    (moe_step.shared_overlap_exposed_s): the shared experts' forward GEMMs, 2·T·n_s·n·h·f_s
    FLOPs on the GPU's tokens over t, hide the forward's dispatch and combine (DeepEP's flex
    dispatcher: the dispatch alone, under fc1, (n − 1)/n of them), their backward the
    backward's."""
    shared_fwd_s = T.compute_time_s(2 * k.b * k.s / k.cp * x.shared_matmul / k.t, x.peak_flops,
                                    x.gemm_eff)
    deepep, sms, n_sms = deepep_sms(x, dispatcher)
    return S.shared_overlap_exposed_s(exposed, shared_fwd_s, x.shared_overlap, deepep,
                                      (x.n_mlp - 1) / x.n_mlp, sms, n_sms)


def deepep_sms(x, dispatcher: Dispatcher) -> tuple:
    """(whether the plan's exchange runs DeepEP's kernels, the SMs they hold while they hide
    under compute, the GPU's SMs — at least one more than those), the search's deepep column
    where the dispatcher is not DeepEP's alone."""
    deepep = 1 if dispatcher is Dispatcher.DEEPEP else x.deepep
    sms = DEEPEP_COMM_SMS * deepep
    return deepep, sms, _ops.maximum(x.n_sm, sms + 1)


def exposed_exchange_s(x, dispatcher: Dispatcher, dualpipe: bool, layer_exchange, window_s,
                       pp=1, vpp=1):
    """A layer's exchange per micro-batch (exchange_s: every call, forward and backward) as
    the plan's overlap leaves them (moe_step.exposed_exchange_s): none, Megatron's
    1F1B merge (--overlap-moe-expert-parallel-comm), or DualPipe's with a V schedule; DeepEP
    holds its SMs while it hides. The merge leaves exposed the warm-up forwards and cool-down
    backwards of pipeline rank 0 (PL.warmup_chunk_forwards with the overlap's extra forward,
    2(p − 1) + (v − 1)·p + 1 of its m·v chunks): the rank that runs the most alone, and the
    one whose timeline sets the step — it runs from the step's first forward to its last
    backward, idle only in the bubble plan3d counts apart, so each pass it runs alone
    lengthens the step; the later ranks' fewer fall in their longer wait at the ends."""
    kind = A2AOverlap.DUALPIPE if dualpipe else A2AOverlap.MERGED_1F1B
    _, sms, n_sms = deepep_sms(x, dispatcher)
    alone = PL.warmup_chunk_forwards(0, pp, vpp, extra=1)
    hidden = S.exposed_exchange_s(layer_exchange, window_s, kind, x.n_micro, sms, n_sms, vpp,
                                  alone)
    return _ops.select(x.a2a_overlap, hidden, layer_exchange)
