"""Megatron-Core (Megatron-LM, and NeMo / Megatron-Bridge, which run it): what plan3d knows of it.

Conventions follow NVIDIA/Megatron-LM @ d98e8a64dd (2026, Megatron-Core 0.20.0), with its launch
settings in `pretrain_gpt.py` argument names; Megatron-Bridge's YAML overrides for NeMo users.

What it runs (megatron/training/arguments.py `validate_args`):
- data parallelism as plain DDP (ZeRO-0), the distributed optimizer (ZeRO-1:
  `--use-distributed-optimizer`), or Megatron-FSDP (`--use-megatron-fsdp`,
  `--data-parallel-sharding-strategy optim_grads` = ZeRO-2, `optim_grads_params` = ZeRO-3),
  which its user guide documents with TP, CP and EP but not PP;
- the 1F1B and interleaved 1F1B schedules (no GPipe);
- uneven pipelines through `--pipeline-model-parallel-layout` (any split of the layers, with the
  embedding `E` and the loss `L` as chunks of their own when wanted: pp·vpp may reach L + 2), so
  the fullest GPU holds ⌈L/p⌉ layers.

Memory (megatron/training/theoretical_memory_usage.py): 16-bit weights, an fp32 gradient buffer
(main_grad; `--grad-reduce-in-bf16` makes it 16-bit), Adam's fp32 master weights, m and v
(12 B/param) — 18 B/param, or 6 + 12/d with the distributed optimizer. Activations are
Transformer Engine's fused kernels' (Korthikanti et al. 2022); the loss is the vocab-parallel
cross entropy over 16-bit logits sharded tp ways. Under fp8, Transformer Engine keeps the linear
layers' saved inputs in fp8 and caches an fp8 copy of each linear weight and of its transpose.
"""

from __future__ import annotations

from ..errors import PlanError
from ..formulas import _ops
from ..formulas.choices import (
    Attention,
    ContextKind,
    Precision,
    QuantRecipe,
    Recompute,
    RecomputeModule,
    Schedule,
    ZeroStage,
)
from ..formulas.memory import ZERO_SHARDS
from ..formulas.moe_step import GROUPED_GEMM_STREAMS
from ..formulas.timing import MASTER_BYTES  # the fp32 master weights (--main-params-dtype fp32)
from ..rules import Rule
from ..schema import ModelSpec, PlanConfig
from .base import (
    ActivationStyle,
    Args,
    DPPhase,
    EmitResult,
    Framework,
    LossKind,
    MemoryConventions,
    ModelStates,
    check_cp_seq,
    common_notes,
    gpipe_note,
    interleaved,
    off_act,
    off_opt,
    off_params,
    offload_refusal,
    yaml_text,
)

RELEASE = (
    "NVIDIA/Megatron-LM megatron/training/arguments.py @ d98e8a64dd (2026, Megatron-Core 0.20.0: "
    "--num-virtual-stages-per-pipeline-rank, --pipeline-model-parallel-layout, "
    "--attention-backend, --use-megatron-fsdp, --data-parallel-sharding-strategy, "
    "--outer-dp-sharding-strategy, --moe-flex-dispatcher-backend); ZeRO-2/3 flags "
    "from the Megatron-FSDP user guide (docs.nvidia.com/megatron-core/developer-guide/latest/"
    "discussions/megatron-fsdp-user-guide).")
BRIDGE_RELEASE = (
    "NVIDIA-NeMo/Megatron-Bridge ConfigContainer YAML override (the format of "
    "examples/recipes/llama/conf/*_override_example*.yaml): keys from "
    "src/megatron/bridge/training/config.py @ 003e863, mixed-precision recipe names from "
    "training/mixed_precision.py @ 0509780, key mapping from "
    "docs/megatron-lm-to-megatron-bridge.md @ 167ba2a. NeMo 2.0 (nemo.collections.llm) "
    "equivalents are listed in the notes.")

WEIGHT_BYTES = 2  # 16-bit weights (under fp8 too: Transformer Engine casts them per GEMM)
MOMENT_BYTES = 4  # each of Adam's m and v in fp32 (--exp-avg-dtype/--exp-avg-sq-dtype fp32)
OPTIMIZER_BYTES = MASTER_BYTES + 2 * MOMENT_BYTES  # Adam: 4 + 4 + 4 = 12


def model_states(zero: ZeroStage, grad_bytes: float,
                 moment_bytes: float = MOMENT_BYTES) -> ModelStates:
    """Megatron's states: 16-bit weights, the main_grad buffer (fp32 by default), Adam's fp32
    master and its moments m, v (4 + 2·b_m: 12 B, or 8 B with the precision-aware optimizer's
    --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, optimizer_config.py l.203-207 @ d98e8a64dd);
    sharded as ZeRO's stages say (the distributed optimizer shards the optimizer; Megatron-FSDP
    also the gradients, and the weights for optim_grads_params).

    Assumes the master copy is 4 B: true where Megatron-Core keeps it (fp8 recipes other than
    delayed scaling); with bf16 training Transformer Engine's FusedAdam keeps only the 16-bit
    remainder of it (store_param_remainders, default True; distrib_optimizer.py l.1008 @
    d98e8a64dd), 2 B fewer per parameter, not modelled: an upper bound there."""
    w, g, o = ZERO_SHARDS[int(zero)]
    # goodput: a distributed checkpoint holds the 16-bit model weights and the optimizer's
    # fp32_param, exp_avg, exp_avg_sq (distrib_optimizer.py sharded_param_state_fs_model_space,
    # l.2016 @ d98e8a64dd), the precision-aware optimizer's states read back unscaled in fp32
    # whatever their dtype (_get_main_param_and_optimizer_states, get_unscaled_state, l.1090):
    # 2 + 12 = 14 B/param either way
    return ModelStates(WEIGHT_BYTES, w, grad_bytes, g, MASTER_BYTES + 2 * moment_bytes, o,
                       source="megatron/training/theoretical_memory_usage.py @ d98e8a64dd",
                       checkpoint_bytes=WEIGHT_BYTES + OPTIMIZER_BYTES)


def _pp_fsdp(m, c):
    return (c.pp == 1) | (c.zero < 2)


def _no_gpipe(m, c):
    return (c.pp == 1) | (c.gpipe == 0)


RULES = (
    Rule("Megatron-FSDP (ZeRO-2/3) only without pipeline parallelism",
         _pp_fsdp,
         lambda m, c: f"megatron: ZeRO-{int(c.zero)} is Megatron-FSDP, which is documented with "
                      f"TP, CP and EP but not PP (pp={c.pp}); use --zero 0 or 1 with pipeline "
                      "parallelism, or --framework torchtitan"),
    # Transformer Engine turns its unfused attention off under context parallelism ("does not
    # support context parallelism": get_attention_backend, pytorch/attention/
    # dot_product_attention/utils.py @ d0067d0), the one backend --attention-backend unfused
    # leaves on
    Rule("classic (unfused) attention only without context parallelism",
         lambda m, c: (c.classic == 0) | (c.cp == 1),
         lambda m, c: f"megatron: classic attention (--attention-backend unfused) does not run "
                      f"with context parallelism (cp={c.cp}): Transformer Engine turns its "
                      "unfused attention off under CP; use --cp 1, or flash attention"),
    Rule("no GPipe schedule (Megatron runs 1F1B and interleaved 1F1B)",
         _no_gpipe,
         lambda m, c: "megatron: there is no GPipe schedule; use --schedule 1f1b or interleaved "
                      "(or --framework torchtitan, which runs GPipe)"),
    Rule("pp·vpp ≤ layers + 2 (the embedding and the loss may stand as pipeline chunks of their "
         "own: --pipeline-model-parallel-layout)",
         lambda m, c: c.pp * c.vpp <= m.n_layers + 2,
         lambda m, c: f"megatron: pp·vpp = {c.pp}·{c.vpp} = {c.pp * c.vpp} chunks exceed the "
                      f"{m.n_layers} layers of {m.name} plus the embedding and the loss"),
    # hybrid sharding is --num-distributed-optimizer-instances r: the distributed optimizer
    # (ZeRO-1) or Megatron-FSDP (ZeRO-2/3, outer no_shard) sharded inside dp·cp/r ranks
    # (megatron/core/parallel_state.py, mcore_fsdp_adapter.py enable_hsdp @ d98e8a64dd)
    Rule("hybrid sharding (dp_shard < dp) with ZeRO 1, 2 or 3 (partial distributed optimizer)",
         lambda m, c: (getattr(c, "dp_shard", c.dp) == c.dp) | (c.zero >= 1),
         lambda m, c: "megatron: --num-distributed-optimizer-instances shards the distributed "
                      "optimizer or Megatron-FSDP; ZeRO-0 shards nothing; use --zero 1, 2 or 3, "
                      "or leave --dp-shard out"),
)


OVERLAP_FLAG = "--moe-a2a-overlap (--overlap-moe-expert-parallel-comm)"


def _overlap_refusal(what: str, asserted: str, instead: str) -> str:
    return (f"megatron: {OVERLAP_FLAG} does not run with {what}: Megatron-Core asserts "
            f"\"{asserted}\"; {instead}")


# moe: what --overlap-moe-expert-parallel-comm asks of the rest of the run
# (TransformerConfig.__post_init__, transformer_config.py l.3002-3046 @ d98e8a64dd). The layout's
# part (ep > 1, virtual stages when pp > 1, no full recompute, so no recompute method or layers,
# the alltoall or flex dispatcher) is model/moe.py overlap_problem; bf16 or fp16 holds for every
# plan (the emitter writes --bf16 under fp8 and nvfp4 too); the torch ≥ 2.6, CUDA-graph and
# ncclep-offload checks read settings plan3d does not write. These three read the plan's other
# settings:
OVERLAP_RULES = (
    # l.3038-3041: 'disable moe_shared_expert_overlap when enabling overlap_moe_expert_...'
    Rule("the all-to-all overlap without --moe-shared-expert-overlap",
         lambda m, c: (c.a2a_overlap == 0) | (c.moe_shared_overlap == 0),
         lambda m, c: _overlap_refusal(
             "--moe-shared-expert-overlap",
             "disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm",
             "keep one: --no-moe-a2a-overlap, or leave --moe-shared-expert-overlap out")),
    # l.3030-3032: 'disable moe in recompute_modules when enabling overlap_moe_expert_...'
    Rule("the all-to-all overlap without moe in --recompute-modules",
         lambda m, c: (c.a2a_overlap == 0) | (c.recompute_moe == 0),
         lambda m, c: _overlap_refusal(
             "moe in --recompute-modules",
             "disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm",
             "drop moe from --recompute-modules (moe_act still recomputes the experts' "
             "activation), or give --no-moe-a2a-overlap")),
    # l.3042-3046: mtp_num_layers in (None, 0, 1)
    Rule("the all-to-all overlap with at most one MTP layer trained",
         lambda m, c: (c.a2a_overlap == 0) | (c.mtp_on == 0) | (m.mtp_layers <= 1),
         lambda m, c: _overlap_refusal(
             f"{m.mtp_layers} MTP layers",
             "MTP supports at most one layer when enabling overlap_moe_expert_parallel_comm.",
             f"{m.name} trains {m.mtp_layers}: give --no-mtp, or --no-moe-a2a-overlap")),
)
"""What Megatron-Core's all-to-all overlap refuses beside the layout (moe), each rule at the
line of transformer_config.py @ d98e8a64dd it cites."""


OFFLOAD_SOURCE = "NVIDIA/Megatron-LM @ d98e8a64dd"
OFFLOAD_RULES = (
    Rule("no parameter offload (Megatron-Core offloads optimizer states and activations only)",
         lambda m, c: off_params(c) == 0,
         lambda m, c: "megatron: Megatron-Core has no parameter offload to host memory; use "
                      "--offload-optimizer, or --framework deepspeed (ZeRO-3 offload_param) or "
                      "torchtitan (FSDP2 CPU offload)"),
    # offload: --optimizer-cpu-offload needs --use-precision-aware-optimizer (arguments.py l.1884),
    # which is "only supported with distributed optimizer" (core/optimizer/__init__.py l.1057);
    # Megatron-FSDP refuses it ("MFSDP v2 does not currently support optimizer CPU offload",
    # core/optimizer/fully_sharded_optimizer.py l.79)
    Rule("optimizer offload only with the distributed optimizer (ZeRO-1)",
         lambda m, c: (off_opt(c) == 0) | (c.zero == 1),
         lambda m, c: "megatron: --optimizer-cpu-offload needs --use-precision-aware-optimizer, "
                      "which runs only with the distributed optimizer (Megatron-FSDP refuses "
                      f"it); use --zero 1 (got --zero {int(c.zero)}) or no --offload-optimizer"),
    # transformer_config.py l.1884-1899: num_layers in [0, L), no PP, no recompute
    Rule("activation offload: fewer layers than the model, pp = 1, no recompute",
         lambda m, c: (off_act(c) == 0) | ((off_act(c) < m.n_layers) & (c.pp == 1)
                                            & (getattr(c, "recompute_none", 1) == 1)),
         lambda m, c: (f"megatron: --cpu-offloading-num-layers must be below the {m.n_layers} "
                       f"layers of {m.name} (got {off_act(c)})" if off_act(c) >= m.n_layers else
                       "megatron: CPU activation offloading runs without pipeline parallelism "
                       "and without recomputation (transformer_config.py); use --pp 1 "
                       "--recompute none, or no --offload-activations")),
)
"""What Megatron-Core offloads to host memory, and under what (offload), each rule cited at
OFFLOAD_SOURCE."""


def _offload_args(a: Args, c: PlanConfig, m: ModelSpec, notes: list[str]) -> None:
    """offload: the HybridDeviceOptimizer's and Transformer Engine's CPU offload flags."""
    offload_refusal("megatron", c, m, OFFLOAD_RULES)
    if c.offload_optimizer > 0:
        a.add("--optimizer-cpu-offload")
        a.add("--optimizer-offload-fraction", f"{c.offload_optimizer:g}")
        a.add("--use-precision-aware-optimizer")
        a.add("--overlap-cpu-optimizer-d2h-h2d")
        notes.append(f"Optimizer offload: {c.offload_optimizer:.0%} of each rank's optimizer "
                     "states on the host, stepped by torch AdamW(fused=True) on the CPU, the "
                     "copies overlapped with it (HybridDeviceOptimizer, megatron/core/optimizer/"
                     f"cpu_offloading @ d98e8a64dd); needs PyTorch ≥ 2.3 and AdamW.")
    if c.offload_activations > 0:
        a.add("--cpu-offloading-num-layers", c.offload_activations)
        notes.append(f"Activation offload: the saved activations of {c.offload_activations} of "
                     f"{m.n_layers} layers go to host memory in the forward and come back for "
                     "the backward (Transformer Engine CPU offloading; --cpu-offloading-num-"
                     "layers > 0 turns cpu_offloading on).")


def pipeline_layout(n_layers: int, pp: int, vpp: int, mtp: int = 0) -> list[str]:
    """The pp·vpp chunks of `--pipeline-model-parallel-layout` in model order (chunk k runs on
    pipeline rank k mod pp), each a string of E (embedding), t (transformer layer), m
    (multi-token-prediction module), L (loss).

    With S = pp·vpp ≤ L chunks, L = q·S + r: the first r chunks hold q + 1 layers, the others q;
    they fall round-robin on the ranks, so no rank holds more than ⌈L/p⌉ layers. With
    L < S ≤ L + 2 the embedding (and, at S = L + 2, the loss) stand as chunks of their own.
    moe: `mtp` modules take the last slots of the last chunk, each as a layer (the cost model's
    ⌈(L + D)/p⌉; Megatron wants them after every decoder layer, all in the last chunk of one
    rank: pipeline_parallel_layer_layout.py validate_layer_layout @ d98e8a64dd)."""
    if mtp:
        body = pipeline_layout(n_layers + mtp, pp, vpp)
        last = body[-1].rstrip("L")
        if last.count("t") < mtp:
            raise PlanError(f"megatron: the last pipeline chunk holds {last.count('t')} layer "
                            f"slots, fewer than the {mtp} MTP modules that must share it")
        body[-1] = last[:len(last) - mtp] + "m" * mtp + body[-1][len(last):]
        return body
    chunks = pp * vpp
    if chunks > n_layers + 2:
        raise PlanError(f"megatron: {chunks} pipeline chunks for {n_layers} layers: at most "
                        f"{n_layers + 2} (the embedding and the loss as chunks of their own)")
    own_embedding = chunks > n_layers
    own_loss = chunks > n_layers + 1
    layer_chunks = chunks - own_embedding - own_loss
    q, r = divmod(n_layers, layer_chunks)
    body = ["t" * (q + 1 if i < r else q) for i in range(layer_chunks)]
    if own_embedding:
        body.insert(0, "E")
    else:
        body[0] = "E" + body[0]
    if own_loss:
        body.append("L")
    else:
        body[-1] = body[-1] + "L"
    return body


def layout_text(chunks: list[str]) -> str:
    """The layout as Megatron's string: chunks joined by '|'."""
    return "|".join(chunks)


def _uneven_split(fw: str, c: PlanConfig, m: ModelSpec) -> tuple[int, int] | None:
    """For pp not dividing the layers (vpp = 1): layers on the first and last stages when every
    middle stage holds ⌈L/p⌉, the planner's fullest stage; None when the split is even."""
    if c.pp < 2 or m.n_layers % c.pp == 0:
        return None
    full = -(-m.n_layers // c.pp)
    rest = m.n_layers - (c.pp - 2) * full
    first, last = rest // 2, rest - rest // 2
    if first < 1 or last > full:
        raise PlanError(f"{fw}: {m.n_layers} layers cannot be split over pp={c.pp} with "
                        f"{full} layers on each middle stage")
    return first, last


def _needs_layout(c: PlanConfig, m: ModelSpec) -> bool:
    """An interleaved plan whose chunks are not all L/(p·v) layers, or a plan with more chunks
    than layers, needs an explicit pipeline layout."""
    return c.pp > 1 and (m.n_layers % (c.pp * c.vpp) != 0 and c.vpp > 1
                         or c.pp * c.vpp > m.n_layers or _mtp(c, m) > 0)


def _mtp(c: PlanConfig, m: ModelSpec) -> int:
    """moe: the multi-token-prediction modules the plan trains; with pp > 1 always through a
    layout, which puts them in the last chunk's layer slots as the cost model does."""
    return m.mtp_layers if c.mtp else 0


def _megatron_model_args(a: Args, c: PlanConfig, m: ModelSpec, notes: list[str]) -> None:
    """The whole model in Megatron-LM's argument names: shape, architecture, MoE and MLA."""
    from .model_settings import megatron_model_args, unmodelled_note, vocab_note
    from .moe_launch import megatron_moe_args

    for flag, value in megatron_model_args(c, m) + megatron_moe_args(c, m):
        a.add(flag, value)
    notes.append(vocab_note(c, m))
    notes += moe_release_notes(c, m)
    extra = unmodelled_note(m)
    if extra:
        notes.insert(0, extra)


def _pipeline_args(a: Args, c: PlanConfig, m: ModelSpec, notes: list[str]) -> None:
    """TP and PP sizes, and the split: an explicit layout, uneven first/last stages, or virtual stages."""
    fw = "megatron"
    a.add("--tensor-model-parallel-size", c.tp)
    a.add("--pipeline-model-parallel-size", c.pp)
    layout = (pipeline_layout(m.n_layers, c.pp, c.vpp, _mtp(c, m)) if _needs_layout(c, m)
              else None)
    split = None if layout is not None else _uneven_split(fw, c, m)
    if layout is not None:
        a.add("--pipeline-model-parallel-layout", repr(layout_text(layout)).replace("'", '"'))
        slots = m.n_layers + _mtp(c, m)
        notes.append(
            f"{m.n_layers} layers in pp·vpp = {c.pp * c.vpp} chunks through "
            "--pipeline-model-parallel-layout (E embedding, t layer, m MTP module, L loss; chunk "
            f"k on pipeline rank k mod {c.pp}): no rank holds more than {-(-slots // c.pp)} "
            "layers, the planner's fullest GPU.")
    if split is not None:
        a.add("--decoder-first-pipeline-num-layers", split[0])
        a.add("--decoder-last-pipeline-num-layers", split[1])
        notes.append(f"{m.n_layers} layers over pp={c.pp}: {split[0]} on the first stage, "
                     f"{split[1]} on the last, {-(-m.n_layers // c.pp)} on each other stage (the "
                     "planner sized the fullest stage).")
    if interleaved(c) and layout is None:
        a.add("--num-virtual-stages-per-pipeline-rank", c.vpp)
        notes.append(
            "Releases without --num-virtual-stages-per-pipeline-rank take the same split as "
            f"--num-layers-per-virtual-pipeline-stage {m.n_layers // (c.pp * c.vpp)} (the two "
            "are mutually exclusive).")
    gpipe = gpipe_note("Megatron-LM", c, "1F1B")
    if gpipe:
        notes.append(gpipe)


def _context_args(a: Args, c: PlanConfig, m: ModelSpec, notes: list[str]) -> None:
    """Context parallelism (size and kind) and sequence parallelism."""
    a.add("--context-parallel-size", c.cp)
    for flag, value in cp_kind_args(c, notes):  # cp-kind
        a.add(flag, value)
    if c.sequence_parallel and c.tp > 1:
        a.add("--sequence-parallel")
    elif c.sequence_parallel:
        notes.append("Sequence parallelism needs tp > 1; Megatron turns it off at tp = 1.")


TORCH_DTYPES = {"bf16": "bfloat16", "fp32": "float32"}
"""plan3d's dtype names as torch's (NeMo's OptimizerConfig fields are torch.dtype)."""

FP8_RECIPE_ARGS = {QuantRecipe.DELAYED: "delayed", QuantRecipe.CURRENT: "tensorwise",
                   QuantRecipe.MXFP8: "mxfp8", QuantRecipe.BLOCKWISE: "blockwise"}
"""fit: plan3d's fp8 recipes as Megatron's --fp8-recipe values (transformer_config.py fp8_recipe:
'tensorwise' is per-tensor current scaling, @ d98e8a6)."""


def _precision_args(a: Args, c: PlanConfig, m: ModelSpec, notes: list[str]) -> None:
    """Matmul precision and gradient dtype."""
    if c.precision is Precision.FP16:
        a.add("--fp16")
    else:
        a.add("--bf16")
    if c.precision is Precision.FP8:
        recipe = c.fp8_recipe or QuantRecipe.DELAYED
        a.add("--fp8-format", "hybrid")
        a.add("--fp8-recipe", FP8_RECIPE_ARGS[recipe])
        if c.fp8_param_gather:
            a.add("--fp8-param-gather")
        notes.append(f"FP8 via Transformer Engine: --fp8-format hybrid (E4M3 forward, E5M2 "
                     f"backward), --fp8-recipe {FP8_RECIPE_ARGS[recipe]} (plan3d's "
                     f"{recipe.value}; transformer_config.py fp8_recipe @ d98e8a6).")
    elif c.precision is Precision.NVFP4:  # fit: NVFP4BlockScaling through TE ≥ 2.7
        a.add("--fp4-format", "e2m1")
        a.add("--fp4-recipe", "nvfp4")
        if c.fp8_param_gather:
            a.add("--fp4-param-gather")
    if c.grad_dtype == "bf16":
        a.add("--grad-reduce-in-bf16")
    else:
        a.add("--accumulate-allreduce-grads-in-fp32")
    if c.adam_moments != "fp32":  # Adam's m and v in bf16 (arguments.py l.3667-3684 @ d98e8a64dd)
        a.add("--use-precision-aware-optimizer")
        a.add("--exp-avg-dtype", c.adam_moments)
        a.add("--exp-avg-sq-dtype", c.adam_moments)
        notes.append("Adam's moments in bf16: Transformer Engine's FusedAdam (the precision-"
                     "aware optimizer) keeps exp_avg and exp_avg_sq in bf16, the master weights "
                     "in fp32; needs the distributed optimizer and Transformer Engine ≥ 2.1.")


def _recompute_args(a: Args, c: PlanConfig, m: ModelSpec, notes: list[str]) -> None:
    """Activation recomputation."""
    if c.recompute is Recompute.SELECTIVE:
        a.add("--recompute-granularity", "selective")
        if c.recompute_modules is not None:  # fit: the checkpointed submodules
            a.add("--recompute-modules", " ".join(mod.value for mod in c.recompute_modules))
    elif c.recompute is Recompute.FULL and c.recompute_layers:
        # fit: the first N layers of each stage (each virtual chunk) recomputed, the rest keep
        # everything (transformer_block.py _checkpointed_forward, block branch @ d98e8a6)
        a.add("--recompute-granularity", "full")
        a.add("--recompute-method", "block")
        a.add("--recompute-num-layers", c.recompute_layers)
    elif c.recompute is Recompute.FULL:
        # fit: groups of recompute_group layers, each checkpointed as one unit (uniform branch)
        a.add("--recompute-granularity", "full")
        a.add("--recompute-method", "uniform")
        a.add("--recompute-num-layers", c.recompute_group)
    if c.distribute_saved_activations:  # fit: checkpoints split over the tp ranks
        a.add("--distribute-saved-activations")


def _zero_args(a: Args, c: PlanConfig, m: ModelSpec, notes: list[str]) -> None:
    """Data-parallel sharding (ZeRO 0-3, hybrid sharding) and gradient overlap."""
    fw = "megatron"
    if c.zero_stage is ZeroStage.OPTIMIZER:
        a.add("--use-distributed-optimizer")
    elif c.zero_stage in (ZeroStage.GRADIENTS, ZeroStage.PARAMETERS):
        strategy = "optim_grads" if c.zero_stage is ZeroStage.GRADIENTS else "optim_grads_params"
        a.add("--use-megatron-fsdp")
        a.add("--data-parallel-sharding-strategy", strategy)
        a.add("--use-distributed-optimizer")
        a.add("--no-gradient-accumulation-fusion")
        a.add("--ckpt-format", "fsdp_dtensor")
        notes.append(
            f"ZeRO-{int(c.zero_stage)} maps to Megatron-FSDP with "
            f"--data-parallel-sharding-strategy {strategy}; Megatron has no ZeRO-2/3 outside "
            "its FSDP paths. Megatron-FSDP wants CUDA_DEVICE_MAX_CONNECTIONS unset.")
        if c.pp > 1:
            notes.append(
                "Megatron-FSDP documents compatibility with TP, CP and EP, not PP: pp > 1 with "
                "it is untested; --use-torch-fsdp2 is rejected outright with pp > 1.")
    else:
        notes.append("ZeRO-0: plain data parallelism (no --use-distributed-optimizer).")
    if c.dp_replicate > 1:  # hybrid sharding: r instances, each sharded over dp·cp/r ranks
        if c.zero_stage is ZeroStage.NONE:
            raise PlanError(f"{fw}: hybrid sharding needs ZeRO 1, 2 or 3 (ZeRO-0 shards nothing)")
        # megatron/training/arguments.py @ d98e8a64dd: --num-distributed-optimizer-instances
        # ("copies across Data Parallel domain"); --outer-dp-sharding-strategy no_shard (DP
        # replication across the outer group, Megatron-FSDP's HSDP; its default, written out)
        a.add("--num-distributed-optimizer-instances", c.dp_replicate)
        if c.zero_stage in (ZeroStage.GRADIENTS, ZeroStage.PARAMETERS):
            a.add("--outer-dp-sharding-strategy", "no_shard")
        notes.append(
            f"Hybrid sharding: {c.dp_replicate} distributed-optimizer instances, each sharded "
            f"over dp·cp/{c.dp_replicate} = {c.dp * c.cp // c.dp_replicate} consecutive "
            "data-parallel ranks; gradients reduce-scatter inside an instance and all-reduce "
            "across instances (megatron/core/distributed/param_and_grad_buffer.py @ d98e8a64dd).")
    if c.overlap_grad_reduce:
        a.add("--overlap-grad-reduce")
        if c.zero_stage >= ZeroStage.OPTIMIZER:
            a.add("--overlap-param-gather")


def _kernel_args(a: Args, c: PlanConfig, m: ModelSpec, notes: list[str]) -> None:
    """Attention backend and the CUDA connection note."""
    # auto: Transformer Engine picks cuDNN's fused attention on Hopper and later where it
    # supports the shape — the kernel plan3d prices (Framework.attention_kernel); `flash` would
    # set NVTE_FUSED_ATTN=0 (language_module._set_attention_backend @ d98e8a64dd)
    a.add("--attention-backend", "auto" if c.attention is Attention.FLASH else "unfused")
    if c.attention is Attention.FLASH:
        notes.append("--attention-backend auto: Transformer Engine runs cuDNN's fused attention "
                     "on Hopper and later, as priced (flash would turn it off).")
    if (c.tp > 1 or c.cp > 1) and c.zero_stage < ZeroStage.GRADIENTS and c.moe_a2a_overlap:
        # arguments.py l.1466-1475 @ d98e8a64dd: a warning, not the assertion, with the overlap
        notes.append("CUDA_DEVICE_MAX_CONNECTIONS: with --overlap-moe-expert-parallel-comm "
                     "Megatron warns rather than asserting 1 for TP/CP on GPUs before Blackwell: "
                     "1 favours TP/CP's overlap, a larger value (e.g. 32) the all-to-all's.")
    elif (c.tp > 1 or c.cp > 1) and c.zero_stage < ZeroStage.GRADIENTS:
        notes.append("export CUDA_DEVICE_MAX_CONNECTIONS=1: Megatron asserts it for TP/CP on "
                     "GPUs before Blackwell.")


def moe_release_notes(c: PlanConfig, m: ModelSpec) -> list[str]:
    """moe: what megatron-core 0.16.1 (the release the parser suite builds; Megatron-Bridge
    0.3.1 runs on it) refuses of a plan Megatron-LM @ d98e8a64dd, whose rules plan3d follows,
    runs: --moe-shared-expert-overlap with the flex dispatcher (0.16.1's transformer_config.py
    l.1090-1095 allows alltoall alone; d98e8a64dd l.1820-1826 alltoall or flex), and the
    all-to-all overlap with an MTP layer at pp = 1 (0.16.1 l.1892-1896; d98e8a64dd has no such
    check)."""
    notes = []
    if c.moe_shared_expert_overlap and c.moe_dispatcher == "deepep":
        notes.append("--moe-shared-expert-overlap with the flex (DeepEP) dispatcher runs from "
                     "Megatron-LM @ d98e8a64dd (MoEFlexTokenDispatcher); megatron-core 0.16.1 "
                     "refuses it (\"moe_shared_expert_overlap only works with alltoall token "
                     "dispatcher\"): run a later Megatron-Core, or plan with --moe-dispatcher "
                     "alltoall.")
    if c.moe_a2a_overlap and _mtp(c, m) and c.pp == 1:
        notes.append("--overlap-moe-expert-parallel-comm with an MTP layer at pp = 1 runs from "
                     "Megatron-LM @ d98e8a64dd; megatron-core 0.16.1 asks pp > 1 for it "
                     "(\"Pipeline model parallel size must be larger than 1 when enabling "
                     "overlap_moe_expert_parallel_comm with MTP layer\").")
    return notes


def _megatron(c: PlanConfig, m: ModelSpec) -> EmitResult:
    """Megatron-LM `pretrain_gpt.py` arguments."""
    check_cp_seq("megatron", c)
    notes = common_notes(c, m)
    a = Args()
    _pipeline_args(a, c, m, notes)
    _context_args(a, c, m, notes)
    a.add("--micro-batch-size", c.mbs)
    a.add("--global-batch-size", c.gbs)
    _megatron_model_args(a, c, m, notes)
    for part in (_precision_args, _recompute_args, _zero_args, _kernel_args):
        part(a, c, m, notes)
    if c.offload:  # offload
        _offload_args(a, c, m, notes)
    return EmitResult("megatron", "args", a.render(), RELEASE, notes)


# ---- cp-kind: the context-parallel kind in Megatron's and Megatron-Bridge's names -------------

CP_COMM_TYPES = {ContextKind.ALL_TO_ALL: "a2a", ContextKind.HIERARCHICAL: "a2a+p2p"}
"""--cp-comm-type of each kind other than the ring (p2p, Megatron's default, is not written)."""


def _cp_kind_note(c: PlanConfig) -> str:
    if c.cp_kind is ContextKind.ALL_TO_ALL:
        return ("cp_comm_type a2a (Transformer Engine ≥ 1.10): all-to-alls trade the sequence "
                f"split for a head split, each TP rank's heads and KV heads over the {c.cp} CP "
                "ranks; exposed, as plan3d costs it.")
    return (f"cp_comm_type a2a+p2p (Transformer Engine ≥ 1.12): all-to-all inside groups of "
            f"{c.cp_a2a} consecutive CP ranks, ring (p2p) across the {c.cp // c.cp_a2a} groups; "
            "hierarchical sizes are [a2a, p2p] (megatron/core/model_parallel_config.py @ "
            "d98e8a64dd).")


def cp_kind_args(c: PlanConfig, notes: list[str]) -> list[tuple[str, object]]:
    """Megatron-LM's --cp-comm-type, and --hierarchical-context-parallel-sizes a2a p2p for the
    hierarchical kind (megatron/training/arguments.py @ d98e8a64dd l.3221, 580-585); nothing
    for the ring (p2p, the default) or cp = 1."""
    if c.cp == 1 or c.cp_kind in (None, ContextKind.RING):
        return []
    notes.append(_cp_kind_note(c))
    out = [("--cp-comm-type", CP_COMM_TYPES[c.cp_kind])]
    if c.cp_kind is ContextKind.HIERARCHICAL:
        out.append(("--hierarchical-context-parallel-sizes", f"{c.cp_a2a} {c.cp // c.cp_a2a}"))
    return out


def cp_kind_overrides(model: dict, doc: dict, c: PlanConfig, notes: list[str]) -> None:
    """Megatron-Bridge's model.cp_comm_type and model.hierarchical_context_parallel_sizes; the
    hierarchical groups are built on the MPU path only, so dist.use_decentralized_pg = false
    (Megatron-Bridge docs/fern/versions/0.4.2/pages/skills/perf-techniques/
    hybrid-context-parallel/SKILL.mdx @ 067f987)."""
    if c.cp == 1 or c.cp_kind in (None, ContextKind.RING):
        return
    notes.append(_cp_kind_note(c))
    model["cp_comm_type"] = CP_COMM_TYPES[c.cp_kind]
    if c.cp_kind is ContextKind.HIERARCHICAL:
        model["hierarchical_context_parallel_sizes"] = [c.cp_a2a, c.cp // c.cp_a2a]
        doc.setdefault("dist", {})["use_decentralized_pg"] = False
        notes.append("Megatron-Bridge builds the hierarchical CP groups on its MPU path only: "
                     "dist.use_decentralized_pg must stay false.")


_MIXED_PRECISION = {
    Precision.BF16: "bf16_mixed",
    Precision.FP16: "fp16_mixed",
    Precision.FP8: "bf16_with_fp8_delayed_scaling_mixed",
    Precision.NVFP4: "bf16_with_nvfp4_mixed",
}


BRIDGE_RECIPES = {  # fit: Megatron-Bridge training/mixed_precision.py @ 067f987 — each preset
    # and its fp8/fp4_param_gather default
    QuantRecipe.DELAYED: ("bf16_with_fp8_delayed_scaling_mixed", True),
    QuantRecipe.CURRENT: ("bf16_with_fp8_current_scaling_mixed", True),
    QuantRecipe.MXFP8: ("bf16_with_mxfp8_mixed", True),
    QuantRecipe.BLOCKWISE: ("bf16_with_fp8_subchannel_scaling_mixed", False),
    QuantRecipe.NVFP4: ("bf16_with_nvfp4_mixed", True),
}


def bridge_precision(c: PlanConfig, notes: list[str]) -> str:
    """fit: the Megatron-Bridge mixed-precision preset of the plan's precision and recipe; a
    note where the preset's parameter gather differs from the plan's."""
    if c.precision not in (Precision.FP8, Precision.NVFP4):
        return _MIXED_PRECISION[c.precision]
    recipe = (QuantRecipe.NVFP4 if c.precision is Precision.NVFP4
              else c.fp8_recipe or QuantRecipe.DELAYED)
    name, gathers = BRIDGE_RECIPES[recipe]
    if gathers != c.fp8_param_gather:
        key = "fp4_param_gather" if recipe is QuantRecipe.NVFP4 else "fp8_param_gather"
        notes.append(f"The {name} preset sets {key}={gathers}; the plan was costed with "
                     f"{c.fp8_param_gather}: set cfg.mixed_precision.{key} = "
                     f"{c.fp8_param_gather} on the recipe object in Python.")
    return name


def _bridge_model(c: PlanConfig, m: ModelSpec, notes: list[str]) -> dict[str, object]:
    """model.*: parallel sizes, the split, the whole architecture, recomputation, attention."""
    fw = "nemo"
    layout = (pipeline_layout(m.n_layers, c.pp, c.vpp, _mtp(c, m)) if _needs_layout(c, m)
              else None)
    model: dict[str, object] = {
        "tensor_model_parallel_size": c.tp,
        "pipeline_model_parallel_size": c.pp,
        "virtual_pipeline_model_parallel_size": c.vpp if interleaved(c) else None,
        "context_parallel_size": c.cp,
        "sequence_parallel": c.sequence_parallel and c.tp > 1,
        "num_layers": m.n_layers,
        "hidden_size": m.hidden,
        "ffn_hidden_size": m.ffn,
        "num_attention_heads": m.n_heads,
        "num_query_groups": m.kv_heads,
        "seq_length": c.seq_len,
    }
    split = None if layout is not None else _uneven_split(fw, c, m)
    if layout is not None:
        model["pipeline_model_parallel_layout"] = layout_text(layout)
        notes.append(f"{m.n_layers} layers in pp·vpp = {c.pp * c.vpp} chunks through "
                     "model.pipeline_model_parallel_layout (E embedding, t layer, L loss).")
    if split is not None:
        model["num_layers_in_first_pipeline_stage"] = split[0]
        model["num_layers_in_last_pipeline_stage"] = split[1]
        notes.append(f"{m.n_layers} layers over pp={c.pp}: {split[0]} on the first stage, "
                     f"{split[1]} on the last, the rest {-(-m.n_layers // c.pp)} each.")
    if c.recompute is Recompute.SELECTIVE:
        model["recompute_granularity"] = "selective"
        model["recompute_modules"] = [mod.value for mod in c.recompute_modules or
                                      (RecomputeModule.CORE_ATTN,)]
    elif c.recompute is Recompute.FULL:  # fit: block over recompute_layers, else every layer
        model["recompute_granularity"] = "full"
        model["recompute_method"] = "block" if c.recompute_layers else "uniform"
        model["recompute_num_layers"] = c.recompute_layers or c.recompute_group
    else:
        model["recompute_granularity"] = None
    if c.attention is Attention.CLASSIC:
        model["attention_backend"] = "unfused"
        notes.append("model.attention_backend takes an AttnBackend name (flash, fused, unfused, "
                     "local, auto); 'unfused' materialises the score matrix as the plan assumes.")
    else:
        notes.append("Attention is left at the default backend (auto: Transformer Engine picks "
                     "a flash or cuDNN fused kernel, neither stores the s×s scores).")
    from .model_settings import bridge_model_fields
    from .moe_launch import bridge_moe_fields

    model.update(bridge_model_fields(c, m))
    model.update(bridge_moe_fields(c, m))
    return model


def _bridge_doc(c: PlanConfig, m: ModelSpec, model: dict, notes: list[str]) -> dict:
    """The ConfigContainer sections: train, dataset, precision, ddp, optimizer, dist, offload."""
    doc: dict[str, object] = {
        "model": model,
        "train": {"micro_batch_size": c.mbs, "global_batch_size": c.gbs},
        "dataset": {"seq_length": c.seq_len},
        "mixed_precision": bridge_precision(c, notes),
    }
    ddp: dict[str, object] = {"overlap_grad_reduce": c.overlap_grad_reduce}
    if c.overlap_grad_reduce and c.zero_stage >= ZeroStage.OPTIMIZER:
        # the gather overlapped as costed (and as --emit megatron writes --overlap-param-gather);
        # DistributedDataParallelConfig's default is False, and Megatron-LM aligns the gather
        # across a virtual pipeline's chunks, which a ConfigContainer must say itself
        # (arguments.py, distributed_data_parallel_config.py @ d98e8a64dd)
        ddp["overlap_param_gather"] = True
        if c.vpp > 1:
            ddp["align_param_gather"] = True
    optimizer: dict[str, object] = {}
    if c.zero_stage >= ZeroStage.OPTIMIZER:
        ddp["use_distributed_optimizer"] = True
        optimizer["use_distributed_optimizer"] = True
    else:
        ddp["use_distributed_optimizer"] = False
        optimizer["use_distributed_optimizer"] = False
    if c.adam_moments != "fp32":  # OptimizerConfig's torch.dtype fields, as Bridge reads them
        # back from a YAML string (omegaconf_utils.py getattr(torch, value.split(".")[-1]))
        optimizer.update(use_precision_aware_optimizer=True,
                         exp_avg_dtype=f"torch.{TORCH_DTYPES[c.adam_moments]}",
                         exp_avg_sq_dtype=f"torch.{TORCH_DTYPES[c.adam_moments]}")
    if c.zero_stage >= ZeroStage.GRADIENTS:
        strategy = "optim_grads" if c.zero_stage is ZeroStage.GRADIENTS else "optim_grads_params"
        ddp["use_megatron_fsdp"] = True
        ddp["data_parallel_sharding_strategy"] = strategy
        model["gradient_accumulation_fusion"] = False
        doc["dist"] = {"use_megatron_fsdp": True, "use_torch_fsdp2": False}
        doc["checkpoint"] = {"ckpt_format": "fsdp_dtensor"}
        notes.append(f"ZeRO-{int(c.zero_stage)} maps to Megatron-FSDP ({strategy}); Bridge "
                     "requires checkpoint.ckpt_format fsdp_dtensor with it.")
        if c.pp > 1:
            notes.append("Megatron-FSDP with pp > 1 is code-supported but not validated by "
                         "Megatron-Bridge; torch FSDP2 does not work with pipeline parallelism.")
    if c.dp_replicate > 1:  # hybrid sharding: DistributedDataParallelConfig's partial DistOpt
        if c.zero_stage is ZeroStage.NONE:
            raise PlanError("nemo: hybrid sharding needs ZeRO 1, 2 or 3 (ZeRO-0 shards nothing)")
        ddp["num_distributed_optimizer_instances"] = c.dp_replicate
    doc["ddp"] = ddp
    doc["optimizer"] = optimizer
    cp_kind_overrides(model, doc, c, notes)  # cp-kind
    if c.offload:  # offload: OptimizerConfig and TransformerConfig fields (@ d98e8a64dd)
        offload_refusal("nemo", c, m, OFFLOAD_RULES)
        if c.offload_optimizer > 0:
            optimizer.update(optimizer_cpu_offload=True,
                             optimizer_offload_fraction=c.offload_optimizer,
                             use_precision_aware_optimizer=True,
                             overlap_cpu_optimizer_d2h_h2d=True)
        if c.offload_activations > 0:
            model["cpu_offloading"] = True
            model["cpu_offloading_num_layers"] = c.offload_activations
    return doc


def _bridge_notes(c: PlanConfig, notes: list[str]) -> None:
    """What the YAML cannot say, and the NeMo 2.0 names."""
    recipe_fp32 = c.precision is not Precision.FP16
    want_fp32 = c.grad_dtype == "fp32"
    if recipe_fp32 != want_fp32:
        notes.append(
            f"The {bridge_precision(c, [])} recipe sets grad_reduce_in_fp32={recipe_fp32} "
            "and copies it onto ddp, overriding any ddp value; for this plan set "
            f"cfg.mixed_precision.grad_reduce_in_fp32 = {want_fp32} on the recipe object in "
            "Python.")
    gpipe = gpipe_note("Megatron-Bridge", c, "1F1B")
    if gpipe:
        notes.append(gpipe)
    notes.append(
        "Model-shape keys assume a GPT provider recipe (e.g. a Llama recipe); the recipe supplies "
        "the rest of the architecture and the tokenizer. dataset.seq_length must equal "
        "model.seq_length (older releases call it dataset.sequence_length).")
    notes.append(
        "NeMo 2.0 (nemo.collections.llm) equivalents: trainer.strategy.tensor_model_parallel_size, "
        "pipeline_model_parallel_size, virtual_pipeline_model_parallel_size, "
        "context_parallel_size, sequence_parallel; data.micro_batch_size, data.global_batch_size, "
        "data.seq_length; model.config.recompute_granularity/recompute_method/"
        "recompute_num_layers; precision through trainer.plugins (the matching plugin in "
        "nemo.collections.llm.recipes.precision.mixed_precision).")


def _nemo(c: PlanConfig, m: ModelSpec) -> EmitResult:
    """A Megatron-Bridge ConfigContainer override (YAML)."""
    check_cp_seq("nemo", c)
    notes = common_notes(c, m)
    model = _bridge_model(c, m, notes)
    doc = _bridge_doc(c, m, model, notes)
    _bridge_notes(c, notes)
    notes += moe_release_notes(c, m)
    header = ("# Megatron-Bridge ConfigContainer overrides written by plan3d\n"
              f"# plan: dp{c.dp} tp{c.tp} pp{c.pp} vpp{c.vpp} cp{c.cp}, model {m.name}\n")
    return EmitResult("nemo", "yaml", header + yaml_text(doc), BRIDGE_RELEASE, notes)


def megatron_step_phases(w):
    """Megatron-Core's gradient reduction and --overlap-param-gather, with --overlap-grad-reduce
    (megatron/core/distributed @ d98e8a64dd; the emitter sets both together).

    Without a virtual pipeline the first pipeline stage cuts its buffer into buckets
    (w.reduce_calls: K.megatron_buckets), each reduced once its parameters' gradients are all in,
    in the last micro-batch's backward (param_and_grad_buffer.py register_grad_ready); the last
    bucket — the first layers and the embedding — waits for the end of that backward. Later
    stages keep one bucket (bucket_size None for pp_rank > 0, training.py) and reduce it after
    their cooldown, which ends a micro-batch's backward or more before the first stage's:
    max(T, T − b) never exceeds the first stage's, so the first stage is the one modelled. The
    gather of the next step runs bucket by bucket, each dispatched as the previous is waited on
    in a forward pre-hook (finish_param_sync): the first bucket exposed. Later stages gather
    their one bucket whole before their first forward (align_param_gather is off without a
    virtual pipeline: arguments.py; formulas.overlap.inline_gathers_s).

    With v > 1 model chunks (interleaved) the pieces are the chunks (megatron_interleaved_phases).
    Without --overlap-grad-reduce one bucket per chunk after the backward and a gather in the
    optimizer step before the forward: nothing overlaps."""
    chunked = 1 - _ops.le(w.v, 1)
    flat = DPPhase(w.reduce_calls, w.overlap * w.bwd_s), DPPhase(
        w.gather_calls, w.overlap * w.fwd_s, inline_stages=1 + w.overlap * (1 - chunked) * (w.p - 1))
    chunks = megatron_interleaved_phases(w)
    return tuple(DPPhase(*(_ops.select(chunked, a, b) for a, b in zip(ch, fl)))
                 for ch, fl in zip(chunks, flat))


def megatron_interleaved_phases(w):
    """Megatron-Core's data-parallel collectives under the interleaved schedule (v > 1 chunks per
    stage), chunk by chunk (megatron/core/pipeline_parallel/schedules.py @ d98e8a64dd,
    forward_backward_pipelining_with_interleaving).

    Reduction: with align_grad_reduce (on by default: training/config/common_config.py) the
    schedule holds every chunk's gradient sync off (no_sync) and calls chunk c's start_grad_sync
    once the backward of its last micro-batch is done (backward_step_helper_postprocess, shifted
    by the stage's rank so all stages launch together). The cooldown runs the backwards in
    groups of p micro-batches per chunk, chunks in descending order (get_model_chunk_id), so the
    chunks' releases are p chunk-backwards apart, p·T_bwd/v: v pieces beside W = p·T_bwd
    (T_bwd the stage's backward of one micro-batch), the last — chunk 0, all its buckets
    launched together after the last backward — exposed.
    Gather (--overlap-param-gather; align_param_gather on with a virtual pipeline): the
    schedule starts chunks 0 and 1's gathers at its start (param_sync_func[0], [1]) and chunk
    k + 1's as chunk k's first micro-batch starts its forward (forward_step_helper_preprocess);
    the first forward of a chunk waits for its gather (the forward pre-hook, finish_param_sync).
    Chunk 0 is gathered whole before anything runs (its buckets are dispatched last layers
    first, so its first layer's is the last), each later chunk beside the p forwards of the
    chunk before: v pieces beside W = p·T_fwd, the first exposed. No stage gathers in line.
    NeMo's distributed Adam (the DGX Cloud recipes: NeMo's megatron_gpt_model.py @ v2.0.0, one
    bucket list per virtual stage) is driven by the same schedule hooks per chunk.
    Assumes m ≥ p (the schedule's micro-batch groups of p; fewer: groups of m), equal chunks,
    and the first stage, as above."""
    groups = _ops.minimum(w.p, w.m)
    return (DPPhase(w.v, w.overlap * groups * w.bwd_s),
            DPPhase(w.v, w.overlap * groups * w.fwd_s))


FRAMEWORK = Framework(
    name="megatron",
    title="Megatron-Core (Megatron-LM, NeMo, Megatron-Bridge)",
    release=RELEASE,
    zero_stages=tuple(ZeroStage),
    schedules=(Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED),
    rules=RULES + OVERLAP_RULES + OFFLOAD_RULES,
    memory=MemoryConventions(
        states=model_states, activations=ActivationStyle.FUSED, loss=LossKind.VOCAB_PARALLEL,
        # offload: the pinned fp32 host copy of each offloaded parameter's gradient
        # (hybrid_optimizer.py cpu_copy_map_grad @ d98e8a64dd)
        host_grad_bytes=4.0,
        gathered_layers=2,
        # Transformer Engine under fp8 caches each linear weight quantized, rowwise and
        # columnwise (its transpose) as the recipe and GPU need, across micro-batches
        # (is_first_microbatch): TransformerEngine module/linear.py @ d0067d0 l.467-475,
        # 1958-1960, 2068-2071; Megatron-Core extensions/transformer_engine.py @ d98e8a6
        # l.1338-1345; --fp8-recipe defaults to delayed (transformer_config.py fp8_recipe)
        quantized_weight_cache=1, fp8_saves_linear_inputs=1,
        default_fp8_recipe=QuantRecipe.DELAYED,
        # fit: groups beside the parallel ones: the world (barriers, timers; the distributed
        # optimizer's gradient statistics: optimizer/distrib_optimizer.py
        # get_grad_stats_parallel_group), the model-parallel group for those statistics without
        # it (optimizer/optimizer.py), the embedding group of a tied model's end stages
        # (distributed/finalize_model_grads.py _allreduce_word_embedding_grads) @ d98e8a64dd;
        # one Transformer Engine GEMM workspace (cpp_extensions/gemm.py @ d0067d0)
        communicators=("world", "model_parallel", "embedding"), te_workspaces=1),
    stage_split="flexible",
    extra_stage_units=2,
    emitters={"megatron": _megatron, "nemo": _nemo},
    # cp-kind: --cp-comm-type p2p | a2a | a2a+p2p (with --hierarchical-context-parallel-sizes)
    # through Transformer Engine's attention (megatron/training/arguments.py @ d98e8a64dd
    # l.3221, 580-585; core/transformer/transformer_config.py l.1030-1045; core/extensions/
    # transformer_engine.py l.2141-2153); the ring (p2p) is its default. Its fourth kind,
    # allgather, is not modelled (CP_ALLGATHER_REFUSAL)
    cp_kinds=(ContextKind.RING, ContextKind.ALL_TO_ALL, ContextKind.HIERARCHICAL),
    offload_pipelined=True,  # offload: --overlap-cpu-optimizer-d2h-h2d, which _offload_args emits
    # fit: --recompute-method block --recompute-num-layers, --recompute-modules
    # (transformer_config.py l.543-590 @ d98e8a6)
    partial_recompute="searched",
    # offload: the HybridDeviceOptimizer copies its fp32 host master into the bf16 GPU parameter
    # (hybrid_optimizer.py l.124, `gpu_param.data.copy_(param.data)` @ d98e8a64dd), and PyTorch
    # converts a CPU→GPU copy's dtype on the CPU first ("Type conversions are performed on the
    # CPU for CPU-GPU copies", aten/src/ATen/native/cuda/Copy.cu): 4 B read + 2 B written per
    # parameter in host DRAM before the DMA reads the 2 B
    offload_conversion_bytes=6,
    # moe: --moe-grouped-gemm runs TEGroupedMLP, Transformer Engine's GroupedLinear
    # (core/extensions/transformer_engine.py TEGroupedLinear @ d98e8a64dd), whose grouped GEMM is
    # one cuBLAS GEMM per local expert over 4 streams (TransformerEngine common/gemm/
    # cublaslt_gemm.cu multi_stream_cublas_gemm, util/multi_stream.cpp @ d0067d0)
    expert_gemm_streams=GROUPED_GEMM_STREAMS,
    # moe: without --moe-permute-fusion, moe_utils.permute/unpermute run index_select and
    # scatter_add_ (atomic adds; moe_utils.py @ d98e8a64dd); with it, TE's fused kernels
    unfused_permute_scatters=True,
    route_weighting=(0, 1),  # moe_utils.unpermute's probs multiply, zeros, scatter_add_
    # Transformer Engine's DotProductAttention prefers FusedAttention (cuDNN) over flash-attn on
    # sm90 and later ("give FusedAttention preference on Hopper+": pytorch/attention/
    # dot_product_attention/utils.py get_attention_backend @ d0067d0)
    attention_kernel="cudnn",
    # moe: --mtp-num-layers (core/transformer/multi_token_prediction.py @ d98e8a64dd)
    trains_mtp=True,
    # moe: every dispatcher waits for the token counts on the host once per MoE layer forward:
    # the all-to-all's `_maybe_dtoh_and_synchronize` at its cuda_sync_point, which is "no_sync"
    # only when padding to capacity (--moe-pad-expert-input-to-capacity, not a plan3d setting),
    # also with ep = tp = 1 ("before_finish", for the counts' CPU value); the all-gather's
    # `.cpu()`; DeepEP's dispatch returning num_recv_tokens_per_expert_list (moe/token_
    # dispatcher.py MoEAlltoAllTokenDispatcher.preprocess, MoEAllGatherTokenDispatcher, moe/
    # fused_a2a.py FusedDispatch @ d98e8a64dd); the backward reuses the split lists
    moe_forward_sync="always",
    dp_step_phases=megatron_step_phases,
)
