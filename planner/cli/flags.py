"""The options the commands share, each once: its flag, its help and its type."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import (
    PlanError,
)

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


PrecisionOpt = Annotated[str, typer.Option(
    help="Matmul precision: bf16, fp16, fp8, nvfp4 (Blackwell profiles).")]
# fit: the low-precision recipe and the finer recompute levels
Fp8RecipeOpt = Annotated[str | None, typer.Option(
    help="With --precision fp8: delayed, current (Megatron's tensorwise), mxfp8 (Blackwell), "
    "blockwise; default: the framework's (Megatron delayed, torchtitan current).")]
Fp8ParamGatherOpt = Annotated[bool, typer.Option(
    "--fp8-param-gather/--no-fp8-param-gather",
    help="The quantised weights are the parameters, no 16-bit copy, gathered quantised "
    "(Megatron --fp8-param-gather; torchtitan enable_fsdp_float8_all_gather).")]
RecomputeLayersOpt = Annotated[int, typer.Option(
    help="With --recompute full: recompute only this many layers of each pipeline stage, the "
    "rest keep every activation (Megatron --recompute-method block --recompute-num-layers); "
    "0: all. search also tries, for every plan that fits with full recompute, the fewest "
    "layers that still fit.", min=0)]
RecomputeGroupOpt = Annotated[int, typer.Option(
    help="With --recompute full: checkpoint this many consecutive layers as one unit, keeping "
    "only the unit's input and rerunning the whole unit at its backward (Megatron "
    "--recompute-method uniform --recompute-num-layers N); 1: every layer its own unit.",
    min=1)]
DistributeOpt = Annotated[bool, typer.Option(
    "--distribute-saved-activations/--no-distribute-saved-activations",
    help="With --recompute full and --no-sp: split each checkpointed layer input over the tp "
    "ranks, all-gathered before its rerun (Megatron --distribute-saved-activations; DeepSpeed "
    "activation_checkpointing.partition_activations).")]
ContiguousOpt = Annotated[bool, typer.Option(
    "--contiguous-checkpoints/--no-contiguous-checkpoints",
    help="DeepSpeed, with --distribute-saved-activations: copy the partitioned checkpoints into "
    "buffers allocated ahead (activation_checkpointing.contiguous_memory_optimization, "
    "number_checkpoints = the model's layers / --recompute-group).")]
RecomputeModulesOpt = Annotated[str | None, typer.Option(
    help="With --recompute selective: the submodules checkpointed, comma list of core_attn, "
    "mlp (Megatron --recompute-modules; default core_attn).")]


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


MoeImbalanceOpt = Annotated[float | None, typer.Option(
    help="Busiest expert-parallel rank's routed tokens over the mean; default: derived from "
    "the model's balancing and the batch (formulas.moe_layer.rank_load).", min=1.0, max=64.0)]


MoeForcedOpt = Annotated[bool, typer.Option(
    "--moe-forced-balance/--no-moe-forced-balance",
    help="Routing forced to balance (Megatron --moe-router-force-load-balancing, for "
    "benchmarks): the busiest rank gets the mean.")]


MoeDispatcherOpt = Annotated[str | None, typer.Option(
    help="Token dispatcher: alltoall (NCCL), allgather, or deepep (DeepEP's node-limited, "
    "de-duplicated kernels; also HybridEP); default alltoall.")]


MoeCapacityOpt = Annotated[float | None, typer.Option(
    help="Drop tokens beyond this capacity factor (caps the imbalance); default dropless.",
    min=0.01, max=64.0)]


MoeOverlapOpt = Annotated[bool | None, typer.Option(
    "--moe-a2a-overlap/--no-moe-a2a-overlap",
    help="Overlap the all-to-all with another micro-batch's compute (Megatron "
    "--overlap-moe-expert-parallel-comm; DualPipe with the dualpipev schedule); search weighs "
    "both where the framework runs it unless one is given.")]


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
    "--cpu-offloading-num-layers; pp 1, no recompute). DeepSpeed: cpu_checkpointing, the "
    "checkpointed inputs of every layer of the stage, under --recompute full.")]


OffloadModeOpt = Annotated[str, typer.Option(
    help="Offload search: fit (default) ranks offload only when no plan fits without it (what "
    "it would win is still weighed under the table); auto ranks, for every plan that does not "
    "fit, the least offload that makes it fit, so that offload competes on speed; none never "
    "offloads.")]


EmitOpt = Annotated[str | None, typer.Option(
    help="Print launch settings for megatron, nemo, torchtitan or deepspeed "
    "(torchtitan@0.2: the TOML job config of torchtitan 0.2; default 0.3).")]


TrainTokensOpt = Annotated[str | None, typer.Option(
    help="Tokens to train on (e.g. 15T, 300B): adds days, GPU-hours, cost, energy.")]


PriceOpt = Annotated[float | None, typer.Option(
    "--price", help="Price of one GPU-hour, for the cost (compare: per profile too).")]
HeadroomOpt = Annotated[float | None, typer.Option(
    help="Memory a recommended plan leaves free, as a fraction of capacity (default 0.1: the "
    "estimate's own error and NCCL buffers beyond it); a plan that fits only inside it is "
    "marked m and never ranked first.")]
WhyOpt = Annotated[bool, typer.Option(
    "--why", help="After the table: every row against row 1 and every option weighed.")]
PlanOpt = Annotated[str | None, typer.Option(
    "--plan", help="A layout as search's table prints it, e.g. \"dp128 tp2 pp1 cp2 z3 sel\" "
    "(quoted): its degrees, ZeRO stage, recompute and the rest in one argument.")]


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


DeadlineOpt = Annotated[float | None, typer.Option(
    help="With --train-tokens: the fewest GPUs (whole NVLink domains, doubling up to --gpus) "
    "whose best plan trains the tokens within this many days (wall-clock, at --goodput).")]


GoodputOpt = Annotated[float | None, typer.Option(
    help="With --train-tokens: the share of wall-clock time that trains, in place of the one "
    "plan3d derives from the cluster's failure rate, the checkpoint's write time and the "
    "restarts (explain shows it: G).")]

FailuresOpt = Annotated[float | None, typer.Option(
    help="The cluster's job interruptions per GPU-hour, for the goodput (default: the profile's, "
    "else Llama 3's 419 in 54 days on 16,384 GPUs = 1.97e-5).")]

RestartOpt = Annotated[float | None, typer.Option(
    help="Seconds from an interruption to training again, before the checkpoint is read back "
    "(default: the profile's, else 600).")]

StorageWriteOpt = Annotated[float | None, typer.Option(
    help="Checkpoint write bandwidth per GPU in GB/s, every GPU writing at once: your storage's "
    "aggregate write bandwidth over its GPUs (default: the profile's \\[storage]).")]


# --help in panels (issue 19): what to plan, the layout, memory, the schedule, MoE, time and cost,
# output. The options are shared by explain, search and compare, so each panel is set once here.
HELP_PANELS = {
    "What to plan": (ModelOpt, HwOpt, GpusOpt, FrameworkOpt, GbsOpt, TokensOpt, SeqOpt,
                     PrecisionOpt, AttnOpt, Fp8RecipeOpt, Fp8ParamGatherOpt),
    "Layout": (PlanOpt, DpOpt, TpOpt, PpOpt, CpOpt, VppOpt, MbsOpt, SpOpt, CpKindOpt, CpA2aOpt,
               DpShardOpt, DpReplicateOpt),
    "Memory and recompute": (ZeroOpt, RecomputeOpt, RecomputeLayersOpt, RecomputeGroupOpt,
                             RecomputeModulesOpt, DistributeOpt, HeadroomOpt, GradOpt,
                             OffloadOptimizerOpt, OffloadParamsOpt, OffloadActivationsOpt,
                             OffloadModeOpt),
    "Schedule and overlap": (ScheduleOpt, OverlapOpt),
    "Mixture of experts": (EpOpt, EtpOpt, MoeImbalanceOpt, MoeCapacityOpt, MoeOverlapOpt,
                           MoeForcedOpt, MoeDispatcherOpt),
    "Time and cost": (TrainTokensOpt, PriceOpt, PowerOpt, GoodputOpt, FailuresOpt, RestartOpt,
                      StorageWriteOpt, DeadlineOpt),
    "Output": (JsonOpt, WhyOpt, EmitOpt, MfuOpt),
}
for _panel, _options in HELP_PANELS.items():
    for _option in _options:
        _option.__metadata__[0].rich_help_panel = _panel
