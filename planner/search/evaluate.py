"""The space evaluated: each choice group's layouts masked by the framework's rules, costed in chunks,
and, for those that do not fit, their offload variants; the columns and costs of every candidate."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from ..errors import PlanError
from ..formulas.choices import Recompute, Schedule
from ..frameworks import FRAMEWORKS
from ..model import constraints
from ..model import moe as MOE
from ..model.numbers import (
    Choices,
    attention_numbers,
    dtype_numbers,
    hardware_numbers,
    model_numbers,
    precision_numbers,
)
from ..rules import recompute_moe
from ..schema import HardwareProfile, ModelSpec
from .costing import KEPT_COSTS, costs_by_stage
from .masks import RuleMasks
from .offload import (
    OFFLOAD_COLUMNS,
    OFFLOAD_KEPT,
    offload_columns,
    offload_layout,
    offload_variants,
    offload_worth_trying,
)
from .recompute import (
    memory_at_one_layer,
    partial_recompute_variants,
    partitioned_checkpoint_variants,
)
from .request import PlanRequest
from .space import choice_groups, numeric_space, search_cp_kind


def request_choices(req: PlanRequest, zero, schedule: Schedule) -> dict:
    """The discrete choices a framework's rules read of a candidate (rules.choices): its ZeRO
    stage and schedule, the request's precision and attention."""
    return constraints.choices(zero, schedule, req.precision, req.attention)


def rule_settings(req: PlanRequest, recomputes=None) -> dict:
    """What the framework rules read of the request beside a candidate's layout and choices
    (rules.layout names them): its fixed offload and whether the recompute is none or full
    (offload_layout), and (moe) its shared-expert overlap, whether the model's MTP modules
    train, and whether selective recompute checkpoints whole MoE layers (rules.recompute_moe).
    Of several `recomputes` (default the request's) a rule holds where it holds for one of
    them: recompute_moe is 1 only when each checkpoints MoE layers."""
    recomputes = recomputes or req.recompute or list(Recompute)
    return dict(**offload_layout(req, recomputes),
                moe_shared_overlap=int(req.moe_shared_expert_overlap), mtp_on=int(req.mtp),
                recompute_moe=min(recompute_moe(r, req.recompute_modules) for r in recomputes))


def framework_runs(framework, model: ModelSpec, layouts, zeros, schedule: Schedule,
                   req: PlanRequest, masks: RuleMasks | None = None) -> dict:
    """What the framework runs of the layouts, ZeRO stage by ZeRO stage (its rules read the
    stage, the schedule, the request's precision and attention): {stage: mask}. `masks`: the
    search's rule masks, reused across its choice groups (masks.py)."""
    masks = RuleMasks(model) if masks is None else masks
    return {z: masks.all_hold(framework.name, framework.all_rules(), {
        **vars(layouts), **request_choices(req, z, schedule)}) for z in zeros}


def base_numbers(model: ModelSpec, hw: HardwareProfile, req: PlanRequest, framework) -> dict:
    """The numbers every candidate shares: the model's, the hardware's, the dtypes', the
    request's switches."""
    seq = req.seq(model)
    return {**model_numbers(model, seq), **hardware_numbers(hw, req.precision),
            **dtype_numbers(framework, req.grad_dtype),
            **attention_numbers(framework, hw, req.precision, model),
            "overlap": int(req.overlap_grad_reduce),
            **precision_numbers(framework, hw, req.precision, req.fp8_recipe,
                                req.fp8_param_gather),  # fit
            "recompute_layers": req.recompute_layers,
            "recompute_group": req.recompute_group,  # fit: Megatron's uniform method
            "distribute": int(req.distribute_saved_activations),
            "gbs": req.global_batch(model), "seq_len": seq,
            # moe: the load settings the expert terms use, and the all-to-all overlap switch
            **MOE.load_numbers(req.moe_imbalance, req.moe_capacity_factor,
                               req.moe_forced_balance, req.mtp),
            "shared_overlap": int(req.moe_shared_expert_overlap),
            **req.fixed_offload()}  # offload: what the request fixes (default: none)


def _add_offload_variants(model, hw, framework, base, pending, fastest_fit, budget, layout_keys,
                          cols, costs) -> None:
    """offload: the least offload that fits each pending group's candidates that do not fit,
    added to the columns and costs. Offload only adds time to a candidate, so one already slower
    than the fastest plan that fits without it, beyond the tie band, can neither win
    nor tie with offload."""
    slowest = offload_worth_trying(hw, fastest_fit)
    for z, r, sp, sched, (sub, keep), out, choices, layout_extra in pending:
        worth = out["step_s"] <= slowest
        if not worth.any():
            continue
        rows = np.flatnonzero(keep)[worth]  # the group's rows kept for the stage, then worth it
        chosen = {k: v[rows] for k, v in sub.items()}
        out = {k: v[worth] for k, v in out.items()}
        for extra, extra_costs in offload_variants(model, hw, framework, base, chosen, out,
                                                   choices, layout_extra, budget):
            _append_rows(cols, costs, {k: extra[k] for k in layout_keys}, (z, r, sp, sched),
                         {k: extra[k] for k in OFFLOAD_COLUMNS}, extra_costs, base["recompute_layers"])


def _group_space(space: dict, interleaved: bool, r: Recompute, parts: dict) -> dict:
    """The part of the space a choice group weighs, before the rules read it (they cost a pass
    over the space each, per group): vpp > 1 for the interleaved schedule alone, vpp = 1 for the
    others; moe: an overlapped candidate only where Megatron runs the overlap (model/moe.py).
    Boolean indexing keeps the rows in the space's order. The part depends on the schedule and
    on full recompute alone, so `parts` keeps each one cut for the groups that share it (read
    only: every group copies what it keeps)."""
    key = (interleaved, r is Recompute.FULL)
    if key not in parts:
        keep = ((space["vpp"] > 1) == interleaved) & MOE.overlap_admissible(space, key[1])
        parts[key] = {k: v[keep] for k, v in space.items()}
        for v in parts[key].values():
            v.flags.writeable = False  # shared by the groups: a write would be a bug
    return parts[key]


def _group_runs(model, req: PlanRequest, framework, masks: RuleMasks, group: dict,
                choice: tuple) -> dict:
    """What the framework runs of a choice group's part of the space, ZeRO stage by stage:
    {stage: mask}, the shared rules (planner.constraints) and the framework's own."""
    r, sp, sched, zeros = choice
    layouts = SimpleNamespace(**group, gbs=req.global_batch(model), seq_len=req.seq(model),
                              interleaved=sched is Schedule.INTERLEAVED, sp=sp, schedule=sched,
                              **rule_settings(req, [r]))  # offload, moe
    mask = masks.all_hold("shared", constraints.RULES, vars(layouts))
    return {z: mask & ok for z, ok in framework_runs(framework, model, layouts, zeros, sched,
                                                      req, masks).items()}


def evaluate_space(model: ModelSpec, hw: HardwareProfile, req: PlanRequest,
                   budget: float | None = None, keys: tuple[str, ...] = KEPT_COSTS):
    """All candidates and their costs: (columns, costs), each a dict of equal-length arrays.
    offload: with --offload auto (search's `fit` runs it when nothing fits), the candidates
    that do not fit in `budget` (default: the capacity) are tried again with the least offload
    that fits them (offload_variants). `keys`: the costs kept of each candidate (the search's
    ranking reads RANKED_COSTS alone; every cost kept is one more column of the whole space
    written and copied), step_s and total_bytes always."""
    _check_precision(hw, req)
    space = numeric_space(model, hw, req)
    seq, gbs = req.seq(model), req.global_batch(model)
    framework = FRAMEWORKS[req.framework]
    base = base_numbers(model, hw, req, framework)
    layout_keys = ("tp", "cp", "pp", "mbs", "vpp", "dp", "ep", "etp", "deepep", "a2a_overlap",
                   *(("dp_shard",) if "dp_shard" in space else ()),  # hybrid sharding
                   "cp_a2a")  # cp-kind
    cols: dict[str, list] = {k: [] for k in (*layout_keys, "zero", "recompute", "sp", "schedule",
                                             *OFFLOAD_COLUMNS,  # offload
                                             "rc_layers",  # fit: full recompute's layers
                                             "rc_dist")}  # fit: checkpoints split over tp
    # the costs kept of each candidate: `keys`, and the step and memory the search reads
    kept = tuple(dict.fromkeys(("step_s", "total_bytes", *keys)))
    costs: dict[str, list] = {k: [] for k in kept}
    fixed = SimpleNamespace(**{k: base[k] for k in ("offload_optimizer", "offload_params",
                                                    "offload_activations")})  # offload
    offload_fixed = (base["offload_optimizer"] > 0 or base["offload_params"]
                     or base["offload_activations"] > 0)
    auto = req.offload == "auto" and not req.offload_fixed and hw.host is not None
    budget = hw.capacity_bytes if budget is None else budget
    pending = []  # offload: the groups whose unfit candidates offload may make fit
    fastest_fit = np.inf  # offload: the fastest step that fits without offload
    for (r, sp, sched, zeros), sub, f, runs, group_choices in _runnable_groups(
            model, req, framework, base, space, offload_fixed):
        interleaved = sched is Schedule.INTERLEAVED
        partial, split = _recompute_variants(req, framework, r, sp, offload_fixed)  # fit
        outs = costs_by_stage(base, f, group_choices, runs,
                              kept + (OFFLOAD_KEPT if auto else ())
                              + (("stage_layers",) if partial else ()))
        # fit: partial recompute's memory at r = 1, every stage's at once (one layout half)
        ones = memory_at_one_layer(base, f, runs, outs, group_choices, budget) if partial else {}
        for z in zeros:
            out, keep = outs[z], runs[z]  # out: the costs of the rows kept
            if not keep.any():
                continue
            rows = slice(None) if keep.all() else keep  # every row of the group: no copy
            layout = {k: sub[k][rows] for k in layout_keys}
            _append_rows(cols, costs, layout, (z, r, sp, sched),
                         offload_columns(fixed, int(keep.sum())), out, req.recompute_layers)
            _add_recompute_rows((partial, split), ones.get(z), base,  # fit
                                {k: v[rows] for k, v in f.items()}, out,
                                replace(group_choices, zero_stage=z), budget, layout,
                                (z, r, sp, sched), fixed, cols, costs)
            if auto:  # offload: the least offload that fits what does not fit without it
                fits = out["total_bytes"] <= budget
                if fits.any():
                    fastest_fit = min(fastest_fit, float(out["step_s"][fits].min()))
                pending.append((z, r, sp, sched, (sub, keep), out,  # subset when worth it
                                replace(group_choices, zero_stage=z),
                                dict(gbs=gbs, seq_len=seq, interleaved=interleaved, sp=sp,
                                     schedule=sched, **request_choices(req, z, sched),
                                     **rule_settings(req, [r]))))
    _add_offload_variants(model, hw, framework, base, pending, fastest_fit, budget, layout_keys,
                          cols, costs)
    if not cols["tp"]:
        return {}, {}
    return ({k: np.concatenate(v) for k, v in cols.items()},
            {k: np.concatenate(v) for k, v in costs.items()})


def _runnable_groups(model: ModelSpec, req: PlanRequest, framework, base: dict, space: dict,
                     offload_fixed: bool):
    """Each choice group of which the framework runs something: ((recompute, sp, schedule,
    ZeRO stages), its candidates' columns, the same as float64 (the ids stay integers), {stage:
    mask of the candidates it runs}, the Choices they share)."""
    parts, masks = {}, RuleMasks(model)  # each rule's mask once per distinct input (masks.py)
    for r, sp, sched, zeros in choice_groups(req):
        group = _group_space(space, sched is Schedule.INTERLEAVED, r, parts)
        runs = _group_runs(model, req, framework, masks, group, (r, sp, sched, zeros))
        mask = np.logical_or.reduce(list(runs.values()))
        if not mask.any():
            continue
        sub = {k: v[mask] for k, v in group.items()}
        f = {k: v if k.startswith("_") else v.astype(np.float64) for k, v in sub.items()}
        yield ((r, sp, sched, zeros), sub, f, {z: runs[z][mask] for z in zeros},
               _group_choices(req, framework, base, (r, sp, sched, zeros), offload_fixed))


def some_plan_fits(model: ModelSpec, hw: HardwareProfile, req: PlanRequest,
                   limit: float, offload_budget: float | None = None) -> bool:
    """Whether the least memory of evaluate_space(model, hw, req)'s candidates is at most `limit`
    (bytes) — what the diagnosis asks of other sizes and profiles, which reads nothing else of
    them. As the search does, --offload fit (the default) is asked as auto when nothing fits
    without offload, each offload variant sized to `offload_budget` (the search's capacity less
    its margin; default the capacity). It is found from the candidates' memory alone (a third
    of their cost on a MoE model: search.costing.memory_in_chunks), every candidate's, so that
    a nan memory answers no, as the least of them all does: the plain candidates', and (fit)
    DeepSpeed's split checkpoints' on those that do not fit. The variants evaluate_space adds
    beside them only where they fit the capacity (partial recompute's, from candidates that fit
    already; offload's) cannot change a yes at a `limit` of the capacity, as the diagnosis asks;
    with offload weighed a no is asked of the whole space (offload's variants are tried on the
    candidates whose step times offload_worth_trying admits), as it is at any other limit."""
    if limit != hw.capacity_bytes:
        return _least_memory_fits(model, hw, req, limit, offload_budget)
    _check_precision(hw, req)
    framework, budget = FRAMEWORKS[req.framework], hw.capacity_bytes
    base = base_numbers(model, hw, req, framework)
    offload_fixed = (base["offload_optimizer"] > 0 or base["offload_params"]
                     or base["offload_activations"] > 0)
    least = []  # the least memory of each stage's candidates, and of the variants that fit
    for (r, sp, _, zeros), _, f, runs, choices in _runnable_groups(
            model, req, framework, base, numeric_space(model, hw, req), offload_fixed):
        outs = costs_by_stage(base, f, choices, runs, ("total_bytes",))
        split = _recompute_variants(req, framework, r, sp, offload_fixed)[1]  # fit
        for z in zeros:
            if not runs[z].any():
                continue
            least.append(np.min(outs[z]["total_bytes"]))
            found = partitioned_checkpoint_variants(
                base, {k: v[runs[z]] for k, v in f.items()}, outs[z],
                replace(choices, zero_stage=z), budget, ("total_bytes",)) if split else None
            if found is not None:
                least.append(np.min(found[1]["total_bytes"]))
    if bool(least) and float(np.min(least)) <= limit:
        return True
    auto = req.offload in ("auto", "fit") and not req.offload_fixed and hw.host is not None
    return _least_memory_fits(model, hw, req, limit, offload_budget) if auto else False


def _least_memory_fits(model: ModelSpec, hw: HardwareProfile, req: PlanRequest,
                       limit: float, offload_budget: float | None = None) -> bool:
    """Whether the least total_bytes of evaluate_space(model, hw, req)'s candidates is at most
    `limit`, the whole space evaluated (--offload fit as auto, as the search evaluates it, its
    variants sized to `offload_budget`)."""
    if req.offload == "fit":
        req = req.model_copy(update={"offload": "auto"})
    _, costs = evaluate_space(model, hw, req, offload_budget)
    return bool(costs) and float(np.min(costs["total_bytes"])) <= limit


def _check_precision(hw: HardwareProfile, req: PlanRequest) -> None:
    """A profile without figures for the request's precision is refused (PlanError)."""
    if hw.peak_flops_per_s(req.precision) is None or hw.gemm_efficiency(req.precision) is None:
        raise PlanError(f"{hw.name} has no {req.precision.value} figures")


def _recompute_variants(req: PlanRequest, framework, r: Recompute, sp: bool,
                        offload_fixed: bool) -> tuple[bool, bool]:
    """fit: whether a choice group's full-recompute candidates are also tried with fewer layers
    recomputed (Megatron's block method) and with their checkpoints split over tp (DeepSpeed's
    partition_activations): only where the request fixes neither and no offload."""
    full = r is Recompute.FULL and not offload_fixed
    partial = (full and not (req.recompute_layers or req.recompute_group > 1)
               and framework.partial_recompute == "searched")
    split = (full and not sp and not req.distribute_saved_activations
             and bool(framework.memory.searches_partitioned_checkpoints))
    return partial, split


def _group_choices(req: PlanRequest, framework, base: dict, choice: tuple,
                   offload_fixed: bool) -> Choices:
    """The Choices a choice group's candidates share (its first ZeRO stage)."""
    r, sp, sched, zeros = choice
    return Choices(zero_stage=zeros[0], recompute=r, schedule=sched, sequence_parallel=sp,
                   attention=req.attention, framework=framework, offload=offload_fixed,
                   offload_params=bool(base["offload_params"]),
                   cp_kind=search_cp_kind(req),  # cp-kind
                   moe_dispatcher=MOE.dispatcher_of(req.moe_dispatcher),
                   moe_permute_fusion=req.moe_permute_fusion,
                   compile_loss=req.compile_loss,  # fit: torchtitan's compiled loss
                   torchtitan_flex_ac=req.torchtitan_flex_ac,
                   adam_moments=req.adam_moments,  # Megatron's precision-aware optimizer
                   recompute_modules=(req.recompute_modules  # fit
                                      if r is Recompute.SELECTIVE else None))


def _add_recompute_rows(tried: tuple[bool, bool], one, *args) -> None:
    """fit: the fewest layers recomputed that still fit (Megatron), the checkpoints split over tp
    where nothing else makes it fit (DeepSpeed), as rows of their own: `tried` says which
    (_recompute_variants), `one` is partial recompute's memory at r = 1 (memory_at_one_layer),
    `args` those of _add_partial_recompute and _add_partitioned."""
    partial, split = tried
    if partial:
        _add_partial_recompute(*args, one=one)
    if split:
        _add_partitioned(*args)


def _add_partial_recompute(base, columns, out, choices, budget, layout, choice, fixed, cols,
                           costs, one=None) -> None:
    """fit: the full-recompute candidates that still fit with fewer layers recomputed, added as
    rows of their own with those layers (search/recompute.py; `one`: their memory at r = 1,
    memory_at_one_layer's)."""
    found = partial_recompute_variants(base, columns, out, choices, budget, tuple(costs), one)
    if found is None:
        return
    rows, layers, row_costs = found
    _append_rows(cols, costs, {k: v[rows] for k, v in layout.items()}, choice,
                 offload_columns(fixed, int(rows.sum())), row_costs, layers)


def _add_partitioned(base, columns, out, choices, budget, layout, choice, fixed, cols,
                     costs) -> None:
    """fit: the full-recompute candidates that fit only with their checkpoints split over the
    tp ranks, added as rows of their own (search/recompute.py)."""
    found = partitioned_checkpoint_variants(base, columns, out, choices, budget, tuple(costs))
    if found is None:
        return
    rows, row_costs = found
    _append_rows(cols, costs, {k: v[rows] for k, v in layout.items()}, choice,
                 offload_columns(fixed, int(rows.sum())), row_costs, 0, 1)


def _append_rows(cols: dict, costs: dict, layout: dict, choice: tuple, offload: dict,
                 row_costs: dict, rc_layers=0, rc_dist=0) -> None:
    """Add rows that share one choice group (ZeRO stage, recompute, sp, schedule) to the search's
    columns and costs: their layout columns, the group's choices, their offload columns, and
    (fit) full recompute's layers per stage (0: all) and whether its checkpoints are split over
    the tp ranks (rc_dist)."""
    z, r, sp, sched = choice
    n = len(next(iter(layout.values())))
    # a group's constant columns as read-only views of one value (np.broadcast_to): no memory
    # of their own until the search's columns are concatenated; the small codes (ZeRO stage,
    # recompute, schedule, split checkpoints) as int8: an eighth of the memory a column of the
    # DeepSeek-V3 search's 1.5 M candidates writes and faults in (12 MB as int64)
    cols["rc_layers"].append(np.broadcast_to(np.asarray(rc_layers, dtype=np.int64), (n,)))
    cols["rc_dist"].append(np.broadcast_to(np.asarray(rc_dist, dtype=np.int8), (n,)))
    for k, v in layout.items():
        cols[k].append(v)
    cols["zero"].append(np.broadcast_to(np.asarray(int(z), dtype=np.int8), (n,)))
    cols["recompute"].append(np.broadcast_to(
        np.asarray(list(Recompute).index(r), dtype=np.int8), (n,)))
    cols["sp"].append(np.broadcast_to(np.asarray(sp), (n,)))
    cols["schedule"].append(np.broadcast_to(
        np.asarray(list(Schedule).index(sched), dtype=np.int8), (n,)))
    for k, v in offload.items():
        cols[k].append(v)
    for k, kept in costs.items():
        kept.append(row_costs[k])
