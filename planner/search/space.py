"""The candidate space: every layout the request admits (dp, tp, pp, cp, vpp, mbs, ep, etp
and the hybrid-sharding and context-parallel-kind columns) as numpy columns, the choice groups
(ZeRO stage, recompute, schedule) costed each at once, and one candidate back as a PlanConfig."""

from __future__ import annotations

import itertools

import numpy as np

from ..errors import PlanError
from ..formulas.choices import ContextKind, Recompute, Schedule, ZeroStage
from ..frameworks import FRAMEWORKS, kind_of_group
from ..model import constraints
from ..schema import HardwareProfile, ModelSpec, PlanConfig
from .request import (
    DEFAULT_MBS,
    PlanRequest,
    moe_settings,
    precision_settings,
    recompute_settings,
)

MAX_OPEN_VPP = 8


MAX_OPEN_CP = 16


LAYOUT_ID = "_layout"
"""The space's column that numbers its layouts: each row's degrees, micro-batch, vpp, shard
group and all-to-all group (LAYOUT_COLUMNS), the same number exactly where they are the same;
the expert columns crossed in (CROSSED) are left out of it, so the search evaluates what depends
on the layout alone once per layout (planner/search/grid.py)."""

LAYOUT_COLUMNS = ("tp", "cp", "pp", "mbs", "vpp", "dp", "n_micro", "dp_shard", "dp_replicate",
                  "cp_a2a")
"""The space's columns that are functions of its LAYOUT_ID (numeric_space builds them so)."""

CROSSED = {"_experts": ("ep", "etp"), "_dispatch": ("deepep", "a2a_overlap")}
"""The space's columns crossed with every layout (_with_expert_degrees), each group of them
numbered by its own id column: the expert degrees, and the dispatcher and its overlap."""


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


def numeric_space(model: ModelSpec, hw: HardwareProfile, req: PlanRequest) -> dict[str, np.ndarray]:
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
    cols[LAYOUT_ID] = np.cumsum(ok) - 1  # each layout's number (dense over those kept)
    return _with_cp_kinds(hw, req, _with_dp_shard(hw, req, _with_expert_degrees(
        model, hw, req, {k: v[ok] for k, v in cols.items()})))  # cp-kind: + cp_a2a


def cp_kinds_searched(req: PlanRequest) -> list[ContextKind]:
    """The kinds the search tries: --cp-kind's; the hierarchical kind when only --cp-a2a is given;
    else (`auto`, the default) every kind the framework runs, so that an all-to-all wins where it
    is faster (the ranking prefers the framework's default kind inside a tie)."""
    runs = FRAMEWORKS[req.framework].cp_kinds
    if req.cp_kind == "auto" or (req.cp_kind is None and not req.cp_a2a):
        return list(runs)
    if req.cp_kind and not set(req.cp_kind) & set(runs):
        from ..frameworks.base import CP_KIND_FLAGS, CP_KIND_REASONS

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
    # the distinct (cp, tp) pairs in (cp, tp) order, as one int64 key each (both < 2¹⁶): a 1-D
    # unique, several times faster than np.unique over rows, with the same order and inverse
    key = (cp.astype(np.int64) << 16) | tp.astype(np.int64)
    keys, inverse = np.unique(key, return_inverse=True)
    pairs = np.stack([keys >> 16, keys & 0xFFFF], axis=1)
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
    out[LAYOUT_ID] = _copies_numbered(cols[LAYOUT_ID], counts)  # an all-to-all group: a layout
    return out


def _copies_numbered(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The layout numbers of rows repeated `counts` times each, where each copy is a layout of
    its own (a shard group, an all-to-all group): the row's number × the most copies + the
    copy's place. The copies' options depend on the layout alone, so a copy's place names the
    same option in every row of one layout (whatever its expert columns)."""
    place = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(ids, counts) * max(int(counts.max(initial=1)), 1) + place


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
    out[LAYOUT_ID] = _copies_numbered(cols[LAYOUT_ID], counts)  # a shard group: a layout
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
    # the dispatchers weighed: the one asked for, else NCCL's all-to-all and DeepEP's (Megatron's
    # flex dispatcher, torchtitan's DeepEPTokenDispatcher) wherever ep > 1
    fixed = None if req.moe_dispatcher is None else int(req.moe_dispatcher == "deepep")
    # and the all-to-all overlap: as asked, else both where Megatron runs it (ep > 1)
    overlaps = ((int(req.moe_a2a_overlap),) if req.moe_a2a_overlap is not None
                else (0, 1) if req.framework == "megatron" else (0,))
    rows = [(e, t, d, o) for e, t in itertools.product(ep_vals, etp_vals)
            for d in ((fixed,) if fixed is not None else (0, 1) if e > 1 else (0,))
            for o in (overlaps if e > 1 else (0,))]
    table = np.array(rows, dtype=np.int64).reshape(-1, 4)
    n, k = len(next(iter(cols.values()))), len(table)
    out = {key: np.repeat(v, k) for key, v in cols.items()}
    for j, key in enumerate(("ep", "etp", "deepep", "a2a_overlap")):
        out[key] = np.tile(table[:, j], n)
    for (id_name, _), part in zip(CROSSED.items(), (table[:, :2], table[:, 2:])):
        # each row's place among the distinct values of the crossed columns (grid.py's axes)
        out[id_name] = np.tile(np.unique(part, axis=0, return_inverse=True)[1].reshape(-1), n)
    return out


SEARCHED_SCHEDULES = (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED, Schedule.ZB_H1, Schedule.ZB_H2,
                      Schedule.ZBV, Schedule.DUALPIPE, Schedule.DUALPIPEV)
"""The schedules the search tries when --schedule is not given, where the plan's framework runs
them (Framework.schedules). GPipe is left out (1F1B has its bubble with less memory)."""


def choice_groups(req: PlanRequest):
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
                             int(cols["rc_layers"][i]) if "rc_layers" in cols else None,
                             bool(cols["sp"][i]),
                             bool(cols["rc_dist"][i]) if "rc_dist" in cols else False),
        dp_shard=int(cols["dp_shard"][i]) if "dp_shard" in cols else None,  # hybrid sharding
        **moe_settings(req, int(cols["ep"][i]), int(cols["etp"][i]),  # moe
                       int(cols["deepep"][i]) if "deepep" in cols else None,
                       int(cols["a2a_overlap"][i]) if "a2a_overlap" in cols else None),
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


def gpu_counts(max_gpus: int, domain: int) -> list[int]:
    """The cluster sizes tried by `--sort gpus`: whole NVLink domains, doubling up to max_gpus
    (and max_gpus itself)."""
    counts, n = [], min(domain, max_gpus)
    while n < max_gpus:
        counts.append(n)
        n *= 2
    return counts + [max_gpus]
