"""The command line: each command parses, calls one library function, renders. Imported by nothing.

Exit codes: 0 success, 1 no plan fits, 2 bad usage or input, 3 internal error (a bug). Every
failure is one line on stderr, `plan3d: error: ...`; `--json` output is strict JSON on stdout and
nothing else goes there."""

from __future__ import annotations

import os
import sys
from typing import Annotated

# The command line uses no pydantic plugins; without this, pydantic scans every installed
# distribution's entry points for plugins when the first model is built (~0.1 s at start-up).
# Set before anything imports pydantic models; a user's own setting wins.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
# The planner does element-wise array arithmetic only, no BLAS: without this, importing numpy
# starts an OpenBLAS thread per core, which costs the second core of a 2-core machine ~0.1 s of
# CPU at start-up. A user's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import typer
from typer.core import TyperGroup

from .._version import __version__
from ..errors import (
    EXIT_BUG,
    EXIT_NO_FIT,
    EXIT_OK,
    EXIT_USAGE,
    NoFeasiblePlan,
    PlanError,
    exit_code,
)
from ..formulas.budget import DEFAULT_GOODPUT

__all__ = ["app", "main", "EXIT_OK", "EXIT_NO_FIT", "EXIT_USAGE", "EXIT_BUG"]

HELP = (
    "Plan 3D-parallel (data × tensor × pipeline × context) LLM training.\n\n"
    "Exit codes: 0 success · 1 no plan fits (the diagnosis is on stderr) · 2 bad usage or input "
    "(one line on stderr: plan3d: error: ...) · 3 internal error (a bug in plan3d: please report "
    "it; PLAN3D_DEBUG=1 shows the traceback).\n\n"
    "With --json, stdout holds only the JSON; plan3d schema COMMAND prints its JSON Schema.")

MAX_TIMELINE_BLOCKS = 100_000  # forward and backward blocks --timeline simulates and draws


def _quiet_stdout() -> None:
    """The reader went away (`| head`): send what is left of stdout nowhere, exit quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _click_errors():
    """click's exception classes: vendored inside typer ≥ 0.2x, the click package before."""
    try:
        from typer._click import exceptions as exc
    except ImportError:  # older typer on click
        from click import exceptions as exc
    no_args = getattr(exc, "NoArgsIsHelpError", None)
    return exc.ClickException, exc.UsageError, exc.BadParameter, no_args


def _stdout_gone() -> bool:
    """stdout was pointed at the null device after a closed pipe (rich does that, then exits 1)."""
    try:
        out, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
        return (out.st_dev, out.st_ino) == (null.st_dev, null.st_ino)
    except (OSError, ValueError, AttributeError):
        return False


def _usage_message(exc) -> str:
    """typer/click's usage errors as one line: the flag, what was expected, what was given."""
    from pydantic import ValidationError

    from ..errors import problem_text

    BadParameter = _click_errors()[2]
    try:
        message = exc.format_message()
    except AttributeError:  # a click/typer mismatch formatting a missing argument
        message = exc.message or "missing argument"
    param = getattr(exc, "param", None)
    cause = exc.__cause__
    if isinstance(exc, BadParameter) and param is not None and isinstance(cause, ValidationError) \
            and cause.errors():
        opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
        name = opts[0] if opts else str(getattr(param, "name", "value")).upper()
        message = f"{name}: {problem_text(cause.errors()[0])}"
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "plan3d"
    return f"{message.rstrip('.')} (see '{where} --help')"


class _Group(TyperGroup):
    """typer's group with plan3d's error contract: one line on stderr and exit 2 for usage
    errors, a quiet exit on a closed pipe, no traceback ever (exit 3 and a one-line report for a
    bug, unless PLAN3D_DEBUG is set)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _quiet_stdout()
            raise typer.Exit(EXIT_OK) from None

    def parse_args(self, ctx, args):  # --help, --version and no-arguments help print from here
        try:
            return super().parse_args(ctx, args)
        except BrokenPipeError:
            _quiet_stdout()
            raise typer.Exit(EXIT_OK) from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        sys.exit(self._guarded(args, "plan3d", complete_var, **extra))

    def _guarded(self, args, prog_name, complete_var, **extra) -> int:
        def error(message: str) -> None:  # rich, numpy and the models load only for an error
            from ..outputs.render import error as say

            say(message)

        ClickException, UsageError, _, NoArgsIsHelpError = _click_errors()
        NoArgsIsHelpError = NoArgsIsHelpError or ()

        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else EXIT_OK
        except NoArgsIsHelpError as exc:
            help_text = exc.format_message()  # empty when typer's rich help printed it already
            if help_text.strip():
                sys.stdout.write(help_text + "\n")
            code = EXIT_USAGE
        except UsageError as exc:
            error(_usage_message(exc))
            code = EXIT_USAGE
        except ClickException as exc:
            error(exc.format_message())
            code = exc.exit_code
        except typer.Abort:
            error("aborted")
            code = 130
        except PlanError as exc:
            error(str(exc))
            code = exit_code(exc)
        except BrokenPipeError:
            _quiet_stdout()
            code = EXIT_OK
        except SystemExit as exc:  # rich's own closed-pipe exit (typer's help): quiet, not 1
            if exc.code == 1 and _stdout_gone():
                code = EXIT_OK
            else:
                raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
            if os.environ.get("PLAN3D_DEBUG"):
                raise
            error(f"internal error ({type(exc).__name__}: {exc}); this is a bug in plan3d "
                  f"{__version__}: please report it with the command line "
                  "(PLAN3D_DEBUG=1 shows the traceback)")
            code = EXIT_BUG
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_stdout()
        except (OSError, ValueError):
            pass
        return code


app = typer.Typer(cls=_Group, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  pretty_exceptions_enable=False, help=HELP)

# ---- shared options ---------------------------------------------------------------------------
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Preset name, size alias (70b), "
                                       "plan3d model file or Hugging Face config.json, or a "
                                       "model folder holding a config.json.")]
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
ZeroOpt = _opt("ZeRO stage(s) 0-3 (1 = distributed optimizer, 3 = FSDP), or auto; explain's "
               "default is the framework's (Megatron, DeepSpeed 1; torchtitan 3).")
RecomputeOpt = _opt("Activation recompute: none, selective, full (comma list), or auto.")
ScheduleOpt = _opt("Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zbv, dualpipe, "
                   "dualpipev.")
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
FrameworkOpt = Annotated[str | None, typer.Option(
    help="The training framework the plan is for: megatron (Megatron-Core, NeMo; default), "
         "torchtitan, deepspeed. --emit X implies X's framework.")]
# moe: expert parallelism
EpOpt = _opt("Expert-parallel degree(s) of a MoE model (search: the divisors of its experts).")
EtpOpt = _opt("Expert tensor-parallel degree(s) of a MoE model (search: 1 unless given).")
DpReplicateOpt = _opt("Hybrid sharding by its replicas (torchtitan's "
                      "data_parallel_replicate_degree): dp/dp_replicate ranks shard, replicated "
                      "dp_replicate times (explain: one divisor of dp; search: a list; instead of "
                      "--dp-shard).")
DpShardOpt = _opt("Hybrid sharding (HSDP): ZeRO shards over dp_shard·cp ranks, replicated "
                  "dp/dp_shard times (explain: one divisor of dp; search: a list, or auto for "
                  "dp and the divisors filling whole NVLink domains; default: all of dp).")
# cp-kind: context-parallel kinds
CpKindOpt = _opt("Context-parallel kind: ring (p2p), a2a (all-to-all, Ulysses), hierarchical "
                 "(a2a inside groups of --cp-a2a ranks, ring across them); default: the "
                 "framework's (Megatron, torchtitan ring; DeepSpeed a2a); search: a comma list, "
                 "or auto for every kind the framework runs.")
CpA2aOpt = _opt("Hierarchical CP: the all-to-all group, a divisor of cp (explain: one; search: "
                "a list; default: those whose tp·group fits the NVLink domain).")
MoeImbalanceOpt = Annotated[float, typer.Option(
    help="Busiest expert-parallel rank's routed tokens over the mean (Switch Transformer's "
    "capacity factor 1.25).", min=1.0, max=64.0)]
MoeCapacityOpt = Annotated[float | None, typer.Option(
    help="Drop tokens beyond this capacity factor (caps the imbalance); default dropless.",
    min=0.01, max=64.0)]
MoeOverlapOpt = Annotated[bool, typer.Option(
    "--moe-a2a-overlap/--no-moe-a2a-overlap",
    help="Overlap the all-to-all with another micro-batch's compute (DualPipe-style).")]
# offload: to host memory
OffloadOptimizerOpt = Annotated[float | None, typer.Option(
    help="Fraction (0-1) of the optimizer states kept in host memory and stepped by the CPU "
    "(Megatron --optimizer-offload-fraction; DeepSpeed offload_optimizer).")]
OffloadParamsOpt = Annotated[bool | None, typer.Option(
    "--offload-params/--no-offload-params",
    help="Parameters, gradients and optimizer states in host memory (FSDP2 CPU offload; "
    "DeepSpeed ZeRO-3 offload_param).")]
OffloadActivationsOpt = Annotated[int | None, typer.Option(
    help="Layers per GPU whose activations are offloaded to host memory (Megatron "
    "--cpu-offloading-num-layers; pp 1, no recompute).")]
OffloadModeOpt = Annotated[str, typer.Option(
    help="Offload search: fit (default) ranks offload only when no plan fits without it (what "
    "it would win is still weighed under the table); auto ranks, for every plan that does not "
    "fit, the least offload that makes it fit, so that offload competes on speed; none never "
    "offloads.")]
EmitOpt = Annotated[str | None, typer.Option(
    help="Print launch settings for megatron, nemo, torchtitan or deepspeed.")]
TrainTokensOpt = Annotated[str | None, typer.Option(
    help="Tokens to train on (e.g. 15T, 300B): adds days, GPU-hours, cost, energy.")]
PriceOpt = Annotated[float | None, typer.Option(help="Price of one GPU-hour, for the cost.")]
PowerOpt = Annotated[float | None, typer.Option(
    help="Average GPU power in W for the energy (default: the profile's TDP).")]
MfuOpt = Annotated[str, typer.Option(
    help="MFU convention: causal (attention's unmasked half, as Megatron-Core logs it) or full "
         "(the whole s×s square, as Narayanan 2021 and PaLM).")]
MFU_CONVENTIONS = ("causal", "full")


def _mfu_convention(value: str) -> str:
    v = value.strip().lower()
    if v not in MFU_CONVENTIONS:
        raise PlanError(f"--mfu-convention must be causal or full, got '{value}'")
    return v


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


DeadlineOpt = Annotated[float | None, typer.Option(
    help="With --train-tokens: the fewest GPUs (whole NVLink domains, doubling up to --gpus) "
    "whose best plan trains the tokens within this many days (wall-clock, at --goodput).")]
HeadroomOpt = Annotated[float | None, typer.Option(
    help="Memory a recommended plan leaves free, as a fraction of capacity (default 0.1: the "
    "estimate's own error and NCCL buffers beyond it); a plan that fits only inside it is "
    "marked m and never ranked first.")]
GoodputOpt = Annotated[float | None, typer.Option(
    help="With --train-tokens: the share of wall-clock time that trains, the rest lost to "
    f"interruptions, restarts and checkpoints (default {DEFAULT_GOODPUT:.2f}: Llama 3 405B on "
    "16K H100, Dubey et al. 2024 §3.3.4).")]


def _extras(plan, model, hw, emit, train_tokens, price, power, goodput=None):
    """--train-tokens and --emit on one plan: (plan with budget, launch settings or None)."""
    from .. import api
    from ..search.options import MAX_POWER_W, MAX_PRICE, positive_number, token_count

    price = positive_number(price, "gpu-hour-price", MAX_PRICE, allow_zero=True)
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


def _deadline_sort(model, req, train_tokens, deadline_days, goodput, sort, target_step_s):
    """search --deadline-days: --sort gpus with the step time that trains the tokens in time."""
    from .. import api
    from ..search.options import token_count

    if target_step_s is not None or sort not in ("time", "gpus"):
        raise PlanError("--deadline-days sizes the cluster itself (as --sort gpus with a step "
                        "time): leave out --target-step-s and --sort")
    return "gpus", api.deadline_target_step_s(model, req, token_count(train_tokens),
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
    """Write all of `content` (text, or bytes such as a PNG) to `path` or nothing (a temporary
    file beside it, then a rename)."""
    import tempfile
    from pathlib import Path

    target = Path(path).expanduser()
    tmp = None
    try:
        if target.is_dir():
            raise IsADirectoryError(21, "is a folder")
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                   dir=target.parent if str(target.parent) else ".")
        binary = isinstance(content, bytes)
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as fh:
            fh.write(content)
        os.replace(tmp, target)
        tmp = None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise PlanError(f"cannot write {path}: {reason}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _not_fit_message(plan) -> str:
    m = plan.memory
    gib = 2**30
    return (f"this plan does not fit: it needs {m.total_bytes / gib:,.1f} GiB per GPU on the "
            f"{m.stage} pipeline stage, {m.capacity_bytes / gib:,.1f} GiB available; try --zero 3, "
            "--recompute full, a larger --tp or --pp, more --gpus, or `plan3d search` for a "
            "layout that fits")


def _request(gpus, dp, tp, pp, cp, vpp, mbs, zero, recompute, schedule, sp, gbs, tokens, seq,
             precision, grad_dtype, attention, overlap, allow_tp_across_nodes=False,
             auto_default=False, framework=None, emit=None, **moe):
    from pydantic import ValidationError

    from ..search.options import parse_request, resolve_framework

    try:
        return parse_request(
            gpus=gpus, dp=dp, tp=tp, pp=pp, cp=cp, vpp=vpp, mbs=mbs, zero=zero,
            recompute=recompute, schedule=schedule, sp=sp, gbs=gbs, tokens_per_step=tokens,
            seq_len=seq, precision=precision, grad_dtype=grad_dtype, attention=attention,
            overlap_grad_reduce=overlap, allow_tp_across_nodes=allow_tp_across_nodes,
            framework=resolve_framework(framework, emit, schedule),
            **moe)  # moe: ep, etp, moe_imbalance, moe_capacity_factor, moe_a2a_overlap
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


# ---- commands ---------------------------------------------------------------------------------


@app.command()
def explain(
    model: ModelOpt, gpus: GpusOpt, hw: HwOpt = "h100-nvlink",
    dp: DpOpt = None, tp: TpOpt = None, pp: PpOpt = None, cp: CpOpt = None, vpp: VppOpt = None,
    mbs: MbsOpt = None, zero: ZeroOpt = None, recompute: RecomputeOpt = "selective",
    schedule: ScheduleOpt = None, sp: SpOpt = None, gbs: GbsOpt = None,
    tokens_per_step: TokensOpt = None, seq_len: SeqOpt = None, precision: PrecisionOpt = "bf16",
    grad_dtype: GradOpt = "fp32", attention: AttnOpt = "flash",
    overlap_grad_reduce: OverlapOpt = True, json_: JsonOpt = False, emit: EmitOpt = None,
    framework: FrameworkOpt = None,
    timeline: Annotated[bool, typer.Option(
        "--timeline", help="Draw the pipeline schedule, to scale.")] = False,
    timeline_out: Annotated[str | None, typer.Option(
        help="Write the schedule picture to an .svg file.")] = None,
    train_tokens: TrainTokensOpt = None, gpu_hour_price: PriceOpt = None,
    gpu_power_w: PowerOpt = None, goodput: GoodputOpt = None,
    brief: Annotated[bool, typer.Option(
        "--brief", help="Print only the answer: fit, step, tokens/s, MFU (days and cost if "
        "asked) and the warnings.")] = False,
    section: Annotated[str | None, typer.Option(
        help="The sections to print after the answer, comma list of model, memory, pipeline, "
        "comm, time, constants (default: all).")] = None,
    mfu_convention: MfuOpt = "causal",
    ep: EpOpt = None, etp: EtpOpt = None, moe_imbalance: MoeImbalanceOpt = 1.25,
    moe_capacity_factor: MoeCapacityOpt = None, moe_a2a_overlap: MoeOverlapOpt = False,
    dp_shard: DpShardOpt = None, dp_replicate: DpReplicateOpt = None,
    cp_kind: CpKindOpt = None, cp_a2a: CpA2aOpt = None,  # cp-kind
    offload_optimizer: OffloadOptimizerOpt = None, offload_params: OffloadParamsOpt = None,
    offload_activations: OffloadActivationsOpt = None,
) -> None:
    """One plan: the answer first, then every term, its formula, its value, and why."""
    from .. import api

    try:
        if timeline_out is not None and not timeline_out.lower().endswith(".svg"):
            raise PlanError(f"--timeline-out writes SVG: give a path ending in .svg, "
                            f"got '{timeline_out}'")
        convention = _mfu_convention(mfu_convention)
        sections = _sections(section)
        if zero is None:  # the framework's own default: ZeRO-1 for Megatron, FSDP for torchtitan
            from ..frameworks import FRAMEWORKS
            from ..search.options import resolve_framework

            zero = str(FRAMEWORKS[resolve_framework(framework, emit, schedule)]
                       .defaults["zero"])
        req = _request(gpus, dp, tp, pp, cp, vpp, mbs, zero, recompute, schedule, sp, gbs,
                       tokens_per_step, seq_len, precision, grad_dtype, attention,
                       overlap_grad_reduce, framework=framework, emit=emit,
                       ep=ep, etp=etp, moe_imbalance=moe_imbalance,
                       moe_capacity_factor=moe_capacity_factor, moe_a2a_overlap=moe_a2a_overlap,
                       dp_shard=dp_shard, dp_replicate=dp_replicate, cp_kind=cp_kind,
                       cp_a2a=cp_a2a,
                       offload_optimizer=offload_optimizer,
                       offload_params=offload_params, offload_activations=offload_activations)
        batch_note = _batch_note(model, req)
        framework_note = _framework_note(framework, emit, schedule)
        plan = api.explain_request(model, hw, req)
        plan, launch = _extras(plan, model, hw, emit, train_tokens, gpu_hour_price, gpu_power_w,
                               goodput)
        data = plan.model_dump(mode="json")
        if launch is not None:
            data["launch"] = _launch_json(launch)
        _checked_json(data)
        picture = svg = None
        if timeline or timeline_out:
            c = plan.config
            blocks = 2 * c.pp * c.n_micro * c.vpp
            if blocks > MAX_TIMELINE_BLOCKS:
                raise PlanError(f"--timeline draws every micro-batch: {c.n_micro:,} micro-batches "
                                f"× pp {c.pp} × vpp {c.vpp} is {blocks:,} blocks, more than "
                                f"{MAX_TIMELINE_BLOCKS:,}; draw it with a smaller --gbs (the "
                                "schedule's pattern is the same)")
            picture = api.plan_timeline(model, hw, plan)
        if timeline_out is not None:
            from ..outputs.render import config_line
            from ..outputs.timeline import to_svg

            svg = to_svg(picture, title=f"{plan.model.name}: {config_line(plan)}")
        constants = None if json_ or brief else api.explain_constants(model, hw, plan)
    except PlanError as exc:
        raise _fail(exc) from None
    from ..outputs import render

    fits = plan.memory.fits
    if fits and not json_:  # with --json, stderr stays empty on success (gbs is in the JSON)
        _notice(batch_note)
        _notice(framework_note)
    if svg is not None and fits:
        try:
            _write_file(timeline_out, svg)
        except PlanError as exc:
            raise _fail(exc) from None
    if svg is not None and fits and not json_:
        render.notice(f"wrote {timeline_out}: the {picture.schedule.value} schedule of "
                      f"{picture.pp} stages × {picture.n_micro} micro-batches, "
                      f"{render.seconds(picture.makespan_s)}")
    if json_:
        render.print_json(data)
    else:
        # with --emit, stdout carries the settings alone; what explains them goes to stderr
        out = render.console(stderr=launch is not None)
        render.render_explain(plan, out, sections=sections, brief=brief,
                              mfu_convention=convention, constants=constants)
        if picture is not None and timeline:
            values = {t.key: t.value for t in plan.terms}
            render.render_timeline(picture, out, head_s=values.get("head_s", 0.0),
                                   step_bubble=render.bubble_share(plan))
        if launch is not None:
            render.render_launch_notes(launch, out)
            render.write_settings(launch)
    if not fits:
        note = f" ({timeline_out} not written)" if svg is not None else ""
        raise _fail(NoFeasiblePlan(_not_fit_message(plan) + note))


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
    sort: Annotated[str, typer.Option(
        help="Rank by: time, memory, mfu; or gpus: the fewest GPUs (whole NVLink domains, "
        "doubling up to --gpus) whose best plan steps within --target-step-s.")] = "time",
    target_step_s: Annotated[float | None, typer.Option(
        help="With --sort gpus: the step time to reach, in seconds.")] = None,
    headroom: HeadroomOpt = None,
    json_: JsonOpt = False, emit: EmitOpt = None, framework: FrameworkOpt = None,
    train_tokens: TrainTokensOpt = None,
    gpu_hour_price: PriceOpt = None, gpu_power_w: PowerOpt = None, goodput: GoodputOpt = None,
    deadline_days: DeadlineOpt = None, mfu_convention: MfuOpt = "causal",
    ep: EpOpt = None, etp: EtpOpt = None, moe_imbalance: MoeImbalanceOpt = 1.25,
    moe_capacity_factor: MoeCapacityOpt = None, moe_a2a_overlap: MoeOverlapOpt = False,
    dp_shard: DpShardOpt = None, dp_replicate: DpReplicateOpt = None,
    cp_kind: CpKindOpt = None, cp_a2a: CpA2aOpt = None,  # cp-kind
    offload_optimizer: OffloadOptimizerOpt = None, offload_params: OffloadParamsOpt = None,
    offload_activations: OffloadActivationsOpt = None, offload: OffloadModeOpt = "fit",
) -> None:
    """Find and rank the layouts that fit and the framework runs (ties within the model's
    uncertainty shown as ties)."""
    from .. import api
    from ..outputs import render

    try:
        convention = _mfu_convention(mfu_convention)
        req = _request(gpus, dp, tp, pp, cp, vpp, mbs, zero, recompute, schedule, sp, gbs,
                       tokens_per_step, seq_len, precision, grad_dtype, attention,
                       overlap_grad_reduce, allow_tp_across_nodes, framework=framework,
                       emit=emit, ep=ep, etp=etp, moe_imbalance=moe_imbalance,
                       moe_capacity_factor=moe_capacity_factor, moe_a2a_overlap=moe_a2a_overlap,
                       dp_shard=dp_shard, dp_replicate=dp_replicate, cp_kind=cp_kind,
                       cp_a2a=cp_a2a,
                       offload_optimizer=offload_optimizer,
                       offload_params=offload_params, offload_activations=offload_activations,
                       offload=offload)
        batch_note = _batch_note(model, req)
        framework_note = _framework_note(framework, emit, schedule)
        if target_step_s is not None and not (0 < target_step_s < float("inf")):
            raise PlanError(f"--target-step-s must be a positive number of seconds, "
                            f"got {target_step_s:g}")
        if deadline_days is not None:  # the fewest GPUs whose best plan trains in time
            sort, target_step_s = _deadline_sort(model, req, train_tokens, deadline_days, goodput,
                                                 sort, target_step_s)
        result = api.search_request(model, hw, req, top=top, sort=sort, headroom=headroom,
                                    target_step_s=target_step_s)
        plans = [_extras(plan, model, hw, None, train_tokens, gpu_hour_price, gpu_power_w,
                         goodput)[0] for plan in result.plans]
        result = result.model_copy(update={"plans": plans})
        launch = None
        if emit:
            try:
                launch = _first_expressible(model, plans, emit)
            except PlanError as exc:
                if "none of the plans shown" not in str(exc):
                    raise
                # look further down the ranking for the best plan the framework can express
                longer = api.search_request(model, hw, req, top=EMIT_SEARCH_DEPTH, sort=sort,
                                            headroom=headroom, target_step_s=target_step_s)
                launch = _first_expressible(model, longer.plans, emit)
        data = result.model_dump(mode="json")
        if launch is not None:
            data["launch"] = _launch_json(launch)
        _checked_json(data)
    except PlanError as exc:
        raise _fail(exc) from None
    if json_:  # stderr stays empty on success (the rounded gbs is in the JSON)
        render.print_json(data)
        return
    _notice(batch_note)
    _notice(framework_note)
    # with --emit, stdout carries the settings alone; the table goes to stderr
    out = render.console(stderr=launch is not None)
    render.render_search(result, out, mfu_convention=convention)
    if launch is not None:
        render.render_launch_notes(launch, out)
        render.write_settings(launch)


@app.command()
def models(json_: JsonOpt = False) -> None:
    """List the built-in model presets and size aliases."""
    from .. import api
    from ..outputs import render

    listing = api.list_models()
    if json_:
        render.print_json([m.model_dump(mode="json") for m in listing])
    else:
        render.render_models(listing, render.console())


@app.command()
def hardware(json_: JsonOpt = False) -> None:
    """List the built-in hardware profiles."""
    from .. import api
    from ..outputs import render

    listing = api.list_hardware()
    if json_:
        render.print_json([h.model_dump(mode="json") for h in listing])
    else:
        render.render_hardware(listing, render.console())


@app.command()
def validate(hw: HwOpt = "a100-nvlink", json_: JsonOpt = False,
             framework: FrameworkOpt = None) -> None:
    """The published runs measured on the profile's GPU (A100, H100) through the model:
    predicted vs measured step time."""
    from ..catalog import load_hardware
    from ..model.validation import validate as run
    from ..outputs import render
    from ..search.options import resolve_framework

    try:
        report = run(load_hardware(hw), framework=resolve_framework(framework, None))
        data = _checked_json(report.model_dump(mode="json"))
    except PlanError as exc:
        raise _fail(exc) from None
    if json_:
        render.print_json(data)
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
    json_: JsonOpt = False, framework: FrameworkOpt = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Write the profile even if it fits the runs worse than --hw.")] = False,
) -> None:
    """Fit a profile's efficiency factors to your cluster's measured step times."""
    from pathlib import Path

    from .. import calibrate as cal
    from ..catalog import load_hardware
    from ..outputs import render

    try:
        profile = load_hardware(hw)
        from ..search.options import resolve_framework

        runs = cal.load_measurements(Path(measurements), profile,
                                     framework=resolve_framework(framework, None))
        factors = tuple(s.strip() for s in fit.split(",") if s.strip())
        if not factors:
            raise PlanError(f"--fit was given no factor ({fit!r}); name some of gemm, hbm, "
                            "fast_busbw, net_busbw")
        if name is not None and not name.strip():
            raise PlanError("--name was given an empty name; give the new profile a name or "
                            "leave the flag out")
        result = cal.calibrate(runs, profile, fit=factors, name=name)
        data = _checked_json(result.model_dump(mode="json"))
        if output and not force:
            cal.check_not_worse(result)
        toml_text = cal.calibration_toml(result, measurements) if output else None
        if output:
            _write_file(output, toml_text)
    except PlanError as exc:
        raise _fail(exc) from None
    if json_:
        render.print_json(data)
    else:
        render.render_calibration(result, render.console(), output)


# ---- compare (several profiles and GPU counts, one job) -----------------------------------------


@app.command()
def compare(
    model: ModelOpt,
    hw: Annotated[str, typer.Option(
        "--hw", help="Hardware profiles to compare, comma list (names or files).")],
    gpus: Annotated[str, typer.Option(
        "--gpus", "-n", help="GPU counts, comma list. With --deadline-days: the counts to try, "
        "or one count, the most to try (whole NVLink domains, doubling up to it).")],
    train_tokens: Annotated[str, typer.Option(help="Tokens to train on (e.g. 15T, 300B).")],
    price: Annotated[str | None, typer.Option(
        help="Price of a GPU-hour: one number for all profiles, or per profile, e.g. "
        "h100-nvlink=2.5,b200-nvlink=4.")] = None,
    gpu_power_w: Annotated[str | None, typer.Option(
        help="Average GPU power in W for the energy, one number or NAME=W pairs (default: each "
        "profile's TDP).")] = None,
    goodput: GoodputOpt = None,
    deadline_days: Annotated[float | None, typer.Option(
        help="Size each profile: the fewest GPUs whose best plan trains the tokens within this "
        "many days.")] = None,
    gbs: GbsOpt = None, tokens_per_step: TokensOpt = None, seq_len: SeqOpt = None,
    precision: PrecisionOpt = "bf16", grad_dtype: GradOpt = "fp32", attention: AttnOpt = "flash",
    overlap_grad_reduce: OverlapOpt = True,
    headroom: HeadroomOpt = None,
    json_: JsonOpt = False,
    chart: Annotated[str | None, typer.Option(
        help="Draw days and cost against GPUs to an .svg or .png file (needs matplotlib: "
        "pip install 'plan3d[chart]').")] = None,
) -> None:
    """The same job on several profiles and GPU counts: the best plan of each, with days,
    GPU-hours, cost and energy; the cheapest and the fastest first."""
    from .. import api
    from ..outputs import render
    from ..search.options import int_list, token_count
    from ..search.request import MAX_GPUS

    try:
        fmt = None
        if chart is not None:
            fmt = chart.rsplit(".", 1)[-1].lower() if "." in chart else ""
            if fmt not in ("svg", "png"):
                raise PlanError(f"--chart writes .svg or .png: give a path ending in one of them, "
                                f"got '{chart}'")
        names = [s.strip() for s in hw.split(",") if s.strip()]
        counts = int_list(gpus, "gpus", MAX_GPUS) or []
        req = _request(max(counts, default=1), None, None, None, None, None, None, None, None,
                       None, None, gbs, tokens_per_step, seq_len, precision, grad_dtype,
                       attention, overlap_grad_reduce)
        result = api.compare_request(model, names, counts, req, token_count(train_tokens),
                                     price, gpu_power_w, goodput, deadline_days, headroom)
        data = _checked_json(result.model_dump(mode="json"))
        if chart is not None:
            from ..compare import chart_image

            _write_file(chart, chart_image(result, fmt))
    except PlanError as exc:
        raise _fail(exc) from None
    if json_:
        render.print_json(data)
    else:
        out = render.console()
        render.render_compare(result, out)
        if chart is not None:
            out.print(f"wrote {chart}")
    if result.cheapest is None:
        sys.stdout.flush()
        raise _fail(NoFeasiblePlan(
            f"no profile trains the tokens within {deadline_days:g} days at the sizes tried; "
            "try more --gpus or a later deadline" if deadline_days is not None else
            "no cell has a plan that fits; try more --gpus or profiles with more memory"))


@app.command()
def schema(
    command: Annotated[str | None, typer.Argument(
        help="explain, search, compare, validate, models, hardware or calibrate; none: all of "
             "them, keyed by command.")] = None,
) -> None:
    """Print the JSON Schema of a command's --json output (the stable interface for scripts)."""
    from ..outputs import render
    from ..outputs.schema import all_schemas, output_schema

    try:
        data = output_schema(command.strip().lower()) if command is not None else all_schemas()
    except PlanError as exc:
        raise _fail(exc) from None
    render.print_json(data)


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


def _build_only_what_runs(args: list[str]) -> None:
    """typer builds the parameters of every command before it parses (≈ 3 ms each, half the
    time it spends before the command runs): keep only the command being run, or none for
    --version (click's lazy-group idea). A root --help, or anything else, keeps them all."""
    if not args:
        return
    if args[0] == "--version":
        app.registered_commands[:] = []
        return
    chosen = [c for c in app.registered_commands if (c.name or c.callback.__name__) == args[0]]
    if chosen:
        app.registered_commands[:] = chosen


def main() -> None:
    """Console entry point: usage errors exit 2 with one line, a closed pipe ends quietly (see
    _Group)."""
    import gc

    _build_only_what_runs(sys.argv[1:])
    try:
        app(prog_name="plan3d")
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(EXIT_OK)
    finally:
        # the process ends here: spare the interpreter's last collection of every object
        # (~50 ms after explain); the console entry point only, never an in-process caller
        gc.freeze()
