"""Many plans at once: the candidate space as float64 arrays through the same plan_costs.

The discrete choices (ZeRO stage, recompute, sequence parallelism, schedule) pick which
expressions are built, so the space is split into one group per combination of them and each
group is evaluated as arrays. Result objects are built only for the plans shown, through the
scalar estimate — the same formulas, so search and explain agree."""

from __future__ import annotations

import itertools
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
from pydantic import BaseModel, ConfigDict

from . import constraints
from .alternatives import Alternative, alternatives, step_differences
from .cost import (
    Choices,
    dtype_numbers,
    hardware_numbers,
    layout_costs,
    model_numbers,
    precision_numbers,
    zero_costs,
)
from .errors import NoFeasiblePlan, PlanError
from .estimate import estimate
from .formulas.choices import ContextKind, Precision, Recompute, Schedule, ZeroStage
from .frameworks import FRAMEWORKS, kind_of_group
from .request import (
    DEFAULT_MBS,
    PlanRequest,
    moe_settings,
    precision_settings,
    recompute_settings,
)
from .results import Plan
from .schema import HardwareProfile, ModelSpec, PlanConfig

SORT_KEYS = ("time", "memory", "mfu", "gpus")
MAX_OPEN_VPP = 8
MAX_OPEN_CP = 16
DEFAULT_HEADROOM = 0.0
# what the ranking, the diagnosis and the agreement tests read of each candidate
KEPT_COSTS = ("step_s", "total_bytes", "mfu", "tokens_per_s", "bubble_fraction", "dp_bytes",
              "tp_bytes", "pp_bytes", "cp_bytes")


class SearchResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    plans: list[Plan]
    considered: int
    feasible: int
    constraints: list[str]
    reason: str = ""
    folded: int = 0  # plans left out of the table: same step time and memory as a simpler one
    # the honest ranking (sort time or mfu): each plan's place, `1=` in a tie; the band within
    # which step times tie (the model's uncertainty) and where it comes from; the variants of
    # each plan's layout (ZeRO, recompute, mbs, vpp) folded into it
    ranks: list[str] = []
    tie_band: float = 0.0
    tie_band_source: str = ""
    variants: list[int] = []
    # each option beyond the plain layout (schedules, hybrid sharding): did it win, and why
    alternatives: list[Alternative] = []


def divisors(n: int, limit: int | None = None) -> list[int]:
    """Divisors of n in increasing order, up to limit."""
    top = n if limit is None else min(n, limit)
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted({d for d in small + [n // d for d in small] if d <= top})


CONSTRAINTS = [
    "dp·tp·pp·cp = gpus",
    "tp ≤ GPUs per NVLink domain unless --allow-tp-across-nodes (or --tp names it)",
    f"cp ≤ {MAX_OPEN_CP} and vpp ≤ {MAX_OPEN_VPP} unless named; the schedule: those the framework "
    "runs, interleaved for vpp > 1, the others for vpp = 1",
    *(rule.text for rule in constraints.RULES),
]


def _numeric_space(model: ModelSpec, hw: HardwareProfile, req: PlanRequest) -> dict[str, np.ndarray]:
    """Every (tp, cp, pp, dp, mbs, vpp, n_micro) with dp·tp·pp·cp = gpus and the degrees the
    request allows, as int64 columns; the rules of planner.constraints are applied per choice
    group (they also read the schedule and sequence parallelism)."""
    n, L, gbs = req.gpus, model.n_layers, req.global_batch(model)
    tp_vals = req.tp or [d for d in divisors(n)
                         if d <= hw.gpus_per_domain or req.allow_tp_across_nodes]
    cp_vals = req.cp or divisors(n, MAX_OPEN_CP)
    pp_vals = req.pp or divisors(n, L)
    mbs_vals = req.mbs or list(DEFAULT_MBS)
    vpp_vals = req.vpp or list(range(1, MAX_OPEN_VPP + 1))
    grid = np.array(list(itertools.product(tp_vals, cp_vals, pp_vals, mbs_vals, vpp_vals)),
                    dtype=np.int64).reshape(-1, 5)
    tp, cp, pp, mbs, vpp = grid.T
    inner = tp * cp * pp
    ok = n % inner == 0
    dp = np.where(ok, n // np.maximum(inner, 1), 0)
    if req.dp:
        ok &= np.isin(dp, req.dp)
    n_micro = gbs // np.maximum(dp * mbs, 1)
    cols = dict(tp=tp, cp=cp, pp=pp, mbs=mbs, vpp=vpp, dp=dp, n_micro=n_micro)
    return _with_cp_kinds(hw, req, _with_dp_shard(hw, req, _with_expert_degrees(
        model, hw, req, {k: v[ok] for k, v in cols.items()})))  # cp-kind: + cp_a2a


# ---- cp-kind: the context-parallel kind as a search dimension ---------------------------------

def cp_kinds_searched(req: PlanRequest) -> list[ContextKind]:
    """The kinds the search tries: --cp-kind's; the hierarchical kind when only --cp-a2a is given;
    else (`auto`, the default) every kind the framework runs, so that an all-to-all wins where it
    is faster (the ranking prefers the framework's default kind inside a tie)."""
    runs = FRAMEWORKS[req.framework].cp_kinds
    if req.cp_kind == "auto" or (req.cp_kind is None and not req.cp_a2a):
        return list(runs)
    if req.cp_kind and not set(req.cp_kind) & set(runs):
        from .frameworks.base import CP_KIND_FLAGS, CP_KIND_REASONS

        raise PlanError(f"{req.framework} runs context parallelism as "
                        f"{', '.join(CP_KIND_FLAGS[k] for k in runs)} only "
                        f"({CP_KIND_REASONS.get(req.framework, '')}), and --cp-kind asks for "
                        "none of them; give --cp-kind auto or another --framework")
    if req.cp_kind:
        return list(req.cp_kind)
    return [ContextKind.HIERARCHICAL]


def a2a_group_candidates(cp: int, tp: int, domain: int, kinds, asked=None) -> list[int]:
    """The all-to-all groups c_a one layout is tried with (c_a = 1 the ring, cp the all-to-all,
    between them the hierarchical kind): for cp = 1 only 1; the hierarchical kind's groups are
    --cp-a2a's that divide cp strictly between 1 and cp, else those whose t·c_a ranks fit the
    NVLink domain (the point of the kind: the all-to-all on NVLink, the ring across it)."""
    if cp == 1:
        return [1]
    out = []
    if ContextKind.RING in kinds:
        out.append(1)
    if ContextKind.HIERARCHICAL in kinds:
        inner = [d for d in divisors(cp) if 1 < d < cp]
        out += ([d for d in inner if d in asked] if asked else
                [d for d in inner if tp * d <= domain])
    if ContextKind.ALL_TO_ALL in kinds:
        out.append(cp)
    return out


def search_cp_kind(req: PlanRequest) -> ContextKind | None:
    """The kind whose expressions the search builds: the one kind asked for, or the general
    (hierarchical) form, whose c_a column also holds the ring's 1 and the all-to-all's cp and
    gives the same numbers as their own forms."""
    kinds = cp_kinds_searched(req)
    return kinds[0] if len(kinds) == 1 else ContextKind.HIERARCHICAL


def _with_cp_kinds(hw: HardwareProfile, req: PlanRequest,
                   cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every layout crossed with its all-to-all groups c_a (a2a_group_candidates), as the column
    cp_a2a; planner.constraints masks what the heads or the framework do not allow. One kind
    alone crosses nothing (the ring: c_a = 1; the all-to-all: c_a = cp)."""
    kinds = cp_kinds_searched(req)
    cp, tp = cols["cp"], cols["tp"]
    if kinds == [ContextKind.RING] or not len(cp):
        return {**cols, "cp_a2a": np.ones_like(cp)}
    if kinds == [ContextKind.ALL_TO_ALL]:
        return {**cols, "cp_a2a": cp.copy()}
    pairs, inverse = np.unique(np.stack([cp, tp], axis=1), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    table = [a2a_group_candidates(int(c), int(t), hw.gpus_per_domain, kinds, req.cp_a2a)
             for c, t in pairs]
    options = np.zeros((len(table), max(len(o) for o in table)), dtype=np.int64)
    for j, o in enumerate(table):
        options[j, :len(o)] = o
    counts = np.array([len(o) for o in table], dtype=np.int64)[inverse]
    out = {key: np.repeat(v, counts) for key, v in cols.items()}
    # each row's place among its layout's copies picks its c_a
    place = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    out["cp_a2a"] = options[np.repeat(inverse, counts), place]
    return out


def dp_shard_candidates(dp: int, inner: int, domain: int) -> list[int]:
    """The shard groups `--dp-shard auto` tries for a layout of dp data-parallel ranks whose
    tp·cp ranks vary faster: dp itself (no replication) and each divisor s < dp whose shard group
    fills whole NVLink domains (s·tp·cp a multiple of the domain's GPUs), so that the gathers stay
    on NVLink or span whole nodes and the replicas all-reduce across the network — HSDP's usual
    layout (torchtitan docs/fsdp.md; ZeRO++ hpZ: one node)."""
    return [s for s in divisors(dp) if s == dp or (s * inner) % domain == 0]


def _with_dp_shard(hw: HardwareProfile, req: PlanRequest,
                   cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Hybrid sharding: every layout crossed with the shard groups --dp-shard asks for (a list,
    or auto: dp_shard_candidates). Without --dp-shard the columns are left as they are (all of dp
    shards; the cost model reads dp_replicate = 1). planner.constraints masks a dp_shard that
    does not divide dp."""
    if (req.dp_shard is None and req.dp_replicate is None) or not len(cols["dp"]):
        return cols
    dp, inner = cols["dp"], cols["tp"] * cols["cp"]
    if req.dp_replicate is not None:  # the replicas asked for: shard groups of dp/r ranks
        options = [[int(d) // r for r in req.dp_replicate if int(d) % r == 0] for d in dp]
    elif req.dp_shard == "auto":
        pairs = {(int(d), int(i)) for d, i in zip(dp, inner)}
        table = {pair: dp_shard_candidates(*pair, hw.gpus_per_domain) for pair in pairs}
        options = [table[(int(d), int(i))] for d, i in zip(dp, inner)]
    else:
        options = [req.dp_shard] * len(dp)
    counts = np.array([len(o) for o in options], dtype=np.int64)
    out = {key: np.repeat(v, counts) for key, v in cols.items()}
    out["dp_shard"] = np.array([s for o in options for s in o], dtype=np.int64)
    fits = out["dp"] % out["dp_shard"] == 0
    out["dp_replicate"] = np.where(fits, out["dp"] // np.where(fits, out["dp_shard"], 1), 1)
    return out


def _with_expert_degrees(model: ModelSpec, hw: HardwareProfile, req: PlanRequest,
                         cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """moe: every layout crossed with the expert degrees: ep among the divisors of the routed
    experts (--ep narrows), etp 1 unless --etp opens it (fine-grained experts are run without
    expert TP: DeepSeek-V3 §3.1), at most the NVLink domain. A dense model gets ep = etp = 1;
    the rules of planner.constraints mask what does not tile dp·cp·tp."""
    ep_vals = req.ep or (divisors(model.n_experts, req.gpus) if model.is_moe else [1])
    etp_vals = req.etp or [1]
    etp_vals = [e for e in etp_vals if e <= hw.gpus_per_domain or req.etp]
    pairs = np.array(list(itertools.product(ep_vals, etp_vals)), dtype=np.int64).reshape(-1, 2)
    n, k = len(next(iter(cols.values()))), len(pairs)
    out = {key: np.repeat(v, k) for key, v in cols.items()}
    out["ep"], out["etp"] = np.tile(pairs[:, 0], n), np.tile(pairs[:, 1], n)
    return out


SEARCHED_SCHEDULES = (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED, Schedule.ZB_H1, Schedule.ZB_H2,
                      Schedule.ZBV, Schedule.DUALPIPE, Schedule.DUALPIPEV)
"""The schedules the search tries when --schedule is not given, where the plan's framework runs
them (Framework.schedules). GPipe is left out (1F1B has its bubble with less memory)."""


def _choice_groups(req: PlanRequest):
    """(recompute, sp, schedule) combinations, each with the ZeRO stages evaluated on it: those
    the request allows and the framework runs."""
    framework = FRAMEWORKS[req.framework]
    zeros = [z for z in (req.zero or list(ZeroStage)) if z in framework.zero_stages]
    recomputes = req.recompute or list(Recompute)
    sps = req.sp if req.sp is not None else [True, False]
    schedules = [s for s in (req.schedule or SEARCHED_SCHEDULES) if s in framework.schedules]
    if not zeros or not schedules:
        return
    for r, sp, sched in itertools.product(recomputes, sps, schedules):
        yield r, sp, sched, zeros


CHUNK = 4096
"""Candidates per plan_costs call. float64 columns of this length stay in the CPU's cache between
the formulas' array operations: on the 2-core CI-sized machine, 10⁶ candidates (with their ZeRO
stages sharing the layout half) evaluate at ~3.6 M/s in chunks of 4,096, 3.3 M/s in chunks of
16,384 and 2.8 M/s in chunks of 2,048 (benchmarks/bench_search.py)."""


def costs_in_chunks(base: dict, columns: dict[str, np.ndarray], choices: Choices,
                    zeros=None, keys: tuple[str, ...] = KEPT_COSTS) -> list[dict[str, np.ndarray]]:
    """plan_costs over many candidates of one choice group, once per ZeRO stage in `zeros`
    (default: choices.zero_stage alone): `base` holds the numbers the candidates share, `columns`
    the float64 arrays they differ in; evaluated CHUNK rows at a time. The layout half of the
    model (cost.layout_costs) is evaluated once and shared by the stages."""
    zeros = [choices.zero_stage] if zeros is None else list(zeros)
    n = len(next(iter(columns.values())))
    parts: list[dict[str, list]] = [{k: [] for k in keys} for _ in zeros]
    for start in range(0, n, CHUNK):
        rows = min(CHUNK, n - start)
        x = SimpleNamespace(**base, **{k: v[start:start + rows] for k, v in columns.items()})
        layout = layout_costs(x, choices)
        for z, part in zip(zeros, parts):
            out = zero_costs(x, replace(choices, zero_stage=z), layout)
            for k in keys:
                v = out[k]
                part[k].append(v if np.ndim(v) else np.full(rows, float(v)))
    return [{k: np.concatenate(v) for k, v in part.items()} for part in parts]


def _framework_runs(framework, model: ModelSpec, layouts, zeros, schedule: Schedule,
                    precision: Precision) -> dict:
    """What the framework runs of the layouts, ZeRO stage by ZeRO stage (its rules read the
    stage, the schedule and the precision): {stage: mask}."""
    return {z: framework.admissible(model, SimpleNamespace(
        **vars(layouts), **constraints.choices(z, schedule, precision))) for z in zeros}


def evaluate_space(model: ModelSpec, hw: HardwareProfile, req: PlanRequest,
                   budget: float | None = None):
    """All candidates and their costs: (columns, costs), each a dict of equal-length arrays.
    offload: with --offload auto (search's `fit` runs it when nothing fits), the candidates
    that do not fit in `budget` (default: the capacity) are tried again with the least offload
    that fits them (offload_variants)."""
    if hw.peak_flops_per_s(req.precision) is None or hw.gemm_efficiency(req.precision) is None:
        raise PlanError(f"{hw.name} has no {req.precision.value} figures")
    space = _numeric_space(model, hw, req)
    seq, gbs = req.seq(model), req.global_batch(model)
    framework = FRAMEWORKS[req.framework]
    base = {**model_numbers(model, seq), **hardware_numbers(hw, req.precision),
            **dtype_numbers(framework, req.grad_dtype),
            "overlap": int(req.overlap_grad_reduce),
            **precision_numbers(framework, hw, req.precision, req.fp8_recipe,
                                req.fp8_param_gather),  # fit
            "recompute_layers": req.recompute_layers,
            "gbs": gbs, "seq_len": seq,
            # moe: the load the expert terms use, and the all-to-all overlap switch
            "moe_load": min(req.moe_imbalance, req.moe_capacity_factor or req.moe_imbalance),
            "a2a_overlap": int(req.moe_a2a_overlap),
            **req.fixed_offload()}  # offload: what the request fixes (default: none)
    layout_keys = ("tp", "cp", "pp", "mbs", "vpp", "dp", "ep", "etp",
                   *(("dp_shard",) if "dp_shard" in space else ()),  # hybrid sharding
                   "cp_a2a")  # cp-kind
    cols: dict[str, list] = {k: [] for k in (*layout_keys, "zero", "recompute", "sp", "schedule",
                                             *OFFLOAD_COLUMNS)}  # offload
    costs: dict[str, list] = {}
    fixed = SimpleNamespace(**{k: base[k] for k in ("offload_optimizer", "offload_params",
                                                    "offload_activations")})  # offload
    offload_fixed = (base["offload_optimizer"] > 0 or base["offload_params"]
                     or base["offload_activations"] > 0)
    auto = req.offload == "auto" and not req.offload_fixed and hw.host is not None
    budget = hw.capacity_bytes if budget is None else budget
    pending = []  # offload: the groups whose unfit candidates offload may make fit
    fastest_fit = np.inf  # offload: the fastest step that fits without offload
    for r, sp, sched, zeros in _choice_groups(req):
        interleaved = sched is Schedule.INTERLEAVED
        layouts = SimpleNamespace(**space, gbs=gbs, seq_len=seq, interleaved=interleaved, sp=sp,
                                  schedule=sched, **offload_layout(req, [r]))  # offload
        # the search gives vpp > 1 to the interleaved schedule alone, and vpp = 1 to the others
        mask = constraints.admissible(model, layouts) & ((space["vpp"] > 1) == interleaved)
        runs = {z: mask & ok for z, ok in _framework_runs(framework, model, layouts, zeros, sched,
                                                          req.precision).items()}
        mask = np.logical_or.reduce(list(runs.values()))
        if not mask.any():
            continue
        sub = {k: v[mask] for k, v in space.items()}
        f = {k: v.astype(np.float64) for k, v in sub.items()}
        group_choices = Choices(zero_stage=zeros[0], recompute=r, schedule=sched,
                                sequence_parallel=sp, attention=req.attention,
                                framework=framework, offload=offload_fixed,
                                offload_params=bool(base["offload_params"]),
                                cp_kind=search_cp_kind(req))  # cp-kind
        outs = costs_in_chunks(base, f, group_choices, zeros,
                               KEPT_COSTS + (OFFLOAD_KEPT if auto else ()))
        for z, out in zip(zeros, outs):
            keep = runs[z][mask]
            if not keep.any():
                continue
            out = {k: v[keep] for k, v in out.items()}
            layout = {k: sub[k][keep] for k in layout_keys}
            _append_rows(cols, costs, layout, (z, r, sp, sched),
                         offload_columns(fixed, int(keep.sum())), out)
            if auto:  # offload: the least offload that fits what does not fit without it
                fits = out["total_bytes"] <= budget
                if fits.any():
                    fastest_fit = min(fastest_fit, float(out["step_s"][fits].min()))
                pending.append((z, r, sp, sched, {k: v[keep] for k, v in sub.items()}, out,
                                replace(group_choices, zero_stage=z),
                                dict(gbs=gbs, seq_len=seq, interleaved=interleaved, sp=sp,
                                     schedule=sched,
                                     **constraints.choices(z, sched, req.precision))))
    # offload only adds time to a candidate, so one already slower than the fastest plan that
    # fits without it, beyond the model's uncertainty, can neither win nor tie with offload
    slowest = _offload_worth_trying(hw, fastest_fit)
    for z, r, sp, sched, chosen, out, choices, layout_extra in pending:
        worth = out["step_s"] <= slowest
        if not worth.any():
            continue
        chosen = {k: v[worth] for k, v in chosen.items()}
        out = {k: v[worth] for k, v in out.items()}
        for extra, extra_costs in offload_variants(model, hw, framework, base, chosen, out,
                                                   choices, layout_extra, budget):
            _append_rows(cols, costs, {k: extra[k] for k in layout_keys}, (z, r, sp, sched),
                         {k: extra[k] for k in OFFLOAD_COLUMNS}, extra_costs)
    if not cols["tp"]:
        return {}, {}
    return ({k: np.concatenate(v) for k, v in cols.items()},
            {k: np.concatenate(v) for k, v in costs.items()})


def _append_rows(cols: dict, costs: dict, layout: dict, choice: tuple, offload: dict,
                 row_costs: dict) -> None:
    """Add rows that share one choice group (ZeRO stage, recompute, sp, schedule) to the search's
    columns and costs: their layout columns, the group's choices, their offload columns."""
    z, r, sp, sched = choice
    n = len(next(iter(layout.values())))
    for k, v in layout.items():
        cols[k].append(v)
    cols["zero"].append(np.full(n, int(z)))
    cols["recompute"].append(np.full(n, list(Recompute).index(r)))
    cols["sp"].append(np.full(n, sp))
    cols["schedule"].append(np.full(n, list(Schedule).index(sched)))
    for k, v in offload.items():
        cols[k].append(v)
    for k in KEPT_COSTS:
        costs.setdefault(k, []).append(row_costs[k])


def _offload_worth_trying(hw: HardwareProfile, fastest_fit_s: float) -> float:
    """offload: the slowest step a candidate may have for offload to be tried on it: the fastest
    step that fits without offload, plus the model's uncertainty (no bound when nothing fits)."""
    from .validation import model_uncertainty

    return fastest_fit_s * (1 + model_uncertainty(hw)[0]) * (1 + 1e-9)


OFFLOAD_COLUMNS = ("off_opt", "off_params", "off_act")
"""offload: the search's columns of each candidate's offload settings."""
OFFLOAD_KEPT = ("optimizer_bytes", "weights_bytes", "gradients_bytes", "layer_activation_bytes")
"""offload: what offload_variants reads of a candidate's costs without offload."""
OFFLOAD_FRACTION_STEP = 0.05  # the grid of optimizer fractions the search tries


def offload_layout(req: PlanRequest, recomputes=None) -> dict:
    """offload: what the framework rules read of the request's fixed offload (planner.constraints
    .of names): the fraction, the parameters, the activation layers, and whether the recompute is
    none (of `recomputes`, default the request's)."""
    fixed = req.fixed_offload()
    recomputes = recomputes or req.recompute or list(Recompute)
    return dict(off_opt=fixed["offload_optimizer"], off_params=int(fixed["offload_params"]),
                off_act=fixed["offload_activations"],
                recompute_none=int(Recompute.NONE in recomputes))


def offload_columns(config, size: int) -> dict[str, np.ndarray]:
    """offload: the columns of `size` candidates that share a plan's offload settings."""
    return {"off_opt": np.full(size, float(config.offload_optimizer)),
            "off_params": np.full(size, int(config.offload_params)),
            "off_act": np.full(size, int(config.offload_activations))}


def offload_variants(model: ModelSpec, hw: HardwareProfile, framework, base: dict,
                     cols: dict[str, np.ndarray], out: dict[str, np.ndarray], choices: Choices,
                     layout_extra: dict, budget: float):
    """offload: for the candidates of one choice group and ZeRO stage that do not fit in
    `budget`, the least offload that makes each fit, as the framework runs it (its rules read
    `layout_extra`, the group's batch, schedule and choices, beside `cols`): (columns, costs)
    per kind tried. A candidate that fits is never offloaded, so the space of plans that fit
    without offload is unchanged; one that offload does not make fit (on the device and in host
    memory) is not admitted either.

    Kinds, each tried on every unfit candidate, so that the fastest way to fit competes: the
    optimizer states, the fraction f = ⌈excess/M_opt⌉ on a 0.05 grid, or 1 where the framework
    offloads only all of them (formulas.offload.min_offload_fraction); the parameters with their
    gradients and optimizer (f = 1); the activations of N = ⌈excess/(A_layer·(1 + φ))⌉ layers
    (the allocator's slack φ goes with them; formulas.offload.activation_offload_saved_bytes)."""
    from .formulas import offload as OF

    excess = out["total_bytes"] - budget
    left = excess > 0
    if not left.any():
        return
    frag = base["frag"] if framework.memory.fragmentation is None else framework.memory.fragmentation
    opt = out["optimizer_bytes"]
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(opt > 0, np.round(OF.min_offload_fraction(
            np.maximum(excess, 0), np.where(opt > 0, opt, 1), OFFLOAD_FRACTION_STEP), 6), 2.0)
        layers = OF.min_offload_layers(np.maximum(excess, 0),
                                       np.maximum(out["layer_activation_bytes"], 1.0), frag)
    kinds = (
        ("optimizer", np.minimum(fraction, 1.0), 0, 0, fraction <= 1),
        ("optimizer", 1.0, 0, 0, fraction <= 1),  # where the framework offloads all or nothing
        ("params", 1.0, 1, 0, np.ones(len(excess), dtype=bool)),
        ("activations", 0.0, 0, layers, layers < model.n_layers),
    )
    unfit, optimizer_done = left, np.zeros(len(excess), dtype=bool)
    for kind, f, params, n_act, reachable in kinds:
        # every kind on every unfit candidate; all of the optimizer only where its least
        # fraction did not make the candidate fit (or the framework refused the fraction)
        left = unfit & ~optimizer_done if kind == "optimizer" else unfit
        f_all = np.broadcast_to(np.asarray(f, dtype=np.float64), excess.shape)
        n_all = np.broadcast_to(np.asarray(n_act, dtype=np.float64), excess.shape)
        layouts = SimpleNamespace(**cols, **layout_extra)
        layouts.off_opt, layouts.off_params, layouts.off_act = f_all, params, n_all
        layouts.recompute_none = int(choices.recompute is Recompute.NONE)
        rows = left & reachable & np.asarray(framework.admissible(model, layouts), dtype=bool)
        if not rows.any():
            continue
        sub = {k: v[rows] for k, v in cols.items()}
        f_cols = {k: v.astype(np.float64) for k, v in sub.items()}
        f_cols.update(offload_optimizer=f_all[rows], offload_activations=n_all[rows])
        shared = {k: v for k, v in base.items() if k not in f_cols}
        tried = costs_in_chunks(shared, f_cols, replace(choices, offload=True,
                                                      offload_params=bool(params)),
                                None, KEPT_COSTS + ("host_bytes",))[0]
        fits = ((tried["total_bytes"] <= budget)
                & (tried["host_bytes"] <= hw.host.memory_bytes))
        if fits.any():
            extra = {k: v[fits] for k, v in sub.items()}
            extra.update(off_opt=f_all[rows][fits], off_params=np.full(int(fits.sum()), params),
                         off_act=n_all[rows][fits].astype(np.int64))
            yield extra, {k: tried[k][fits] for k in KEPT_COSTS}
            if kind == "optimizer":
                optimizer_done[np.flatnonzero(rows)[fits]] = True


def config_at(model: ModelSpec, req: PlanRequest, cols: dict, i: int) -> PlanConfig:
    """The PlanConfig of candidate i."""
    gbs = req.global_batch(model)
    dp, mbs = int(cols["dp"][i]), int(cols["mbs"][i])
    return PlanConfig(
        dp=dp, tp=int(cols["tp"][i]), pp=int(cols["pp"][i]), cp=int(cols["cp"][i]),
        vpp=int(cols["vpp"][i]), mbs=mbs, n_micro=gbs // (dp * mbs), gbs=gbs,
        seq_len=req.seq(model), zero_stage=ZeroStage(int(cols["zero"][i])),
        recompute=list(Recompute)[int(cols["recompute"][i])],
        sequence_parallel=bool(cols["sp"][i]), schedule=list(Schedule)[int(cols["schedule"][i])],
        precision=req.precision, grad_dtype=req.grad_dtype, attention=req.attention,
        overlap_grad_reduce=req.overlap_grad_reduce, framework=req.framework,
        **precision_settings(req),  # fit
        **recompute_settings(req, list(Recompute)[int(cols["recompute"][i])],
                             int(cols["rc_layers"][i]) if "rc_layers" in cols else None),
        dp_shard=int(cols["dp_shard"][i]) if "dp_shard" in cols else None,  # hybrid sharding
        **moe_settings(req, int(cols["ep"][i]), int(cols["etp"][i])),  # moe
        **cp_kind_at(req, int(cols["cp"][i]), int(cols["cp_a2a"][i])),  # cp-kind
        **({"offload_optimizer": float(cols["off_opt"][i]),  # offload
            "offload_params": bool(cols["off_params"][i]),
            "offload_activations": int(cols["off_act"][i])} if "off_opt" in cols
           else req.fixed_offload()))


def cp_kind_at(req: PlanRequest, cp: int, c_a: int) -> dict:
    """cp-kind: the PlanConfig fields of a candidate's all-to-all group c_a: the kind it makes
    (1 ring, cp all-to-all, between them hierarchical over c_a), None where that is the
    framework's default (so a default plan's configuration is as it was)."""
    kind = next(k for k, is_kind in kind_of_group(cp, c_a).items() if is_kind)
    default = FRAMEWORKS[req.framework].cp_kinds[0]
    return dict(cp_kind=None if cp == 1 or kind is default else kind,
                cp_a2a=c_a if kind is ContextKind.HIERARCHICAL else None)


def _order(costs: dict, cols: dict, idx: np.ndarray, sort: str) -> np.ndarray:
    """Rank: the objective, then memory or time, then the simpler layout (less cp, pp, tp, vpp)."""
    step, mem = costs["step_s"][idx], costs["total_bytes"][idx]
    simpler = tuple(cols[k][idx] for k in ("vpp", "tp", "pp", "cp"))  # lexsort: last is primary
    if sort == "memory":
        keys = (*simpler, step, mem)
    elif sort == "mfu":
        keys = (*simpler, mem, -costs["mfu"][idx])
    else:
        keys = (*simpler, mem, step)
    return idx[np.lexsort(keys)]


def _why(plans: list[Plan], tied: int = 1) -> str:
    """A paragraph on the winner: what its step is made of, and what the next plans lose. With
    `tied` plans tying for first, the first is the simplest of them, not always the fastest."""
    if not plans:
        return ""
    best = plans[0]
    t = best.time
    fastest = min(plans[:tied], key=lambda p: p.time.step_s)
    head = ("Best" if fastest is best else
            f"Ranked first (the simplest of {tied} plans that tie; the fastest of them is "
            f"{fastest.config.label(batch=False)}, {1 - fastest.time.step_s / t.step_s:.1%} "
            "faster)")
    parts = [f"{head}: {best.config.label(batch=False)} — step {t.step_s:.3g} s "
             f"({t.tokens_per_s:,.0f} tokens/s, "
             f"MFU {t.mfu_causal:.1%} causal, {t.mfu:.1%} full): of the step, compute "
             f"{t.compute_s / t.step_s:.0%}, bubble "
             f"{t.bubble_s / t.step_s:.0%}, exposed communication "
             f"{t.exposed_comm_s / t.step_s:.0%}; {best.memory.total_bytes / 2**30:.1f} of "
             f"{best.memory.capacity_bytes / 2**30:.1f} GiB."]
    for other in plans[1:3]:
        o = other.time
        ratio = o.step_s / t.step_s - 1
        text = (f"{other.config.label(batch=False)} is {abs(ratio):.1%} "
                f"{'slower' if ratio >= 0 else 'faster (ranked after it in a tie)'}")
        differences = step_differences(t, o)
        text += (f": {differences}" if differences else
                 f" (same step time; it needs {other.memory.total_bytes / 2**30:.1f} GiB)")
        parts.append(text + ".")
    return " ".join(parts)


def gpu_counts(max_gpus: int, domain: int) -> list[int]:
    """The cluster sizes tried by `--sort gpus`: whole NVLink domains, doubling up to max_gpus
    (and max_gpus itself)."""
    counts, n = [], min(domain, max_gpus)
    while n < max_gpus:
        counts.append(n)
        n *= 2
    return counts + [max_gpus]


def fewest_gpus(model: ModelSpec, hw: HardwareProfile, req: PlanRequest, target_step_s: float,
                top: int = 10, headroom: float = DEFAULT_HEADROOM) -> SearchResult:
    """The smallest cluster (whole domains, doubling, up to req.gpus) whose best plan steps in at
    most target_step_s, with its plans ranked by step time. Raises NoFeasiblePlan when even
    req.gpus does not reach the target."""
    if not target_step_s > 0:
        raise PlanError(f"--target-step-s must be positive, got {target_step_s}")
    best_seen = None
    sizes = gpu_counts(req.gpus, hw.gpus_per_domain)
    req = req.model_copy(update={"gbs": req.global_batch(model)})  # the same batch at every size
    for n in sizes:
        try:
            result = search(model, hw, req.model_copy(update={"gpus": n}), top=top, sort="time",
                            headroom=headroom)
        except NoFeasiblePlan:
            continue
        step = min(p.time.step_s for p in result.plans)  # the fastest, whatever its place in a tie
        best_seen = (n, step)
        if step <= target_step_s:
            return result.model_copy(update={"reason": (
                f"{n} GPUs is the smallest size tried ({', '.join(map(str, sizes))}) whose best "
                f"plan steps in ≤ {target_step_s:g} s. " + result.reason)})
    seen = (f"; the best found is {best_seen[1]:.3g} s on {best_seen[0]} GPUs" if best_seen
            else "; no size fits in memory")
    raise NoFeasiblePlan(f"no cluster of up to {req.gpus} GPUs reaches a {target_step_s:g} s "
                         f"step for {model.name} at global batch {req.global_batch(model)}{seen}")


def search(model: ModelSpec, hw: HardwareProfile, req: PlanRequest, top: int = 10,
           sort: str = "time", headroom: float = DEFAULT_HEADROOM,
           target_step_s: float | None = None) -> SearchResult:
    """Rank the plans that fit. Raises NoFeasiblePlan, with a diagnosis, when none does.
    sort = "gpus" finds the fewest GPUs whose best plan meets target_step_s."""
    if sort not in SORT_KEYS:
        raise PlanError(f"unknown sort '{sort}' (choose from {', '.join(SORT_KEYS)})")
    if sort == "gpus":
        if target_step_s is None:
            raise PlanError("--sort gpus needs --target-step-s (the step time to reach)")
        return fewest_gpus(model, hw, req, target_step_s, top, headroom)
    if not 0 <= headroom < 1:
        raise PlanError(f"headroom must be in [0, 1), got {headroom}")
    budget = hw.capacity_bytes * (1 - headroom)
    # offload: --offload fit (the default) evaluates the least offload that makes each plan fit,
    # as auto does, but ranks it only when nothing fits without it ("Also weighed" says what it
    # would win)
    evaluated = req.model_copy(update={"offload": "auto"}) if req.offload == "fit" else req
    cols, costs = evaluate_space(model, hw, evaluated, budget)
    if not cols:
        raise NoFeasiblePlan(no_layout_message(model, hw, req))
    fits = np.flatnonzero(costs["total_bytes"] <= budget)
    if req.offload == "fit" and not req.offload_fixed:
        from .ranking import offloaded

        plain = fits[offloaded(cols, fits) == 0]
        fits = plain if plain.size else fits
    considered = len(cols["tp"])
    if fits.size == 0:
        i = int(np.argmin(costs["total_bytes"]))
        need = costs["total_bytes"][i]
        cfg = config_at(model, req, cols, i)
        raise NoFeasiblePlan(_diagnose(model, hw, req, cfg, need, budget))
    if sort in ("time", "mfu"):
        return _ranked(model, hw, req, cols, costs, fits, top, considered, budget)
    order, folded = _distinct(costs, _order(costs, cols, fits, sort), top)
    plans = [estimate(model, hw, config_at(model, req, cols, int(i))) for i in order]
    reason = _why(plans)
    if folded:
        reason += (f" {folded} other layouts with exactly the step time and memory of a plan shown "
                   "(e.g. context parallelism traded for micro-batch size) are folded into it.")
    return SearchResult(plans=plans, considered=considered, feasible=int(fits.size),
                        constraints=_constraints(req), reason=reason, folded=folded)


def _constraints(req: PlanRequest) -> list[str]:
    """The rules every framework shares, then the request's framework's own."""
    return CONSTRAINTS + [f"{req.framework}: {rule.text}"
                          for rule in FRAMEWORKS[req.framework].all_rules()]


def _ranked(model, hw, req, cols, costs, fits, top, considered, budget) -> SearchResult:
    """The honest ranking (planner.ranking): one row per layout, ties within the model's
    uncertainty shown as ties and ordered by simplicity and the framework's defaults."""
    from .ranking import distinct_layouts, tie_order
    from .validation import model_uncertainty

    band, source = model_uncertainty(hw)
    step = costs["step_s"]
    order = _order(costs, cols, fits, "time")
    # more layouts than shown, so that a tie cut by `top` is the same tie at any --top
    defaults = {**FRAMEWORKS[req.framework].defaults,  # cp-kind: its default kind too
                "cp_kind": FRAMEWORKS[req.framework].cp_kinds[0]}
    chosen, variants = distinct_layouts(cols, step, order, 3 * top + 10, band, defaults)
    ranked, labels = tie_order(cols, step, chosen, band, defaults)
    ranked, labels = ranked[:top], labels[:top]
    folded_by = dict(zip(chosen, variants))
    plans = [estimate(model, hw, config_at(model, req, cols, i)) for i in ranked]
    ties = labels.count(labels[0]) if labels else 0
    reason = _why(plans, ties)
    if ties > 1:
        reason += (f" The first {ties} plans tie (`1=`): their step times differ by less than the "
                   f"model's uncertainty, ±{band:.1%} ({source}); inside a tie the simpler layout "
                   "and the framework's defaults come first.")
    folded = sum(folded_by[i] for i in ranked)
    if folded:
        reason += (f" Each row is one layout (dp, tp, pp, cp); {folded:,} variants of the layouts "
                   "shown (ZeRO stage, recompute, micro-batch size, virtual stages) are folded "
                   "into them.")
    return SearchResult(plans=plans, considered=considered, feasible=int(fits.size),
                        constraints=_constraints(req), reason=reason, folded=folded, ranks=labels,
                        tie_band=band, tie_band_source=source,
                        variants=[folded_by[i] for i in ranked],
                        alternatives=alternatives(model, hw, req, cols, costs, fits, band,
                                                  budget))


def _distinct(costs: dict, order: np.ndarray, top: int) -> tuple[list[int], int]:
    """The first `top` plans of `order` whose (step time, memory) differ from every plan already
    taken (to 1e-9 relative): the ranking's simpler-layout tie-break keeps the simplest of equals."""
    taken: list[int] = []
    seen: list[tuple[float, float]] = []
    folded = 0
    for i in order:
        key = (float(costs["step_s"][i]), float(costs["total_bytes"][i]))
        if any(abs(key[0] - s) <= 1e-9 * s and abs(key[1] - m) <= 1e-9 * m for s, m in seen):
            folded += 1
            continue
        if len(taken) == top:
            break
        taken.append(int(i))
        seen.append(key)
    return taken, folded


def _smallest_fitting_gpus(model, hw, req: PlanRequest, budget: float, start: int) -> int | None:
    """The smallest cluster, doubling from `start` (whole domains), on which some plan fits: what
    the diagnosis may promise. None if nothing up to 64× start (or MAX_GPUS) fits."""
    from .request import MAX_GPUS

    domain = hw.gpus_per_domain
    n = max(domain, int(np.ceil(start / domain)) * domain)
    req = req.model_copy(update={"gbs": req.global_batch(model)})  # the same batch
    for _ in range(7):
        if n > MAX_GPUS:
            return None
        _, costs = evaluate_space(model, hw, req.model_copy(update={"gpus": n}))
        if costs and float(np.min(costs["total_bytes"])) <= budget:
            return n
        n *= 2
    return None


def _diagnose(model, hw, req, cfg: PlanConfig, need: float, budget: float) -> str:
    gib = 2**30
    hints = []
    # memory per GPU falls at best as 1/N: N·need/budget GPUs is a lower bound; the count said is
    # one that was checked to fit (same batch and constraints)
    lower = int(np.ceil(need / budget * req.gpus))
    checked = _smallest_fitting_gpus(model, hw, req, budget, lower)
    if checked is not None:
        hints.append(f"{checked} GPUs (checked: a plan fits there)")
    else:
        hints.append(f"more than {lower} GPUs (a lower bound; no size up to 64× that was found "
                     "to fit with this global batch)")
    if req.zero and ZeroStage.PARAMETERS not in req.zero:
        hints.append("ZeRO-3 (--zero 3)")
    if req.recompute and Recompute.FULL not in req.recompute:
        hints.append("full recompute (--recompute full)")
    if req.offload == "none" and hw.host is not None:  # offload
        hints.append("offload to host memory (--offload fit)")
    hints.append("a larger-memory profile (e.g. h200-nvlink, mi300x, gb200-nvl72)")
    return (f"no plan of {model.name} fits on {req.gpus} × {hw.name}: the smallest need is "
            f"{need / gib:.1f} GiB per GPU (dp{cfg.dp} tp{cfg.tp} pp{cfg.pp} cp{cfg.cp} "
            f"mbs{cfg.mbs} zero{int(cfg.zero_stage)} {cfg.recompute.value}) against "
            f"{budget / gib:.1f} GiB usable; would fit with " + ", or ".join(hints))


# ---- when no layout satisfies the rules: which rules removed the candidates, what would work ----

DIAGNOSED_DIMS = ("tp", "pp", "cp", "vpp", "mbs", "dp")
NEAREST_SHOWN = 8  # values suggested per dimension
GPU_WINDOW = 256  # how far from --gpus the nearest working counts are looked for


def _admissible(model: ModelSpec, hw: HardwareProfile, req: PlanRequest, count: bool = False):
    """The layouts of the request's space that obey every rule under some schedule and
    sequence-parallel setting it allows: (space, mask, removals by rule)."""
    space = _numeric_space(model, hw, req)
    size = len(space["tp"])
    mask = np.zeros(size, dtype=bool)
    removals: dict[str, list] = {}  # rule text → [count, the message for its first layout]
    if size == 0:
        return space, mask, removals
    seq, gbs = req.seq(model), req.global_batch(model)
    pairs = {(sp, sched) for _, sp, sched, _ in _choice_groups(req)}
    vpp_rule = constraints.Rule(
        "the search gives vpp > 1 to the interleaved schedule and vpp = 1 to the others",
        lambda m, c: (c.vpp > 1) == c.interleaved, lambda m, c: "")
    framework = FRAMEWORKS[req.framework]
    zeros = [z for z in (req.zero or list(ZeroStage)) if z in framework.zero_stages]
    for sp, sched in sorted(pairs, key=str):
        interleaved = sched is Schedule.INTERLEAVED
        layouts = SimpleNamespace(**space, gbs=gbs, seq_len=seq, interleaved=interleaved, sp=sp,
                                  schedule=sched, **offload_layout(req))  # offload
        shared = constraints.admissible(model, layouts) & ((space["vpp"] > 1) == interleaved)
        ok = shared & np.logical_or.reduce(list(_framework_runs(
            framework, model, layouts, zeros, sched, req.precision).values()))
        mask |= ok
        if count and shared.any() and not ok.any():
            # the shared rules leave layouts that the framework does not run: say which of its
            # rules removed them (under the first ZeRO stage asked for)
            kept = {k: v[shared] for k, v in space.items()}
            fw_layouts = SimpleNamespace(**kept, gbs=gbs, seq_len=seq, interleaved=interleaved,
                                         sp=sp, schedule=sched,
                                         **constraints.choices(zeros[0], sched, req.precision),
                                         **offload_layout(req))  # offload
            for rule, n, first in constraints.removed_by(model, fw_layouts,
                                                         framework.all_rules()):
                said = rule.message(model, constraints.one_layout(fw_layouts, first)) or rule.text
                removals.setdefault(rule.text, [0, said])[0] += n
        if count:
            for rule, n, first in constraints.removed_by(model, layouts,
                                                         (*constraints.RULES, vpp_rule)):
                one = constraints.one_layout(layouts, first)
                if rule is constraints.RULES[0]:  # the search derives n_micro = gbs // (dp·mbs)
                    said = (f"global batch {gbs:,} must be divisible by dp·mbs (e.g. dp {one.dp} "
                            f"· mbs {one.mbs} = {one.dp * one.mbs:,} is not)")
                else:
                    said = rule.message(model, one) or rule.text
                removals.setdefault(rule.text, [0, said])[0] += n
    return space, mask, removals


def _values_that_work(model, hw, req: PlanRequest, dim: str) -> list[int]:
    """The values of one dimension the user fixed that would leave some layout, all else kept."""
    space, mask, _ = _admissible(model, hw, req.model_copy(update={dim: None}))
    return sorted({int(v) for v in space[dim][mask]}) if mask.any() else []


def _nearest(values: list[int], given: list[int]) -> list[int]:
    target = given[0] if given else 0
    return sorted(sorted(values, key=lambda v: (abs(v - target), v))[:NEAREST_SHOWN])


def _gpu_counts_that_work(model, hw, req: PlanRequest) -> list[int]:
    """The nearest GPU counts below and above --gpus at which some layout obeys every rule (the
    same global batch and fixed dimensions)."""
    req = req.model_copy(update={"gbs": req.global_batch(model)})
    below, above = [], []
    for d in range(1, GPU_WINDOW + 1):
        for n, found in ((req.gpus - d, below), (req.gpus + d, above)):
            if n >= 1 and len(found) < 2 and _admissible(model, hw,
                                                        req.model_copy(update={"gpus": n}))[1].any():
                found.append(n)
        if len(below) >= 2 and len(above) >= 2:
            break
    return sorted(below + above)


def no_layout_message(model: ModelSpec, hw: HardwareProfile, req: PlanRequest) -> str:
    """Why no layout survives the rules: the rules that removed the candidates, with counts, and
    the nearest values that would work (of each dimension the user fixed, and of --gpus)."""
    n, gbs = req.gpus, req.global_batch(model)
    framework = FRAMEWORKS[req.framework]
    if not any(z in framework.zero_stages for z in (req.zero or list(ZeroStage))):
        runs = ", ".join(str(int(z)) for z in framework.zero_stages)
        return (f"{framework.name} runs ZeRO stages {runs}, and --zero asks for none of them; "
                f"give --zero {runs.replace(', ', ',')} or another --framework")
    if not any(s in framework.schedules for s in (req.schedule or SEARCHED_SCHEDULES)):
        runs = ", ".join(s.value for s in framework.schedules)
        return (f"{framework.name} runs the schedules {runs}, and --schedule asks for none of "
                "them; give one of those or another --framework")
    tp_vals = req.tp or [d for d in divisors(n) if d <= hw.gpus_per_domain
                         or req.allow_tp_across_nodes]
    cp_vals = req.cp or divisors(n, MAX_OPEN_CP)
    pp_vals = req.pp or divisors(n, model.n_layers)
    raw = (len(tp_vals) * len(cp_vals) * len(pp_vals) * len(req.mbs or DEFAULT_MBS)
           * len(req.vpp or range(1, MAX_OPEN_VPP + 1)))
    space, _, removals = _admissible(model, hw, req, count=True)
    settings = len({(sp, s) for _, sp, s, _ in _choice_groups(req)})
    product_gone = (raw - len(space["tp"])) * settings  # candidates: layouts × settings
    reasons = []
    fixed = ", ".join(f"{k} {','.join(map(str, getattr(req, k)))}" for k in ("dp", "tp", "pp", "cp")
                      if getattr(req, k))
    if product_gone and fixed:  # with nothing fixed, the product is how the space is enumerated
        reasons.append((product_gone, f"dp·tp·pp·cp must equal {n} GPUs (with {fixed})"))
    else:
        raw = len(space["tp"])
    for count, said in removals.values():
        reasons.append((count, said))
    reasons.sort(key=lambda r: -r[0])
    said = "; ".join(f"{text} (removed {count:,})" for count, text in reasons[:3])
    total = raw * settings
    hints = []
    for dim in DIAGNOSED_DIMS:
        given = getattr(req, dim)
        if not given:
            continue
        works = _values_that_work(model, hw, req, dim)
        if works:
            hints.append(f"--{dim} {', '.join(map(str, _nearest(works, given)))}")
        else:
            hints.append(f"no --{dim} works with the rest as given")
    counts = _gpu_counts_that_work(model, hw, req)
    if counts:
        hints.append(f"--gpus {', '.join(f'{c:,}' for c in counts)}")
    message = (f"no layout of {model.name} satisfies the constraints on {n:,} GPUs (global batch "
               f"{gbs:,}, seq {req.seq(model):,}): of {total:,} candidates, {said}")
    if hints:
        message += "; values that work here (each with the rest as given): " + "; ".join(hints)
    return message
