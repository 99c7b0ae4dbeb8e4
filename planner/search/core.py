"""Many plans at once: the candidate space as float64 arrays through the same plan_costs.

The discrete choices (ZeRO stage, recompute, sequence parallelism, schedule) pick which
expressions are built, so the space is split into one group per combination of them and each
group is evaluated as arrays. Result objects are built only for the plans shown, through the
scalar estimate — the same formulas, so search and explain agree."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from ..errors import NoFeasiblePlan, PlanError
from ..frameworks import FRAMEWORKS
from ..model.estimate import estimate
from ..results import Plan
from ..schema import HardwareProfile, ModelSpec
from .alternatives import Alternative, alternatives, step_differences
from .diagnosis import diagnose, no_layout_message
from .evaluate import evaluate_space
from .request import PlanRequest
from .space import CONSTRAINTS, config_at, gpu_counts

SORT_KEYS = ("time", "memory", "mfu", "gpus")


DEFAULT_HEADROOM = 0.0


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
        raise NoFeasiblePlan(diagnose(model, hw, req, cfg, need, budget))
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
    from ..model.validation import model_uncertainty
    from .ranking import distinct_layouts, tie_order

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
