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
    overlap_grad_reduce: OverlapOpt = True, json_: JsonOpt = False,
) -> None:
    """One plan's breakdown: every term, its formula, its value, and why."""
    from . import api, render

    try:
        req = _request(gpus, dp, tp, pp, cp, vpp, mbs, zero, recompute, schedule, sp, gbs,
                       tokens_per_step, seq_len, precision, grad_dtype, attention,
                       overlap_grad_reduce)
        plan = api.explain_request(model, hw, req)
    except PlanError as exc:
        raise _fail(exc) from None
    if json_:
        render.print_json(plan.model_dump(mode="json"))
    else:
        render.render_explain(plan, render.console())


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
    json_: JsonOpt = False,
) -> None:
    """Find and rank the layouts that fit."""
    from . import api, render

    try:
        req = _request(gpus, dp, tp, pp, cp, vpp, mbs, zero, recompute, schedule, sp, gbs,
                       tokens_per_step, seq_len, precision, grad_dtype, attention,
                       overlap_grad_reduce, allow_tp_across_nodes)
        result = api.search_request(model, hw, req, top=top, sort=sort, headroom=headroom)
    except PlanError as exc:
        raise _fail(exc) from None
    if json_:
        render.print_json(result.model_dump(mode="json"))
    else:
        render.render_search(result, render.console())


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
