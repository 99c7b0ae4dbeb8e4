"""DeepSpeed's expert parallelism, as plan3d runs and writes it (moe helper, issue 23): AutoEP.

Conventions follow deepspeed 0.19.8 (the parser suite's release; the files cited are the same in
deepspeedai/DeepSpeed @ edaa72212):

- module_inject/auto_ep_config.py `parse_autoep_config`, `validate_autoep_config`: the JSON's
  "expert_parallel" section — enabled, autoep_size (ep), expert_tensor_parallel_size (etp),
  preset_model, comm_backend ("comm": torch's all_to_all_single with per-rank splits;
  "deepep": DeepEP, which needs comm_max_tokens_per_rank), use_grouped_mm (default true).
- module_inject/auto_ep_folding.py `build_folding_spec`, `validate_folding_global`: ep·etp
  divides the stage (world/pp), leaving edp = stage/(ep·etp) expert-data-parallel ranks; etp
  must be 1 ("reserved ... not supported yet"); with AutoTP (tp > 1) only pp = 1, no Ulysses.
- runtime/engine.py `_validate_zero3_moe_compatibility`: ZeRO-3 runs AutoEP layers (and
  refuses the native deepspeed.moe.layer.MoE) but not with sequence parallelism (Ulysses) and
  only with etp = 1; runtime/zero/stage_1_and_2.py `_configure_moe_settings`: ZeRO-1/2
  partition the experts' optimizer states over the expert-data-parallel group and need
  contiguous_gradients and reduce_scatter (the emitted config sets both).
- module_inject/auto_ep_layer.py, moe/ep_router.py, moe/ep_experts.py: a dropless token-choice
  top-k router (no capacity, no forced balance), the tokens exchanged by all_to_all_single (or
  DeepEP) over the ep group, the local experts run as torch._grouped_mm — torchtitan's MoE,
  which it ports. plan3d costs it with the MoE formulas every framework shares
  (formulas/moe*.py; the framework's expert_gemm_streams = 0: one grouped kernel).
- runtime/pipe/engine.py `PipelineEngine.__init__`: the pipeline engine runs a PipelineModule
  only; AutoEP patches the MoE blocks of a Hugging Face model.

Why AutoEP and not deepspeed.moe.layer.MoE: the older layer is model code (its ep_size is an
argument of the module, not a config key), dispatches GShard-style into capacity-padded
[E, C, h] buffers, and the engine refuses it under ZeRO-3; AutoEP is the expert parallelism
DeepSpeed's config drives and that runs with every ZeRO stage.
"""

from __future__ import annotations

from ..errors import PlanError
from ..formulas.choices import RecomputeModule
from ..rules import Rule, layout
from ..schema import ModelSpec, PlanConfig

AUTOEP_PRESETS = {
    "deepseek-v3": ("deepseek_v3", "deepseek-ai/DeepSeek-V3"),
    "qwen3-30b-a3b": ("qwen3_moe", "Qwen/Qwen3-30B-A3B"),
    "qwen3-235b-a22b": ("qwen3_moe", "Qwen/Qwen3-235B-A22B"),
    "mixtral-8x7b": ("mixtral", "mistralai/Mixtral-8x7B-v0.1"),
    "mixtral-8x22b": ("mixtral", "mistralai/Mixtral-8x22B-v0.1"),
}
"""plan3d's MoE models that AutoEP has a preset for (module_inject/auto_ep_presets/: deepseek_v2,
deepseek_v3, minimax_m3, mixtral, qwen3_5_moe, qwen3_moe), with the Hugging Face checkpoint whose
MoE blocks it replaces."""


def _ep(c):
    return getattr(c, "ep", 1)


def _etp(c):
    return getattr(c, "etp", 1)


UNSUPPORTED = {"moe_capped": "capacity factor (--moe-capacity-factor: it routes dropless)",
               "moe_forced": "forced balance (--moe-forced-balance)",
               "moe_allgather": "allgather dispatcher",
               "a2a_overlap": "all-to-all overlap (--moe-a2a-overlap)",
               "moe_shared_overlap": "shared-expert overlap"}
"""The layout's MoE run settings (rules.layout) AutoEP does not have, and how to name them."""

MOE_RULES = (
    Rule("expert parallelism is AutoEP's: no expert tensor parallelism (etp = 1)",
         lambda m, c: _etp(c) == 1,
         lambda m, c: f"deepspeed: AutoEP runs no expert tensor parallelism "
                      f"(expert_tensor_parallel_size {_etp(c)} is reserved, auto_ep_folding.py); "
                      "use --etp 1 or --framework megatron"),
    Rule("expert parallelism (AutoEP) with tp = pp = cp = 1",
         lambda m, c: (_ep(c) == 1) | ((c.tp == 1) & (c.pp == 1) & (c.cp == 1)),
         lambda m, c: f"deepspeed: AutoEP patches a Hugging Face model, which the pipeline "
                      "engine does not split (it runs a PipelineModule), whose TP would be AutoTP "
                      "(no sequence parallelism, which plan3d's MoE layer with TP needs) and "
                      "which Megatron-DeepSpeed's Ulysses does not drive: with ep > 1 use tp = "
                      f"pp = cp = 1 (got tp={c.tp}, pp={c.pp}, cp={c.cp}), or --framework "
                      "megatron"),
    Rule("expert parallelism (AutoEP) on a model with an AutoEP preset",
         lambda m, c: (_ep(c) == 1) | (m.name in AUTOEP_PRESETS),
         lambda m, c: f"deepspeed: AutoEP has no preset for {m.name} (it has deepseek_v3, "
                      "qwen3_moe, mixtral among plan3d's models); use --ep 1 or --framework "
                      "megatron"),
    Rule("AutoEP's routing: dropless (no capacity factor), no forced balance, the all-to-all "
         "or DeepEP, no all-to-all or shared-expert overlap",
         lambda m, c: sum(getattr(c, key, 0) for key in UNSUPPORTED) == 0,
         lambda m, c: "deepspeed: AutoEP has no " + ", no ".join(
             what for key, what in UNSUPPORTED.items() if getattr(c, key, 0))
         + " (its router is dropless, its exchange all-to-all or DeepEP, not overlapped); "
           "leave it out or use --framework megatron"),
)
"""What DeepSpeed's expert parallelism runs (the module docstring's sources); ZeRO-3 with
Ulysses is already excluded by cp = 1."""


def check(c: PlanConfig, m: ModelSpec) -> None:
    """A PlanError with the first MOE_RULES rule the plan breaks (the emitter's own check)."""
    plan = layout(c, 1)
    for rule in MOE_RULES:
        if not rule.holds(m, plan):
            raise PlanError(rule.message(m, plan))
    modules = c.recompute_modules not in (None, (RecomputeModule.CORE_ATTN,))
    if c.ep > 1 and (modules or c.recompute_layers or c.recompute_group > 1):
        raise PlanError("deepspeed: AutoEP's Hugging Face model checkpoints every decoder layer "
                        "or none (gradient_checkpointing_enable); it has no recompute modules, "
                        "--recompute-layers or --recompute-group")


def expert_parallel_section(c: PlanConfig, m: ModelSpec) -> dict[str, object] | None:
    """The JSON's "expert_parallel" section for a plan with ep > 1 (None otherwise): AutoEP over
    ep ranks with the model's preset, grouped GEMMs, and the plan's dispatcher (DeepEP's buffer
    sized to the tokens one rank routes, mbs·s)."""
    if c.ep == 1:
        return None
    preset, _ = AUTOEP_PRESETS[m.name]
    section: dict[str, object] = {"enabled": True, "autoep_size": c.ep,
                                  "expert_tensor_parallel_size": 1, "preset_model": preset,
                                  "use_grouped_mm": True}
    if c.moe_dispatcher == "deepep":
        section.update(comm_backend="deepep", comm_max_tokens_per_rank=c.mbs * c.seq_len)
    else:
        section["comm_backend"] = "comm"
    return section


def launch_notes(c: PlanConfig, m: ModelSpec, notes: list[str]) -> None:
    """How the AutoEP plan is launched and what it runs (in place of Megatron-DeepSpeed's
    arguments, which drive a different model)."""
    preset, hf = AUTOEP_PRESETS[m.name]
    edp = c.dp * c.tp * c.cp // c.ep
    notes.append(f"AutoEP (DeepSpeed's expert parallelism for Hugging Face MoE models): load "
                 f"{hf} with transformers and pass this config to deepspeed.initialize; AutoEP "
                 f"replaces each MoE block (preset {preset}) by one that holds "
                 f"{m.n_experts // c.ep} of the {m.n_experts} experts on each of ep = {c.ep} "
                 f"ranks, runs them as torch._grouped_mm, and reduces their gradients over "
                 f"edp = {edp} expert-data-parallel ranks (ZeRO shards their optimizer states "
                 "there). No Megatron-DeepSpeed arguments: tp = pp = cp = 1.")
    notes.append("Routing is dropless (AutoEP's router has no capacity factor), tokens move by "
                 + ("DeepEP (comm_backend deepep, its buffer sized to mbs·seq_len tokens)"
                    if c.moe_dispatcher == "deepep" else "all_to_all_single (comm_backend comm)")
                 + "; the exchange is not overlapped with compute.")
    recompute = {"full": "full recomputation is the model's gradient_checkpointing_enable() "
                         "(each decoder layer checkpointed; the JSON's activation_checkpointing "
                         "block configures deepspeed.checkpointing, which it does not use)",
                 "selective": "selective recomputation as plan3d costs it (the attention core's "
                              "s×s scores not kept) is what the model's flash or SDPA attention "
                              "does without any switch",
                 "none": "no recomputation: leave gradient checkpointing off"}
    notes.append("Recomputation: " + recompute[c.recompute.value] + ".")
