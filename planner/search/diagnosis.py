"""When no plan fits, or no layout is admissible: why, the smallest change that would fit, and the
nearest values of each degree and GPU count that work."""

from __future__ import annotations

import itertools
import re
from types import SimpleNamespace

import numpy as np

from ..errors import PlanError
from ..formulas.choices import Recompute, Schedule, ZeroStage
from ..frameworks import FRAMEWORKS
from ..model import constraints
from ..schema import HardwareProfile, ModelSpec, PlanConfig
from .evaluate import framework_runs, request_choices, rule_settings, some_plan_fits
from .request import DEFAULT_MBS, PlanRequest
from .space import MAX_OPEN_CP, MAX_OPEN_VPP, SEARCHED_SCHEDULES, choice_groups, divisors, numeric_space


def _smallest_fitting_gpus(model, hw, req: PlanRequest, budget: float, start: int,
                           headroom: float) -> tuple[int, bool] | None:
    """The smallest cluster, doubling from `start` (whole domains), on which some plan fits as
    the search finds it (offload sized to the capacity less the margin `headroom`), and whether
    only offload makes one fit there: what the diagnosis may promise. None if nothing up to
    64× start (or MAX_GPUS) fits."""
    from .request import MAX_GPUS

    domain = hw.gpus_per_domain
    n = max(domain, int(np.ceil(start / domain)) * domain)
    req = req.model_copy(update={"gbs": req.global_batch(model)})  # the same batch
    for _ in range(7):
        if n > MAX_GPUS:
            return None
        sized = req.model_copy(update={"gpus": n})
        if some_plan_fits(model, hw, sized, budget, hw.capacity_bytes * (1 - headroom)):
            plain = sized.model_copy(update={"offload": "none"})
            return n, not (sized.offload_fixed or some_plan_fits(model, hw, plain, budget))
        n *= 2
    return None


def _larger_profiles_that_fit(model, hw, req: PlanRequest, headroom: float) -> list[str]:
    """The built-in profiles with more memory per GPU than `hw` on which some plan of the same
    request fits at the same GPU count as the search finds it (each checked through the same
    search space, offload sized to the profile's capacity less the margin `headroom`)."""
    from ..catalog import hardware_presets, load_hardware

    out = []
    req = req.model_copy(update={"gbs": req.global_batch(model)})
    for name in hardware_presets():
        other = load_hardware(name)
        if other.capacity_bytes <= hw.capacity_bytes or req.gpus % other.gpus_per_domain and \
                req.gpus > other.gpus_per_domain:
            continue
        try:
            if some_plan_fits(model, other, req, other.capacity_bytes,
                              other.capacity_bytes * (1 - headroom)):
                out.append(name)
        except PlanError:  # a profile without figures for the request (e.g. its precision)
            continue
    return out


def diagnose(model, hw, req, cfg: PlanConfig, need: float, budget: float,
             headroom: float) -> str:
    gib = 2**30
    hints = []
    # memory per GPU falls at best as 1/N: N·need/budget GPUs is a lower bound without offload;
    # offload to host memory (which the search weighs under --offload fit or auto) can fit below
    # it, so there the sizes are tried from the next one up. The count said is one that was
    # checked to fit as the search finds it (same batch and constraints)
    lower = int(np.ceil(need / budget * req.gpus))
    offload_may = (req.offload in ("auto", "fit") and not req.offload_fixed
                   and hw.host is not None)
    checked = _smallest_fitting_gpus(model, hw, req, budget,
                                     req.gpus + 1 if offload_may else lower, headroom)
    if checked is not None:
        n, offloaded = checked
        hints.append(f"{n} GPUs (checked: a plan fits there"
                     + (", offloading to host memory)" if offloaded else ")"))
    else:
        hints.append(f"more than {lower} GPUs (a lower bound; no size up to 64× that was found "
                     "to fit with this global batch)")
    if req.zero and ZeroStage.PARAMETERS not in req.zero:
        hints.append("ZeRO-3 (--zero 3)")
    if req.recompute and Recompute.FULL not in req.recompute:
        hints.append("full recompute (--recompute full)")
    if req.offload == "none" and hw.host is not None:  # offload
        hints.append("offload to host memory (--offload fit)")
    bigger = _larger_profiles_that_fit(model, hw, req, headroom)
    if bigger:
        hints.append(f"a larger-memory profile (checked: a plan fits on {req.gpus} × "
                     f"{', '.join(bigger)})")
    return (f"no plan of {model.name} fits on {req.gpus} × {hw.name}: the smallest need is "
            f"{need / gib:.1f} GiB per GPU ({cfg.short_label()}) against "
            f"{budget / gib:.1f} GiB usable; would fit with " + ", or ".join(hints))


DIAGNOSED_DIMS = ("tp", "pp", "cp", "vpp", "mbs", "dp", "ep", "etp")


NEAREST_SHOWN = 8  # values suggested per dimension


GPU_WINDOW = 256  # how far from --gpus the nearest working counts are looked for


def _admissible(model: ModelSpec, hw: HardwareProfile, req: PlanRequest, count: bool = False):
    """The layouts of the request's space that obey every rule under some schedule and
    sequence-parallel setting it allows: (space, mask, removals by rule)."""
    space = numeric_space(model, hw, req)
    size = len(space["tp"])
    mask = np.zeros(size, dtype=bool)
    removals: dict[str, list] = {}  # rule text → [count, the message for its first layout]
    if size == 0:
        return space, mask, removals
    seq, gbs = req.seq(model), req.global_batch(model)
    pairs = {(sp, sched) for _, sp, sched, _ in choice_groups(req)}
    vpp_rule = constraints.Rule(
        "the search gives vpp > 1 to the interleaved schedule and vpp = 1 to the others",
        lambda m, c: (c.vpp > 1) == c.interleaved, lambda m, c: "")
    framework = FRAMEWORKS[req.framework]
    zeros = [z for z in (req.zero or list(ZeroStage)) if z in framework.zero_stages]
    for sp, sched in sorted(pairs, key=str):
        interleaved = sched is Schedule.INTERLEAVED
        layouts = SimpleNamespace(**space, gbs=gbs, seq_len=seq, interleaved=interleaved, sp=sp,
                                  schedule=sched, **rule_settings(req))  # offload
        shared = constraints.admissible(model, layouts) & ((space["vpp"] > 1) == interleaved)
        ok = shared & np.logical_or.reduce(list(framework_runs(
            framework, model, layouts, zeros, sched, req).values()))
        mask |= ok
        if count and shared.any() and not ok.any():
            # the shared rules leave layouts that the framework does not run: say which of its
            # rules removed them (under the first ZeRO stage asked for)
            kept = {k: v[shared] for k, v in space.items()}
            fw_layouts = SimpleNamespace(**kept, gbs=gbs, seq_len=seq, interleaved=interleaved,
                                         sp=sp, schedule=sched,
                                         **request_choices(req, zeros[0], sched),
                                         **rule_settings(req), **_own_settings(req))
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


def _moe_settings(req: PlanRequest) -> dict[str, int]:
    """The MoE run settings a request gives, as the framework rules read them (rules.layout)."""
    return dict(deepep=int(req.moe_dispatcher == "deepep"),
                moe_allgather=int(req.moe_dispatcher == "allgather"),
                a2a_overlap=int(bool(req.moe_a2a_overlap)),
                moe_capped=int(bool(req.moe_capacity_factor)),
                moe_forced=int(req.moe_forced_balance),
                moe_shared_overlap=int(req.moe_shared_expert_overlap))


def _own_settings(req: PlanRequest) -> dict[str, int]:
    """torchtitan's own settings the request gives (frameworks.torchtitan.OWN_SETTINGS;
    rules.layout names them too), which its refusals read where they offer another framework."""
    from ..frameworks.torchtitan import OWN_SETTINGS

    return {name: int(getattr(req, name)) for name in OWN_SETTINGS}


def moe_settings_refusal(model: ModelSpec, hw: HardwareProfile, req: PlanRequest) -> str | None:
    """The framework's refusal of a MoE run setting the request gives (--moe-dispatcher,
    --moe-a2a-overlap, --moe-capacity-factor, --moe-forced-balance, --moe-shared-expert-overlap)
    whatever the layout: the message of a framework rule that some layout of the request's space
    obeys without those settings and none obeys with them. Said first, alone: otherwise the
    search removes every layout under that rule among others (torchtitan with DeepEP: "no layout
    … vpp=2 needs --schedule interleaved …"), or shows only the layouts the setting does not
    touch (expert parallelism 1). None when no such rule refuses them."""
    asked = _moe_settings(req)
    if not model.is_moe or not any(asked.values()):
        return None
    space = numeric_space(model, hw, req)
    size = len(space["tp"])
    if size == 0:
        return None
    framework = FRAMEWORKS[req.framework]
    zeros = [z for z in (req.zero or list(ZeroStage)) if z in framework.zero_stages]
    seq, gbs = req.seq(model), req.global_batch(model)
    without: dict[int, SimpleNamespace] = {}  # rule → a layout it holds for without them
    refused = {i: True for i in range(len(framework.all_rules()))}
    for (_, sp, sched, _), zero in itertools.product(choice_groups(req), zeros):
        base = {**space, "gbs": gbs, "seq_len": seq, "sp": sp, "schedule": sched,
                "interleaved": sched is Schedule.INTERLEAVED, **rule_settings(req),
                **request_choices(req, zero, sched),
                **_own_settings(req)}
        neutral = SimpleNamespace(**{**base, **dict.fromkeys(asked, 0)})
        given = SimpleNamespace(**{**base, **asked})
        for i, rule in enumerate(framework.all_rules()):
            held = np.broadcast_to(rule.holds(model, neutral), (size,))
            if held.any():
                without.setdefault(i, constraints.one_layout(given, int(np.argmax(held))))
                refused[i] &= not np.broadcast_to(rule.holds(model, given), (size,)).any()
    for i, rule in enumerate(framework.all_rules()):
        if i in without and refused[i]:
            return rule.message(model, without[i])
    return None


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
    settings = len({(sp, s) for _, sp, s, _ in choice_groups(req)})
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
    # a rule that names a value the user fixed (ep=3 …) is the cause, whatever else it removed
    named = re.compile("|".join(rf"(?<![a-z]){dim}={v}\b" for dim in DIAGNOSED_DIMS
                                for v in (getattr(req, dim) or ())) or "(?!)")
    reasons.sort(key=lambda r: (not named.search(r[1]), -r[0]))
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
