"""The options several commands share beyond the plan flags (plan_flags.PlanFlags), each once: its
flag, its help, its type and its --help panel."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Annotated

import typer

from ..errors import (
    PlanError,
)

# --help in panels (issue 19): what to plan, the layout, memory, the schedule, MoE, time and cost,
# ranking, output. Each option names its panel where it is declared.
PANELS = SimpleNamespace(what="What to plan", layout="Layout", memory="Memory and recompute",
                         schedule="Schedule and overlap", moe="Mixture of experts",
                         time="Time and cost", ranking="Ranking", output="Output")

# ---- what to plan ------------------------------------------------------------------------------
ModelOpt = Annotated[str, typer.Option(
    "--model", "-m", rich_help_panel=PANELS.what, help="Preset name, size alias (70b), plan3d "
    "model file or Hugging Face config.json, or a model folder holding a config.json.")]


HwOpt = Annotated[str, typer.Option("--hw", help="Hardware profile name or file.",
                                    rich_help_panel=PANELS.what)]


GpusOpt = Annotated[int, typer.Option("--gpus", "-n", help="Number of GPUs.",
                                      rich_help_panel=PANELS.what)]


FrameworkOpt = Annotated[str | None, typer.Option(
    rich_help_panel=PANELS.what,
    help="The training framework the plan is for: megatron (Megatron-Core, NeMo; default), "
         "torchtitan, deepspeed. --emit X implies X's framework.")]


# ---- the layout and memory, beyond the plan flags ----------------------------------------------
PlanOpt = Annotated[str | None, typer.Option(
    "--plan", rich_help_panel=PANELS.layout,
    help="A layout as search's table prints it, e.g. \"dp128 tp2 pp1 cp2 z3 sel\" (quoted): its "
    "degrees, ZeRO stage, recompute and the rest in one argument.")]


AllowTpOpt = Annotated[bool, typer.Option(
    rich_help_panel=PANELS.layout,
    help="Admit tp larger than the NVLink domain (to see its cost).")]


HeadroomOpt = Annotated[float | None, typer.Option(
    rich_help_panel=PANELS.memory,
    help="Memory a recommended plan leaves free, as a fraction of capacity (default 0.1: the "
    "estimate's own error and NCCL buffers beyond it); a plan that fits only inside it is "
    "marked m and never ranked first.")]


OffloadModeOpt = Annotated[str, typer.Option(
    rich_help_panel=PANELS.memory,
    help="Offload search: fit (default) ranks offload only when no plan fits without it (what "
    "it would win is still weighed under the table); auto ranks, for every plan that does not "
    "fit, the least offload that makes it fit, so that offload competes on speed; none never "
    "offloads.")]


# ---- time and cost -----------------------------------------------------------------------------
TrainTokensOpt = Annotated[str | None, typer.Option(
    rich_help_panel=PANELS.time,
    help="Tokens to train on (e.g. 15T, 300B): adds days, GPU-hours, cost, energy.")]


PriceOpt = Annotated[float | None, typer.Option(
    "--price", rich_help_panel=PANELS.time,
    help="Price of one GPU-hour, for the cost (compare: per profile too).")]


PowerOpt = Annotated[float | None, typer.Option(
    rich_help_panel=PANELS.time,
    help="Average GPU power in W for the energy (default: the profile's TDP).")]


DeadlineOpt = Annotated[float | None, typer.Option(
    rich_help_panel=PANELS.time,
    help="With --train-tokens: the fewest GPUs (whole NVLink domains, doubling up to --gpus) "
    "whose best plan trains the tokens within this many days (wall-clock, at --goodput).")]


GoodputOpt = Annotated[float | None, typer.Option(
    rich_help_panel=PANELS.time,
    help="With --train-tokens: the share of wall-clock time that trains, in place of the one "
    "plan3d derives from the cluster's failure rate, the checkpoint's write time and the "
    "restarts (explain shows it: G).")]


# ---- output ------------------------------------------------------------------------------------
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.",
                                       rich_help_panel=PANELS.output)]


WhyOpt = Annotated[bool, typer.Option(
    "--why", rich_help_panel=PANELS.output,
    help="After the table: every row against row 1 and every option weighed.")]


EmitOpt = Annotated[str | None, typer.Option(
    rich_help_panel=PANELS.output,
    help="Print launch settings for megatron, nemo, torchtitan or deepspeed "
    "(torchtitan@0.2: the TOML job config of torchtitan 0.2; default 0.3).")]


MfuOpt = Annotated[str, typer.Option(
    rich_help_panel=PANELS.output,
    help="MFU convention: causal (attention's unmasked half, as Megatron-Core logs it) or full "
         "(the whole s×s square, as Narayanan 2021 and PaLM).")]


MFU_CONVENTIONS = ("causal", "full")


def _mfu_convention(value: str) -> str:
    v = value.strip().lower()
    if v not in MFU_CONVENTIONS:
        raise PlanError(f"--mfu-convention must be causal or full, got '{value}'")
    return v
