"""The plan flags, declared once: every flag that sets a field of the plan request, shared by
explain, search and compare.

A command takes them as one typed parameter, `flags: PlanFlags`; `with_plan_flags` puts one option
per field of PlanFlags in that parameter's place in the command's signature (typer reads the
signature), and gives the command the values back as one PlanFlags. A field's name is the
PlanRequest field it sets (planner.search.options.parse_request reads them by name), so adding a
plan flag is its declaration here — its typer option inline, with its help panel, as --mtp's —
plus the PlanRequest field that uses it. (The older flags' options are in flags.py, where
HELP_PANELS gives their panels.)"""

# no `from __future__ import annotations`: the dataclass fields' types are the typer options
# themselves, read by with_plan_flags

import functools
import inspect
from dataclasses import asdict, dataclass, fields
from typing import Annotated

import typer

from .flags import (
    AttnOpt,
    ContiguousOpt,
    CpA2aOpt,
    CpKindOpt,
    CpOpt,
    DistributeOpt,
    DpOpt,
    DpReplicateOpt,
    DpShardOpt,
    EpOpt,
    EtpOpt,
    FailuresOpt,
    Fp8ParamGatherOpt,
    Fp8RecipeOpt,
    FrameworkOpt,
    GbsOpt,
    GradOpt,
    MbsOpt,
    MoeCapacityOpt,
    MoeDispatcherOpt,
    MoeForcedOpt,
    MoeImbalanceOpt,
    MoeOverlapOpt,
    OffloadActivationsOpt,
    OffloadOptimizerOpt,
    OffloadParamsOpt,
    OverlapOpt,
    PpOpt,
    PrecisionOpt,
    RecomputeGroupOpt,
    RecomputeLayersOpt,
    RecomputeModulesOpt,
    RecomputeOpt,
    RestartOpt,
    ScheduleOpt,
    SeqOpt,
    SpOpt,
    StorageWriteOpt,
    TokensOpt,
    TpOpt,
    VppOpt,
    ZeroOpt,
)

MOE = "Mixture of experts"  # the --help panels (flags.HELP_PANELS) a flag declared here joins


@dataclass
class PlanFlags:
    """The plan flags as given (text for lists and enums: parse_request reads them), in the order
    --help lists them within each panel (flags.HELP_PANELS)."""

    # what to plan
    framework: FrameworkOpt = None
    gbs: GbsOpt = None
    tokens_per_step: TokensOpt = None
    seq_len: SeqOpt = None
    precision: PrecisionOpt = "bf16"
    attention: AttnOpt = "flash"
    fp8_recipe: Fp8RecipeOpt = None  # fit
    fp8_param_gather: Fp8ParamGatherOpt = False
    # layout
    dp: DpOpt = None
    tp: TpOpt = None
    pp: PpOpt = None
    cp: CpOpt = None
    vpp: VppOpt = None
    mbs: MbsOpt = None
    sp: SpOpt = None
    dp_shard: DpShardOpt = None  # hybrid sharding
    dp_replicate: DpReplicateOpt = None
    cp_kind: CpKindOpt = None  # cp-kind
    cp_a2a: CpA2aOpt = None
    # memory and recompute
    zero: ZeroOpt = None
    recompute: RecomputeOpt = None
    recompute_layers: RecomputeLayersOpt = 0  # fit
    recompute_group: RecomputeGroupOpt = 1
    recompute_modules: RecomputeModulesOpt = None
    distribute_saved_activations: DistributeOpt = False
    contiguous_checkpoints: ContiguousOpt = False  # fit: DeepSpeed
    grad_dtype: GradOpt = "fp32"
    offload_optimizer: OffloadOptimizerOpt = None  # offload
    offload_params: OffloadParamsOpt = None
    offload_activations: OffloadActivationsOpt = None
    # schedule and overlap
    schedule: ScheduleOpt = None
    overlap_grad_reduce: OverlapOpt = True
    # mixture of experts
    ep: EpOpt = None
    etp: EtpOpt = None
    moe_imbalance: MoeImbalanceOpt = None
    moe_capacity_factor: MoeCapacityOpt = None
    moe_a2a_overlap: MoeOverlapOpt = None
    moe_forced_balance: MoeForcedOpt = False
    moe_dispatcher: MoeDispatcherOpt = None
    moe_shared_expert_overlap: Annotated[bool, typer.Option(
        "--moe-shared-expert-overlap", rich_help_panel=MOE,
        help="Compute the shared experts beside the token dispatch and combine (Megatron "
        "--moe-shared-expert-overlap): the alltoall dispatcher only, which it implies.")] = False
    mtp: Annotated[bool, typer.Option(
        "--mtp/--no-mtp", rich_help_panel=MOE,
        help="Train the model's multi-token-prediction modules (DeepSeek-V3's MTP; Megatron "
        "--mtp-num-layers), on the last pipeline stage; --no-mtp plans a run that leaves them "
        "out. Nothing changes for a model without them.")] = True
    # time and cost: the cluster's reliability (goodput)
    failures_per_gpu_hour: FailuresOpt = None
    restart_s: RestartOpt = None
    storage_write_gb_per_s_per_gpu: StorageWriteOpt = None


PLAN_FLAG_NAMES = tuple(f.name for f in fields(PlanFlags))
PLAN_FLAG_DEFAULTS = {f.name: f.default for f in fields(PlanFlags)}
"""Each plan flag's value when it is not given."""


def plan_flags_of(options) -> dict:
    """The plan flags' current values in a command's options (explain's --plan may have set some
    after parsing), by name."""
    return {name: getattr(options, name) for name in PLAN_FLAG_NAMES}


def options_of(arguments: dict):
    """A command's arguments (its locals()) as one namespace: its own options and, in place of
    `flags`, each plan flag by name."""
    from types import SimpleNamespace

    own = {k: v for k, v in arguments.items() if k != "flags"}
    return SimpleNamespace(**asdict(arguments["flags"]), **own)


def with_plan_flags(command):
    """The command with one option per plan flag in place of its `flags: PlanFlags` parameter; it
    is called with the values gathered into one PlanFlags."""
    own = inspect.signature(command, eval_str=True)
    shared = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                annotation=f.type) for f in fields(PlanFlags)]
    params = []
    for p in own.parameters.values():
        if p.name == "flags":
            params += shared
        else:
            params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))
    if len(params) == len(own.parameters):
        raise TypeError(f"{command.__name__} has no `flags: PlanFlags` parameter")

    @functools.wraps(command)
    def run(**arguments):
        flags = PlanFlags(**{name: arguments.pop(name) for name in PLAN_FLAG_NAMES})
        return command(flags=flags, **arguments)

    run.__signature__ = own.replace(parameters=params)
    run.__annotations__ = {p.name: p.annotation for p in params}
    del run.__wrapped__  # typer reads the signature above, not the command's own
    return run
