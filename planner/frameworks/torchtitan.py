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
from ..formulas.choices import (
    Attention,
    ContextKind,
    Precision,
    QuantRecipe,
    Recompute,
    Schedule,
    ZeroStage,
)
from ..rules import Rule, layout
from ..schema import ModelSpec, PlanConfig
from ..tomltext import toml_tables
from .base import (
    ActivationStyle,
    DPPhase,
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
    "torchtitan @ 0.3.0 (PyPI): --module/--config from the config registry, --section.key "
    "overrides (torchtitan/config/manager.py, config/configs.py, trainer.py), pipeline split "
    "from distributed/pipeline_parallel.py.")
RELEASE_02 = (
    "torchtitan @ 0.2.2 (PyPI): TOML job config, torchtitan/config/job_config.py ([model] "
    "name/flavor/converters, [training], [parallelism], [activation_checkpoint]); pipeline "
    "split from distributed/pipeline_parallel.py.")

FP32 = 4  # bytes
ADAM_MOMENTS = 8  # Adam m and v in fp32


def model_states(zero: ZeroStage, grad_bytes: float) -> ModelStates:
    """FSDP2 (ZeRO-2/3): fp32 parameters, fp32 gradients (they take the sharded parameter's dtype,
    whatever the reduce dtype) and Adam's m, v, all sharded: 16 B/param over d. DDP (ZeRO-0): the
    same 16 B/param on every rank."""
    sharded = zero >= ZeroStage.GRADIENTS
    # goodput: its DCP checkpoint holds the model's fp32 parameters and the optimizer's m, v
    # (torchtitan/components/checkpointer/dcp.py, its MODEL and OPTIMIZER states,
    # checkpointer/base.py l.28 @ b5bcd76): 4 + 8 = 12 B/param, the default weight + optimizer
    # bytes
    return ModelStates(FP32, sharded, FP32, sharded, ADAM_MOMENTS, sharded,
                       source="torch.distributed.fsdp fully_shard + torchtitan parallelize.py")


def _elsewhere(c, names: str = "megatron") -> str:
    """A refusal's other way out, another framework: `--framework NAMES`, and where the plan
    sets torchtitan's own settings (OWN_SETTINGS, which the others refuse) that they go."""
    own = _torchtitans_own(c)
    return f"--framework {names}" + (f" without {' and '.join(own)} (torchtitan's own)"
                                     if own else "")


def _dispatch_refusal(m, c) -> str:
    """Why torchtitan cannot launch the plan's token exchange (RULES' dispatcher rule)."""
    if getattr(c, "deepep", 0):
        return (f"torchtitan: DeepEP is chosen inside a config_registry function "
                f"(model_registry(..., moe_comm_backend=\"deepep\")), not on the command line, "
                f"and torchtitan 0.3.0's entry for {m.name} builds the all-to-all; use "
                f"--moe-dispatcher alltoall, or {_elsewhere(c, 'megatron or deepspeed')} for DeepEP")
    if getattr(c, "moe_allgather", 0):
        return ("torchtitan: its token dispatchers are the all-to-all, DeepEP, HybridEP and "
                "MinimalAsyncEP, no all-gather; use --moe-dispatcher alltoall or "
                f"{_elsewhere(c)}")
    if getattr(c, "moe_capped", 0):
        return ("torchtitan: its MoE routes dropless; a capacity factor exists only for "
                "HybridEP's non-blocking dispatch (non_blocking_capacity_factor), set in a "
                "config_registry function, not on the command line; leave --moe-capacity-factor "
                f"out or use {_elsewhere(c)}")
    if getattr(c, "moe_shared_overlap", 0):
        return ("torchtitan: its MoE runs the shared experts after the routed ones (MoE.forward), "
                "not beside the token exchange; leave --moe-shared-expert-overlap out or use "
                f"{_elsewhere(c)}")
    return ("torchtitan: it has no overlapped expert-parallel communication (Megatron's "
            "--overlap-moe-expert-parallel-comm); leave --moe-a2a-overlap out or use "
            f"{_elsewhere(c)}")


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
                      f"gated one: use {_elsewhere(c, 'megatron or deepspeed')}"),
    # expert parallelism borrows the dense region's ranks: ep divides dp_shard·cp·tp and the
    # experts are FSDP-sharded over efsdp = dp_shard·cp·tp/ep; no expert TP
    # (torchtitan/distributed/parallel_dims.py @ b5bcd76, ParallelismConfig.expert_parallel_degree)
    Rule("expert parallelism with ep dividing dp_shard·cp·tp, no expert TP (etp = 1)",
         lambda m, c: ((getattr(c, "etp", 1) == 1)
                       & ((getattr(c, "dp_shard", c.dp) * c.cp * c.tp) % getattr(c, "ep", 1)
                          == 0)),
         lambda m, c: "torchtitan: expert parallelism borrows the dense ranks (ep must divide "
                      "dp_shard·cp·tp) and has no expert tensor parallelism; use --etp 1 or "
                      f"{_elsewhere(c)}"),
    # moe: the token dispatcher is the model's, chosen in Python: model_registry(flavor,
    # moe_comm_backend=...) builds it (models/qwen3/__init__.py l.613-622, models/deepseek_v3/
    # __init__.py l.616-629 @ 0.3.0) and Trainer.Config.model_spec is left out of the command
    # line (tyro.conf.Suppress, trainer.py l.75-77 @ 0.3.0). The registry entries plan3d writes,
    # qwen3_30b_a3b and deepseek_v3_671b, keep the "standard" all-to-all (AllToAllTokenDispatcher;
    # DeepEP only in the debug entry qwen3_moe_deepep): config_registry.py @ 0.3.0. The backends
    # are standard, deepep, hybridep, minimal_async_ep (models/common/config_utils.py l.360-425
    # @ 0.3.0): no all-gather dispatcher; and no overlapped expert-parallel communication setting.
    # Routing is dropless: a capacity factor is only HybridEP's non_blocking_capacity_factor,
    # a field of the dispatcher's config (config_utils.py l.365-406, overrides/
    # moe_token_dispatcher.py @ 0.3.0); MoE.forward runs the shared experts after the routed
    # ones, in the same stream (models/common/moe.py l.403-460 @ 0.3.0). Forced balance it has:
    # --debug.moe_force_load_balance (config/configs.py DebugConfig, models/common/decoder.py
    # l.182 @ 0.3.0), written by _sections.
    Rule("the all-to-all token dispatcher, dropless, not overlapped (DeepEP and a capacity "
         "factor are not command-line settings of torchtitan 0.3.0; it has no all-gather "
         "dispatcher, nor Megatron's a2a or shared-expert overlap)",
         lambda m, c: (getattr(c, "deepep", 0) + getattr(c, "moe_allgather", 0)
                       + getattr(c, "a2a_overlap", 0) + getattr(c, "moe_capped", 0)
                       + getattr(c, "moe_shared_overlap", 0)) == 0,
         lambda m, c: _dispatch_refusal(m, c)),
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
                      f"--offload-optimizer 1) or {_elsewhere(c, 'megatron or deepspeed')}"),
    Rule("parameter offload with FSDP2 (ZeRO-2/3)",
         lambda m, c: (off_params(c) == 0) | (c.zero >= 2),
         lambda m, c: "torchtitan: CPU offload is an FSDP2 policy; use --zero 2 or 3"),
    Rule("no activation offload",
         lambda m, c: off_act(c) == 0,
         lambda m, c: "torchtitan: its trainer has no activation offload to host memory (only "
                      f"the experimental graph_trainer does); use {_elsewhere(c)}"),
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


# ---- the pipeline split, as torchtitan makes it ---------------------------------------------


def titan_stage_layers(n_layers: int, stages: int, first_less: int, last_less: int) -> list[int]:
    """The transformer layers torchtitan puts on each of `stages` stages: it spreads
    L + first_less + last_less "effective layers" (the embedding and the output weighed as that
    many layers) as evenly as it can, the first (E mod S) stages one more, then takes the
    weights off the first and the last stage (torchtitan/distributed/pipeline_parallel.py
    `_generate_llm_fqn_per_model_part` @ 0.3.0, `generate_llm_fqn_per_model_part` @ 0.2.2; the
    same rule in both). Raises ValueError where torchtitan refuses the split."""
    if stages == 1:
        return [n_layers]
    effective = n_layers + first_less + last_less
    base, extra = divmod(effective, stages)
    if base == 0 or first_less > base or last_less > base:
        raise ValueError(f"torchtitan cannot split {n_layers} layers into {stages} stages "
                         f"with first/last less layers {first_less}/{last_less}")
    out = [base + (i < extra) for i in range(stages)]
    out[0] -= first_less
    out[-1] -= last_less
    return out


def titan_stage_count(n_layers: int, per_stage: int, first_less: int, last_less: int) -> int:
    """⌈(L + first_less + last_less) / layers_per_stage⌉ stages (pipeline_parallel.py @ 0.3.0
    and 0.2.2, `pipeline_parallel_layers_per_stage` set)."""
    return math.ceil((n_layers + first_less + last_less) / per_stage)


def titan_rank_stages(rank: int, pp: int, stages: int, v_shape: bool) -> tuple[int, ...]:
    """The stages a pipeline rank holds: looped (rank, rank + pp, …) or, for the V schedules,
    (rank, 2·pp − 1 − rank) (`_get_pp_rank_to_stage_indices_mapping` @ 0.3.0)."""
    if v_shape:
        return (rank, stages - 1 - rank)
    return tuple(rank + s * pp for s in range(stages // pp))


def titan_split(n_layers: int, stages: int, cap: int) -> tuple[int, int, int] | None:
    """(layers_per_stage, first_less, last_less) for which torchtitan builds exactly `stages`
    stages with none over `cap` layers (plan3d's costed chunk, ⌈L/S⌉). torchtitan's default
    weights (1, 1) first, when they keep to the cap; then (0, 0), the plan's own even split;
    None when no weights do (the caller lists the modules of each stage instead)."""
    for first, last in ((1, 1), (0, 0), (1, 0), (0, 1)):
        per_stage = math.ceil((n_layers + first + last) / stages)
        if titan_stage_count(n_layers, per_stage, first, last) != stages:
            continue
        try:
            layers = titan_stage_layers(n_layers, stages, first, last)
        except ValueError:
            continue
        if max(layers) <= cap and min(layers) >= 0:
            return per_stage, first, last
    return None


def _module_lists(n_layers: int, stages: int, version: str) -> list[list[str]]:
    """parallelism.module_fqns_per_model_part: the plan's split written out, ⌈L/S⌉ layers on
    the first L mod S stages (llama3's module names: tok_embeddings, layers.i, norm, and the
    output projection, `lm_head` @ 0.3.0, `output` @ 0.2.2)."""
    base, extra = divmod(n_layers, stages)
    out, start = [], 0
    for i in range(stages):
        count = base + (i < extra)
        out.append([f"layers.{j}" for j in range(start, start + count)])
        start += count
    out[0].insert(0, "tok_embeddings")
    out[-1] += ["norm", "lm_head" if version == "0.3" else "output"]
    return out


# ---- the emitter: torchtitan 0.3 (config registry + overrides) and 0.2 (TOML) ------------------

TESTED_VERSIONS = ("0.3", "0.2")
"""torchtitan releases the emitter writes for, newest (the default) first: 0.3.0 (config
registry: `--module M --config C` and `--section.key value` overrides,
torchtitan/config/manager.py @ 0.3.0) and 0.2.2 (TOML job config, --job.config_file)."""

REGISTRY = {
    # moe: torchtitan/models/deepseek_v3 and qwen3 config_registry.py @ 0.3.0 (deepseek_v3_671b,
    # qwen3_30b_a3b; flavors "671B" and "30B-A3B")
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b", "671B"),
    # the 16B flavour (DeepSeek-V2-Lite's shape): config_registry.py @ 0.3.0 deepseek_v3_16b,
    # __init__.py @ 0.2.2 deepseekv3_args["16B"]; plan3d's model is a reference file
    "torchtitan-deepseek-v3-16b": ("deepseek_v3", "deepseek_v3_16b", "16B"),
    "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b", "30B-A3B"),
    "llama-3.1-8b": ("llama3", "llama3_8b", "8B"),
    "llama-3.1-70b": ("llama3", "llama3_70b", "70B"),
    "llama-3.1-405b": ("llama3", "llama3_405b", "405B"),
}
"""plan3d presets that torchtitan's registry builds: (module, 0.3 config function, 0.2 flavor)
— torchtitan/models/llama3/config_registry.py and __init__.py @ 0.3.0 (llama3_configs),
models/llama3/__init__.py @ 0.2.2 (llama3_args). The parser suite compares each built model
with plan3d's field by field."""

FLOAT8_CONFIGS = {"llama3_405b"}
"""0.3 registry entries whose model is converted to float8 (Float8LinearConverter, lm_head
left in bf16; with torch.compile and async TP): config_registry.py @ 0.3.0 llama3_405b. Their
precision is fixed: the plan's must match."""

REFERENCE_MODELS = {"torchtitan-deepseek-v3-16b": "reference/models/torchtitan-deepseek-v3-16b.toml"}
"""REGISTRY's models that are plan3d model files shipped with the package, not presets (the
path under planner/)."""

SHAPE = ("n_layers", "hidden", "n_heads", "kv_heads", "ffn", "vocab", "rope_theta",
         "rope_scaling", "rope_factor", "norm_eps", "qk_norm", "tied_embeddings",
         # moe: the experts and MLA, so that a MoE model is matched by its whole shape
         "n_experts", "top_k", "moe_ffn", "n_shared_experts", "first_k_dense", "moe_layer_freq",
         "moe_layer_phase", "q_lora_rank", "kv_lora_rank")


def registry_model(name: str) -> ModelSpec:
    """The plan3d model of a REGISTRY entry: a preset, or a model file shipped with plan3d."""
    from pathlib import Path

    from ..catalog import load_model

    file = REFERENCE_MODELS.get(name)
    return load_model(str(Path(__file__).parents[1] / file) if file else name)


OWN_SETTINGS = {
    "compile_loss": "torchtitan's compile.components ['loss']",
    "torchtitan_flex_ac": "torchtitan's op SAC before v0.2.1 (full AC on a DeepSeek-V3 "
                          "flavour's attention)",
}
"""fit: the plan settings (PlanConfig/PlanRequest fields) that describe a torchtitan setting,
refused under another framework (search.options.parse_request)."""


def _torchtitans_own(c: PlanConfig) -> list[str]:
    """The plan's flags that are torchtitan's own settings (OWN_SETTINGS), which Megatron
    refuses."""
    return ["--" + name.replace("_", "-") for name in OWN_SETTINGS if getattr(c, name, 0)]


def _megatron_instead(c: PlanConfig) -> str:
    """The refusals' other way out, Megatron-Core, offered only where the plan's flags run there
    (_torchtitans_own)."""
    own = _torchtitans_own(c)
    if own:
        return (f" (not --emit megatron: {' and '.join(own)} "
                f"{'is' if len(own) == 1 else 'are'} torchtitan's own)")
    return ", or plan it for Megatron-Core (--emit megatron, without --framework torchtitan)"


def _registry_entry(fw: str, m: ModelSpec, c: PlanConfig) -> tuple[str, str, str]:
    """The registry entry that builds `m`: by name, or a model of the same shape."""
    if m.name in REGISTRY:
        return REGISTRY[m.name]
    for name, entry in REGISTRY.items():
        known = registry_model(name)
        if all(getattr(known, f) == getattr(m, f) for f in SHAPE):
            return entry
    raise PlanError(
        f"{fw}: torchtitan builds its models from its config registry, which has no "
        f"{m.name} (plan3d knows {', '.join(REGISTRY)}); write a config_registry function "
        f"for it and pass it with --module{_megatron_instead(c)}")


def _check(fw: str, c: PlanConfig) -> None:
    """What torchtitan cannot run, refused with the reason."""
    if c.torchtitan_flex_ac:
        raise PlanError(f"{fw}: --torchtitan-flex-ac costs torchtitan before v0.2.1 (full AC on "
                        "the attention of its flex-attention flavours); the releases plan3d "
                        "writes for (0.2.2, 0.3.0) wrap the whole block in per-op SAC: leave "
                        "--torchtitan-flex-ac out to emit")
    if c.recompute_layers:  # fit
        raise PlanError(f"{fw}: per-layer activation checkpointing (every N-th block) was "
                        f"removed at 114151ad4 (per-op selective only since); --recompute-layers "
                        f"is costed for older torchtitan but not emitted: use --recompute full "
                        f"or selective")
    if c.precision is Precision.NVFP4 or c.fp8_recipe not in (None, QuantRecipe.CURRENT):
        raise PlanError(f"{fw}: the settings plan3d writes run torchao's float8 tensorwise "
                        f"(--fp8-recipe current); MXFP8 and NVFP4 are model_registry converters "
                        f"(components/quantization/mxfp8.md, nvfp4.md @ b5bcd76) and delayed or "
                        f"blockwise scaling are not torchao recipes")
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
                        "passes K/V); re-plan with --cp-kind ring"
                        + ("" if _torchtitans_own(c) else " or --framework megatron"))
    divisor = c.tp * (2 * c.cp if c.cp > 1 else 1)
    if c.seq_len % divisor:
        raise PlanError(f"{fw}: seq_len {c.seq_len} must be a multiple of tp·2·cp = {divisor}")
    if c.zero_stage is ZeroStage.NONE and c.dp_replicate > 1:
        raise PlanError(f"{fw}: HSDP (dp_shard {c.dp_shard} < dp {c.dp}) is FSDP2 on a 2-D mesh; "
                        "re-plan with zero_stage 2 or 3")


def _dispatcher(c: PlanConfig, m: ModelSpec, version: str) -> dict[str, object]:
    """The plan's token exchange as torchtitan sets it: the all-to-all by default in both
    releases; DeepEP only in 0.2.2, by parallelism.expert_parallel_comm_backend (config/
    job_config.py l.474 @ 0.2.2), which deepseek_v3 reads (models/deepseek_v3/model/args.py
    l.116, infra/parallelize.py l.100 @ 0.2.2) and qwen3 does not (models/qwen3/model/model.py
    l.368 builds the all-to-all MoE @ 0.2.2). 0.3.0 chooses it in Python only (RULES)."""
    if c.moe_dispatcher == "allgather" or c.moe_a2a_overlap:
        raise PlanError(_dispatch_refusal(m, layout(c, 1)))
    if c.moe_dispatcher != "deepep" or c.ep == 1:
        return {}
    module = _registry_entry("torchtitan", m, c)[0]
    if version == "0.2" and module == "deepseek_v3":
        return {"expert_parallel_comm_backend": "deepep"}
    if version == "0.2":
        raise PlanError(f"torchtitan: 0.2.2's {module} MoE ignores parallelism."
                        "expert_parallel_comm_backend (only deepseek_v3 builds DeepEPMoE), so "
                        f"{m.name} would run the all-to-all; plan with --moe-dispatcher alltoall")
    raise PlanError(_dispatch_refusal(m, layout(c, 1)) + " (torchtitan@0.2 writes DeepEP "
                    "for deepseek-v3 alone)")


def _data_parallel(c: PlanConfig, notes: list[str]) -> dict[str, object]:
    """DDP, FSDP2 or HSDP degrees and FSDP2's reshard policy."""
    if c.zero_stage is ZeroStage.NONE:
        return {"data_parallel_replicate_degree": c.dp, "data_parallel_shard_degree": 1}
    # HSDP: FSDP2 inside data_parallel_shard_degree ranks, replicated across the rest
    out: dict[str, object] = {"data_parallel_replicate_degree": c.dp_replicate,
                              "data_parallel_shard_degree": c.dp // c.dp_replicate}
    if c.dp_replicate > 1:
        notes.append(f"HSDP: FSDP2 shards over dp_shard·cp = {c.dp // c.dp_replicate}·{c.cp} "
                     f"ranks and all-reduces the gradient shards across {c.dp_replicate} "
                     "replicas (mesh [\"pp\", \"dp_replicate\", \"dp_shard\", \"cp\", \"tp\"]).")
    if c.zero_stage is ZeroStage.GRADIENTS:
        out["fsdp_reshard_after_forward"] = "never"
        notes.append("ZeRO-2 is FSDP2 with reshard_after_forward off: weights stay gathered "
                     "from forward to backward, gradients and optimizer state are sharded.")
    elif c.pp > 1:
        # the stage stays gathered across micro-batches, as the plan was costed
        out["fsdp_reshard_after_forward"] = "default"
        notes.append("ZeRO-3 under PP is FSDP2 with the 'default' reshard policy, which keeps "
                     "each stage's weights gathered across its micro-batches (no all-gather per "
                     "micro-batch); gradients accumulate unsharded until the last micro-batch, "
                     "as plan3d sized it.")
    else:
        out["fsdp_reshard_after_forward"] = "always"
        notes.append("ZeRO-3 is FSDP2 resharding after every forward ('always').")
    return out


def _pipeline(c: PlanConfig, m: ModelSpec, version: str, notes: list[str]) -> dict[str, object]:
    """Schedule, and the split that places exactly the layers plan3d costed: at most ⌈L/S⌉ on
    any stage (S = pp·vpp, or 2·pp for the V schedules)."""
    v_shape = c.schedule in V_SCHEDULES
    stages = c.pp * (2 if v_shape else c.vpp)
    schedule = Schedule.INTERLEAVED if interleaved(c) else (
        Schedule.ONE_F_ONE_B if c.schedule is Schedule.INTERLEAVED else c.schedule)
    out: dict[str, object] = {"pipeline_parallel_schedule": _TITAN_SCHEDULES[schedule]}
    cap = math.ceil(m.n_layers / stages)
    split = titan_split(m.n_layers, stages, cap)
    if split is None:
        out["module_fqns_per_model_part"] = _module_lists(m.n_layers, stages, version)
        layers = [len([n for n in part if n.startswith("layers.")])
                  for part in out["module_fqns_per_model_part"]]
    else:
        per_stage, first, last = split
        out.update(pipeline_parallel_layers_per_stage=per_stage,
                   pipeline_parallel_first_stage_less_layers=first,
                   pipeline_parallel_last_stage_less_layers=last)
        layers = titan_stage_layers(m.n_layers, stages, first, last)
    ranks = [sum(layers[s] for s in titan_rank_stages(r, c.pp, stages, v_shape))
             for r in range(c.pp)]
    notes.append(f"Pipeline: {stages} stages of {layers} layers; by rank {ranks} "
                 f"({'V' if v_shape else 'looped'} placement), none over the "
                 f"{cap} per stage plan3d costed.")
    out["pipeline_parallel_microbatch_size"] = c.mbs
    return out


def _training(c: PlanConfig, notes: list[str]) -> dict[str, object]:
    """Batch, sequence, CPU offload and mixed precision."""
    out: dict[str, object] = {"seq_len": c.seq_len}
    if c.pp > 1:
        out["local_batch_size"] = c.mbs * c.n_micro
        notes.append(f"With PP the n_micro = {c.n_micro} micro-batches are carved out of "
                     "local_batch_size by pipeline_parallel_microbatch_size; no extra gradient "
                     "accumulation.")
    else:
        out["local_batch_size"] = c.mbs
        if c.n_micro > 1:
            notes.append(f"global_batch_size / (local_batch_size·dp) = {c.n_micro} gradient "
                         "accumulation steps.")
    out["global_batch_size"] = c.gbs
    if c.offload:  # offload: FSDP2 CPUOffloadPolicy
        out["enable_cpu_offload"] = True
        notes.append("training.enable_cpu_offload: FSDP2's CPUOffloadPolicy keeps the sharded "
                     "fp32 parameters, gradients and Adam states in pinned host memory and runs "
                     "the optimizer step on the CPU (torchtitan/distributed/fsdp.py @ b5bcd76).")
    out["mixed_precision_param"] = "bfloat16"
    out["mixed_precision_reduce"] = "float32"
    if c.grad_dtype == "bf16":
        notes.append("torchtitan reduces gradients in float32 only (mixed_precision_reduce); the "
                     "plan's bf16 gradients cannot be expressed, so gradient traffic and the "
                     "sharded gradients are twice the plan's.")
    return out


def _general_notes(c: PlanConfig, notes: list[str]) -> None:
    if c.recompute is Recompute.SELECTIVE:
        notes.append("Selective is torchtitan's per-op SAC, as plan3d costs it: it saves "
                     "attention outputs and every second matmul's, and recomputes the rest "
                     "(pointwise ops, the other matmuls, the MoE router gate and grouped "
                     "expert GEMMs).")
    if c.tp > 1 and not c.sequence_parallel:
        notes.append("torchtitan's TP always shards norms and residuals over the sequence "
                     "(sequence parallel); activations are smaller than the plan's.")
    if c.attention is Attention.CLASSIC:
        notes.append("torchtitan's Llama uses SDPA/flex attention (no stored score matrix); the "
                     "plan's classic attention is an over-estimate here.")
    if c.overlap_grad_reduce is False:
        notes.append("FSDP2 always overlaps its collectives with compute; that cannot be "
                     "switched off.")


def _sections(c: PlanConfig, m: ModelSpec, version: str, notes: list[str]) -> dict[str, dict]:
    """The settings by section, in torchtitan's key names (the same in 0.2 and 0.3)."""
    _check("torchtitan", c)
    if c.offload:
        offload_refusal("torchtitan", c, m, OFFLOAD_RULES)
    parallelism = _data_parallel(c, notes)
    parallelism.update(tensor_parallel_degree=c.tp, pipeline_parallel_degree=c.pp,
                       context_parallel_degree=c.cp)
    if m.is_moe:  # always said: deepseek_v3_671b's registry entry sets 2 of its own
        parallelism["expert_parallel_degree"] = c.ep
        parallelism.update(_dispatcher(c, m, version))
        if c.ep > 1:
            notes.append(f"Expert parallelism: ep = {c.ep} borrows the dense ranks, the experts "
                         f"FSDP-sharded over efsdp = dp_shard·cp·tp/ep = "
                         f"{(c.dp // c.dp_replicate) * c.cp * c.tp // c.ep} ranks; tokens move by "
                         + ("DeepEP (expert_parallel_comm_backend deepep: DeepEPMoE and "
                            "DeepEPExpertParallel)." if parallelism.get(
                                "expert_parallel_comm_backend") else "all-to-all."))
    if c.pp > 1:
        parallelism.update(_pipeline(c, m, version, notes))
    training = _training(c, notes)
    sections = {"training": training, "parallelism": parallelism}
    if m.is_moe and c.moe_forced_balance:
        # both releases: [debug] moe_force_load_balance, read by the MoE router (0.3.0
        # models/common/decoder.py l.182; 0.2.2 models/qwen3/model/args.py l.58,
        # deepseek_v3/model/args.py l.111)
        sections["debug"] = {"moe_force_load_balance": True}
        notes.append("Forced balance: debug.moe_force_load_balance routes tokens round-robin, "
                     "every expert the same count (torchtitan: for debugging and benchmarks, "
                     "not for training a model).")
    if (c.pp > 1 or (m.is_moe and c.ep > 1)) and version == "0.3":
        # CUDA graphs do not run under PP, nor with the all-to-all token dispatcher's CPU sync
        # (trainer.py _validate_cuda_graphs @ 0.3.0)
        training["disable_cuda_graphs"] = True
    _general_notes(c, notes)
    return sections


def _titan_02(c: PlanConfig, m: ModelSpec, notes: list[str]) -> str:
    """torchtitan 0.2 (TOML-era): [model] [training] [parallelism] [activation_checkpoint]
    (torchtitan/config/job_config.py @ 0.2.2)."""
    module, _, flavor = _registry_entry("torchtitan", m, c)
    sections: dict[str, dict[str, object]] = {"model": {"name": module, "flavor": flavor}}
    if c.precision is Precision.FP8:
        sections["model"]["converters"] = ["quantize.linear.float8"]
        notes.append("FP8: torchao Float8Linear via model.converters (recipe in "
                     "[quantize.linear.float8] recipe_name; tensorwise by default).")
        if m.is_moe:
            notes.append("FP8: the routed experts' grouped GEMMs stay bf16, as costed "
                         "(quantize.grouped_mm.float8 is a prototype needing pp = cp = 1).")
    if not m.is_mla:
        # its flavours default to attn_type "sdpa" but for DeepSeek-V3's (flex); its SDPA module
        # asks for cuDNN first (models/attention.py ScaledDotProductAttention @ v0.2.2)
        notes.append("torchtitan 0.2.2 runs this flavour's attention through SDPA (cuDNN "
                     "first), not the FlexAttention of 0.3.0 that plan3d prices: its attention "
                     "runs faster than costed (the profile's cudnn figures, not its flex ones).")
    sections.update(_sections(c, m, "0.2", notes))
    ac: dict[str, object] = {"mode": c.recompute.value}
    if c.recompute is Recompute.SELECTIVE:
        ac["selective_ac_option"] = "op"
    sections["activation_checkpoint"] = ac
    if c.compile_loss:  # fit: the loss alone compiled (job_config.py Compile @ 0.2.2)
        sections["compile"] = {"enable": True, "components": ["loss"]}
    return ("# torchtitan 0.2 job config written by plan3d (--job.config_file job.toml)\n"
            f"# plan: dp{c.dp} tp{c.tp} pp{c.pp} vpp{c.vpp} cp{c.cp}, model {m.name}\n"
            + toml_tables(sections))


def _override_value(value: object) -> str:
    if isinstance(value, list) and value and isinstance(value[0], list):
        return " ".join(",".join(part) for part in value)  # list[list[str]]: A,B C,D
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def _compile_03(c: PlanConfig, fp8_entry: bool) -> dict:
    """fit: [compile] as the plan is costed — the loss compiled alone (--compile-loss), or
    nothing compiled — said whatever the registry entry sets (deepseek_v3_671b and _16b compile
    the loss, config_registry.py @ 0.3.0 l.169, l.241); a float8 entry keeps the model compiled
    its converter and async TP need, with the loss or not (CompileConfig's default components
    are model and loss)."""
    if fp8_entry:
        return {"components": ["model", "loss"] if c.compile_loss else ["model"]}
    if c.compile_loss:
        return {"enable": True, "components": ["loss"]}
    return {"enable": False}


def _titan_03(c: PlanConfig, m: ModelSpec, notes: list[str]) -> str:
    """torchtitan 0.3: `--module M --config C` and `--section.key value` overrides (booleans
    as bare switches), the activation-checkpointing policy as tyro's subcommand
    `activation-checkpoint:{none,selective,full}` (trainer.py Trainer.Config @ 0.3.0)."""
    module, config, _ = _registry_entry("torchtitan", m, c)
    fp8_entry = config in FLOAT8_CONFIGS
    if (c.precision is Precision.FP8) != fp8_entry:
        raise PlanError(
            f"torchtitan: 0.3 sets float8 through the registry's model converters (model_spec is "
            f"not a command-line section), and {config} trains in "
            f"{'float8' if fp8_entry else 'bf16'}; plan with --precision "
            f"{'fp8' if fp8_entry else 'bf16'}, write a config_registry function, or use "
            "--emit torchtitan@0.2")
    if fp8_entry:
        notes.append(f"{config} converts the linear layers to torchao Float8Linear (tensorwise "
                     "scaling, lm_head in bf16) and compiles the model with async TP, as its "
                     "registry entry sets.")
    lines = [f"--module {module}", f"--config {config}"]
    sections = _sections(c, m, "0.3", notes)
    sections["compile"] = _compile_03(c, fp8_entry)
    for section, keys in sections.items():
        for key, value in keys.items():
            flag = f"--{section}.{key}"
            if value is True:
                lines.append(flag)
            elif value is False:
                lines.append(f"--{section}.no-{key.replace('_', '-')}")
            else:
                lines.append(f"{flag} {_override_value(value)}")
    lines.append(f"activation-checkpoint:{c.recompute.value}")
    notes.append("Pass these after `torchrun ... -m torchtitan.train`; the activation-"
                 "checkpoint policy is a subcommand and stays last.")
    return "    " + " \\\n    ".join(lines) + "\n"


def _torchtitan(c: PlanConfig, m: ModelSpec, version: str | None = None) -> EmitResult:
    """torchtitan settings for `version` (0.3, the default: command-line overrides of a config
    registry entry; 0.2: a TOML job config)."""
    version = version or TESTED_VERSIONS[0]
    version = ".".join(version.split(".")[:2])
    if version not in TESTED_VERSIONS:
        raise PlanError(f"torchtitan: version {version} is not one plan3d writes for (tested: "
                        f"{', '.join(TESTED_VERSIONS)})")
    notes = common_notes(c, m)
    if version == "0.2":
        text = _titan_02(c, m, notes)
        return EmitResult("torchtitan", "toml", text, RELEASE_02, notes)
    return EmitResult("torchtitan", "args", _titan_03(c, m, notes), RELEASE, notes)


def fsdp_dp_calls(per_layer, buf, layers, params, dp_ranks, overlap, linear_modules,
                  chunks=1):
    """FSDP2 shards each transformer block as one unit (torchtitan's apply_fsdp:
    fully_shard per block): one all-gather per block in the forward, again in the backward
    (reshard_after_forward), one reduce-scatter per block — `layers` calls each, however many
    pipeline chunks (`chunks`) the blocks are spread over."""
    return layers


def fsdp_step_phases(w):
    """torchtitan's once-per-step collectives, overlapped whatever the plan's overlap flag
    (neither FSDP2 nor DDP can turn it off). ZeRO-0 (DDP): gradient buckets all-reduced as they
    fill in the backward, the last exposed; ZeRO-2 (FSDP2 with reshard_after_forward never):
    the updated shards gathered at the next forward block by block, each one ahead of its
    compute (FSDP2's forward prefetch: torch/distributed/fsdp/_fully_shard/_fsdp_state.py
    @ 01c9f4fcc3ff _pre_forward), the first block's exposed. w.*_calls: one per block."""
    return DPPhase(w.reduce_calls, w.bwd_s), DPPhase(w.gather_calls, w.fwd_s)


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
    split_end_slots=1,
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
    dp_calls=fsdp_dp_calls,
    # FSDP2 per block (issue 22): the forward's all-gathers one block ahead (the first block's
    # exposed), the backward's re-gathers (reshard_after_forward) prefetched one ahead by
    # _pre_backward and each block's reduce-scatter waited on by the next block's (the last one
    # exposed after the backward): L_s pieces each way (frameworks.base.generic_microbatch_phases;
    # torch/distributed/fsdp/_fully_shard/_fsdp_state.py @ 01c9f4fcc3ff)
    dp_step_phases=fsdp_step_phases,
    # FSDP2 (ZeRO-3), per-op selective AC (llama3_8b; the 70B/405B configs use full), and TP
    # always sequence-parallel (config_registry.py, parallelize.py @ b5bcd76)
    defaults={"zero": 3, "recompute": 1, "sp": True},
    # fit: per-layer selective AC (every N-th block) existed until 114151ad4
    # (torchtitan/distributed/activation_checkpoint.py @ 1f029641b); costed, not emitted
    partial_recompute="costed",
    # cp-kind: PyTorch's context_parallel (torch.distributed.tensor.experimental._attention) is
    # ring attention only; torchtitan's context_parallel_rotate_method "allgather" | "alltoall"
    # (config/job_config.py @ 000204a l.336-342) is how the ring passes the K/V shards, not a
    # head-splitting all-to-all (Ulysses): it is priced as the ring
    cp_kinds=(ContextKind.RING,),
    # per-op selective AC reruns every second mm, the router gate and the grouped expert GEMMs
    # with every unsaved op (activation_checkpoint.py _apply_op_sac, the save lists in
    # models/*/infra/parallelize.py @ 99fee810b and v0.2.2: formulas.recompute.op_sac_recomputed_
    # weights)
    op_sac_selective=True,
    # moe: its MoE un-permutes with PyTorch's atomic `out.scatter_add` (MoE.forward) and gathers
    # the routed rows with `torch.gather`, whose backward is a scatter_add_ of the same rows
    # (models/moe/moe.py l.453, l.478 @ 176498cd4, the same at 99fee810b and v0.2.0; v0.2.1
    # replaced the forward's by an index-put and a bmm), with no fused alternative
    unfused_permute_scatters=True,
    route_weighting=(1, 2),  # (rows.to(float32) * scores).to(bf16), zeros_like, scatter_add
    # its language models' attention is FlexAttention with a block-causal (document) mask, the
    # Triton kernel (kernel_options {}: BACKEND auto; "flex_flash" opt-in), compiled on its own:
    # every model_registry's attn_backend="flex" and models/common/config_utils.py
    # get_attention_config in 0.3.0; in 0.2.2 only the DeepSeek-V3 flavours' attn_type "flex"
    # (the others SDPA: _titan_02's note)
    attention_kernel="flex",
    fused_permutation=False,
    # moe: with ep > 1 the dispatch copies the all-to-all's split sizes to the host with a
    # blocking `.to("cpu")` and `.tolist()` ("this would incur a device-to-host sync":
    # distributed/expert_parallel.py ExpertParallel._token_dispatch @ 99fee810b); with ep = 1
    # the grouped GEMM's padding runs "without incurring synchronization between device and
    # host" (the same file, expert_parallel). The backward's all-to-all reuses the lists; the
    # op-SAC policy saves the device-to-host copy (MUST_SAVE, activation_checkpoint.py
    # _apply_op_sac), so its recompute does not wait again; full AC reruns the forward and does
    moe_forward_sync="ep",
    # moe: the FP8 plan3d writes is the Float8Linear converter ("quantize.linear.float8"), which
    # swaps nn.Linear only; the routed experts are GroupedExperts parameters run by
    # torch._grouped_mm and stay bf16. Their converter ("quantize.grouped_mm.float8", rowwise)
    # is a prototype that asserts pp = cp = 1 (components/quantization/float8.py
    # Float8GroupedMMConverter @ v0.2.2 l.176-200) and is not written
    fp8_expert_gemms=False,
)
