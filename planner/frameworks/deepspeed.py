"""DeepSpeed (with Megatron-DeepSpeed for tensor and pipeline parallelism): what plan3d knows of
it.

Conventions follow deepspeedai/DeepSpeed @ 00376da (docs/_pages/config-json.md,
deepspeed/runtime/zero/stage_1_and_2.py, stage3.py, pipe/engine.py) and
deepspeedai/Megatron-DeepSpeed megatron/arguments.py @ 207b2d5.

What it runs: ZeRO stages 0–3, but the pipeline engine only with ZeRO 0 or 1 ("ZeRO-2 and ZeRO-3
are incompatible with pipeline parallelism"); its TrainSchedule is 1F1B-style, with no
interleaving and no GPipe; context parallelism is DeepSpeed-Ulysses (all-to-all over the heads),
not combined with Megatron's sequence parallelism; no FP8 mode in the config. Expert
parallelism is AutoEP's over a Hugging Face model (frameworks/deepspeed_moe.py): ep > 1 with
tp = pp = cp = 1, etp = 1, any ZeRO stage, dropless routing by all-to-all or DeepEP.

Memory: 16-bit weights and gradients; the optimizer keeps fp32 master weights, Adam's m and v
(12 B/param) and, in step(), an fp32 copy of its gradient partition (4 B/param): under ZeRO-2/3
the sharded states are 2 + 4 + 12 = 18 B/param per rank.
"""

from __future__ import annotations

import json
import math

from ..errors import PlanError
from ..formulas import _ops
from ..formulas import collectives as K
from ..formulas import zero3 as Z3
from ..formulas.choices import Attention, ContextKind, Precision, Recompute, Schedule, ZeroStage
from ..rules import Rule
from ..schema import ModelSpec, PlanConfig
from . import deepspeed_moe as DS_MOE
from .base import (
    ActivationStyle,
    Args,
    DPPhase,
    DPPiecePhase,
    EmitResult,
    Framework,
    LossKind,
    MemoryConventions,
    ModelStates,
    common_notes,
    gpipe_note,
    interleaved,
    off_act,
    off_opt,
    off_params,
    offload_refusal,
)

RELEASE = (
    "deepspeedai/DeepSpeed docs/_pages/config-json.md @ 00376da (deepspeed.ai/docs/"
    "config-json); PipelineEngine's 'ZeRO-2 and ZeRO-3 are incompatible with pipeline "
    "parallelism'; TP/PP/SP launch arguments from deepspeedai/Megatron-DeepSpeed "
    "megatron/arguments.py @ 207b2d5.")

HALF = 2  # 16-bit weights and gradients
FP32_GRAD_COPY = 4  # the optimizer's fp32 copy of its gradient partition (step())
OPTIMIZER_BYTES = 12  # fp32 master weights + Adam m + v


def model_states(zero: ZeroStage, grad_bytes: float) -> ModelStates:
    """ZeRO 0: 16-bit weights and gradients (grad_bytes: 2, grad_bytes_fixed), 12 + 4 B of
    optimizer state on every rank; ZeRO-1 shards the optimizer's 16 B; ZeRO-2 also the 16-bit
    gradients (2 + 4 + 12 = 18 B/param sharded); ZeRO-3 also the weights."""
    z = int(zero)
    grads = HALF if z >= 2 else grad_bytes
    # goodput: a checkpoint holds the 16-bit module weights and each rank's optimizer partition
    # (fp32 master + Adam m, v; engine.py save_checkpoint / _save_zero_checkpoint @ 00376da),
    # not the transient fp32 gradient copy: 2 + 12 = 14 B/param
    return ModelStates(HALF, z >= 3, grads, z >= 2, OPTIMIZER_BYTES + FP32_GRAD_COPY, z >= 1,
                       source="deepspeed/runtime/zero/stage_1_and_2.py, stage3.py @ 00376da",
                       checkpoint_bytes=HALF + OPTIMIZER_BYTES)


# zero_optimization's buffers and thresholds, in elements: DeepSpeed's defaults
# (deepspeed/runtime/zero/config.py @ edaa72212, the line of each), written into the emitted
# ds_config as they are modelled (ZERO_SETTINGS), so the run uses what was costed
REDUCE_BUCKET_ELEMENTS = 500_000_000  # reduce_bucket_size (l.113)
ALLGATHER_BUCKET_ELEMENTS = 500_000_000  # allgather_bucket_size, ZeRO-1/2 (l.132)
PREFETCH_BUCKET_ELEMENTS = 50_000_000  # stage3_prefetch_bucket_size (l.215)
PARAM_PERSISTENCE_THRESHOLD = 100_000  # stage3_param_persistence_threshold (l.221)
MAX_LIVE_PARAMETERS = 1_000_000_000  # stage3_max_live_parameters (l.238)
MAX_REUSE_DISTANCE = 1_000_000_000  # stage3_max_reuse_distance (l.244)


def zero_settings(zero: ZeroStage) -> dict[str, int]:
    """The zero_optimization keys plan3d models for the stage, with the values it costs."""
    z = int(zero)
    if z == 0:
        return {}
    keys: dict[str, int] = {"reduce_bucket_size": REDUCE_BUCKET_ELEMENTS}
    if z < 3:
        keys["allgather_bucket_size"] = ALLGATHER_BUCKET_ELEMENTS
    else:
        keys.update({"stage3_prefetch_bucket_size": PREFETCH_BUCKET_ELEMENTS,
                     "stage3_param_persistence_threshold": PARAM_PERSISTENCE_THRESHOLD,
                     "stage3_max_live_parameters": MAX_LIVE_PARAMETERS,
                     "stage3_max_reuse_distance": MAX_REUSE_DISTANCE})
    return keys


def bucket_bytes(zero: ZeroStage) -> float:
    """DeepSpeed's fixed buffers at its defaults, in 16-bit elements: ZeRO 1–2 reduce gradients
    through a bucket of reduce_bucket_size elements, and a second with overlap_comm, which the
    emitted config turns on (stage_1_and_2.py l.2497-2513); ZeRO-3 keeps one reduce bucket and up
    to stage3_max_live_parameters gathered parameters (in place of the gathered layers)."""
    z = int(zero)
    if z == 0:
        return 0.0
    bucket = HALF * REDUCE_BUCKET_ELEMENTS
    return bucket + (HALF * MAX_LIVE_PARAMETERS if z == 3 else bucket)


RULES = (
    *DS_MOE.MOE_RULES,  # moe: AutoEP (frameworks/deepspeed_moe.py)
    Rule("pipeline parallelism only with ZeRO 0 or 1",
         lambda m, c: (c.pp == 1) | (c.zero < 2),
         lambda m, c: f"deepspeed: ZeRO-{int(c.zero)} with pipeline parallelism is not supported "
                      "(the pipeline engine needs ZeRO stage 0 or 1)"),
    Rule("no interleaved or GPipe schedule (the pipeline engine runs 1F1B)",
         lambda m, c: (c.pp == 1) | ((c.interleaved == 0) & (c.gpipe == 0)),
         lambda m, c: "deepspeed: the pipeline engine runs its 1F1B TrainSchedule only; use "
                      "--schedule 1f1b"),
    Rule("pp ≤ layers",
         lambda m, c: c.pp * c.vpp <= m.n_layers,
         lambda m, c: f"deepspeed: pp = {c.pp} stages exceed the {m.n_layers} layers of {m.name}"),
    Rule("cp > 1 is Ulysses: heads divisible by tp·cp, without sequence parallelism",
         lambda m, c: (c.cp == 1) | ((m.n_heads % (c.tp * c.cp) == 0) & (c.sp == 0)),
         lambda m, c: f"deepspeed: context parallelism is DeepSpeed-Ulysses: the {m.n_heads} heads "
                      f"must divide by tp·cp = {c.tp * c.cp} and Megatron's sequence parallelism "
                      "must be off (--no-sp)"),
    Rule("no fp8 (the config has no FP8 training mode)",
         lambda m, c: c.fp8 == 0,
         lambda m, c: "deepspeed: the DeepSpeed config has no FP8 training mode; use --precision "
                      "bf16"),
    # ZeRO++ hpZ (zero_hpz_partition_size) keeps a second copy of the weights partitioned inside
    # a node for the backward gathers, but gradients and optimizer states stay partitioned over
    # all dp ranks (deepspeed/runtime/zero/config.py @ edaa72212: "ranks in zero parameters
    # partitioning secondary group"; Wang et al. 2023 §3.2): not the plan's shard-and-replicate
    # layout. MiCS (mics_shard_size) is, but plan3d does not model it yet.
    Rule("no hybrid sharding (dp_shard = dp): hpZ is a secondary weight partition, not HSDP",
         lambda m, c: getattr(c, "dp_shard", c.dp) == c.dp,
         lambda m, c: "deepspeed: ZeRO++ hpZ (zero_hpz_partition_size) keeps gradients and "
                      "optimizer states sharded over all dp ranks, so it is not the plan's "
                      "hybrid sharding; leave --dp-shard out, or use --framework torchtitan or "
                      "megatron"),
)

OFFLOAD_RULES = (
    # offload: deepspeed/runtime/zero/offload_config.py @ edaa72212 — offload_optimizer "Valid with
    # stage 1, 2, and 3", `ratio` < 1 "Only valid with ZeRO Stage 3" (zero/config.py
    # offload_ratio_check), offload_param "Valid only with stage 3"
    Rule("optimizer offload (ZeRO-Offload) with ZeRO 1, 2 or 3; a fraction below 1 only with "
         "ZeRO-3 (offload_optimizer.ratio)",
         lambda m, c: (off_opt(c) == 0) | ((c.zero >= 1) & ((off_opt(c) == 1) | (c.zero == 3))),
         lambda m, c: (f"deepspeed: offload_optimizer needs ZeRO 1, 2 or 3 (got --zero "
                       f"{int(c.zero)})" if c.zero < 1 else
                       f"deepspeed: offload_optimizer.ratio {off_opt(c):g} (partial offload) "
                       "runs only with ZeRO-3; use --offload-optimizer 1 or --zero 3")),
    Rule("parameter offload (offload_param) only with ZeRO-3",
         lambda m, c: (off_params(c) == 0) | (c.zero == 3),
         lambda m, c: f"deepspeed: offload_param is valid only with ZeRO stage 3 (got --zero "
                      f"{int(c.zero)}); use --zero 3"),
    # fit: --offload-activations is activation_checkpointing.cpu_checkpointing, which moves
    # every checkpointed layer input of full recompute to host memory (checkpointing.py
    # CheckpointFunction.forward @ edaa722): all of the stage's layers, under full recompute
    Rule("activation offload is cpu_checkpointing: full recompute, every layer of the stage",
         lambda m, c: (off_act(c) == 0) | ((getattr(c, "recompute_full", 1) == 1)
                                           & (off_act(c) * c.pp >= m.n_layers)),
         lambda m, c: ("deepspeed: activation_checkpointing.cpu_checkpointing moves the "
                       "checkpointed inputs of full recompute to host memory; use --recompute "
                       "full" if getattr(c, "recompute_full", 1) != 1 else
                       "deepspeed: activation_checkpointing.cpu_checkpointing moves every "
                       f"checkpointed layer input, not {off_act(c)} layers: use "
                       f"--offload-activations {math.ceil(m.n_layers / c.pp)} (the stage's "
                       "layers)")),
)
"""What DeepSpeed offloads to host memory, and under what ZeRO stages (offload)."""


def _ds_check(c: PlanConfig) -> None:
    """What the DeepSpeed config cannot express, refused with the reason."""
    fw = "deepspeed"
    if interleaved(c):
        raise PlanError(f"{fw}: the pipeline engine has no interleaved 1F1B schedule "
                        f"(vpp = {c.vpp}); re-plan with vpp 1")
    if c.pp > 1 and c.zero_stage >= ZeroStage.GRADIENTS:
        raise PlanError(f"{fw}: ZeRO-{int(c.zero_stage)} with pipeline parallelism is not "
                        "supported (the pipeline engine needs ZeRO stage 0 or 1)")
    if c.dp_replicate > 1:
        raise PlanError(f"{fw}: hybrid sharding (dp_shard {c.dp_shard} < dp {c.dp}) cannot be "
                        "written: ZeRO++ hpZ (zero_hpz_partition_size) shards gradients and "
                        "optimizer states over all dp ranks; re-plan without dp_shard")
    if c.precision is Precision.FP8:
        raise PlanError(f"{fw}: the DeepSpeed config has no FP8 training mode (FP8 needs "
                        "Transformer Engine layers in the model code)")
    if c.cp > 1 and c.sequence_parallel and c.tp > 1:
        raise PlanError(f"{fw}: context parallelism (DeepSpeed-Ulysses, "
                        "--ds-sequence-parallel-size) cannot be combined with Megatron sequence "
                        "parallelism")


def _contiguous_check(c: PlanConfig, m: ModelSpec) -> None:
    """fit: contiguous_memory_optimization fills one list of number_checkpoints = ⌈L/g⌉ buffers
    from a backward to the next (checkpointing.py partition_activations @ edaa722), so the
    first stage's checkpoints in flight before its first backward must not outnumber it: the
    1F1B warm-up holds min(pp, m) micro-batches there, each with ⌈⌈L/pp⌉/g⌉ checkpoints; more
    is an IndexError at run time."""
    if not c.contiguous_checkpoints:
        return
    number = math.ceil(m.n_layers / c.recompute_group)
    stage = math.ceil(math.ceil(m.n_layers / c.pp) / c.recompute_group)
    in_flight = min(c.pp, c.n_micro) * stage
    if in_flight > number:
        raise PlanError(f"deepspeed: contiguous_memory_optimization keeps number_checkpoints = "
                        f"{number} buffers from one backward to the next, but the first stage "
                        f"holds {in_flight} checkpoints before its first backward (list index "
                        "out of range in deepspeed.checkpointing); leave out contiguous "
                        "checkpoints or split the layers evenly over the stages")


def _ds_config(c: PlanConfig, m: ModelSpec, notes: list[str]) -> dict[str, object]:
    """The DeepSpeed JSON: batch, precision, ZeRO, offload, activation checkpointing."""
    fw = "deepspeed"
    cfg: dict[str, object] = {
        "train_batch_size": c.gbs,
        "train_micro_batch_size_per_gpu": c.mbs,
        "gradient_accumulation_steps": c.n_micro,
    }
    if c.precision is Precision.FP16:
        cfg["fp16"] = {"enabled": True, "loss_scale": 0}
    else:
        cfg["bf16"] = {"enabled": True}
    # 16-bit gradients, as the plan was costed: with fp32 accumulation DeepSpeed's bf16 ZeRO-1 runs
    # its BF16_Optimizer, which holds a full-size fp32 gradient buffer (bf16_optimizer.py)
    half = "fp16" if c.precision is Precision.FP16 else "bf16"
    cfg["data_types"] = {"grad_accum_dtype": half}
    if c.grad_dtype == "fp32":
        notes.append("Gradients accumulate and are reduced in 16-bit (data_types.grad_accum_dtype "
                     f"{half}), as plan3d costs DeepSpeed; fp32 accumulation would add a "
                     "full-size fp32 gradient buffer at ZeRO 0-1 (BF16_Optimizer).")
    zero: dict[str, object] = {"stage": int(c.zero_stage)}
    if c.zero_stage >= ZeroStage.OPTIMIZER:
        zero["overlap_comm"] = c.overlap_grad_reduce
        zero["contiguous_gradients"] = True
        zero["reduce_scatter"] = True
    zero.update(zero_settings(c.zero_stage))  # the buckets and thresholds the plan was costed with
    cfg["zero_optimization"] = zero
    if c.offload:  # offload: ZeRO-Offload / ZeRO-Infinity to pinned host memory
        offload_refusal(fw, c, m, OFFLOAD_RULES)
    if c.offload_optimizer > 0 or c.offload_params:
        optimizer_offload: dict[str, object] = {"device": "cpu", "pin_memory": True}
        if c.offload_optimizer < 1:
            optimizer_offload["ratio"] = c.offload_optimizer
        zero["offload_optimizer"] = optimizer_offload
        if c.offload_params:
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
        notes.append("Optimizer offload: the optimizer states (and with offload_param the "
                     "parameters) in pinned host memory, Adam stepped by DeepSpeedCPUAdam "
                     "(set the client optimizer to DeepSpeedCPUAdam or leave it to the config's "
                     "\"optimizer\" block).")
    if c.recompute is Recompute.FULL:
        cfg["activation_checkpointing"] = _ds_activation_checkpointing(c, m)
    return cfg


def _ds_activation_checkpointing(c: PlanConfig, m: ModelSpec) -> dict[str, object]:
    """fit: activation_checkpointing as the plan was costed (runtime/activation_checkpointing/
    config.py @ edaa722): partition_activations from --distribute-saved-activations (each
    checkpoint split over the tp ranks, all-gathered before its rerun), cpu_checkpointing from
    --offload-activations (every checkpoint to host memory), contiguous_memory_optimization with
    number_checkpoints = ⌈L/g⌉, the count Megatron-DeepSpeed passes to configure()."""
    block: dict[str, object] = {
        "partition_activations": bool(c.distribute_saved_activations),
        "cpu_checkpointing": c.offload_activations > 0,
        "contiguous_memory_optimization": bool(c.contiguous_checkpoints),
        "synchronize_checkpoint_boundary": False,
        "profile": False,
    }
    if c.contiguous_checkpoints:
        block["number_checkpoints"] = math.ceil(m.n_layers / c.recompute_group)
    return block


def _ds_launch_args(c: PlanConfig, notes: list[str]) -> None:
    """Megatron-DeepSpeed's arguments, where TP, PP, SP and recomputation are set (a note)."""
    # Megatron-DeepSpeed arguments: where TP, PP, SP and recomputation are set.
    a = Args()
    a.add("--tensor-model-parallel-size", c.tp)
    a.add("--pipeline-model-parallel-size", c.pp)
    if c.pp == 1:
        a.add("--no-pipeline-parallel")
    if c.sequence_parallel and c.tp > 1:
        a.add("--sequence-parallel")
    if c.cp > 1:
        a.add("--ds-sequence-parallel-size", c.cp)
    a.add("--micro-batch-size", c.mbs)
    a.add("--global-batch-size", c.gbs)
    a.add("--seq-length", c.seq_len)
    a.add("--fp16" if c.precision is Precision.FP16 else "--bf16")
    a.add("--zero-stage", int(c.zero_stage))
    if c.recompute is Recompute.SELECTIVE:
        a.add("--recompute-granularity", "selective")
    elif c.recompute is Recompute.FULL:
        a.add("--checkpoint-activations")
        a.add("--checkpoint-num-layers", 1)
        a.add("--deepspeed-activation-checkpointing")
        # fit: Megatron-DeepSpeed passes these to deepspeed.checkpointing.configure(), whose
        # arguments override the JSON's (megatron/initialize.py
        # setup_deepspeed_random_and_activation_checkpointing, bigscience-workshop/
        # Megatron-DeepSpeed @ 1a00f35; checkpointing.py configure @ edaa722)
        if c.distribute_saved_activations:
            a.add("--partition-activations")
        if c.contiguous_checkpoints:
            a.add("--contigious-checkpointing")  # sic: the flag's spelling
        if c.offload_activations:
            a.add("--checkpoint-in-cpu")
    if c.attention is Attention.FLASH:
        a.add("--use-flash-attn-v2")
    a.add("--deepspeed")
    a.add("--deepspeed_config", "ds_config.json")
    notes.append("Megatron-DeepSpeed args: " + a.inline())
    notes.append("DeepSpeed's JSON has no TP/PP keys: TP comes from the model code (Megatron-"
                 "DeepSpeed --tensor-model-parallel-size, passed to deepspeed.initialize as mpu), "
                 "PP from PipelineModule(num_stages=pp) in code; train_batch_size counts "
                 "data-parallel ranks only.")


def _ds_notes(c: PlanConfig, m: ModelSpec, notes: list[str]) -> None:
    """What the JSON leaves to the model code."""
    if c.cp > 1:
        notes.append(f"cp = {c.cp} maps to DeepSpeed-Ulysses (all-to-all over heads, needs "
                     f"{m.n_heads} heads divisible by {c.cp}), not ring attention; activation "
                     "memory splits the same way, communication differs.")
    if c.pp > 1:
        gpipe = gpipe_note("DeepSpeed", c, "its TrainSchedule (1F1B-style)")
        if gpipe:
            notes.append(gpipe)
        notes.append("The pipeline engine partitions layers by PipelineModule's partition_method "
                     "(Megatron-DeepSpeed: parameters-balanced), not necessarily evenly.")
    if c.recompute is Recompute.SELECTIVE:
        notes.append("Selective recomputation is a model-code switch (Megatron-DeepSpeed "
                     "--recompute-granularity selective); the JSON has no key for it.")
    elif c.recompute is Recompute.FULL:
        notes.append("Full recomputation: the JSON's activation_checkpointing only configures "
                     "deepspeed.checkpointing; layers are checkpointed by the model code "
                     "(--checkpoint-activations). Megatron-DeepSpeed's --partition-activations, "
                     "--contigious-checkpointing and --checkpoint-in-cpu override the JSON's "
                     "keys when it calls deepspeed.checkpointing.configure, so pass them as "
                     "written.")
    if c.attention is Attention.CLASSIC:
        notes.append("The attention kernel is chosen in the model code; leave out "
                     "--use-flash-attn-v2 for classic attention.")
    if c.precision is not Precision.FP16 and c.zero_stage <= ZeroStage.OPTIMIZER:
        notes.append("With bf16 at ZeRO stage 0 (and stage 1 under the pipeline engine) "
                     "DeepSpeed may pick its BF16_Optimizer, which partitions the fp32 master "
                     "weights and optimizer state over data-parallel ranks like ZeRO-1.")


def _deepspeed(c: PlanConfig, m: ModelSpec) -> EmitResult:
    """A DeepSpeed JSON config, with the Megatron-DeepSpeed arguments for TP/PP in the notes."""
    notes = common_notes(c, m)
    _ds_check(c)
    _contiguous_check(c, m)  # fit
    DS_MOE.check(c, m)
    cfg = _ds_config(c, m, notes)
    expert_parallel = DS_MOE.expert_parallel_section(c, m)  # moe: AutoEP
    if expert_parallel is None:
        _ds_launch_args(c, notes)
        _ds_notes(c, m, notes)
    else:
        cfg["expert_parallel"] = expert_parallel
        DS_MOE.launch_notes(c, m, notes)
    return EmitResult("deepspeed", "json", json.dumps(cfg, indent=2) + "\n", RELEASE, notes)


def deepspeed_dp_calls(per_layer, buf, layers, params, dp_ranks, overlap, linear_modules,
                       chunks=1):
    """DeepSpeed: gradients are reduced (ZeRO-3 reduce-scattered every micro-batch), and ZeRO-1/2
    weights gathered, in buckets of reduce_bucket_size / allgather_bucket_size = 5·10⁸ elements:
    ⌈Ψ/bucket⌉ calls (stage3.py reduce_independent_p_g_buckets_and_remove_grads l.1519-1537: a
    bucket is reduced when the next gradient would overflow it, the rest in
    independent_gradient_partition_epilogue l.1357; one reduce_scatter_coalesced, one NCCL call,
    per bucket: l.1813, runtime/comm/coalesced_collectives.py l.158-218 @ edaa72212). ZeRO-3's
    gathers follow its prefetch trace (deepspeed_zero3_gathers, Framework.zero3_gathers), not
    the per-module count returned here for them. `chunks` (v) is always 1: no interleaved
    schedule."""
    per_module = layers * linear_modules
    bucketed = K.bucketed_calls(params, REDUCE_BUCKET_ELEMENTS)
    return _ops.select(per_layer * (buf == "weight"), per_module, bucketed)


def deepspeed_zero3_gathers(params, modules):
    """ZeRO-3's coalesced all-gathers in a micro-batch, as the coordinator walks its trace of
    the forward then the backward (formulas/zero3.py): the forward gathers the stage's Ψ
    gathered elements (the persistent ones, ≤ stage3_param_persistence_threshold = 10⁵ each —
    norms, small biases — stay whole and are not counted: under 10⁻³ of Ψ for h ≥ 2048), the
    backward Ψ_b = max(0, Ψ − max(L, R/2)) again; calls n(Ψ) and n(Ψ + Ψ_b) − n(Ψ), with
    modules of Ψ/`modules` elements, the prefetch bucket B = 5·10⁷, max live L = 10⁹ and reuse
    distance R = 10⁹ as emitted. Returns ((forward calls, Ψ), (backward calls, Ψ_b))."""
    module = params / modules
    back = Z3.backward_gathered_elements(params, MAX_LIVE_PARAMETERS, MAX_REUSE_DISTANCE)

    def calls(elements):
        return Z3.prefetch_gather_calls(elements, module, PREFETCH_BUCKET_ELEMENTS,
                                        MAX_LIVE_PARAMETERS)

    forward = calls(params)
    return (forward, params), (calls(params + back) - forward, back)


def deepspeed_step_phases(w):
    """DeepSpeed's once-per-step collectives (ZeRO-0/1/2). With overlap_comm (what the plan's
    overlap flag emits) the gradients are reduced on the reduction stream bucket by bucket
    (reduce_bucket_size) as they fill in the last micro-batch's backward, the last bucket after
    it (deepspeed/runtime/zero/stage_1_and_2.py reduce_ready_partitions_and_remove_grads,
    independent_gradient_partition_epilogue @ edaa72212). Under the pipeline engine the
    reduction waits for the schedule's end (its ReduceGrads instruction: runtime/pipe/engine.py
    _exec_reduce_grads; is_gradient_accumulation_boundary is false in its backward passes):
    nothing overlaps. The updated weights are gathered inside the optimizer step
    (stage_1_and_2.py step, all_gather_dp_groups), before the next forward: nothing overlaps."""
    piped = 1 - _ops.le(w.p, 1)
    return DPPhase(w.reduce_calls, w.overlap * (1 - piped) * w.bwd_s), DPPhase(1, 0)


def deepspeed_microbatch_phases(w):
    """ZeRO-3, each micro-batch (partitioned_param_coordinator.py, parameter_offload.py,
    stage3.py @ edaa72212):
    forward — reset_step at the forward's start leaves nothing live (parameter_offload.py
    l.296-302), so the first fetch, the word embedding's table or a prefetch bucket
    (formulas/zero3.first_fetch_elements: f = max(B, V·h/t)), waits with no compute beside it;
    the rest is prefetched ahead of the modules on the all-gather stream: the forward's
    gathers in Ψ/f pieces beside the forward (formulas.overlap.pipelined_exposed_s), the first
    exposed;
    backward — the trace runs on from the forward, so the backward's gathers are fetched ahead
    of it and none waits alone; the gradients' reduce buckets (reduce_bucket_size) go out as they
    fill, and the last after the backward, which the host waits for
    (independent_gradient_partition_epilogue: reduce_and_partition_stream.synchronize(),
    stage3.py l.1357-1364): the backward's gathers and reduce-scatters on one stream beside the
    backward in n_rs pieces, the last bucket, T_rs/n_rs, exposed
    (formulas.overlap.exposed_piece_s).
    ZeRO-2: the reduce buckets alone (w.bwd_calls; no gathers: w.zero_bwd_s is T_rs), the same
    form."""
    first = Z3.first_fetch_elements(w.first_params, PREFETCH_BUCKET_ELEMENTS)
    return (DPPhase(w.params / first, w.fwd_s),
            DPPiecePhase(w.bwd_calls, w.bwd_s, w.zero_rs_s / w.bwd_calls))


FRAMEWORK = Framework(
    name="deepspeed",
    title="DeepSpeed (ZeRO, pipeline engine; Megatron-DeepSpeed for TP)",
    release=RELEASE,
    zero_stages=tuple(ZeroStage),
    schedules=(Schedule.ONE_F_ONE_B,),
    rules=RULES + OFFLOAD_RULES,
    dp_calls=deepspeed_dp_calls,
    dp_step_phases=deepspeed_step_phases,
    dp_microbatch_phases=deepspeed_microbatch_phases,
    zero3_gathers=deepspeed_zero3_gathers,
    memory=MemoryConventions(
        states=model_states, activations=ActivationStyle.FUSED, loss=LossKind.VOCAB_PARALLEL,
        gathered_layers=0, bucket_bytes=bucket_bytes,
        # fit: the world beside the data-parallel group, which is a clone of it without an mpu
        # (deepspeed/utils/groups.py _clone_world_group, deepspeed 0.19.8): the default
        # communicators
        # fit: partition_activations follows --distribute-saved-activations (off by default, as
        # DeepSpeed's own default), and the search weighs it where a plan needs it to fit;
        # cpu_checkpointing is --offload-activations, every checkpoint
        searches_partitioned_checkpoints=1, host_checkpoints=1,
        # offload: ZeRO-Offload accumulates each gradient partition on the host as its bucket is
        # reduced (stage_1_and_2.py async_accumulate_grad_in_cpu_via_gpu, accumulated_grads_in_cpu
        # @ edaa72212); ZeRO-3's offload_optimizer keeps its fp32 gradient partition there too
        offload_grads_from_zero=2),
    stage_split="chunks",
    extra_stage_units=0,
    # Megatron-DeepSpeed runs the flash-attn package's FlashAttention-2 under the
    # --use-flash-attn-v2 that `--emit deepspeed` writes (megatron/model/transformer.py
    # FlashSelfAttention)
    attention_kernel="fa2",
    # Megatron-DeepSpeed's topology (pipe, data, model) varies the model (TP) rank fastest
    rank_order=("tp", "cp", "dp", "pp"),
    # overlap_comm defaults to True only for stage 3 (zero/config.py l.138, 383-386), but the
    # emitted config sets it as the plan asks (--overlap-grad-reduce), so the reduction overlaps
    # the backward at every stage, at the price of a second reduce bucket (bucket_bytes)
    # ZeRO-1 (the pipeline engine allows no more), full checkpointing of each layer
    # (Megatron-DeepSpeed --checkpoint-activations), Megatron's sequence parallelism off
    defaults={"zero": 1, "recompute": 2, "sp": False},
    emitters={"deepspeed": _deepspeed},
    # gradients are 16-bit partitions and are reduced in the model's dtype
    # (communication_data_type defaults to it: deepspeed/runtime/engine.py @ edaa72212)
    grad_bytes_fixed=HALF,
    # --ds-sequence-parallel-size is DeepSpeed-Ulysses: all-to-all over the heads
    # (Jacobs et al. 2023; deepspeed/sequence/layer.py @ edaa72212 DistributedAttention),
    # priced by formulas/context.py with c_a = cp; there is no ring or hierarchical form
    cp_kinds=(ContextKind.ALL_TO_ALL,),
    # moe: AutoEP with ep > 1 brings the all-to-all's split sizes to the host ("share a single
    # device-to-host sync": module_inject/auto_ep_layer.py _split_plan_from_expert_counts,
    # `.cpu().tolist()` @ edaa72212); with ep = 1 it keeps the counts on the device
    moe_forward_sync="ep",
    ep_needs_pure_dp=True,  # moe: AutoEP with tp = pp = cp = 1 (DS_MOE.MOE_RULES)
)
