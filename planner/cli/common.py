"""What the commands share beyond their options: the request from the flags, notices on stderr,
--train-tokens and --emit on a plan, refusing non-finite output, writing a file whole."""

from __future__ import annotations

import typer

from ..errors import (
    PlanError,
    exit_code,
)

MAX_TIMELINE_BLOCKS = 100_000  # forward and backward blocks --timeline simulates and draws


def _batch_note(model: str, req) -> str | None:
    """--tokens-per-step rounds to whole sequences: what it became, for stderr (printed only
    when the command succeeds: a failure is one line on stderr)."""
    from .. import api

    return api.batch_rounding(model, req)


def _framework_note(framework: str | None, emit: str | None, schedule: str | None) -> str | None:
    """When --schedule chose the framework (options.schedule_framework), say so on stderr."""
    from ..search.options import schedule_framework

    implied = schedule_framework(schedule) if framework is None and emit is None else None
    return (f"--schedule {schedule}: costed for {implied}, the framework plan3d models that runs "
            "it (--framework to choose)" if implied else None)


def _notice(note: str | None) -> None:
    if note:
        from ..outputs.render import notice

        notice(note)


def _extras(plan, model, hw, emit, train_tokens, price, power, goodput=None):
    """--train-tokens and --emit on one plan: (plan with budget, launch settings or None)."""
    from .. import api
    from ..search.options import MAX_POWER_W, MAX_PRICE, positive_number, token_count

    price = positive_number(price, "price", MAX_PRICE, allow_zero=True)
    power = positive_number(power, "gpu-power-w", MAX_POWER_W, unit=" W")
    plan = api.budgeted(plan, hw, token_count(train_tokens), price, power, goodput)
    launch = api.launch_settings(model, plan, emit) if emit else None
    return plan, launch


EMIT_SEARCH_DEPTH = 300  # how far down the ranking --emit looks for a plan a framework can express


def _first_expressible(model: str, plans, framework: str):
    """--emit on search: the best plan the framework can express, saying which and why the
    better ones could not be."""
    from .. import api

    refusals = []
    for i, plan in enumerate(plans, 1):
        try:
            launch = api.launch_settings(model, plan, framework)
        except PlanError as exc:
            if "unknown framework" in str(exc) or "known:" in str(exc):
                raise
            refusals.append(f"plan {i}: {exc}")
            continue
        if refusals:
            more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
            launch.notes.insert(0, f"Settings for plan {i} of the ranking: the {len(refusals)} "
                                   f"better plan(s) cannot be expressed in {framework} — "
                                   f"{refusals[0]}{more}")
        return launch
    raise PlanError(f"none of the plans shown can be expressed in {framework}: {refusals[0]}"
                    + (f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""))


def _deadline_sort(model, hw, req, train_tokens, deadline_days, goodput, sort, target_step_s):
    """search --deadline-days: --sort gpus with the step time that trains the tokens in time."""
    from .. import api
    from ..search.options import token_count

    if target_step_s is not None or sort not in ("time", "gpus"):
        raise PlanError("--deadline-days sizes the cluster itself (as --sort gpus with a step "
                        "time): leave out --target-step-s and --sort")
    return "gpus", api.deadline_target_step_s(model, hw, req, token_count(train_tokens),
                                              deadline_days, goodput)


def _launch_json(launch):
    from dataclasses import asdict

    return None if launch is None else asdict(launch)


def _fail(exc: Exception) -> typer.Exit:
    from ..outputs.render import error

    error(str(exc))
    return typer.Exit(exit_code(exc))


def _checked_json(data) -> dict:
    """The output, refused (exit 2) if any number in it is NaN or infinite: the inputs were out of
    the range where the model's numbers mean anything."""
    from ..outputs.render import non_finite

    where = non_finite(data)
    if where:
        raise PlanError(f"the result is not a finite number at {where}: the inputs are out of the "
                        "range the model covers (check --gbs, --seq-len, --mbs, --train-tokens "
                        "and the profile's numbers)")
    return data


def _write_file(path: str, content: str | bytes) -> None:
    """Write all of `content` (text, or bytes such as a PNG) to `path` or nothing, with the
    umask's permissions (planner.files.write_atomic)."""
    from ..files import write_atomic

    write_atomic(path, content)


def _not_fit_message(plan, model: str, hw: str) -> str:
    """The one line for a plan that does not fit: what it needs, what there is, and only the
    levers that would change something for this plan (a ZeRO stage it is not at and its
    framework runs, full recompute if not every layer is recomputed, a larger tp or pp while dp
    leaves room, else more GPUs for one, more GPUs to shard over under ZeRO, the profiles it
    fits on)."""
    from .. import api
    from ..formulas.choices import Recompute, ZeroStage
    from ..frameworks import FRAMEWORKS

    m, c = plan.memory, plan.config
    gib = 2**30
    levers = []
    if (c.zero_stage is not ZeroStage.PARAMETERS
            and ZeroStage.PARAMETERS in FRAMEWORKS[c.framework].zero_stages
            and api.runs_with(model, hw, c, zero_stage=ZeroStage.PARAMETERS)):
        levers.append("--zero 3")
    if c.recompute is not Recompute.FULL or c.recompute_layers:
        levers.append("--recompute full" + (" (every layer: --recompute-layers 0)"
                                            if c.recompute_layers else ""))
    if c.dp > 1:
        levers.append("a larger --tp or --pp")
        if c.zero_stage is not ZeroStage.NONE:  # more data-parallel ranks to shard the states
            levers.append("more --gpus")
    else:  # tp·pp·cp is every GPU: a larger one needs more of them
        levers.append("more --gpus for a larger --tp or --pp")
    larger = api.profiles_that_fit(model, hw, plan)
    if larger:
        levers.append(f"a GPU with more memory (--hw {' or --hw '.join(larger)})")
    return (f"this plan does not fit: it needs {m.total_bytes / gib:,.1f} GiB per GPU on the "
            f"{m.stage_name} pipeline stage, {m.capacity_bytes / gib:,.1f} GiB available; try "
            f"{', '.join(levers)}, or `plan3d search` for a layout that fits")


def _request(gpus: int, flags: dict, emit: str | None = None, **extra):
    """The PlanRequest of the plan flags (plan_flags.PlanFlags, by name) on `gpus` GPUs; `extra`:
    a command's own request fields (search's allow_tp_across_nodes, offload)."""
    from pydantic import ValidationError

    from ..search.options import parse_request, resolve_framework

    flags = dict(flags)
    framework = resolve_framework(flags.pop("framework", None), emit, flags.get("schedule"))
    try:
        return parse_request(gpus=gpus, framework=framework, **flags, **extra)
    except ValidationError as err:
        from ..search.options import validation_message

        raise PlanError(validation_message(err)) from None


EXPLAIN_SECTIONS = ("model", "memory", "pipeline", "comm", "time", "constants")


def _sections(text: str | None):
    """--section: the named sections, in the order given; None for all."""
    if text is None:
        return None
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in EXPLAIN_SECTIONS]
    if bad or not names:
        raise PlanError(f"--section takes a comma list of {', '.join(EXPLAIN_SECTIONS)}; "
                        f"got '{text}'")
    return names
