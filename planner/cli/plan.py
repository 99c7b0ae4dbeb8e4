"""plan3d explain and plan3d search: one plan with every term, and the ranked plans that fit."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Annotated

import typer

from ..errors import (
    NoFeasiblePlan,
    PlanError,
)
from ..layout_text import explain_args
from .app import PanelledHelp, app
from .common import (
    EMIT_SEARCH_DEPTH,
    MAX_TIMELINE_BLOCKS,
    _batch_note,
    _checked_json,
    _deadline_sort,
    _extras,
    _fail,
    _first_expressible,
    _framework_note,
    _launch_json,
    _not_fit_message,
    _notice,
    _request,
    _sections,
    _write_file,
)
from .flags import (
    PANELS,
    AllowTpOpt,
    DeadlineOpt,
    EmitOpt,
    GoodputOpt,
    GpusOpt,
    HeadroomOpt,
    HwOpt,
    JsonOpt,
    MfuOpt,
    ModelOpt,
    OffloadModeOpt,
    PlanOpt,
    PowerOpt,
    PriceOpt,
    TrainTokensOpt,
    WhyOpt,
    _mfu_convention,
)
from .plan_flags import (
    PLAN_FLAG_DEFAULTS,
    PlanFlags,
    options_of,
    plan_flags_of,
    with_plan_flags,
)


@app.command(cls=PanelledHelp)
@with_plan_flags
def explain(
    ctx: typer.Context, model: ModelOpt, gpus: GpusOpt, hw: HwOpt = "h100-nvlink", plan: PlanOpt = None,
    train_tokens: TrainTokensOpt = None, gpu_hour_price: PriceOpt = None,
    gpu_power_w: PowerOpt = None, goodput: GoodputOpt = None, flags: PlanFlags = None,
    headroom: HeadroomOpt = None, json_: JsonOpt = False, emit: EmitOpt = None,
    timeline: Annotated[bool, typer.Option(
        "--timeline", help="Draw the pipeline schedule, to scale.",
        rich_help_panel=PANELS.output)] = False,
    timeline_out: Annotated[str | None, typer.Option(
        help="Write the schedule picture to an .svg file.", rich_help_panel=PANELS.output)]
    = None,
    brief: Annotated[bool, typer.Option(
        "--brief", rich_help_panel=PANELS.output, help="Print only the answer: fit, step, "
        "tokens/s, MFU (days and cost if asked) and the warnings.")] = False,
    section: Annotated[str | None, typer.Option(
        rich_help_panel=PANELS.output, help="The sections to print after the answer, comma "
        "list of model, memory, pipeline, comm, time, constants (default: all).")] = None,
    mfu_convention: MfuOpt = "causal",
    force: Annotated[bool, typer.Option(
        "--force", rich_help_panel=PANELS.output, help="With --emit: write the settings even "
        "when the plan does not fit, a warning at their top (without it nothing is written and "
        "the exit status is 1).")] = False,
) -> None:
    """One plan: the answer first, then every term, its formula, its value, and why."""
    o = options_of(locals())
    try:
        run = _explained(o)
    except PlanError as exc:
        raise _fail(exc) from None
    _show_explained(o, run)


def _plan_request(o, **extra):
    """The PlanRequest of explain's or search's flags (o: the command's options)."""
    return _request(o.gpus, plan_flags_of(o), emit=o.emit, **extra)


def _explained(o) -> SimpleNamespace:
    """explain's work, before anything is printed: the plan (with --train-tokens), its launch
    settings (--emit), its JSON, its timeline picture and SVG, and the constants shown."""
    from .. import api

    if o.timeline_out is not None and not o.timeline_out.lower().endswith(".svg"):
        raise PlanError(f"--timeline-out writes SVG: give a path ending in .svg, "
                        f"got '{o.timeline_out}'")
    run = SimpleNamespace(convention=_mfu_convention(o.mfu_convention),
                          sections=_sections(o.section), picture=None, svg=None)
    if o.headroom is not None:  # the margin the verdict names (search's --headroom)
        from ..search.ranking import check_headroom

        check_headroom(o.headroom)
    if o.plan is not None:
        _apply_layout(o)
    if o.recompute is None:
        o.recompute = "selective"
    if o.zero is None:  # the framework's own default: ZeRO-1 for Megatron, FSDP for torchtitan
        from ..frameworks import FRAMEWORKS
        from ..search.options import resolve_framework

        o.zero = str(FRAMEWORKS[resolve_framework(o.framework, o.emit, o.schedule)]
                     .defaults["zero"])
    req = _plan_request(o)
    run.batch_note = _batch_note(o.model, req)
    run.framework_note = _framework_note(o.framework, o.emit, o.schedule)
    plan = api.explain_request(o.model, o.hw, req)
    run.plan, run.launch = _extras(plan, o.model, o.hw, o.emit, o.train_tokens, o.gpu_hour_price,
                                   o.gpu_power_w, o.goodput)
    run.constants = None if o.brief else api.explain_constants(o.model, o.hw, run.plan, req)
    run.data = run.plan.model_dump(mode="json")
    run.data["constants"] = [dict(symbol=symbol, value=value, unit=unit, meaning=meaning)
                             for symbol, value, unit, meaning in run.constants or []]
    if run.launch is not None:
        run.data["launch"] = _launch_json(run.launch)
    _checked_json(run.data)
    if o.timeline or o.timeline_out:
        run.picture = _timeline_picture(o, run.plan)
    if o.timeline_out is not None:
        from ..outputs.render import config_line
        from ..outputs.timeline import to_svg

        run.svg = to_svg(run.picture, title=f"{run.plan.model.name}: {config_line(run.plan)}")
    return run


LAYOUT_OPTIONS = ("dp", "dp_shard", "tp", "pp", "cp", "cp_kind", "cp_a2a", "vpp", "ep", "etp",
                  "schedule", "mbs", "gbs", "seq_len", "zero", "recompute", "sp", "precision",
                  "offload_optimizer", "offload_params", "offload_activations",
                  "moe_dispatcher", "moe_a2a_overlap", "recompute_layers", "recompute_modules",
                  "fp8_recipe", "fp8_param_gather", "recompute_group",
                  "distribute_saved_activations")
"""explain's options a layout string (--plan) can set."""


def _apply_layout(o) -> None:
    """explain --plan: the layout string's settings into explain's options; an option given
    beside it that contradicts it is an error naming both (planner.layout_text)."""
    from ..layout_text import merge_layout

    # options at the values they take when not given count as not given (and --no-moe-a2a-overlap,
    # a layout without `ovl`), unless typed on the command line (`--precision bf16` beside a
    # layout in fp8 contradicts it)
    ctx = getattr(o, "ctx", None)

    def typed(key: str) -> bool:
        source = ctx.get_parameter_source(key) if ctx is not None else None
        return getattr(source, "name", None) == "COMMANDLINE"

    unset = {k: PLAN_FLAG_DEFAULTS[k] for k in LAYOUT_OPTIONS
             if PLAN_FLAG_DEFAULTS[k] is not None} | {"moe_a2a_overlap": False}
    given = {k: (None if k in unset and getattr(o, k) == unset[k] and not typed(k)
                 else getattr(o, k))
             for k in LAYOUT_OPTIONS}
    fields = merge_layout(o.plan, given)
    for key, value in fields.items():
        if key in LAYOUT_OPTIONS:
            # options typed as they are, not degree lists
            typed = isinstance(value, bool) or key.startswith("offload") or key in (
                "precision", "gbs", "seq_len", "moe_dispatcher", "recompute_layers",
                "recompute_group", "recompute_modules", "fp8_recipe")
            setattr(o, key, value if typed else str(value))


def _timeline_picture(o, plan):
    """--timeline: the schedule simulated block by block (refused beyond MAX_TIMELINE_BLOCKS)."""
    from .. import api

    c = plan.config
    blocks = 2 * c.pp * c.n_micro * c.vpp
    if blocks > MAX_TIMELINE_BLOCKS:
        raise PlanError(f"--timeline draws every micro-batch: {c.n_micro:,} micro-batches "
                        f"× pp {c.pp} × vpp {c.vpp} is {blocks:,} blocks, more than "
                        f"{MAX_TIMELINE_BLOCKS:,}; draw it with a smaller --gbs (the "
                        "schedule's pattern is the same)")
    return api.plan_timeline(o.model, o.hw, plan)


def _show_explained(o, run) -> None:
    """explain's output: notices and the SVG file, then the JSON or the text (the settings alone
    on stdout with --emit); exit 1 when the plan does not fit."""
    from ..outputs import render

    plan, launch, picture, svg = run.plan, run.launch, run.picture, run.svg
    fits = plan.memory.fits
    if fits and not o.json_:  # with --json, stderr stays empty on success (gbs is in the JSON)
        _notice(run.batch_note)
        _notice(run.framework_note)
    if svg is not None and fits:
        try:
            _write_file(o.timeline_out, svg)
        except PlanError as exc:
            raise _fail(exc) from None
    if svg is not None and fits and not o.json_:
        render.notice(f"wrote {o.timeline_out}: the {picture.schedule.value} schedule of "
                      f"{picture.pp} stages × {picture.n_micro} micro-batches, "
                      f"{render.seconds(picture.makespan_s)}")
    if o.json_:
        if not fits and not o.force:
            run.data.pop("launch", None)  # settings for a plan that does not fit: only forced
        render.print_json(run.data)
    else:
        # with --emit, stdout carries the settings alone; what explains them goes to stderr
        out = render.console(stderr=launch is not None)
        render.render_explain(plan, out, sections=run.sections, brief=o.brief,
                              mfu_convention=run.convention, constants=run.constants,
                              headroom=o.headroom)
        if picture is not None and o.timeline:
            values = {t.key: t.value for t in plan.terms}
            render.render_timeline(picture, out, head_s=values.get("head_s", 0.0),
                                   step_bubble=render.bubble_share(plan))
        if launch is not None:
            render.render_launch_notes(launch, out)
            _write_launch(launch, plan, fits, o.force, o.model, o.hw)
    if not fits:
        note = f" ({o.timeline_out} not written)" if svg is not None else ""
        raise _fail(NoFeasiblePlan(_not_fit_message(plan, o.model, o.hw) + note))


def _write_launch(launch, plan, fits: bool, force: bool, model: str, hw: str) -> None:
    """--emit's settings on stdout: only for a plan that fits, unless --force, which writes them
    under a warning (planner.frameworks.emit.with_warning)."""
    from ..frameworks.emit import with_warning
    from ..outputs import render

    if fits:
        render.write_settings(launch)
    elif force:
        render.write_settings(with_warning(launch, _not_fit_message(plan, model, hw)))
    else:
        render.notice("settings not written: the plan does not fit (--force writes them, with "
                      "a warning at their top)")


@app.command(cls=PanelledHelp)
@with_plan_flags
def search(
    model: ModelOpt, gpus: GpusOpt, hw: HwOpt = "h100-nvlink",
    train_tokens: TrainTokensOpt = None, gpu_hour_price: PriceOpt = None,
    gpu_power_w: PowerOpt = None, goodput: GoodputOpt = None, flags: PlanFlags = None,
    allow_tp_across_nodes: AllowTpOpt = False,
    offload: OffloadModeOpt = "fit",
    top: Annotated[int, typer.Option(
        rich_help_panel=PANELS.ranking, min=1, help="How many ranked plans to show (after "
        "them, up to 2 faster ones that fit only inside the memory margin, marked m).")] = 10,
    sort: Annotated[str, typer.Option(
        rich_help_panel=PANELS.ranking, help="Rank by: time, memory, mfu; or gpus: the fewest "
        "GPUs (whole NVLink domains, doubling up to --gpus) whose row 1 steps within "
        "--target-step-s.")] = "time",
    target_step_s: Annotated[float | None, typer.Option(
        rich_help_panel=PANELS.ranking, help="With --sort gpus: the step time to reach, in "
        "seconds.")] = None,
    headroom: HeadroomOpt = None, why: WhyOpt = False,
    json_: JsonOpt = False, emit: EmitOpt = None, deadline_days: DeadlineOpt = None,
    mfu_convention: MfuOpt = "causal",
) -> None:
    """Find and rank the layouts that fit and the framework runs (ties within the model's
    uncertainty shown as ties)."""
    o = options_of(locals())
    try:
        run = _searched(o)
    except PlanError as exc:
        raise _fail(exc) from None
    _show_searched(o, run)


def _searched(o) -> SimpleNamespace:
    """search's work, before anything is printed: the ranked plans (with --train-tokens), the
    launch settings of the best one the --emit framework can express, the JSON."""
    from .. import api

    run = SimpleNamespace(convention=_mfu_convention(o.mfu_convention))
    req = _plan_request(o, allow_tp_across_nodes=o.allow_tp_across_nodes, offload=o.offload)
    run.batch_note = _batch_note(o.model, req)
    run.framework_note = _framework_note(o.framework, o.emit, o.schedule)
    sort, target_step_s = o.sort, o.target_step_s
    if target_step_s is not None and not (0 < target_step_s < float("inf")):
        raise PlanError(f"--target-step-s must be a positive number of seconds, "
                        f"got {target_step_s:g}")
    if o.deadline_days is not None:  # the fewest GPUs whose best plan trains in time
        sort, target_step_s = _deadline_sort(o.model, o.hw, req, o.train_tokens, o.deadline_days,
                                             o.goodput, sort, target_step_s)
    result = api.search_request(o.model, o.hw, req, top=o.top, sort=sort, headroom=o.headroom,
                                target_step_s=target_step_s)
    plans = [_extras(plan, o.model, o.hw, None, o.train_tokens, o.gpu_hour_price, o.gpu_power_w,
                     o.goodput)[0] for plan in result.plans]
    run.result = result.model_copy(update={"plans": plans, "explain_args": [
        explain_args(o.model, o.hw, p.config, o.framework, o.seq_len is not None, o.headroom)
        for p in plans]})
    run.launch = None
    if o.emit:
        from ..search.ranking import MARGIN_MARK

        # the ranked plans only: a row shown for its speed inside the memory margin is not run
        ranked = [p for p, lab in zip(plans, result.ranks or [""] * len(plans))
                  if lab != MARGIN_MARK]
        try:
            run.launch = _first_expressible(o.model, ranked, o.emit)
        except PlanError as exc:
            if "none of the plans shown" not in str(exc):
                raise
            # look further down the ranking for the best plan the framework can express
            longer = api.search_request(o.model, o.hw, req, top=EMIT_SEARCH_DEPTH, sort=sort,
                                        headroom=o.headroom, target_step_s=target_step_s)
            run.launch = _first_expressible(o.model, [
                p for p, lab in zip(longer.plans, longer.ranks or [""] * len(longer.plans))
                if lab != MARGIN_MARK], o.emit)
    run.data = run.result.model_dump(mode="json")
    if run.launch is not None:
        run.data["launch"] = _launch_json(run.launch)
    _checked_json(run.data)
    return run


def _show_searched(o, run) -> None:
    """search's output: the JSON, or notices and the table (on stderr with --emit, the settings
    alone on stdout)."""
    from ..outputs import render

    if o.json_:  # stderr stays empty on success (the rounded gbs is in the JSON)
        render.print_json(run.data)
        return
    _notice(run.batch_note)
    _notice(run.framework_note)
    # with --emit, stdout carries the settings alone; the table goes to stderr
    out = render.console(stderr=run.launch is not None)
    render.render_search(run.result, out, mfu_convention=run.convention, why=o.why,
                         footer=_footer(run.result))
    if run.launch is not None:
        render.render_launch_notes(run.launch, out)
        render.write_settings(run.launch)


def _footer(result) -> list[tuple[str, list[str]]]:
    """The command that runs row 1: its label and its shell words, quoted as printed (the
    renderer breaks it only between words, with shell continuations)."""
    import shlex

    if not result.explain_args:
        return []
    # a layout in double quotes, as the issue and the README write it; anything else as shlex does
    words = [f'"{a}"' if " " in a and '"' not in a and "$" not in a and "`" not in a
             else shlex.quote(a) for a in result.explain_args[0]]
    return [("Run row 1:", ["plan3d", *words])]
