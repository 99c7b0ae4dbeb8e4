"""Many plans at once: the candidate space as float64 arrays through the same plan_costs.

The discrete choices (ZeRO stage, recompute, sequence parallelism, schedule) pick which
expressions are built, so the space is split into one group per combination of them and each
group is evaluated as arrays. Result objects are built only for the plans shown, through the
scalar estimate — the same formulas, so search and explain agree."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..errors import NoFeasiblePlan, PlanError
from ..frameworks import FRAMEWORKS
from ..model.estimate import estimate
from ..results import Plan
from ..schema import HardwareProfile, ModelSpec
from .alternatives import Alternative, alternatives
from .costing import RANKED_COSTS
from .diagnosis import diagnose, moe_settings_refusal, no_layout_message
from .evaluate import evaluate_space
from .ranking import (
    DEFAULT_HEADROOM,
    TIE_BAND,
    TIE_BAND_SOURCE,
    Ranking,
    check_headroom,
    in_margin,
    offloaded,
    rank,
)
from .reach import sizes_within_reach
from .request import PlanRequest
from .space import CONSTRAINTS, config_at, gpu_counts
from .summary import memory_summary, summary, why

SORT_KEYS = ("time", "memory", "mfu", "gpus")


class SearchResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    plans: list[Plan]
    considered: int
    feasible: int
    constraints: list[str]
    reason: str = ""
    folded: int = 0  # plans left out of the table: same step time and memory as a simpler one
    # the honest ranking (sort time or mfu): each plan's place, `1=` in a tie; the band within
    # which step times tie (ranking.TIE_BAND) and where it comes from; the variants of
    # each plan's layout (ZeRO, recompute, mbs, vpp) folded into it
    ranks: list[str] = Field(default=[], description=(
        "Each plan's label, as the table's # column: its place ('1' the recommendation, row 1), "
        "'N=' within the tie band of row N, 'm' after the ranked rows: faster than row 1 but "
        "fits only inside the memory margin (`headroom`), never recommended; where no plan fits "
        "with the margin (`any_safe` false) each label ends in 'm'."))
    tie_band: float = 0.0
    tie_band_source: str = ""
    variants: list[int] = []
    # each option beyond the plain layout (schedules, hybrid sharding): did it win, and why
    alternatives: list[Alternative] = []
    # the memory margin a recommended plan leaves free (planner.search.ranking), and whether any
    # plan does: rows marked `m` fit only inside it
    headroom: float = Field(default=DEFAULT_HEADROOM, description=(
        "The memory margin, a fraction of capacity, a recommended plan leaves free."))
    any_safe: bool = Field(default=True, description=(
        "Whether any plan fits with the memory margin (else row 1 is the fastest that fits)."))
    # the words: `answer` before the table (--sort gpus: the size), `summary` the few lines under
    # it, `reason` the whole reasoning (--why)
    answer: str = ""
    summary: list[str] = []
    # each row's `plan3d explain` arguments, which reproduce it exactly (filled by the CLI, which
    # knows the names the user gave the model and the profile)
    explain_args: list[list[str]] = Field(default=[], description=(
        "Each plan's `plan3d explain` arguments, which reproduce it exactly."))


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


def fewest_gpus(model: ModelSpec, hw: HardwareProfile, req: PlanRequest, target_step_s: float,
                top: int = 10, headroom: float | None = None) -> SearchResult:
    """The smallest cluster (whole domains, doubling, up to req.gpus) whose best plan steps in at
    most target_step_s, with its plans ranked by step time. Raises NoFeasiblePlan when even
    req.gpus does not reach the target."""
    if not target_step_s > 0:
        raise PlanError(f"--target-step-s must be positive, got {target_step_s}")
    best_seen = None
    sizes = gpu_counts(req.gpus, hw.gpus_per_domain)
    req = req.model_copy(update={"gbs": req.global_batch(model)})  # the same batch at every size
    headroom = DEFAULT_HEADROOM if headroom is None else headroom
    check_headroom(headroom)
    # the sizes where even MFU = 1 cannot reach the target are not searched (reach.py)
    reach = sizes_within_reach(model, hw, req, sizes, target_step_s)
    for n in sizes:
        sized = req.model_copy(update={"gpus": n})
        _check_request(model, hw, sized, "time")
        found = _row_one(model, hw, sized, headroom) if n in reach else None
        if found is None:
            continue
        cols, costs, fits, step = found
        best_seen = (n, step)
        if step <= target_step_s:
            result = _ranked(model, hw, sized, cols, costs, fits, top, len(cols["tp"]), headroom)
            unsearched = [f"{k:,}" for k in sizes if k < n and k not in reach]
            bound = (f"; {', '.join(unsearched)} not searched: even 100 % MFU misses it"
                     if unsearched else "")
            return result.model_copy(update={"answer": (
                f"{n:,} GPUs: the smallest size ({', '.join(f'{k:,}' for k in sizes)}) "
                f"whose row 1 steps in ≤ {target_step_s:,.4g} s ({step:,.3f} s){bound}.")})
    for n in [n for n in sizes if n not in reach] if best_seen is None else []:
        # none fits where searched: the best found, as searching every size finds it
        found = _row_one(model, hw, req.model_copy(update={"gpus": n}), headroom)
        best_seen = best_seen if found is None else (n, found[3])
    seen = (f"; the best found is {best_seen[1]:.3g} s on {best_seen[0]} GPUs" if best_seen
            else "; no size fits in memory")
    raise NoFeasiblePlan(f"no cluster of up to {req.gpus} GPUs reaches a {target_step_s:g} s "
                         f"step for {model.name} at global batch {req.global_batch(model)}{seen}")


def _row_one(model: ModelSpec, hw: HardwareProfile, sized: PlanRequest, headroom: float):
    """--sort gpus at one size: (columns, costs, the candidates that fit, row 1's step), or None
    where nothing fits. Row 1, the recommendation at this size, is estimated alone: the table,
    its other rows and the options weighed only for the size that answers."""
    try:  # a size where nothing fits is passed over: no diagnosis built for it
        cols, costs, fits = _space_that_fits(model, hw, sized, headroom, diagnosed=False)
    except NoFeasiblePlan:
        return None
    step = estimate(model, hw, config_at(model, sized, cols, _table(
        hw, sized, cols, costs, fits, 1, headroom).rows[0])).time.step_s
    return cols, costs, fits, step


def search(model: ModelSpec, hw: HardwareProfile, req: PlanRequest, top: int = 10,
           sort: str = "time", headroom: float | None = None,
           target_step_s: float | None = None) -> SearchResult:
    """Rank the plans that fit. Raises NoFeasiblePlan, with a diagnosis, when none does.
    headroom: the memory margin a recommended plan leaves free (None: DEFAULT_HEADROOM).
    sort = "gpus" finds the fewest GPUs whose row 1 meets target_step_s."""
    headroom = DEFAULT_HEADROOM if headroom is None else headroom
    _check_request(model, hw, req, sort)
    if sort == "gpus":
        if target_step_s is None:
            raise PlanError("--sort gpus needs --target-step-s (the step time to reach)")
        return fewest_gpus(model, hw, req, target_step_s, top, headroom)
    check_headroom(headroom)
    cols, costs, fits = _space_that_fits(model, hw, req, headroom)
    considered = len(cols["tp"])
    if sort in ("time", "mfu"):
        return _ranked(model, hw, req, cols, costs, fits, top, considered, headroom)
    order, folded = _distinct(costs, _order(costs, cols, fits, sort), top)
    plans = [estimate(model, hw, config_at(model, req, cols, int(i))) for i in order]
    reason = why(plans, [str(k) for k in range(1, len(plans) + 1)], 0.0, "", 0)
    if folded:
        reason += (f" {folded} other layouts with exactly the step time and memory of a plan shown "
                   "(e.g. context parallelism traded for micro-batch size) are folded into it.")
    return SearchResult(plans=plans, considered=considered, feasible=int(fits.size),
                        constraints=_constraints(req), reason=reason, folded=folded,
                        summary=memory_summary(plans))


def _check_request(model: ModelSpec, hw: HardwareProfile, req: PlanRequest, sort: str) -> None:
    """What search refuses before it evaluates anything, one clear reason each."""
    asked = [d for d in (req.ep or []) + (req.etp or []) if d != 1]
    if model.n_experts <= 1 and asked:  # the real cause first, not a count of removed layouts
        raise PlanError(f"{model.name} has no routed experts, so there is nothing to split over "
                        "expert parallelism: ep = etp = 1 is the only value that works; leave "
                        "--ep and --etp out")
    if sort not in SORT_KEYS:
        raise PlanError(f"unknown sort '{sort}' (choose from {', '.join(SORT_KEYS)})")
    refusal = moe_settings_refusal(model, hw, req)  # a MoE setting the framework never runs
    if refusal:
        raise PlanError(refusal)


def _space_that_fits(model: ModelSpec, hw: HardwareProfile, req: PlanRequest,
                     headroom: float, diagnosed: bool = True) -> tuple[dict, dict, np.ndarray]:
    """Every candidate's columns and ranked costs, and the indices of those the ranking weighs
    (they fit; with --offload fit, without offload where any plan does). Raises NoFeasiblePlan,
    with a diagnosis unless `diagnosed` is false, when none fits (the diagnosis searches other
    sizes and profiles: --sort gpus, which passes over a size where nothing fits, would build
    it at each such size and throw it away)."""
    capacity = hw.capacity_bytes
    safe_budget = capacity * (1 - headroom)  # what a recommended plan may use
    # offload: --offload fit (the default) evaluates the least offload that makes each plan fit
    # with the margin, as auto does, but ranks it only when nothing fits with the margin without
    # it ("Also weighed" says what it would win)
    evaluated = req.model_copy(update={"offload": "auto"}) if req.offload == "fit" else req
    cols, costs = evaluate_space(model, hw, evaluated, safe_budget, RANKED_COSTS)
    if not cols:
        raise NoFeasiblePlan(no_layout_message(model, hw, req))
    fits = np.flatnonzero(costs["total_bytes"] <= capacity)
    if req.offload == "fit" and not req.offload_fixed:
        plain = fits[offloaded(cols, fits) == 0]
        plain_safe = plain[~in_margin(costs["total_bytes"][plain], capacity, headroom)]
        fits = plain if plain_safe.size or fits.size == plain.size else fits
    if fits.size == 0:
        if not diagnosed:
            raise NoFeasiblePlan(f"no plan of {model.name} fits on {req.gpus} × {hw.name}")
        i = int(np.argmin(costs["total_bytes"]))
        need = costs["total_bytes"][i]
        cfg = config_at(model, req, cols, i)
        raise NoFeasiblePlan(diagnose(model, hw, req, cfg, need, capacity, headroom))
    return cols, costs, fits


def _constraints(req: PlanRequest) -> list[str]:
    """The rules every framework shares, then the request's framework's own."""
    return CONSTRAINTS + [f"{req.framework}: {rule.text}"
                          for rule in FRAMEWORKS[req.framework].all_rules()]


def _ranked(model, hw, req, cols, costs, fits, top, considered, headroom) -> SearchResult:
    """The recommendation rule (planner.search.ranking): one row per layout, the fastest plan
    that fits with the memory margin first, ties within the tie band (TIE_BAND) marked."""
    band, source = TIE_BAND, TIE_BAND_SOURCE
    capacity = hw.capacity_bytes
    r = _table(hw, req, cols, costs, fits, top, headroom)
    plans = [estimate(model, hw, config_at(model, req, cols, i)) for i in r.rows]
    folded = sum(r.folded)
    # the alternatives are weighed among the plans a recommendation may come from
    safe = fits[~in_margin(costs["total_bytes"][fits], capacity, headroom)] if r.any_safe else fits
    weighed = alternatives(model, hw, req, cols, costs, safe, band, capacity * (1 - headroom))
    return SearchResult(plans=plans, considered=considered, feasible=int(fits.size),
                        constraints=_constraints(req), folded=folded,
                        reason=why(plans, r.labels, band, source, folded),
                        summary=summary(plans, r.labels, band, headroom, r.any_safe, weighed,
                                        r.ties),
                        ranks=r.labels, tie_band=band, tie_band_source=source,
                        variants=r.folded, headroom=headroom, any_safe=r.any_safe,
                        alternatives=weighed)


def _table(hw, req, cols, costs, fits, top, headroom) -> Ranking:
    """The recommendation rule's table (planner.search.ranking.rank): its rows, row 1 first."""
    defaults = {**FRAMEWORKS[req.framework].defaults,  # cp-kind: its default kind too
                "cp_kind": FRAMEWORKS[req.framework].cp_kinds[0]}
    return rank(cols, costs["step_s"], costs["total_bytes"], hw.capacity_bytes, fits, TIE_BAND,
                headroom, top, defaults)


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
