"""What a training framework is to plan3d: the plans it runs, how it lays memory out, what it
overlaps, and the launch settings it reads — one `Framework` value per framework module.

A framework chooses terms and constants for the cost model (`planner.cost`); it never holds a copy
of a formula. Its rules are `planner.rules.Rule`s, evaluated on one layout (explain) or on arrays of
layouts (the search), like the rules every framework shares."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from ..errors import PlanError
from ..formulas import collectives as K
from ..formulas.choices import ContextKind, Precision, QuantRecipe, Schedule, ZeroStage
from ..formulas.pipeline import SPLIT_BACKWARD
from ..placement import MEGATRON_RANK_ORDER
from ..rules import Rule, layout
from ..schema import ModelSpec, PlanConfig


class LossKind(str, Enum):
    """How the framework computes the cross-entropy over the vocabulary (what is alive at the
    loss: see formulas.activations)."""

    VOCAB_PARALLEL = "vocab-parallel"
    """Megatron-Core's fused vocab-parallel cross entropy on 16-bit logits sharded over tp."""
    FP32_UPCAST = "fp32-upcast"
    """`cross_entropy(logits.float())` in eager PyTorch (torchtitan), sharded over tp only with
    loss parallelism."""


class ActivationStyle(str, Enum):
    """What a transformer layer saves for the backward pass."""

    FUSED = "fused"
    """Transformer Engine's fused kernels (Megatron-Core): Korthikanti et al. 2022's terms."""
    EAGER = "eager"
    """Eager PyTorch modules (torchtitan's Llama): what autograd saves op by op, and per-op
    selective checkpointing for 'selective'."""


@dataclass(frozen=True)
class ModelStates:
    """Bytes per parameter of each persistent model state, and whether the data-parallel sharding
    (ZeRO / FSDP) divides it over the d = dp·cp ranks."""

    weight_bytes: float
    weight_sharded: bool
    grad_bytes: float
    grad_sharded: bool
    optimizer_bytes: float
    optimizer_sharded: bool
    source: str = ""
    checkpoint_bytes: float | None = None
    """goodput: bytes per parameter the framework's checkpoint writes (its weights and optimizer
    state, each parameter once); None: weight_bytes + optimizer_bytes."""

    @property
    def saved_bytes(self) -> float:
        return (self.weight_bytes + self.optimizer_bytes if self.checkpoint_bytes is None
                else self.checkpoint_bytes)


@dataclass(frozen=True)
class MemoryConventions:
    """How a framework lays a GPU's memory out, beyond the model states.

    states: (zero stage, gradient bytes the plan asks for[, moment_bytes: Adam's m and v bytes
        each, given only where the plan keeps them below fp32 (Megatron)]) → ModelStates.
    activations / loss: which formulas describe the saved activations and the loss.
    gathered_layers: under ZeRO-3, whole (unsharded, 16-bit) layers alive at once: the one being
        computed and those prefetched.
    reduce_buffer_layers: under ZeRO-3, layers' reduce-scatter inputs (in the gradient dtype)
        alive in the backward.
    zero2_keeps_weights_gathered: ZeRO-2 is sharded weights kept gathered from forward to
        backward (FSDP2's reshard_after_forward=False), so the stage's 16-bit weights are held
        unsharded on top of the sharded states.
    head_unsharded: under ZeRO-3, the embedding and the output layer stay gathered through the
        step (they sit in the root FSDP unit, which does not reshard after forward).
    pp_unsharded: under ZeRO-3 with pp > 1, (weight, gradient) bytes per parameter of the stage
        held unsharded across the micro-batches of a step (gradient sync off until the last one).
    quantized_weight_cache: 1 when an fp8/nvfp4 plan caches quantised copies of the linear
        weights across micro-batches (Transformer Engine; their bytes per parameter come from the
        recipe and the GPU: formulas.quantization.weight_copy_bytes_per_param).
    fp8_saves_linear_inputs: 1 when an fp8 plan keeps linear layers' saved inputs quantised.
    default_fp8_recipe: the recipe an fp8 plan runs when not told.
    bucket_bytes: fixed communication buckets the framework allocates (bytes), by ZeRO stage.
    fragmentation: the caching allocator's reserved-over-allocated excess, as a fraction of the
        allocated bytes (None: the hardware profile's figure).
    """

    states: Callable[..., ModelStates]
    activations: ActivationStyle
    loss: LossKind
    gathered_layers: int = 2
    reduce_buffer_layers: int = 0
    zero2_keeps_weights_gathered: bool = False
    head_unsharded: bool = False
    pp_unsharded: tuple[float, float] = (0.0, 0.0)
    quantized_weight_cache: int = 0
    fp8_saves_linear_inputs: int = 0
    default_fp8_recipe: QuantRecipe = QuantRecipe.CURRENT
    searches_partitioned_checkpoints: int = 0
    """fit: 1 when the search weighs splitting full recompute's checkpointed inputs over the tp
    ranks (DeepSpeed activation_checkpointing.partition_activations) by itself, for the
    candidates without sequence parallelism that do not fit without it (search/recompute.py
    partitioned_checkpoint_variants); 0: only when asked (--distribute-saved-activations)."""
    host_checkpoints: int = 0
    """fit: 1 when the framework's activation offload is moving full recompute's checkpointed
    inputs to host memory (DeepSpeed activation_checkpointing.cpu_checkpointing): offload_activations
    then covers every checkpoint of the stage, with DeepSpeed's copy timing
    (formulas.recompute.cpu_checkpoint_exposed_s)."""
    bucket_bytes: Callable[[ZeroStage], float] = lambda z: 0.0
    fragmentation: float | None = None
    communicators: tuple[str, ...] = ("world",)
    """fit: the process groups the framework runs collectives on beside the parallel ones (tp,
    cp, the data-parallel shard group and replicas, the expert-data-parallel group), each one NCCL
    communicator with its buffers (model/runtime.py framework_groups: "world",
    "model_parallel", "embedding")."""
    te_workspaces: int = 0
    """fit: Transformer Engine cuBLAS workspaces the framework's GEMMs keep (formulas/runtime.py),
    beside PyTorch's own."""
    host_grad_bytes: float = 0.0
    offload_grads_from_zero: int = 4
    """offload: from this ZeRO stage on, optimizer offload also moves the gradient partition to
    the host, accumulated there micro-batch by micro-batch (DeepSpeed ZeRO-2/3; 4: never)."""
    """offload: bytes per offloaded parameter of the host gradient buffer the CPU optimizer reads,
    beyond its optimizer state (Megatron: an fp32 copy; DeepSpeed counts it in the state)."""


class DPPhase(NamedTuple):
    """How a framework runs one phase of its data-parallel collectives beside compute
    (formulas.overlap.pipelined_exposed_s): in `pieces` equal pieces (buckets, blocks, modules,
    pipeline chunks) beside `window_s` seconds of compute, and, for a weight gather, how many
    pipeline stages' gathers run one after another in the warm-up (`inline_stages`, 1: none
    beyond the first's; formulas.overlap.inline_gathers_s)."""

    pieces: object
    window_s: object
    inline_stages: object = 1


class DPPiecePhase(NamedTuple):
    """A DPPhase whose exposed piece is not the phase's seconds over `pieces`: `exposed_s`
    seconds wait with nothing beside them (formulas.overlap.exposed_piece_s) — DeepSpeed
    ZeRO-3's last reduce bucket beside the backward's gathers, fetched ahead."""

    pieces: object
    window_s: object
    exposed_s: object


def generic_step_phases(w):
    """Each collective in the pieces it is issued in (w.reduce_calls, w.gather_calls), the
    reduction beside the last micro-batch's backward and the gather beside the first
    forward, when the plan overlaps them (w.overlap)."""
    return (DPPhase(w.reduce_calls, w.overlap * w.bwd_s),
            DPPhase(w.gather_calls, w.overlap * w.fwd_s))


def generic_microbatch_phases(w):
    """ZeRO-2/3's per-micro-batch collectives in the pieces they are issued in: the forward's
    gathers beside the forward, the backward's gathers and reduce-scatters beside the
    backward (prefetched and bucketed whatever the plan's overlap flag)."""
    return (DPPhase(w.fwd_calls, w.fwd_s), DPPhase(w.bwd_calls, w.bwd_s))


def megatron_dp_calls(per_layer, buf, layers, params, dp_ranks, overlap, linear_modules,
                      chunks=1):
    """Megatron-Core: every data-parallel collective runs bucket by bucket,
    ⌈Ψ / max(4·10⁷, 10⁶·d)⌉ buckets with overlap, one without (K.megatron_buckets). With v > 1
    model chunks (an interleaved pipeline) each chunk is its own DDP module with its own buffer,
    and only the first chunk is cut into buckets (disable_bucketing for chunk_idx > 0,
    megatron/training/training.py @ d98e8a64dd): ⌈(Ψ/v) / bucket⌉ + (v − 1) calls on the
    first pipeline stage, the one modelled (later stages keep one bucket per chunk: v); v without
    overlap. v = 1 gives the buckets above. Equal chunks assumed.

    Megatron-FSDP's per-micro-batch ZeRO-3 gathers and reduce-scatters (`per_layer`) run one
    coalesced collective per TransformerLayer and kind, its local experts one more over the
    expert data-parallel group, whatever the bucket size (the FSDP units:
    megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py's per-unit
    buckets, l.1860-1957 @ d98e8a64dd): `layers` calls (every layer's experts taken as
    one unit, as FSDP2's blocks are)."""
    if per_layer:
        return layers
    return K.megatron_buckets(params / chunks, dp_ranks, overlap) + chunks - 1


@dataclass(frozen=True)
class Framework:
    """One training framework, as plan3d knows it.

    name: the `--framework` value. release: which release and source its conventions follow.
    zero_stages / schedules: what it runs. rules: what else it requires of a layout (on top of
    constraints.RULES; each Rule's predicate also reads the layout's `zero`). memory: its memory
    conventions. stage_split: "flexible" when the fullest GPU holds ⌈L/p⌉ layers (an explicit
    pipeline layout), "chunks" when each of its v chunks holds ⌈L/(p·v)⌉. extra_stage_units:
    how many non-transformer pieces (embedding, loss) may stand as pipeline chunks of their own,
    so pp·vpp may reach L + extra_stage_units. emitters: launch-settings formats it writes.
    grad_bytes_fixed: the gradient dtype's bytes when the framework does not let the plan choose
    (torchtitan reduces and keeps gradients in fp32)."""

    name: str
    title: str
    release: str
    zero_stages: tuple[ZeroStage, ...]
    schedules: tuple[Schedule, ...]
    rules: tuple[Rule, ...]
    memory: MemoryConventions
    stage_split: str = "chunks"
    split_end_slots: int = 0
    """Layer slots the embedding and the output each weigh in the pipeline split where pp·vpp
    does not divide the layers (torchtitan: 1, `_generate_llm_fqn_per_model_part`'s
    input_weight and output_weight @ 0.3.0); 0 where the split spreads the layers alone."""
    extra_stage_units: int = 0
    emitters: dict[str, Callable[[PlanConfig, ModelSpec], EmitResult]] = field(
        default_factory=dict, hash=False, compare=False)
    notes: tuple[str, ...] = ()
    grad_bytes_fixed: float | None = None
    rank_order: tuple[str, ...] = MEGATRON_RANK_ORDER
    """How the framework orders ranks, fastest-varying first (planner.placement)."""
    tp_backward_overlap: bool = True
    """The backward's tensor-parallel collectives run under the weight-gradient GEMMs."""
    dp_step_phases: Callable = field(default=generic_step_phases, hash=False, compare=False)
    """How its once-per-step gradient reduction and weight gather overlap compute: w (the
    stage's forward and backward of one micro-batch fwd_s, bwd_s; p, v; the plan's overlap; the
    calls of each) → (reduce DPPhase, gather DPPhase) (issue 22)."""
    dp_microbatch_phases: Callable = field(default=generic_microbatch_phases, hash=False,
                                           compare=False)
    """How its ZeRO-2/3 per-micro-batch collectives overlap compute: w → (forward DPPhase,
    backward DPPhase) (issue 22)."""
    cp_kinds: tuple[ContextKind, ...] = (ContextKind.RING,)
    """cp-kind: the context-parallel kinds it runs, its default (a plan's cp_kind None) first."""
    dp_calls: Callable = field(default=megatron_dp_calls, hash=False, compare=False)
    """How many collectives the framework issues for one data-parallel reduction or gather —
    (1 for ZeRO-3's per-micro-batch collectives, "grad"/"weight", stage layers, parameters, d
    ranks, overlap, linear modules per layer, model chunks v) → calls — so that each pays its
    own latency at its own message size (issue 22)."""
    zero3_gathers: Callable | None = None
    """ZeRO-3's per-micro-batch gathers when the framework does not gather every parameter
    twice in equal calls (dp_calls): (gathered parameters Ψ, modules) → ((forward calls,
    forward parameters), (backward calls, backward parameters)) (DeepSpeed's prefetch trace:
    formulas/zero3.py)."""
    trains_mtp: bool = False
    """moe: whether it trains a model's multi-token-prediction modules (Megatron-Core's
    --mtp-num-layers; formulas/moe_mtp.py)."""
    expert_gemm_streams: int = 0
    """moe: how the framework runs a grouped expert GEMM: 0, one grouped kernel over every local
    expert (torch._grouped_mm, in 16 bits at the profile's measured share for it where it has
    one, efficiency.grouped_mm_16); n > 0, one GEMM per local expert spread over n CUDA streams
    (Transformer Engine's GroupedLinear: formulas.moe_step.grouped_gemm_launches and
    formulas.moe.concurrent_experts)."""
    fp8_expert_gemms: bool = True
    """moe: whether its FP8 recipe runs the routed experts' grouped GEMMs in FP8; False where
    only linear layers are converted and the experts' GEMMs stay 16-bit (costed at the 16-bit
    peak and efficiency)."""
    unfused_permute_scatters: bool = False
    """moe: with its permutation fusion off (PlanConfig.moe_permute_fusion False) the framework
    un-permutes by PyTorch's atomic scatter-add (Megatron-Core's moe_utils.unpermute, and
    index_add_ as permute's backward): formulas.moe_layer.atomic_scatter_excess_s."""
    route_weighting: tuple[int, int] | None = None
    """moe: where the framework weighs the routed rows by their scores in a pass of their own
    outside a fused kernel (formulas.moe_layer.score_weighting_bytes), its (fp32, out_passes):
    fp32 1 where it casts the rows to fp32 and back around the multiply, out_passes the
    T-row passes over the output beyond the scatter's write; None where a fused kernel weighs
    them (taken with the un-fused permutation alone: PlanConfig.moe_permute_fusion)."""
    attention_kernel: str = "cudnn"
    """The flash-attention kernel family it runs (schema.AttentionEfficiency): cudnn, fa2 or
    flex; its measured forward and backward shares of the 16-bit peak price the attention
    products where the profile has them (model.numbers.attention_numbers)."""
    ep_needs_pure_dp: bool = False
    """moe: whether it splits the experts only with tp = pp = cp = 1, every GPU a data-parallel
    rank (DeepSpeed's AutoEP: deepspeed_moe.MOE_RULES), so that a global batch smaller than the
    GPUs leaves expert parallelism out (search.alternatives says so)."""
    fused_permutation: bool = True
    """moe: whether the framework has a fused token permutation that PlanConfig.moe_permute_fusion
    turns on; without one (torchtitan) its un-permutation always scatter-adds."""
    moe_forward_sync: str = "none"
    """moe: where the host waits for the device in an MoE layer's forward, to read the routed
    token counts as Python numbers, so that the layer's forward runs from an empty launch queue
    (formulas/host.py): "always" (every MoE layer), "ep" (with ep > 1 only: the all-to-all's
    split sizes), "none"."""
    op_sac_selective: bool = False
    """Whether "selective" recompute is torchtitan's per-op policy — every second mm, the router
    gate and the grouped expert GEMMs rerun with every unsaved op, the attention product saved
    (formulas.recompute.op_sac_recomputed_weights) — rather than Megatron's core attention."""
    fsdp_once_per_step_under_pp: bool = False
    """Under pp > 1 the ZeRO-2/3 gathers and reduce-scatters run once per step, not per
    micro-batch (the stage stays gathered and gradient sync is off until the last one)."""
    offload_pipelined: bool = False
    """offload: the offloaded optimizer step's gradient copies, CPU step and weight copies run
    concurrently (Megatron --overlap-cpu-optimizer-d2h-h2d), rather than copies under the
    backward, then the CPU step, then the weights back (formulas.offload)."""
    offload_conversion_bytes: int = 0
    """offload: host DRAM bytes per parameter the weights' copy back adds when the host converts
    their dtype first (formulas.offload.host_dram_step_s)."""
    partial_recompute: str = "none"
    """fit: the recompute levels between none and full it runs: "none"; "costed" (the cost model
    prices --recompute-layers — torchtitan's per-layer AC before 114151ad4 — but its emitter and
    the search do not offer it); "searched" (Megatron's block method and --recompute-modules:
    emitted, and tried by the search)."""
    defaults: dict = field(default_factory=lambda: {"zero": 1, "recompute": 1, "sp": True},
                           hash=False, compare=False)
    """What the framework runs when not told otherwise (ranking.preference orders ties by it):
    zero stage, recompute (index in Recompute), sequence parallelism with tp > 1."""

    def grad_bytes(self, requested: float) -> float:
        """Bytes per gradient element as the framework keeps and reduces them: the plan's
        --grad-dtype, unless the framework fixes it (grad_bytes_fixed)."""
        return requested if self.grad_bytes_fixed is None else self.grad_bytes_fixed

    def schedule_rule(self) -> Rule:
        """The pipeline schedules it runs, as a rule (with pp = 1 there is no schedule)."""
        names = ", ".join(s.value for s in self.schedules)

        def holds(m, c):
            return (c.pp == 1) | (getattr(c, "schedule", Schedule.ONE_F_ONE_B) in self.schedules)

        def message(m, c):
            runners = [f.name for f in FRAMEWORKS.values() if c.schedule in f.schedules]
            where = (f", or --framework {' or '.join(runners)}, which runs it" if runners else
                     " (no framework plan3d models runs it)")
            return (f"{self.name}: there is no {c.schedule.value} schedule in {self.name} "
                    f"(it runs {names}); choose one of them{where}")

        return Rule(f"pipeline schedules: {names}", holds, message)

    def cp_kind_rule(self) -> Rule:
        """cp-kind: the context-parallel kinds it runs, as a rule on the layout's all-to-all
        group c_a (1: the ring; cp: all-to-all; between: hierarchical), for cp > 1."""
        kinds = set(self.cp_kinds)
        names = ", ".join(CP_KIND_FLAGS[k] for k in self.cp_kinds)

        def holds(m, c):
            if len(kinds) == len(ContextKind):  # every kind: nothing to rule out
                return True
            c_a = getattr(c, "cp_a2a", 1)
            ring = c_a == 1
            a2a = c_a == c.cp
            ok = c.cp == 1
            if ContextKind.RING in kinds:
                ok = ok | ring
            if ContextKind.ALL_TO_ALL in kinds:
                ok = ok | a2a
            if ContextKind.HIERARCHICAL in kinds:
                ok = ok | (~ring & ~a2a if hasattr(ring, "shape") else not (ring or a2a))
            return ok

        def message(m, c):
            return (f"{self.name}: runs context parallelism as {names} only "
                    f"({CP_KIND_REASONS.get(self.name, '')}); give --cp-kind "
                    f"{CP_KIND_FLAGS[self.cp_kinds[0]]}, or a framework that runs the kind "
                    "asked for")

        return Rule(f"context-parallel kinds: {names}", holds, message)

    def all_rules(self) -> tuple[Rule, ...]:
        return (*self.rules, self.schedule_rule(), self.cp_kind_rule())

    def broken(self, model: ModelSpec, layout) -> Rule | None:
        """The first of the framework's own rules one layout breaks, or None."""
        for rule in self.all_rules():
            if not rule.holds(model, layout):
                return rule
        return None

    def admissible(self, model: ModelSpec, layouts):
        """The mask of layouts (arrays) the framework runs."""
        ok = True
        for rule in self.all_rules():
            ok = ok & rule.holds(model, layouts)
        return ok


# --------------------------------------------------------------------------------------------
# Launch settings: what every emitter shares


@dataclass(frozen=True)
class EmitResult:
    """Launch settings for one framework.

    framework: the format's name. format: "args", "yaml", "toml" or "json". text: the settings,
    ready to paste. version_note: which framework revision / document the option names follow.
    notes: what was assumed, approximated, or has to be set elsewhere.
    """

    framework: str
    format: str
    text: str
    version_note: str
    notes: list[str] = field(default_factory=list)


FRAMEWORKS: dict[str, Framework] = {}
"""Every framework plan3d models, by name: filled by the package (planner/frameworks/__init__.py)
once it has imported each framework's module, so that a framework's rule can name the others."""


def context_kind(config):
    """cp-kind: the plan's context-parallel kind, its framework's default (the first of
    Framework.cp_kinds) when the plan names none."""
    return config.cp_kind or FRAMEWORKS[config.framework].cp_kinds[0]


def a2a_ranks(config) -> int:
    """cp-kind: the plan's all-to-all group c_a: 1 for the ring, cp for all-to-all, cp_a2a for the
    hierarchical kind (formulas.context.a2a_group)."""
    from ..formulas.context import a2a_group

    return a2a_group(context_kind(config), config.cp, config.cp_a2a or 1)


def check_plan(fw: str, c: PlanConfig, schedules: tuple[Schedule, ...] = ()) -> None:
    """Reject plans that are inconsistent in themselves, whatever the framework, and plans whose
    schedule the framework (running `schedules`) does not have."""
    if c.gbs != c.mbs * c.n_micro * c.dp:
        raise PlanError(
            f"{fw}: the plan's gbs ({c.gbs}) is not mbs·n_micro·dp "
            f"({c.mbs}·{c.n_micro}·{c.dp} = {c.mbs * c.n_micro * c.dp})")
    if c.vpp > 1 and c.pp == 1:
        raise PlanError(f"{fw}: vpp = {c.vpp} needs pipeline parallelism (pp > 1)")
    if c.vpp > 1 and c.schedule is not Schedule.INTERLEAVED:
        raise PlanError(
            f"{fw}: vpp = {c.vpp} model chunks per GPU needs the interleaved schedule, "
            f"not {c.schedule.value}")
    if c.precision is Precision.FP16 and c.grad_dtype == "bf16":
        raise PlanError(f"{fw}: bf16 gradients with fp16 compute is not a mode any framework has")
    if c.pp > 1 and c.schedule in SPLIT_BACKWARD and c.schedule not in schedules:
        # Megatron-LM and DeepSpeed have no such schedule (ZB-H1/H2 run in
        # sail-sg/zero-bubble-pipeline-parallelism, DualPipe in deepseek-ai/DualPipe)
        raise PlanError(f"{fw}: there is no {c.schedule.value} schedule to launch; plan with "
                        "--schedule 1f1b or interleaved, or a framework that runs it")


def offload_refusal(fw: str, c: PlanConfig, m: ModelSpec, rules: tuple[Rule, ...]) -> None:
    """offload: refuse to write settings for a plan whose offload the framework does not run,
    with the reason of the first of `rules` (the framework's offload rules) it breaks."""
    plan = layout(c, a2a_ranks(c))
    for rule in rules:
        if not rule.holds(m, plan):
            raise PlanError(rule.message(m, plan))


def off_opt(c) -> float:
    """offload: a layout's offloaded optimizer fraction (0 where the layout does not say)."""
    return getattr(c, "off_opt", 0)


def off_params(c) -> int:
    """offload: 1 where a layout's parameters live on the host."""
    return getattr(c, "off_params", 0)


def off_act(c) -> int:
    """offload: layers per GPU whose activations a layout offloads."""
    return getattr(c, "off_act", 0)


def interleaved(c: PlanConfig) -> bool:
    """The plan runs the interleaved schedule with more than one chunk per GPU."""
    return c.pp > 1 and c.vpp > 1


def common_notes(c: PlanConfig, m: ModelSpec) -> list[str]:
    """Notes that hold for every framework."""
    notes = [
        f"Launch on dp·tp·pp·cp = {c.dp}·{c.tp}·{c.pp}·{c.cp} = {c.n_gpus} GPUs; "
        "the data-parallel degree is what is left of the world size.",
    ]
    if c.schedule is Schedule.INTERLEAVED and c.vpp == 1 and c.pp > 1:
        notes.append("The plan says 'interleaved' with vpp = 1, which is plain 1F1B; emitted as "
                     "1F1B.")
    if m.n_experts > 1 and c.ep == 1 and c.etp == 1:
        notes.append(f"{m.name} is a mixture of experts ({m.n_experts} experts, top-{m.top_k}); "
                     "the plan has no expert parallelism, so expert-parallel size stays 1.")
    return notes


def gpipe_note(fw: str, c: PlanConfig, schedule_name: str) -> str | None:
    """A note when the plan asks for GPipe and the framework only runs a 1F1B-style schedule."""
    if c.pp > 1 and c.schedule is Schedule.GPIPE:
        return (f"{fw} has no GPipe (all-forwards-then-all-backwards) schedule; it runs "
                f"{schedule_name}, with the same bubble but at most pp = {c.pp} micro-batches in "
                f"flight instead of n_micro = {c.n_micro}, so peak activation memory is at or "
                "below the plan's.")
    return None


def check_cp_seq(fw: str, c: PlanConfig) -> None:
    """Context parallelism splits each sequence into 2·cp chunks (load-balanced causal)."""
    if c.cp > 1 and c.seq_len % (2 * c.cp):
        raise PlanError(
            f"{fw}: seq_len {c.seq_len} must be a multiple of 2·cp = {2 * c.cp} for context "
            "parallelism")


CP_KIND_FLAGS = {ContextKind.RING: "ring", ContextKind.ALL_TO_ALL: "a2a",
                 ContextKind.HIERARCHICAL: "hierarchical"}
"""cp-kind: each kind by its --cp-kind name."""

CP_KIND_REASONS = {
    "torchtitan": "PyTorch's context_parallel is ring attention; its rotate method allgather or "
                  "alltoall only chooses how the ring passes K/V",
    "deepspeed": "its sequence parallelism is DeepSpeed-Ulysses, an all-to-all over the heads",
}
"""cp-kind: why a framework runs only the kinds it runs (its module cites the source)."""


class Args:
    """An ordered list of `--flag [value]` pairs, rendered one per line."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str | None]] = []

    def add(self, flag: str, value: object = None) -> None:
        """Append a flag, with its value if it takes one."""
        self.items.append((flag, None if value is None else str(value)))

    def inline(self) -> str:
        """All flags on one line."""
        return " ".join(f if v is None else f"{f} {v}" for f, v in self.items)

    def render(self) -> str:
        """One `--flag value` per line, each but the last ending in a shell continuation."""
        lines = [f if v is None else f"{f} {v}" for f, v in self.items]
        return "\n".join(f"    {line} \\" for line in lines[:-1]) + f"\n    {lines[-1]}\n"


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "none", "~"}


def yaml_scalar(value: object) -> str:
    """One YAML scalar: null, true/false, a number, or a (quoted when needed) string."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and "e" in repr(value) and "." not in repr(value):
        return repr(value).replace("e", ".0e")  # YAML 1.1 (PyYAML) reads 1e-05 as a string
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)


def yaml_text(doc: dict[str, object], indent: int = 0) -> str:
    """Block-style YAML for nested mappings of scalars and lists of scalars (a small, regular
    subset; the tests parse every output back)."""
    pad = "  " * indent
    out = []
    for key, value in doc.items():
        if isinstance(value, dict):
            out.append(f"{pad}{key}:\n{yaml_text(value, indent + 1)}")
        elif isinstance(value, list):
            items = "".join(f"{pad}  - {yaml_scalar(v)}\n" for v in value)
            out.append(f"{pad}{key}:\n{items}")
        else:
            out.append(f"{pad}{key}: {yaml_scalar(value)}\n")
    return "".join(out)
