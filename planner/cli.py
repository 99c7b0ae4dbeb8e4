"""The command line: each command parses, calls one library function, renders. Imported by nothing.

Exit codes: 0 success, 1 no plan fits, 2 bad usage or input."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from . import __version__
from .errors import NoFeasiblePlan, PlanError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Plan 3D-parallel (data × tensor × pipeline × context) LLM training.")

EXIT_OK, EXIT_NO_FIT, EXIT_USAGE = 0, 1, 2

# ---- shared options ---------------------------------------------------------------------------
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Preset name, size alias (70b), "
                                       "plan3d model file or Hugging Face config.json.")]
HwOpt = Annotated[str, typer.Option("--hw", help="Hardware profile name or file.")]
GpusOpt = Annotated[int, typer.Option("--gpus", "-n", help="Number of GPUs.")]
ListOpt = Annotated[str | None, typer.Option()]


def _opt(help_: str):
    return Annotated[str | None, typer.Option(help=help_)]


DpOpt = _opt("Data-parallel degree(s), e.g. 16 or 8,16 (search).")
TpOpt = _opt("Tensor-parallel degree(s).")
PpOpt = _opt("Pipeline-parallel degree(s).")
CpOpt = _opt("Context-parallel degree(s).")
VppOpt = _opt("Virtual pipeline stages per GPU (interleaved schedule).")
MbsOpt = _opt("Micro-batch size(s) in sequences.")
ZeroOpt = _opt("ZeRO stage(s) 0-3 (1 = distributed optimizer, 3 = FSDP), or auto.")
RecomputeOpt = _opt("Activation recompute: none, selective, full (comma list), or auto.")
ScheduleOpt = _opt("Pipeline schedule: gpipe, 1f1b, interleaved.")
SpOpt = Annotated[bool | None, typer.Option("--sp/--no-sp", help="Sequence parallelism.")]
GbsOpt = Annotated[int | None, typer.Option(help="Global batch size in sequences.")]
TokensOpt = Annotated[int | None, typer.Option(help="Global batch in tokens (gbs = this/seq).")]
SeqOpt = Annotated[int | None, typer.Option(help="Sequence length (default: the model's).")]
PrecisionOpt = Annotated[str, typer.Option(help="Matmul precision: bf16, fp16, fp8.")]
GradOpt = Annotated[str, typer.Option(help="Gradient buffer dtype: fp32 (Megatron default) "
                                      "or bf16.")]
AttnOpt = Annotated[str, typer.Option(help="Attention kernel: flash or classic.")]
OverlapOpt = Annotated[bool, typer.Option("--overlap-grad-reduce/--no-overlap-grad-reduce",
                                          help="Overlap the DP gradient reduction with backward.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
EmitOpt = Annotated[str | None, typer.Option(
    help="Print launch settings for megatron, nemo, torchtitan or deepspeed.")]
TrainTokensOpt = Annotated[str | None, typer.Option(
    help="Tokens to train on (e.g. 15T, 300B): adds days, GPU-hours, cost, energy.")]
PriceOpt = Annotated[float | None, typer.Option(help="Price of one GPU-hour, for the cost.")]
PowerOpt = Annotated[float | None, typer.Option(
    help="Average GPU power in W for the energy (default: the profile's TDP).")]


def _extras(plan, model, hw, emit, train_tokens, price, power):
    """--train-tokens and --emit on one plan: (plan with budget, launch settings or None)."""
    from . import api
    from .options import token_count

    if price is not None and price < 0:
        raise PlanError(f"--gpu-hour-price must be ≥ 0, got {price:g}")
    if power is not None and power <= 0:
        raise PlanError(f"--gpu-power-w must be positive, got {power:g}")
    plan = api.budgeted(plan, hw, token_count(train_tokens), price, power)
    launch = api.launch_settings(model, plan, emit) if emit else None
    return plan, launch


def _launch_json(launch):
    from dataclasses import asdict

    return None if launch is None else asdict(launch)


def _fail(exc: Exception) -> typer.Exit:
    from .render import error

    error(str(exc))
    return typer.Exit(EXIT_NO_FIT if isinstance(exc, NoFeasiblePlan) else EXIT_USAGE)


def _request(gpus, dp, tp, pp, cp, vpp, mbs, zero, recompute, schedule, sp, gbs, tokens, seq,
             precision, grad_dtype, attention, overlap, allow_tp_across_nodes=False,
             auto_default=False):
    from pydantic import ValidationError

    from .options import parse_request

    try:
        return parse_request(
            gpus=gpus, dp=dp, tp=tp, pp=pp, cp=cp, vpp=vpp, mbs=mbs, zero=zero,
            recompute=recompute, schedule=schedule, sp=sp, gbs=gbs, tokens_per_step=tokens,
            seq_len=seq, precision=precision, grad_dtype=grad_dtype, attention=attention,
            overlap_grad_reduce=overlap, allow_tp_across_nodes=allow_tp_across_nodes)
    except ValidationError as err:
        from .options import validation_message

        raise PlanError(validation_message(err)) from None


# ---- commands ---------------------------------------------------------------------------------


@app.command()
def explain(
    model: ModelOpt, gpus: GpusOpt, hw: HwOpt = "h100-nvlink",
    dp: DpOpt = None, tp: TpOpt = None, pp: PpOpt = None, cp: CpOpt = None, vpp: VppOpt = None,
    mbs: MbsOpt = None, zero: ZeroOpt = "1", recompute: RecomputeOpt = "selective",
    schedule: ScheduleOpt = None, sp: SpOpt = None, gbs: GbsOpt = None,
    tokens_per_step: TokensOpt = None, seq_len: SeqOpt = None, precision: PrecisionOpt = "bf16",
    grad_dtype: GradOpt = "fp32", attention: AttnOpt = "flash",
    overlap_grad_reduce: OverlapOpt = True, json_: JsonOpt = False, emit: EmitOpt = None,
    timeline: Annotated[bool, typer.Option(
        "--timeline", help="Draw the pipeline schedule, to scale.")] = False,
    timeline_out: Annotated[str | None, typer.Option(
        help="Write the schedule picture to an .svg file.")] = None,
    train_tokens: TrainTokensOpt = None, gpu_hour_price: PriceOpt = None,
    gpu_power_w: PowerOpt = None,
) -> None:
    """One plan's breakdown: every term, its formula, its value, and why."""
    from . import api, render

    try:
        if timeline_out is not None and not timeline_out.lower().endswith(".svg"):
            raise PlanError(f"--timeline-out writes SVG: give a path ending in .svg, "
                            f"got '{timeline_out}'")
        req = _request(gpus, dp, tp, pp, cp, vpp, mbs, zero, recompute, schedule, sp, gbs,
                       tokens_per_step, seq_len, precision, grad_dtype, attention,
                       overlap_grad_reduce)
        plan = api.explain_request(model, hw, req)
        plan, launch = _extras(plan, model, hw, emit, train_tokens, gpu_hour_price, gpu_power_w)
        picture = api.plan_timeline(model, hw, plan) if (timeline or timeline_out) else None
        svg = None
        if timeline_out is not None:
            from .timeline import to_svg

            svg = to_svg(picture, title=f"{plan.model.name}: {render.config_line(plan)}")
    except PlanError as exc:
        raise _fail(exc) from None
    if svg is not None:
        try:
            with open(timeline_out, "w", encoding="utf-8") as fh:
                fh.write(svg)
        except OSError as exc:
            raise _fail(PlanError(f"cannot write {timeline_out}: {exc.strerror or exc}")) from None
    if json_:
        data = plan.model_dump(mode="json")
        if launch is not None:
            data["launch"] = _launch_json(launch)
        render.print_json(data)
        return
    out = render.console()
    render.render_explain(plan, out)
    if picture is not None and timeline:
        render.render_timeline(picture, out)
    if launch is not None:
        render.render_launch(launch, out)


@app.command()
def search(
    model: ModelOpt, gpus: GpusOpt, hw: HwOpt = "h100-nvlink",
    dp: DpOpt = None, tp: TpOpt = None, pp: PpOpt = None, cp: CpOpt = None, vpp: VppOpt = None,
    mbs: MbsOpt = None, zero: ZeroOpt = None, recompute: RecomputeOpt = None,
    schedule: ScheduleOpt = None, sp: SpOpt = None, gbs: GbsOpt = None,
    tokens_per_step: TokensOpt = None, seq_len: SeqOpt = None, precision: PrecisionOpt = "bf16",
    grad_dtype: GradOpt = "fp32", attention: AttnOpt = "flash",
    overlap_grad_reduce: OverlapOpt = True,
    allow_tp_across_nodes: Annotated[bool, typer.Option(
        help="Admit tp larger than the NVLink domain (to see its cost).")] = False,
    top: Annotated[int, typer.Option(help="How many plans to show.", min=1)] = 10,
    sort: Annotated[str, typer.Option(help="Rank by: time, memory, mfu.")] = "time",
    headroom: Annotated[float, typer.Option(
        help="Memory to keep free, as a fraction of capacity (0.1 = 10%).")] = 0.0,
    json_: JsonOpt = False, emit: EmitOpt = None, train_tokens: TrainTokensOpt = None,
    gpu_hour_price: PriceOpt = None, gpu_power_w: PowerOpt = None,
) -> None:
    """Find and rank the layouts that fit."""
    from . import api, render

    try:
        req = _request(gpus, dp, tp, pp, cp, vpp, mbs, zero, recompute, schedule, sp, gbs,
                       tokens_per_step, seq_len, precision, grad_dtype, attention,
                       overlap_grad_reduce, allow_tp_across_nodes)
        result = api.search_request(model, hw, req, top=top, sort=sort, headroom=headroom)
        plans = []
        for i, plan in enumerate(result.plans):
            plan, launch_i = _extras(plan, model, hw, emit if i == 0 else None, train_tokens,
                                     gpu_hour_price, gpu_power_w)
            plans.append(plan)
            if i == 0:
                launch = launch_i
        result = result.model_copy(update={"plans": plans})
    except PlanError as exc:
        raise _fail(exc) from None
    if json_:
        data = result.model_dump(mode="json")
        if launch is not None:
            data["launch"] = _launch_json(launch)
        render.print_json(data)
        return
    out = render.console()
    render.render_search(result, out)
    if launch is not None:
        render.render_launch(launch, out)


@app.command()
def models(json_: JsonOpt = False) -> None:
    """List the built-in model presets and size aliases."""
    from . import api, render

    listing = api.list_models()
    if json_:
        render.print_json([m.model_dump(mode="json") for m in listing])
    else:
        render.render_models(listing, render.console())


@app.command()
def hardware(json_: JsonOpt = False) -> None:
    """List the built-in hardware profiles."""
    from . import api, render

    listing = api.list_hardware()
    if json_:
        render.print_json([h.model_dump(mode="json") for h in listing])
    else:
        render.render_hardware(listing, render.console())


@app.command()
def validate(hw: HwOpt = "a100-nvlink", json_: JsonOpt = False) -> None:
    """Run every published A100 run through the model: predicted vs measured step time."""
    from . import render
    from .catalog import load_hardware
    from .validation import validate as run

    try:
        report = run(load_hardware(hw))
    except PlanError as exc:
        raise _fail(exc) from None
    if json_:
        render.print_json(report.model_dump(mode="json"))
    else:
        render.render_validation(report, render.console())


@app.command()
def calibrate(
    measurements: Annotated[str, typer.Argument(help="CSV or JSON of measured runs (model, dp, "
                                                "tp, pp, mbs, gbs, ..., step_s).")],
    hw: HwOpt = "h100-nvlink",
    output: Annotated[str | None, typer.Option("--output", "-o",
                                               help="Write the calibrated profile (TOML).")] = None,
    fit: Annotated[str, typer.Option(help="Factors to fit: gemm, hbm, fast_busbw, "
                                     "net_busbw (comma list).")] = "gemm,hbm,fast_busbw,net_busbw",
    name: Annotated[str | None, typer.Option(help="Name of the new profile.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Fit a profile's efficiency factors to your cluster's measured step times."""
    from pathlib import Path

    from . import calibrate as cal
    from . import render
    from .catalog import load_hardware

    try:
        profile = load_hardware(hw)
        runs = cal.load_measurements(Path(measurements), profile)
        factors = tuple(s.strip() for s in fit.split(",") if s.strip())
        result = cal.calibrate(runs, profile, fit=factors, name=name)
        toml_text = cal.calibration_toml(result, measurements) if output else None
    except PlanError as exc:
        raise _fail(exc) from None
    if output:
        try:
            Path(output).write_text(toml_text, encoding="utf-8")
        except OSError as exc:
            raise _fail(PlanError(f"cannot write {output}: {exc.strerror or exc}")) from None
    if json_:
        render.print_json(result.model_dump(mode="json"))
    else:
        render.render_calibration(result, render.console(), output)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"plan3d {__version__}\n")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """plan3d: how to lay a large-model training job out over a GPU cluster, with reasons."""


def main() -> None:
    """Console entry point: typer's usage errors exit 2; a closed pipe ends quietly."""
    try:
        app(standalone_mode=True)
    except BrokenPipeError:
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(EXIT_OK)
