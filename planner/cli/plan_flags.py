"""The plan flags, declared once: every flag that sets a field of the plan request, shared by
explain, search and compare.

A command takes them as one typed parameter, `flags: PlanFlags`; `with_plan_flags` puts one option
per field of PlanFlags in that parameter's place in the command's signature (typer reads the
signature), and gives the command the values back as one PlanFlags. A field's name is the
PlanRequest field it sets (planner.search.options.parse_request reads them by name), and its type
is its typer option — flag, help and --help panel (flags.PANELS) in one place. So adding a plan
flag is one field here plus the PlanRequest field that uses it; a flag that only one command
takes (search's --top) stays that command's, and options shared beyond the plan (--model,
--framework for validate and calibrate too) are in flags.py."""

# no `from __future__ import annotations`: the dataclass fields' types are the typer options
# themselves, read by with_plan_flags

import functools
import inspect
from dataclasses import asdict, dataclass, fields
from typing import Annotated

import typer

from .flags import PANELS, FrameworkOpt

WHAT, LAYOUT, MEMORY, SCHEDULE, MOE, TIME = (
    PANELS.what, PANELS.layout, PANELS.memory, PANELS.schedule, PANELS.moe, PANELS.time)


def _text(help_: str, panel: str):
    """A plan flag given as text: a degree or a comma list of them, a name, `auto`."""
    return Annotated[str | None, typer.Option(help=help_, rich_help_panel=panel)]


@dataclass
class PlanFlags:
    """The plan flags as given (text for lists and enums: parse_request reads them), in the order
    --help lists them within each panel."""

    # what to plan
    framework: FrameworkOpt = None
    gbs: Annotated[int | None, typer.Option(
        help="Global batch size in sequences.", rich_help_panel=WHAT)] = None
    tokens_per_step: Annotated[int | None, typer.Option(
        help="Global batch in tokens (gbs = this/seq).", rich_help_panel=WHAT)] = None
    seq_len: Annotated[int | None, typer.Option(
        help="Sequence length (default: the model's).", rich_help_panel=WHAT)] = None
    precision: Annotated[str, typer.Option(
        help="Matmul precision: bf16, fp16, fp8, nvfp4 (Blackwell profiles).",
        rich_help_panel=WHAT)] = "bf16"
    attention: Annotated[str, typer.Option(
        help="Attention kernel: flash or classic.", rich_help_panel=WHAT)] = "flash"
    fp8_recipe: _text(  # fit: the low-precision recipe
        "With --precision fp8: delayed, current (Megatron's tensorwise), mxfp8 (Blackwell), "
        "blockwise; default: the framework's (Megatron delayed, torchtitan current).",
        WHAT) = None
    fp8_param_gather: Annotated[bool, typer.Option(
        "--fp8-param-gather/--no-fp8-param-gather", rich_help_panel=WHAT,
        help="The quantised weights are the parameters, no 16-bit copy, gathered quantised "
        "(Megatron --fp8-param-gather; torchtitan enable_fsdp_float8_all_gather).")] = False
    # layout
    dp: _text("Data-parallel degree(s), e.g. 16 or 8,16 (search).", LAYOUT) = None
    tp: _text("Tensor-parallel degree(s).", LAYOUT) = None
    pp: _text("Pipeline-parallel degree(s).", LAYOUT) = None
    cp: _text("Context-parallel degree(s).", LAYOUT) = None
    vpp: _text("Virtual pipeline stages per GPU (interleaved schedule).", LAYOUT) = None
    mbs: _text("Micro-batch size(s) in sequences.", LAYOUT) = None
    sp: Annotated[bool | None, typer.Option(
        "--sp/--no-sp", help="Sequence parallelism.", rich_help_panel=LAYOUT)] = None
    dp_shard: _text(  # hybrid sharding
        "Hybrid sharding (HSDP): ZeRO shards over dp_shard·cp ranks, replicated dp/dp_shard "
        "times (explain: one divisor of dp; search: a list, or auto for dp and the divisors "
        "filling whole NVLink domains; default: all of dp).", LAYOUT) = None
    dp_replicate: _text(
        "Hybrid sharding by its replicas (torchtitan's data_parallel_replicate_degree): "
        "dp/dp_replicate ranks shard, replicated dp_replicate times (explain: one divisor of "
        "dp; search: a list; instead of --dp-shard).", LAYOUT) = None
    cp_kind: _text(  # cp-kind: context-parallel kinds
        "Context-parallel kind: ring (p2p), a2a (all-to-all, Ulysses), hierarchical (a2a "
        "inside groups of --cp-a2a ranks, ring across them); default: the framework's "
        "(Megatron, torchtitan ring; DeepSpeed a2a); search: a comma list, or auto for every "
        "kind the framework runs.", LAYOUT) = None
    cp_a2a: _text(
        "Hierarchical CP: the all-to-all group, a divisor of cp (explain: one; search: a list; "
        "default: those whose tp·group fits the NVLink domain).", LAYOUT) = None
    # memory and recompute
    zero: _text(
        "ZeRO stage(s) 0-3 (1 = distributed optimizer, 3 = FSDP), or auto; explain's default "
        "is the framework's (Megatron, DeepSpeed 1; torchtitan 3).", MEMORY) = None
    recompute: _text(
        "Activation recompute: none, selective, full (comma list), or auto.", MEMORY) = None
    recompute_layers: Annotated[int, typer.Option(  # fit: the finer recompute levels
        help="With --recompute full: recompute only this many layers of each pipeline stage, "
        "the rest keep every activation (Megatron --recompute-method block "
        "--recompute-num-layers); 0: all. search also tries, for every plan that fits with "
        "full recompute, the fewest layers that still fit.", min=0,
        rich_help_panel=MEMORY)] = 0
    recompute_group: Annotated[int, typer.Option(
        help="With --recompute full: checkpoint this many consecutive layers as one unit, "
        "keeping only the unit's input and rerunning the whole unit at its backward (Megatron "
        "--recompute-method uniform --recompute-num-layers N); 1: every layer its own unit.",
        min=1, rich_help_panel=MEMORY)] = 1
    recompute_modules: _text(
        "With --recompute selective: the submodules checkpointed, comma list of core_attn, mlp, "
        "layernorm, moe_act, mla_up_proj, shared_experts, moe (Megatron --recompute-modules; "
        "default core_attn).", MEMORY) = None
    distribute_saved_activations: Annotated[bool, typer.Option(
        "--distribute-saved-activations/--no-distribute-saved-activations",
        rich_help_panel=MEMORY,
        help="With --recompute full and --no-sp: split each checkpointed layer input over the "
        "tp ranks, all-gathered before its rerun (Megatron --distribute-saved-activations; "
        "DeepSpeed activation_checkpointing.partition_activations).")] = False
    contiguous_checkpoints: Annotated[bool, typer.Option(  # fit: DeepSpeed
        "--contiguous-checkpoints/--no-contiguous-checkpoints", rich_help_panel=MEMORY,
        help="DeepSpeed, with --distribute-saved-activations: copy the partitioned checkpoints "
        "into buffers allocated ahead (activation_checkpointing.contiguous_memory_optimization, "
        "number_checkpoints = the model's layers / --recompute-group).")] = False
    compile_loss: Annotated[bool, typer.Option(  # fit: torchtitan
        "--compile-loss/--no-compile-loss", rich_help_panel=MEMORY,
        help="torchtitan: the loss compiled (compile.enable, compile.components ['loss'], as "
        "its DeepSeek-V3 16B config): its peak is the 16-bit logits and their gradient, not "
        "eager PyTorch's fp32 copies; --emit torchtitan writes it.")] = False
    torchtitan_flex_ac: Annotated[bool, typer.Option(
        "--torchtitan-flex-ac/--no-torchtitan-flex-ac", rich_help_panel=MEMORY,
        help="torchtitan before v0.2.1, DeepSeek-V3 flavours: selective recompute as its flex "
        "path (full AC on the attention, op SAC on the MoE); default: the whole block in op "
        "SAC, as 0.2.2 and 0.3.0.")] = False
    grad_dtype: Annotated[str, typer.Option(
        help="Gradient buffer dtype: fp32 (Megatron default) or bf16.",
        rich_help_panel=MEMORY)] = "fp32"
    adam_moments: Annotated[str, typer.Option(
        help="Adam's m and v dtype: fp32 (default) or bf16, Megatron's precision-aware "
        "optimizer (--use-precision-aware-optimizer --exp-avg-dtype/--exp-avg-sq-dtype bf16; "
        "ZeRO-1, no optimizer offload; Megatron and NeMo only).",
        rich_help_panel=MEMORY)] = "fp32"
    offload_optimizer: Annotated[float | None, typer.Option(  # offload: to host memory
        help="Fraction (0-1) of the optimizer states kept in host memory and stepped by the "
        "CPU (Megatron --optimizer-offload-fraction; DeepSpeed offload_optimizer).",
        rich_help_panel=MEMORY)] = None
    offload_params: Annotated[bool | None, typer.Option(
        "--offload-params/--no-offload-params", rich_help_panel=MEMORY,
        help="Parameters, gradients and optimizer states in host memory (FSDP2 CPU offload; "
        "DeepSpeed ZeRO-3 offload_param).")] = None
    offload_activations: Annotated[int | None, typer.Option(
        help="Layers per GPU whose activations are offloaded to host memory (Megatron "
        "--cpu-offloading-num-layers; pp 1, no recompute). DeepSpeed: cpu_checkpointing, the "
        "checkpointed inputs of every layer of the stage, under --recompute full.",
        rich_help_panel=MEMORY)] = None
    # schedule and overlap
    schedule: _text(
        "Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zbv, dualpipe, dualpipev.",
        SCHEDULE) = None
    overlap_grad_reduce: Annotated[bool, typer.Option(
        "--overlap-grad-reduce/--no-overlap-grad-reduce", rich_help_panel=SCHEDULE,
        help="Overlap the DP gradient reduction with backward.")] = True
    # mixture of experts
    ep: _text("Expert-parallel degree(s) of a MoE model (search: the divisors of its experts).",
              MOE) = None
    etp: _text("Expert tensor-parallel degree(s) of a MoE model (search: 1 unless given).",
               MOE) = None
    moe_imbalance: Annotated[float | None, typer.Option(
        help="Busiest expert-parallel rank's routed tokens over the mean; default: derived from "
        "the model's balancing and the batch (formulas.moe_layer.rank_load).", min=1.0,
        max=64.0, rich_help_panel=MOE)] = None
    moe_capacity_factor: Annotated[float | None, typer.Option(
        help="Drop tokens beyond this capacity factor (caps the imbalance); default dropless.",
        min=0.01, max=64.0, rich_help_panel=MOE)] = None
    moe_a2a_overlap: Annotated[bool | None, typer.Option(
        "--moe-a2a-overlap/--no-moe-a2a-overlap", rich_help_panel=MOE,
        help="Overlap the all-to-all with another micro-batch's compute (Megatron "
        "--overlap-moe-expert-parallel-comm; DualPipe with the dualpipev schedule); search "
        "weighs both where the framework runs it unless one is given.")] = None
    moe_forced_balance: Annotated[bool, typer.Option(
        "--moe-forced-balance/--no-moe-forced-balance", rich_help_panel=MOE,
        help="Routing forced to balance, for benchmarks (Megatron "
        "--moe-router-force-load-balancing; torchtitan debug.moe_force_load_balance): the "
        "busiest rank gets the mean.")] = False
    moe_dispatcher: _text(
        "Token dispatcher: alltoall (NCCL), allgather, or deepep (DeepEP's node-limited, "
        "de-duplicated kernels; also HybridEP); default alltoall.", MOE) = None
    moe_shared_expert_overlap: Annotated[bool, typer.Option(
        "--moe-shared-expert-overlap", rich_help_panel=MOE,
        help="Compute the shared experts beside the token dispatch and combine (Megatron "
        "--moe-shared-expert-overlap): the alltoall or deepep dispatcher, and not with "
        "--moe-a2a-overlap (search weighs no overlapped all-to-all beside it).")] = False
    moe_permute_fusion: Annotated[bool, typer.Option(
        "--moe-permute-fusion/--no-moe-permute-fusion", rich_help_panel=MOE,
        help="Megatron's fused token permutation (Transformer Engine's kernels; --emit writes "
        "--moe-permute-fusion); --no-moe-permute-fusion costs Megatron-Core's un-fused path, "
        "whose un-permutation scatter-adds atomically. Other frameworks have no such switch.")] = True
    mtp: Annotated[bool, typer.Option(
        "--mtp/--no-mtp", rich_help_panel=MOE,
        help="Train the model's multi-token-prediction modules (DeepSeek-V3's MTP; Megatron "
        "--mtp-num-layers), on the last pipeline stage; --no-mtp plans a run that leaves them "
        "out. Nothing changes for a model without them.")] = True
    # time and cost: the cluster's reliability (goodput)
    failures_per_gpu_hour: Annotated[float | None, typer.Option(
        help="The cluster's job interruptions per GPU-hour, for the goodput (default: the "
        "profile's, else Llama 3's 419 in 54 days on 16,384 GPUs = 1.97e-5).",
        rich_help_panel=TIME)] = None
    restart_s: Annotated[float | None, typer.Option(
        help="Seconds from an interruption to training again, before the checkpoint is read "
        "back (default: the profile's, else 600).", rich_help_panel=TIME)] = None
    storage_write_gb_per_s_per_gpu: Annotated[float | None, typer.Option(
        help="Checkpoint write bandwidth per GPU in GB/s, every GPU writing at once: your "
        "storage's aggregate write bandwidth over its GPUs (default: the profile's "
        "\\[storage]).", rich_help_panel=TIME)] = None


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
