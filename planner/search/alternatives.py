"""What else the search weighed, and why it did or did not win.

For each option beyond the plain layout — interleaving, the zero-bubble and DualPipe schedules,
the context-parallel kinds other than the framework's own, offload to host memory, hybrid
sharding — `alternatives` compares the fastest plan that uses it with the fastest that does
not, among the plans that fit and the framework runs, and says which wins and by what (the step's
parts that differ most). An option the framework does not run, or the search did not try, is
named with the reason and what would try it. Options in the searched space are read off the
search's own arrays; hybrid sharding, outside the default space, is tried on the best layouts.
"""

from __future__ import annotations

import re
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, PrivateAttr

from ..errors import PlanError
from ..formulas.choices import ContextKind, Precision, Schedule
from ..frameworks import FRAMEWORKS
from ..results import Plan, Time

Verdict = Literal["wins", "ties", "loses", "not run", "not searched", "none fits"]

STEP_PARTS = {"compute_s": "compute", "bubble_s": "bubble", "tp_exposed_s": "exposed TP",
              "dp_exposed_s": "exposed DP/ZeRO", "pp_exposed_s": "pipeline sends",
              "cp_exposed_s": "exposed CP", "optimizer_s": "optimizer",
              "offload_s": "offload copies and CPU step", "straggler_s": "stragglers"}
"""The parts of a step (results.Time) two plans are compared by."""

PROBED_LAYOUTS = 3
"""How many of the fastest fitting layouts an option outside the searched space is tried on."""
PROBED_SHARDS = 3
"""How many shard groups hybrid sharding is tried with on each: the smallest (one NVLink domain's
worth, the most replicas), the largest below dp, and one between."""


class Alternative(BaseModel):
    """One option and its verdict. plan/step_s: the fastest plan that uses it (None when none
    does); versus/versus_step_s: the fastest that does not; why: one sentence."""

    model_config = ConfigDict(frozen=True)

    option: str
    verdict: Verdict
    plan: str | None = None
    step_s: float | None = None
    versus: str | None = None
    versus_step_s: float | None = None
    why: str
    # the step of `plan`, part by part, for the lines that weigh it against row 1 (not in --json)
    _time: Time | None = PrivateAttr(default=None)


EP_PART = "exposed all-to-all (EP)"


def step_parts(t: Time) -> dict[str, float]:
    """The step's parts in seconds, named as the reasons name them: STEP_PARTS, and the exposed
    expert all-to-all (0 without experts). They add up to the step: step = compute + bubble +
    exposed communication + optimizer + offload + stragglers (planner.model.step's
    composition)."""
    parts = {name: getattr(t, key, 0.0) for key, name in STEP_PARTS.items()}
    parts[EP_PART] = t.ep_exposed_s
    return parts


def difference_terms(plan: Time, other: Time) -> list[tuple[str, float]]:
    """Each part by which `other`'s step differs from `plan`'s (other − plan, seconds), the
    largest first; parts that do not differ (to 10⁻⁹ of the step) left out. The terms add up to
    other.step_s − plan.step_s."""
    a, b = step_parts(plan), step_parts(other)
    tiny = 1e-9 * max(plan.step_s, other.step_s)
    terms = [(name, b[name] - a[name]) for name in a if abs(b[name] - a[name]) > tiny]
    return sorted(terms, key=lambda t: -abs(t[1]))


def _signed(seconds: float, unit: str = " s") -> str:
    return f"{'+' if seconds >= 0 else '−'}{abs(seconds):.3f}{unit}"


def step_differences(plan: Time, other: Time, most: int | None = None,
                     unit_once: bool = False) -> str:
    """Where `other`'s step differs from `plan`'s, every part, largest first, and their sum — the
    step difference — so that the arithmetic can be checked: 'exposed DP/ZeRO −1.130 s, compute
    +0.476 s, optimizer −0.002 s = −0.656 s' ('' when no part differs). Parts under half a
    millisecond are left out of the words (not of the sum). With `most`, only the `most` largest
    parts are named and the others summed as one ('4 others −0.051 s'), so the words still add
    up to the difference. With `unit_once`, the seconds are named once, after the sum
    ('compute −6.739, exposed TP −2.863 = −9.602 s'), for a line that must stay short."""
    terms = difference_terms(plan, other)
    if not terms:
        return ""
    unit = "" if unit_once else " s"
    shown = [f"{name} {_signed(d, unit)}" for name, d in terms if abs(d) >= 5e-4]
    total = other.step_s - plan.step_s
    if len(shown) == 1 and len(terms) == 1:
        return f"{terms[0][0]} {_signed(terms[0][1])}"
    if most is not None and len(shown) > most + 1:
        rest = [d for _, d in terms[most:]]  # the parts under half a millisecond too
        shown = shown[:most] + [f"{len(rest)} others {_signed(sum(rest), unit)}"]
    return ", ".join(shown or ["parts under 1 ms"]) + f" = {_signed(total)}"


SCHEDULE_OPTIONS = (
    ("interleaved 1F1B", (Schedule.INTERLEAVED,)),
    ("zero-bubble (ZB-H1, ZB-H2, ZB-V)", (Schedule.ZB_H1, Schedule.ZB_H2, Schedule.ZBV)),
    ("DualPipe, DualPipeV", (Schedule.DUALPIPE, Schedule.DUALPIPEV)),
)


def alternatives(model, hw, req, cols: dict, costs: dict, fits: np.ndarray, band: float,
                 budget: float) -> list[Alternative]:
    """The verdict on each option (see the module's docstring). `fits` indexes the candidates
    the search ranks; `band` is the tie band (ranking.TIE_BAND), the relative step-time
    difference within which two plans tie; `budget` the bytes a plan must fit in (offloaded
    candidates that fit but are not ranked, under `--offload fit`, are weighed here)."""
    from ..model.estimate import estimate
    from .space import config_at

    framework = FRAMEWORKS[req.framework]
    step = costs["step_s"]

    plans: dict[int, Plan] = {}  # the same candidate is often the reference of several options

    def plan_at(i: int) -> Plan:
        i = int(i)
        if i not in plans:
            plans[i] = estimate(model, hw, config_at(model, req, cols, i))
        return plans[i]

    def fastest(mask: np.ndarray, pool: np.ndarray = fits) -> int | None:
        idx = pool[mask[pool]]
        return None if idx.size == 0 else int(idx[np.argmin(step[idx])])

    out = []
    order = list(Schedule)
    for option, schedules in SCHEDULE_OPTIONS:
        runners = {f.name: [s.value for s in schedules if s in f.schedules]
                   for f in FRAMEWORKS.values() if any(s in f.schedules for s in schedules)}
        if not any(s in framework.schedules for s in schedules):
            who = "; ".join(f"{name} runs {', '.join(runs)} (--framework {name})"
                            for name, runs in runners.items())
            out.append(Alternative(option=option, verdict="not run", why=(
                f"{framework.name} does not run it; "
                + (who or "no framework plan3d models runs it") + ".")))
            continue
        codes = [order.index(s) for s in schedules]
        uses = np.isin(cols["schedule"], codes) & (cols["pp"] > 1)  # a schedule needs a pipeline
        if not uses.any():
            out.append(Alternative(option=option, verdict="not searched", why=(
                "--schedule leaves it out, or no layout meets its rules "
                "(micro-batches, stages per rank).")))
            continue
        out.append(_compare(option, fastest(uses), fastest(~uses), plan_at, band,
                            none_fit=f"none of its {int(uses.sum()):,} candidates fits"))
    kinds = _context_kinds(framework, cols, fits, plan_at, fastest, band)
    first = fastest(np.ones(len(cols["cp"]), dtype=bool))  # row 1: the fastest plan weighed
    if first is not None and cols["cp"][first] == 1:  # a kind's verdict is not about row 1
        kinds = [k.model_copy(update={"why": "among layouts with context parallelism only (row "
                                             "1 has none): " + k.why})
                 if k.verdict in ("wins", "ties", "loses") else k for k in kinds]
    out += kinds
    if model.is_moe:  # moe
        out.append(_expert_parallelism(model, req, cols, plan_at, fastest, band))
    out.append(_offload(req, cols, costs, fits, budget, plan_at, fastest, band))
    out.append(_hybrid_sharding(model, hw, req, cols, fits, step, plan_at, fastest, band,
                                budget))
    out.append(_partial_recompute(req, cols, plan_at, fastest, band))  # fit
    if FRAMEWORKS[req.framework].memory.searches_partitioned_checkpoints:  # fit
        out += _partitioned_checkpoints(req, cols, plan_at, fastest, band)
    if req.precision is Precision.FP8 and len(fits):  # fit
        out.append(_fp8_recipes(model, hw, req, cols, fits, step, plan_at, band, budget))
    return out


def _fp8_recipes(model, hw, req, cols, fits, step, plan_at, band, budget) -> Alternative:
    """fit: the other fp8 recipes, and the quantised weights as the parameters
    (--fp8-param-gather), on row 1's layout: each the framework and the GPU run, costed by
    explain's model; the fastest that fits in `budget` (with the memory margin, as row 1 must)
    against row 1. The search does not switch recipes by itself (each is a numerics choice), so
    they are tried on the fastest plan only."""
    from ..formulas.choices import QuantRecipe
    from ..model.estimate import check_config, estimate
    from .space import config_at

    option = "other fp8 recipes and --fp8-param-gather (on row 1's layout)"
    first = int(fits[np.argmin(step[fits])])
    config = config_at(model, req, cols, first)
    own = (config.fp8_recipe or FRAMEWORKS[req.framework].memory.default_fp8_recipe,
           config.fp8_param_gather)
    tried = []
    for recipe in QuantRecipe:
        for gather in (False, True):
            if (recipe, gather) == own:
                continue
            candidate = config.model_copy(update={"fp8_recipe": recipe,
                                                  "fp8_param_gather": gather})
            try:
                check_config(model, hw, candidate)
            except PlanError:
                continue  # the framework or the GPU does not run it
            plan = estimate(model, hw, candidate)
            if plan.memory.total_bytes <= budget:  # fits with the margin, as row 1
                tried.append(plan)
    if not tried:
        return Alternative(option=option, verdict="none fits", why=(
            "no other recipe the framework and the GPU run fits on row 1's layout with the "
            "memory margin."))
    with_plan = min(tried, key=lambda p: p.time.step_s)
    return _verdict(option, with_plan, plan_at(first), band,
                    tried=f" (of {len(tried)} that fit on row 1's layout; a numerics choice, "
                          "never made by the search)")


def _partitioned_checkpoints(req, cols, plan_at, fastest, band) -> list[Alternative]:
    """fit: DeepSpeed's checkpoint options beside full recompute. partition_activations: the
    search adds, for each full-recompute plan without sequence parallelism that does not fit,
    the same plan with its checkpoints split over the tp ranks (search/recompute.py); what the
    fastest of them gains over the fastest plan without it. contiguous_memory_optimization is
    not weighed: it only adds buffers in plan3d's memory (what it saves is fragmentation, which
    the allocator's measured slack does not split by option)."""
    option = "partitioned checkpoints (partition_activations, full+dist)"
    contiguous = Alternative(
        option="contiguous checkpoint buffers (contiguous_memory_optimization)",
        verdict="not searched", why=(
            "it copies partitioned checkpoints into number_checkpoints buffers allocated ahead, "
            "which plan3d counts as more memory, never less (the fragmentation it avoids is "
            "inside the allocator's slack); --distribute-saved-activations "
            "--contiguous-checkpoints costs it."))
    if req.distribute_saved_activations:
        return [Alternative(option=option, verdict="not searched", why=(
            "--distribute-saved-activations fixes it.")), contiguous]
    uses = cols.get("rc_dist", np.zeros(len(cols["tp"]), dtype=np.int64)) > 0
    if not uses.any():
        return [Alternative(option=option, verdict="none fits", why=(
            "no full-recompute plan with tp > 1 and no sequence parallelism that does not fit "
            "fits with its checkpoints split over the tp ranks (a plan that fits without it is "
            "not split: the split only adds an all-gather before each rerun).")), contiguous]
    return [_compare(option, fastest(uses), fastest(~uses), plan_at, band,
                     none_fit="no plan with its checkpoints split over the tp ranks fits"),
            contiguous]


def _partial_recompute(req, cols, plan_at, fastest, band) -> Alternative:
    """fit: recomputing only some layers of each stage (Megatron --recompute-method block): the
    search adds, for each plan that fits with full recompute, the fewest recomputed layers that
    still fit (search/recompute.py); what the fastest of them gains over the fastest plan
    without it."""
    from ..formulas.choices import Recompute

    option = "partial recompute (the fewest layers of each stage that fit)"
    if FRAMEWORKS[req.framework].partial_recompute != "searched":
        return Alternative(option=option, verdict="not searched", why=(
            f"{req.framework} does not run Megatron's --recompute-method block; "
            "--framework megatron weighs it."))
    if req.recompute_layers:
        return Alternative(option=option, verdict="not searched", why=(
            f"--recompute-layers {req.recompute_layers} fixes it."))
    if "rc_layers" not in cols:
        return Alternative(option=option, verdict="not searched", why="no candidate tried it.")
    uses = ((cols["rc_layers"] > 0)
            & (cols["recompute"] == list(Recompute).index(Recompute.FULL)))
    return _compare(option, fastest(uses), fastest(~uses), plan_at, band,
                    none_fit="no plan that fits with full recompute fits with fewer layers "
                    "recomputed")


CONTEXT_OPTIONS = ((ContextKind.RING, "context parallelism as a ring (p2p)"),
                   (ContextKind.ALL_TO_ALL, "context parallelism as an all-to-all (Ulysses)"),
                   (ContextKind.HIERARCHICAL, "hierarchical context parallelism (a2a+p2p)"))


def _context_kinds(framework, cols, fits, plan_at, fastest, band) -> list[Alternative]:
    """Each context-parallel kind other than the framework's default, from the search's cp_a2a
    column (c_a = 1 the ring, cp the all-to-all, between them hierarchical), among cp > 1: its
    fastest plan that fits against the same layout with the framework's own kind."""
    from ..frameworks import kind_of_group
    from ..frameworks.base import CP_KIND_FLAGS

    cp = cols["cp"]
    kind_of = kind_of_group(cp, cols.get("cp_a2a", np.ones_like(cp)))
    out = []
    for kind, option in CONTEXT_OPTIONS:
        if kind is framework.cp_kinds[0]:
            continue
        if kind not in framework.cp_kinds:
            runners = [f.name for f in FRAMEWORKS.values() if kind in f.cp_kinds]
            out.append(Alternative(option=option, verdict="not run", why=(
                f"{framework.name} does not run it; "
                + "; ".join(f"{r} does (--framework {r})" for r in runners) + ".")))
            continue
        uses = kind_of[kind] & (cp > 1)
        if not (cp > 1).any():
            out.append(Alternative(option=option, verdict="not searched", why=(
                "no layout with context parallelism (cp > 1) is in the search (--cp fixes "
                "cp).")))
            continue
        if not uses.any():
            out.append(Alternative(option=option, verdict="not searched", why=(
                f"--cp-kind leaves it out, or no layout with cp > 1 meets its rules (the heads "
                f"and KV heads per TP rank must divide by its all-to-all group); "
                f"--cp-kind {CP_KIND_FLAGS[kind]} asks for it.")))
            continue
        with_i = fastest(uses)
        if with_i is None:
            out.append(Alternative(option=option, verdict="none fits", why=(
                f"none of its {int(uses.sum()):,} candidates fits.")))
            continue
        # against the same layout with the framework's own kind, so that the verdict is the
        # kind's and not another layout's
        same = np.ones(len(cp), dtype=bool)
        for key in SAME_LAYOUT:
            if key in cols:
                same &= cols[key] == cols[key][with_i]
        own = same & kind_of[framework.cp_kinds[0]]
        own_i = fastest(own, np.flatnonzero(own))
        if own_i is None:
            out.append(_compare(option, with_i, None, plan_at, band, none_fit=""))
            continue
        verdict = _verdict(option, plan_at(with_i), plan_at(own_i), band)
        fits_own = bool(np.any(fits == own_i))  # np.isin would import numpy.ma (≈ 0.03 s)
        out.append(verdict if fits_own else verdict.model_copy(update={
            "verdict": "wins", "why": verdict.why[:-1] + (
                f"; with {CP_KIND_FLAGS[framework.cp_kinds[0]]} this layout does not fit.")}))
    return out


SAME_LAYOUT = ("dp", "tp", "pp", "cp", "vpp", "mbs", "ep", "etp", "dp_shard", "zero",
               "recompute", "sp", "schedule", "off_opt", "off_params", "off_act")
"""The columns two candidates share when they differ only in their context-parallel kind."""


EP_OPTION = "expert parallelism"
EP_PINNED = "--ep 1 leaves it out."
"""moe: the option's name, and its reason where the request itself keeps the experts whole."""


def _expert_parallelism(model, req, cols, plan_at, fastest, band) -> Alternative:
    """moe: the fastest plan that splits the experts (ep > 1) against the fastest that does not;
    where the request holds ep (--ep) to one side, or the search held no layout with ep > 1, why:
    --ep, the request's --tp/--pp/--cp or its global batch under a framework whose expert
    parallelism needs every GPU a data-parallel rank (DeepSpeed's AutoEP: tp = pp = cp = 1),
    with the batch that would fill them."""
    uses = cols["ep"] > 1
    pinned = [str(e) for e in req.ep or ()]
    if pinned and uses.all():  # asked for: nothing keeps the experts whole to weigh it against
        return Alternative(option=EP_OPTION, verdict="not searched", why=(
            f"--ep {' '.join(pinned)} asks for it: no plan keeps the experts whole."))
    if uses.any():
        return _compare(EP_OPTION, fastest(uses), fastest(~uses), plan_at, band,
                        none_fit=f"none of its {int(uses.sum()):,} candidates fits")
    gbs, gpus = req.global_batch(model), req.gpus
    pure = FRAMEWORKS[req.framework].ep_needs_pure_dp
    held = [f"--{d} {' '.join(str(v) for v in getattr(req, d))}" for d in ("tp", "pp", "cp")
            if getattr(req, d) and "1" not in [str(v) for v in getattr(req, d)]]
    if pinned and all(e == "1" for e in pinned):
        why = EP_PINNED
    elif pure and held:
        why = (f"{req.framework} splits the experts only with tp = pp = cp = 1, which "
               f"{' and '.join(held)} rules out.")
    elif pure and gbs % gpus:
        need = -(-gbs // gpus) * gpus
        why = (f"{req.framework} splits the experts only with tp = pp = cp = 1, every GPU a "
               f"data-parallel rank, and the global batch of {gbs:,} sequences does not divide "
               f"over {gpus:,} of them: --gbs {need} weighs it.")
    else:
        why = (f"no layout of {gpus:,} GPUs meets its rules (ep dividing the "
               f"{model.n_experts} experts and the ranks it folds over).")
    return Alternative(option=EP_OPTION, verdict="not searched", why=why)


def _offload(req, cols, costs, fits, budget, plan_at, fastest, band) -> Alternative:
    """Offload to host memory: the search evaluates, for each plan that does not fit, the least
    offload that makes it fit; under `--offload fit` those are ranked only when nothing else
    fits, and weighed here either way."""
    from .ranking import offloaded

    option = "offload to host memory"
    if "off_opt" not in cols:
        return Alternative(option=option, verdict="not searched", why="--offload none.")
    everything = np.arange(len(cols["tp"]))
    uses = offloaded(cols, everything) > 0
    fit_all = np.flatnonzero(costs["total_bytes"] <= budget)
    with_i = fastest(uses, fit_all)
    if with_i is None:
        return Alternative(option=option, verdict="none fits", why=(
            "no plan that fails to fit is made to fit by the offload its framework runs"
            if not uses.any() else "none of the offloaded candidates fits") + ".")
    without_i = fastest(~uses)
    if without_i is None:
        return _compare(option, with_i, None, plan_at, band, none_fit="")
    verdict = _verdict(option, plan_at(with_i), plan_at(without_i), band)
    ranked = bool(np.any(fits == with_i))  # np.isin would import numpy.ma (≈ 0.03 s)
    if verdict.verdict == "wins" and not ranked:
        verdict = verdict.model_copy(update={"why": verdict.why[:-1] + (
            " — not ranked: offload's time has no measured run behind it (`--offload auto` "
            "ranks it).")})
    return verdict


def _compare(option: str, with_i: int | None, without_i: int | None, plan_at, band: float,
             none_fit: str) -> Alternative:
    """The verdict from the fastest plan with the option and the fastest without."""
    if with_i is None:
        return Alternative(option=option, verdict="none fits", why=none_fit + ".")
    with_plan = plan_at(with_i)
    if without_i is None:
        alt = Alternative(option=option, verdict="wins", plan=with_plan.config.short_label(),
                          step_s=with_plan.time.step_s, why="every plan that fits uses it.")
        alt._time = with_plan.time
        return alt
    return _verdict(option, with_plan, plan_at(without_i), band)


def _verdict(option: str, with_plan: Plan, without: Plan, band: float,
             tried: str = "") -> Alternative:
    a, b = with_plan.time, without.time
    ratio = a.step_s / b.step_s - 1
    label_a, label_b = with_plan.config.short_label(), without.config.short_label()
    if ratio < -band:
        verdict, why = "wins", (f"its fastest plan{tried}, {label_a}, is {-ratio:.1%} faster than "
                                f"the fastest without it, {label_b}: "
                                f"{step_differences(b, a) or 'same parts'}")
    elif ratio > band:
        verdict, why = "loses", (f"its fastest plan{tried}, {label_a}, is {ratio:.1%} slower than "
                                 f"{label_b}: {step_differences(b, a) or 'same parts'}")
    else:
        verdict, why = "ties", (f"its fastest plan{tried}, {label_a}, is within the tie band "
                                f"(±{band:.0%}) of {label_b} ({'+' if ratio >= 0 else '−'}{abs(ratio):.1%}): "
                                f"{step_differences(b, a) or 'same parts'}")
    alt = Alternative(option=option, verdict=verdict, plan=label_a, step_s=a.step_s,
                      versus=label_b, versus_step_s=b.step_s, why=why + ".")
    alt._time = a
    return alt


def _fastest_first(step: np.ndarray, k: int) -> np.ndarray:
    """The places of the k smallest steps, smallest first, equal steps in order of place: what
    np.argsort(step, kind="stable")[:k] gives, without sorting every candidate (a partition
    finds the k-th step; only the steps up to it are sorted)."""
    kth = np.partition(step, k - 1)[k - 1] if len(step) > k else np.nan
    if np.isnan(kth):  # few candidates, or NaN among the k first: the sort itself
        return np.argsort(step, kind="stable")[:k]
    near = np.flatnonzero(step <= kth)
    return near[np.argsort(step[near], kind="stable")[:k]]


def _hybrid_sharding(model, hw, req, cols, fits, step, plan_at, fastest, band,
                     budget) -> Alternative:
    """HSDP: read off the search when --dp-shard put it in the space; otherwise tried, with up to
    PROBED_SHARDS of the shard groups `--dp-shard auto` would try, on the PROBED_LAYOUTS fastest
    fitting layouts, a tried plan counted where it fits in `budget` (with the memory margin, as
    the search would rank it)."""
    from ..model.estimate import check_config, estimate
    from .space import config_at, dp_shard_candidates

    option = "hybrid sharding (HSDP)"
    if "dp_shard" in cols:
        uses = cols["dp_shard"] < cols["dp"]
        return _compare(option, fastest(uses), fastest(~uses), plan_at, band,
                        none_fit="no hybrid plan fits")
    best = fits[_fastest_first(step[fits], PROBED_LAYOUTS)]
    tried, refusal = [], ""
    for i in best:
        config = config_at(model, req, cols, int(i))
        shards = [s for s in dp_shard_candidates(config.dp, config.tp * config.cp,
                                                 hw.gpus_per_domain) if s < config.dp]
        if len(shards) > PROBED_SHARDS:
            shards = [shards[0], shards[len(shards) // 2], shards[-1]]
        for shard in shards:
            candidate = config.model_copy(update={"dp_shard": shard})
            try:
                check_config(model, hw, candidate)
            except PlanError as exc:
                refusal = refusal or str(exc)
                continue
            plan = estimate(model, hw, candidate)
            if plan.memory.total_bytes <= budget:  # fits with the margin, as row 1
                tried.append(plan)
    if not tried:
        # the framework's reason, without its advice about --dp-shard: the user did not give it
        refusal = re.split(r"[;,] (?:or )?(?:leave|use) --", refusal)[0].replace(
            "--dp-shard", "hybrid sharding")
        why = (f"refused: {refusal}" if refusal else
               f"on the {len(best)} fastest layouts, no hybrid shard group (whole NVLink "
               "domains) fits with the memory margin")
        return Alternative(option=option, verdict="not run" if refusal else "none fits",
                           why=why.rstrip(".") + ".")
    with_plan = min(tried, key=lambda p: p.time.step_s)
    return _verdict(option, with_plan, plan_at(int(best[0])), band,
                    tried=f" (tried on the {len(best)} fastest layouts; search all with "
                          "--dp-shard auto)")
