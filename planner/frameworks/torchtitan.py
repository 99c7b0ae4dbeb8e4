"""torchtitan (PyTorch-native training: FSDP2, DTensor TP, torch.distributed.pipelining): what
plan3d knows of it.

Conventions follow pytorch/torchtitan @ 000204a (2025) and PyTorch's FSDP2 (`fully_shard`) and
pipelining as of torch 2.8–2.9.

What it runs (torchtitan/distributed/parallel_dims.py, models/llama3/infra/parallelize.py):
- FSDP2 over the data-parallel ranks (ZeRO-3; `fsdp_reshard_after_forward = "never"` keeps the
  gathered weights from forward to backward, ZeRO-2-like), or DDP (ZeRO-0) only without
  TP/PP/CP ("DDP has not supported > 1D parallelism"); no optimizer-only sharding (ZeRO-1);
- pipeline schedules GPipe, 1F1B, Interleaved1F1B, and the V-shaped ZBVZeroBubble and DualPipeV
  (two stages per rank); its InterleavedZeroBubble is not modelled;
- the layers split into stages of `pipeline_parallel_layers_per_stage`, the embedding and the
  output weighed as a layer each, so pp·vpp may reach L + 2.

Memory: FSDP2 with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) keeps fp32 sharded
parameters, fp32 sharded gradients and fp32 Adam m, v: 16 B/param over the FSDP group, no
separate 16-bit copy; the gathered 16-bit weights of the layer being computed and of the one
prefetched are transient. Activations are what eager PyTorch autograd saves, with per-op
selective checkpointing for "selective"; the loss upcasts the logits to fp32.
"""

from __future__ import annotations

import math

from ..errors import PlanError
from ..formulas.choices import Attention, ContextKind, Precision, Recompute, Schedule, ZeroStage
from ..rules import Rule
from ..schema import ModelSpec, PlanConfig
from ..tomltext import toml_tables
from .base import (
    ActivationStyle,
    EmitResult,
    Framework,
    LossKind,
    MemoryConventions,
    ModelStates,
    common_notes,
    interleaved,
    off_act,
    off_opt,
    off_params,
    offload_refusal,
)

RELEASE = (
    "pytorch/torchtitan TOML job config: torchtitan/config/job_config.py @ 000204a "
    "([training] local_batch_size/global_batch_size/seq_len, [parallelism] "
    "fsdp_reshard_after_forward, pipeline_parallel_layers_per_stage, "
    "pipeline_parallel_microbatch_size), models/llama3/infra/parallelize.py @ 018740b "
    "(reshard policy; DDP only without TP/PP/CP), distributed/pipeline_parallel.py @ 02ef790 "
    "(stage count = ceil((layers + 2) / layers_per_stage)); section layout of "
    "models/llama3/train_configs/llama3_70b.toml @ 038d5fd.")

FP32 = 4  # bytes
ADAM_MOMENTS = 8  # Adam m and v in fp32


def model_states(zero: ZeroStage, grad_bytes: float) -> ModelStates:
    """FSDP2 (ZeRO-2/3): fp32 parameters, fp32 gradients (they take the sharded parameter's dtype,
    whatever the reduce dtype) and Adam's m, v, all sharded: 16 B/param over d. DDP (ZeRO-0): the
    same 16 B/param on every rank."""
    sharded = zero >= ZeroStage.GRADIENTS
    return ModelStates(FP32, sharded, FP32, sharded, ADAM_MOMENTS, sharded,
                       source="torch.distributed.fsdp fully_shard + torchtitan parallelize.py")


def _zero_supported(m, c):
    # ZeRO-1 has no FSDP2 form; DDP only as the one parallelism
    return (c.zero != 1) & ((c.zero != 0) | ((c.tp == 1) & (c.pp == 1) & (c.cp == 1)))


RULES = (
    # its language models (llama3, qwen3, deepseek_v3, gpt_oss, kimi_k2_7) share
    # torchtitan/models/common/feed_forward.py, a gated SwiGLU MLP; GELU appears only in flux and
    # vision encoders (@ b5bcd76). plan3d's eager and SAC activation sets assume the gated MLP.
    Rule("a gated (SwiGLU) MLP, as torchtitan's language models have",
         lambda m, c: (c.pp > 0) & (m.n_mlp_matrices == 3),  # shaped as the layouts
         lambda m, c: f"torchtitan: its language models have a gated (SwiGLU) MLP, {m.name} a "
                      f"plain one ({m.mlp.value}); plan3d's torchtitan activation model assumes the "
                      "gated one: use --framework megatron or deepspeed"),
    Rule("no expert parallelism (ep = etp = 1)",
         lambda m, c: (getattr(c, "ep", 1) == 1) & (getattr(c, "etp", 1) == 1),
         lambda m, c: "torchtitan: it runs expert parallelism (parallel_dims ep), but plan3d does "
                      "not model its FSDP of the experts nor write its settings yet; use --ep 1 "
                      "or --framework megatron"),
    Rule("ZeRO-2/3 as FSDP2, or ZeRO-0 (DDP) with no TP, PP or CP; no ZeRO-1",
         _zero_supported,
         lambda m, c: ("torchtitan: FSDP2 shards gradients with the optimizer state, so ZeRO-1 "
                       "cannot be expressed; use --zero 2 or 3" if c.zero == 1 else
                       "torchtitan: DDP (ZeRO-0) runs only without TP, PP or CP; use --zero 2 "
                       "or 3")),
    Rule("pp·vpp ≤ layers + 2 (the embedding and the output weigh as a layer each in the "
         "stage split)",
         lambda m, c: c.pp * c.vpp <= m.n_layers + 2,
         lambda m, c: f"torchtitan: pp·vpp = {c.pp * c.vpp} stages exceed the {m.n_layers} "
                      f"layers of {m.name} plus the embedding and the output"),
    Rule("bf16 or fp8 compute (no fp16 mixed precision)",
         lambda m, c: c.fp16 == 0,
         lambda m, c: "torchtitan: fp16 is not offered (mixed_precision_param is bfloat16 or "
                      "float32); use --precision bf16"),
    # HSDP is FSDP2 on a 2-D mesh (dp_replicate, dp_shard): docs/fsdp.md, parallel_dims.py
    Rule("hybrid sharding (dp_shard < dp) with FSDP2 (ZeRO-2/3)",
         lambda m, c: (getattr(c, "dp_shard", c.dp) == c.dp) | (c.zero >= 2),
         lambda m, c: "torchtitan: HSDP is FSDP2 over data_parallel_shard_degree with "
                      "data_parallel_replicate_degree replicas; it needs --zero 2 or 3"),
)

OFFLOAD_RULES = (
    # offload: training.enable_cpu_offload "CPU offloading of parameters, gradients, and optimizer
    # states in FSDP" (config/configs.py l.70 @ b5bcd76) → fully_shard(offload_policy=
    # CPUOffloadPolicy()) (distributed/fsdp.py l.231): all three states together, FSDP2 only
    Rule("offload is FSDP2's CPUOffloadPolicy: parameters, gradients and optimizer states "
         "together (no optimizer-only offload)",
         lambda m, c: (off_opt(c) == 0) | (off_params(c) == 1),
         lambda m, c: "torchtitan: training.enable_cpu_offload moves parameters, gradients and "
                      "optimizer states together; use --offload-params (with "
                      "--offload-optimizer 1) or --framework megatron/deepspeed"),
    Rule("parameter offload with FSDP2 (ZeRO-2/3)",
         lambda m, c: (off_params(c) == 0) | (c.zero >= 2),
         lambda m, c: "torchtitan: CPU offload is an FSDP2 policy; use --zero 2 or 3"),
    Rule("no activation offload",
         lambda m, c: off_act(c) == 0,
         lambda m, c: "torchtitan: its trainer has no activation offload to host memory (only "
                      "the experimental graph_trainer does); use --framework megatron"),
)
"""What torchtitan offloads to host memory (offload)."""


_TITAN_SCHEDULES = {
    Schedule.GPIPE: "GPipe",
    Schedule.ONE_F_ONE_B: "1F1B",
    Schedule.INTERLEAVED: "Interleaved1F1B",
    Schedule.ZBV: "ZBVZeroBubble",
    Schedule.DUALPIPEV: "DualPipeV",
}
V_SCHEDULES = (Schedule.ZBV, Schedule.DUALPIPEV)
"""torchtitan's V-shaped schedules run exactly two stages per rank (pipeline_parallel.py @ b5bcd76
l.550-569)."""


def _titan_split(n_layers: int, stages: int) -> tuple[int, int, int] | None:
    """(layers_per_stage, first_less, last_less) that make torchtitan build exactly `stages`
    stages. torchtitan weighs the embedding and the output as `first_less`/`last_less` layers
    (pipeline_parallel_first/last_stage_less_layers, default 1 each) and builds
    ceil((n_layers + first_less + last_less) / layers_per_stage) stages. The defaults come first,
    then (0, 0), which is the plan's even split; None when nothing gives `stages`."""
    for first, last in ((1, 1), (0, 0), (1, 0), (0, 1)):
        weighted = n_layers + first + last
        per_stage = math.ceil(weighted / stages)
        if math.ceil(weighted / per_stage) == stages:
            return per_stage, first, last
    return None


def _torchtitan(c: PlanConfig, m: ModelSpec) -> EmitResult:
    """torchtitan TOML sections: [model], [training], [parallelism], [activation_checkpoint]."""
    fw = "torchtitan"
    notes = common_notes(c, m)
    if c.precision is Precision.FP16:
        raise PlanError(f"{fw}: fp16 is not offered (training.mixed_precision_param is bfloat16 "
                        "or float32)")
    if c.zero_stage is ZeroStage.OPTIMIZER:
        raise PlanError(
            f"{fw}: ZeRO-1 cannot be expressed (FSDP2 always shards gradients with the optimizer "
            "state); re-plan with zero_stage 2 (fsdp_reshard_after_forward = never), 3, or 0")
    if c.zero_stage is ZeroStage.NONE and (c.tp > 1 or c.pp > 1 or c.cp > 1):
        raise PlanError(f"{fw}: ZeRO-0 (DDP) is only supported without TP/PP/CP ('DDP has not "
                        "supported > 1D parallelism'); re-plan with zero_stage 2 or 3")
    if c.cp > 1 and c.cp_kind not in (None, ContextKind.RING):  # cp-kind
        raise PlanError(f"{fw}: context parallelism is ring attention only (PyTorch's "
                        f"context_parallel); the plan's {c.cp_kind.value} kind cannot be written "
                        "(context_parallel_rotate_method alltoall only changes how the ring "
                        "passes K/V); re-plan with --cp-kind ring or --framework megatron")
    divisor = c.tp * (2 * c.cp if c.cp > 1 else 1)
    if c.seq_len % divisor:
        raise PlanError(f"{fw}: seq_len {c.seq_len} must be a multiple of tp·2·cp = {divisor}")

    if c.zero_stage is ZeroStage.NONE and c.dp_replicate > 1:
        raise PlanError(f"{fw}: HSDP (dp_shard {c.dp_shard} < dp {c.dp}) is FSDP2 on a 2-D mesh; "
                        "re-plan with zero_stage 2 or 3")
    parallelism: dict[str, object] = {}
    if c.zero_stage is ZeroStage.NONE:
        parallelism["data_parallel_replicate_degree"] = c.dp
        parallelism["data_parallel_shard_degree"] = 1
    else:
        # HSDP: FSDP2 inside data_parallel_shard_degree ranks, replicated across the rest
        parallelism["data_parallel_replicate_degree"] = c.dp_replicate
        parallelism["data_parallel_shard_degree"] = c.dp // c.dp_replicate
        if c.dp_replicate > 1:
            notes.append(f"HSDP: FSDP2 shards over dp_shard·cp = {c.dp // c.dp_replicate}·{c.cp} "
                         f"ranks and all-reduces the gradient shards across "
                         f"{c.dp_replicate} replicas (mesh [\"pp\", \"dp_replicate\", "
                         "\"dp_shard\", \"cp\", \"tp\"]).")
        if c.zero_stage is ZeroStage.GRADIENTS:
            parallelism["fsdp_reshard_after_forward"] = "never"
            notes.append("ZeRO-2 is FSDP2 with reshard_after_forward off: weights stay gathered "
                         "from forward to backward, gradients and optimizer state are sharded.")
        else:
            if c.pp > 1:
                # the stage stays gathered across micro-batches, as the plan was costed
                parallelism["fsdp_reshard_after_forward"] = "default"
                notes.append("ZeRO-3 under PP is FSDP2 with the 'default' reshard policy, which "
                             "keeps each stage's weights gathered across its micro-batches (no "
                             "all-gather per micro-batch); gradients accumulate unsharded until "
                             "the last micro-batch, as plan3d sized it.")
            else:
                parallelism["fsdp_reshard_after_forward"] = "always"
                notes.append("ZeRO-3 is FSDP2 resharding after every forward ('always').")
    parallelism["tensor_parallel_degree"] = c.tp
    parallelism["pipeline_parallel_degree"] = c.pp
    parallelism["context_parallel_degree"] = c.cp

    training: dict[str, object] = {"seq_len": c.seq_len}
    if c.pp > 1:
        stages = c.pp * (2 if c.schedule in V_SCHEDULES else c.vpp)
        schedule = Schedule.ONE_F_ONE_B if c.schedule is Schedule.INTERLEAVED else c.schedule
        if interleaved(c):
            schedule = Schedule.INTERLEAVED
        parallelism["pipeline_parallel_schedule"] = _TITAN_SCHEDULES[schedule]
        split = _titan_split(m.n_layers, stages)
        if split is None and c.vpp > 2:
            raise PlanError(f"{fw}: no pipeline_parallel_layers_per_stage gives {stages} stages "
                            f"for {m.n_layers} layers")
        if split is None:
            notes.append(f"pipeline_parallel_layers_per_stage is left unset: torchtitan's default "
                         f"of {c.vpp} stage(s) per rank for this schedule is the plan's split.")
        else:
            per_stage, first, last = split
            parallelism["pipeline_parallel_layers_per_stage"] = per_stage
            if (first, last) != (1, 1):
                parallelism["pipeline_parallel_first_stage_less_layers"] = first
                parallelism["pipeline_parallel_last_stage_less_layers"] = last
                notes.append(
                    "pipeline_parallel_first/last_stage_less_layers need a torchtitan recent "
                    "enough to have them (older releases count the embedding and output as one "
                    "layer each, and no layers_per_stage gives this stage count there).")
            if (first, last) == (0, 0) and m.n_layers % stages == 0:
                notes.append(f"pipeline_parallel_layers_per_stage = {per_stage} gives the plan's "
                             f"{stages} stages of {per_stage} layers.")
            else:
                notes.append(
                    f"pipeline_parallel_layers_per_stage = {per_stage} gives {stages} stages "
                    f"(ceil(({m.n_layers} + {first} + {last}) / {per_stage})); torchtitan counts "
                    f"the embedding and the output as {first} and {last} layer(s) when it spreads "
                    f"the {m.n_layers} layers, so stages differ from the plan's even "
                    f"{m.n_layers / stages:g} layers by about one.")
        parallelism["pipeline_parallel_microbatch_size"] = c.mbs
        training["local_batch_size"] = c.mbs * c.n_micro
        notes.append(f"With PP the n_micro = {c.n_micro} micro-batches are carved out of "
                     "local_batch_size by pipeline_parallel_microbatch_size; no extra gradient "
                     "accumulation.")
    else:
        training["local_batch_size"] = c.mbs
        if c.n_micro > 1:
            notes.append(f"global_batch_size / (local_batch_size·dp) = {c.n_micro} gradient "
                         "accumulation steps.")
    training["global_batch_size"] = c.gbs
    if c.offload:  # offload: FSDP2 CPUOffloadPolicy
        offload_refusal(fw, c, m, OFFLOAD_RULES)
        training["enable_cpu_offload"] = True
        notes.append("training.enable_cpu_offload: FSDP2's CPUOffloadPolicy keeps the sharded "
                     "fp32 parameters, gradients and Adam states in pinned host memory and runs "
                     "the optimizer step on the CPU (torchtitan/distributed/fsdp.py @ b5bcd76).")
    training["mixed_precision_param"] = "bfloat16"
    training["mixed_precision_reduce"] = "float32"
    if c.grad_dtype == "bf16":
        notes.append("torchtitan reduces gradients in float32 only (mixed_precision_reduce); the "
                     "plan's bf16 gradients cannot be expressed, so gradient traffic and the "
                     "sharded gradients are twice the plan's.")

    ac: dict[str, object] = {"mode": c.recompute.value}
    if c.recompute is Recompute.SELECTIVE:
        ac["selective_ac_option"] = "op"
        notes.append("Selective maps to per-op SAC ('op'): it saves matmul and attention outputs "
                     "but recomputes pointwise ops and every second matmul, so memory is at or "
                     "below the plan's and recompute time above it.")

    sections: dict[str, dict[str, object]] = {}
    if c.precision is Precision.FP8:
        sections["model"] = {"converters": ["float8"]}
        notes.append("FP8 uses torchao Float8Linear via model.converters = [\"float8\"]; the "
                     "scaling recipe lives in [float8] (newer releases: "
                     "[quantize.linear.float8]) recipe_name.")
    sections["training"] = training
    sections["parallelism"] = parallelism
    sections["activation_checkpoint"] = ac

    if c.tp > 1 and not c.sequence_parallel:
        notes.append("torchtitan's TP always shards norms and residuals over the sequence "
                     "(sequence parallel); activations are smaller than the plan's.")
    if c.attention is Attention.CLASSIC:
        notes.append("torchtitan's Llama uses SDPA/flex attention (no stored score matrix); the "
                     "plan's classic attention is an over-estimate here.")
    if c.overlap_grad_reduce is False:
        notes.append("FSDP2 always overlaps its collectives with compute; that cannot be "
                     "switched off.")
    notes.append("Older torchtitan (before mid-2025) names training.local_batch_size "
                 "training.batch_size and has no training.global_batch_size.")
    header = ("# torchtitan job-config sections written by plan3d; merge into your "
              "train_configs/*.toml\n"
              f"# plan: dp{c.dp} tp{c.tp} pp{c.pp} vpp{c.vpp} cp{c.cp}, model {m.name} (set "
              "[model] name/flavor to match)\n")
    return EmitResult(fw, "toml", header + toml_tables(sections), RELEASE, notes)


FRAMEWORK = Framework(
    name="torchtitan",
    title="torchtitan (FSDP2, DTensor TP, torch.distributed.pipelining)",
    release=RELEASE,
    zero_stages=(ZeroStage.NONE, ZeroStage.GRADIENTS, ZeroStage.PARAMETERS),
    schedules=(Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED, *V_SCHEDULES),
    rules=RULES + OFFLOAD_RULES,
    memory=MemoryConventions(
        states=model_states, activations=ActivationStyle.EAGER, loss=LossKind.FP32_UPCAST,
        gathered_layers=2, reduce_buffer_layers=1, zero2_keeps_weights_gathered=True,
        head_unsharded=True, pp_unsharded=(2.0, 4.0)),
    stage_split="chunks",
    extra_stage_units=2,
    emitters={"torchtitan": _torchtitan},
    grad_bytes_fixed=FP32,
    # the device mesh ["pp", "dp_replicate", "dp_shard", "cp", "tp"] varies tp fastest, then cp,
    # then dp, then pp (parallel_dims.py @ b5bcd76): Megatron's order
    rank_order=("tp", "cp", "dp", "pp"),
    # DTensor TP runs its collectives in line (async TP needs torch.compile and is off by
    # default: config_registry.py @ b5bcd76, enabled for 405B only)
    tp_backward_overlap=False,
    # FSDP2 under PP: reshard_after_forward off and gradient sync only on the last micro-batch
    # (torch.distributed.pipelining stage.py backward_maybe_with_nosync)
    fsdp_once_per_step_under_pp=True,
    # FSDP2 (ZeRO-3), per-op selective AC (llama3_8b; the 70B/405B configs use full), and TP
    # always sequence-parallel (config_registry.py, parallelize.py @ b5bcd76)
    defaults={"zero": 3, "recompute": 1, "sp": True},
    # cp-kind: PyTorch's context_parallel (torch.distributed.tensor.experimental._attention) is
    # ring attention only; torchtitan's context_parallel_rotate_method "allgather" | "alltoall"
    # (config/job_config.py @ 000204a l.336-342) is how the ring passes the K/V shards, not a
    # head-splitting all-to-all (Ulysses): it is priced as the ring
    cp_kinds=(ContextKind.RING,),
)
