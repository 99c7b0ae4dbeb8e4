"""What else the search weighed, and why it did or did not win.

For each option beyond the plain layout — interleaving, the zero-bubble and DualPipe schedules,
hybrid sharding — `alternatives` compares the fastest plan that uses it with the fastest that does
not, among the plans that fit and the framework runs, and says which wins and by what (the step's
parts that differ most). An option the framework does not run, or the search did not try, is
named with the reason and what would try it. Options in the searched space are read off the
search's own arrays; hybrid sharding, outside the default space, is tried on the best layouts.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from .errors import PlanError
from .formulas.choices import Schedule
from .frameworks import FRAMEWORKS
from .results import Plan, Time

Verdict = Literal["wins", "ties", "loses", "not run", "not searched", "none fits"]

STEP_PARTS = {"compute_s": "compute", "bubble_s": "bubble", "tp_exposed_s": "exposed TP",
              "dp_exposed_s": "exposed DP/ZeRO", "pp_exposed_s": "pipeline sends",
              "cp_exposed_s": "exposed CP", "optimizer_s": "optimizer"}
"""The parts of a step (results.Time) two plans are compared by."""

PROBED_LAYOUTS = 3
"""How many of the fastest fitting layouts an option outside the searched space is tried on."""


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


def step_differences(plan: Time, other: Time) -> str:
    """The parts by which `other`'s step differs most from `plan`'s, largest growth first and the
    largest saving after it: 'bubble +0.18 s, exposed DP/ZeRO −0.03 s' ('' when none differs)."""
    deltas = {k: getattr(other, k) - getattr(plan, k) for k in STEP_PARTS}
    worse, better = max(deltas, key=deltas.get), min(deltas, key=deltas.get)
    tiny = 1e-6 * plan.step_s
    parts = []
    if deltas[worse] > tiny:
        parts.append(f"{STEP_PARTS[worse]} +{deltas[worse]:.3f} s")
    if deltas[better] < -tiny:
        parts.append(f"{STEP_PARTS[better]} −{-deltas[better]:.3f} s")
    return ", ".join(parts)


SCHEDULE_OPTIONS = (
    ("interleaved 1F1B", (Schedule.INTERLEAVED,)),
    ("zero-bubble (ZB-H1, ZB-H2, ZB-V)", (Schedule.ZB_H1, Schedule.ZB_H2, Schedule.ZBV)),
    ("DualPipe, DualPipeV", (Schedule.DUALPIPE, Schedule.DUALPIPEV)),
)


def alternatives(model, hw, req, cols: dict, costs: dict, fits: np.ndarray,
                 band: float) -> list[Alternative]:
    """The verdict on each option (see the module's docstring). `fits` indexes the candidates
    that fit; `band` is the model's relative step-time uncertainty, within which two plans tie."""
    from .estimate import estimate
    from .search import config_at

    framework = FRAMEWORKS[req.framework]
    step = costs["step_s"]

    def plan_at(i: int) -> Plan:
        return estimate(model, hw, config_at(model, req, cols, int(i)))

    def fastest(mask: np.ndarray) -> int | None:
        idx = fits[mask[fits]]
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
    out.append(_hybrid_sharding(model, hw, req, cols, fits, step, plan_at, fastest, band))
    return out


def _compare(option: str, with_i: int | None, without_i: int | None, plan_at, band: float,
             none_fit: str) -> Alternative:
    """The verdict from the fastest plan with the option and the fastest without."""
    if with_i is None:
        return Alternative(option=option, verdict="none fits", why=none_fit + ".")
    with_plan = plan_at(with_i)
    if without_i is None:
        return Alternative(option=option, verdict="wins", plan=with_plan.config.label(batch=False),
                           step_s=with_plan.time.step_s,
                           why="every plan that fits uses it.")
    return _verdict(option, with_plan, plan_at(without_i), band)


def _verdict(option: str, with_plan: Plan, without: Plan, band: float,
             tried: str = "") -> Alternative:
    a, b = with_plan.time, without.time
    ratio = a.step_s / b.step_s - 1
    label_a, label_b = with_plan.config.label(batch=False), without.config.label(batch=False)
    if ratio < -band:
        verdict, why = "wins", (f"its fastest plan{tried} is {-ratio:.1%} faster than the fastest "
                                f"without it, {label_b}: {step_differences(b, a) or 'same parts'}")
    elif ratio > band:
        verdict, why = "loses", (f"its fastest plan{tried}, {label_a}, is {ratio:.1%} slower than "
                                 f"{label_b}: {step_differences(b, a) or 'same parts'}")
    else:
        verdict, why = "ties", (f"its fastest plan{tried}, {label_a}, is within the model's "
                                f"uncertainty (±{band:.1%}) of {label_b} ({ratio:+.1%})")
    return Alternative(option=option, verdict=verdict, plan=label_a, step_s=a.step_s,
                       versus=label_b, versus_step_s=b.step_s, why=why + ".")


def _hybrid_sharding(model, hw, req, cols, fits, step, plan_at, fastest, band) -> Alternative:
    """HSDP: read off the search when --dp-shard put it in the space; otherwise tried, with the
    shard groups `--dp-shard auto` would try, on the PROBED_LAYOUTS fastest fitting layouts."""
    from .estimate import check_config, estimate
    from .search import config_at, dp_shard_candidates

    option = "hybrid sharding (HSDP)"
    if "dp_shard" in cols:
        uses = cols["dp_shard"] < cols["dp"]
        return _compare(option, fastest(uses), fastest(~uses), plan_at, band,
                        none_fit="no hybrid plan fits")
    best = fits[np.argsort(step[fits], kind="stable")[:PROBED_LAYOUTS]]
    tried, refusal = [], ""
    for i in best:
        config = config_at(model, req, cols, int(i))
        for shard in dp_shard_candidates(config.dp, config.tp * config.cp, hw.gpus_per_domain):
            if shard == config.dp:
                continue
            candidate = config.model_copy(update={"dp_shard": shard})
            try:
                check_config(model, hw, candidate)
            except PlanError as exc:
                refusal = refusal or str(exc)
                continue
            plan = estimate(model, hw, candidate)
            if plan.memory.fits:
                tried.append(plan)
    if not tried:
        why = (f"refused: {refusal}" if refusal else
               f"on the {len(best)} fastest layouts, no hybrid shard group (whole NVLink "
               "domains) fits")
        return Alternative(option=option, verdict="not run" if refusal else "none fits",
                           why=why.rstrip(".") + ".")
    with_plan = min(tried, key=lambda p: p.time.step_s)
    return _verdict(option, with_plan, plan_at(int(best[0])), band,
                    tried=f" (tried on the {len(best)} fastest layouts; search all with "
                          "--dp-shard auto)")
