"""Megatron-LM launch arguments for a mixture-of-experts or MLA model, and which emitters express
expert parallelism.

Option names are those of Megatron-LM @ d98e8a64dd: `--num-experts` and `--moe-layer-freq` are
declared in megatron/training/arguments.py (`_add_moe_args`, `moe_freq_type`); the others are
generated from the dataclass fields of TransformerConfig / ModelParallelConfig / the MLA config
(megatron/core/transformer/transformer_config.py, megatron/core/model_parallel_config.py) by
megatron/training/argument_utils.py, which turns `moe_router_topk` into `--moe-router-topk`.
Megatron's `--qk-head-dim` is MLA's per-head width without rotary (d_nope) and
`--qk-pos-emb-head-dim` the rotary part (d_rope).
"""

from __future__ import annotations

from ..schema import ModelSpec, PlanConfig


def moe_layer_pattern(model: ModelSpec) -> str:
    """`--moe-layer-freq` for the model: an integer N when every N-th layer from the first is MoE
    (Megatron's integer: layer i is MoE when i mod N = 0, gpt_layer_specs.py
    `get_gpt_decoder_layer_specs` @ d98e8a64dd), else the Python list expression Megatron
    evaluates (1 = MoE layer), e.g. DeepSeek-V3's three dense layers: "([0]*3+[1]*58)", or a
    Qwen-MoE with decoder_sparse_step 2 over 48 layers (MoE at 1, 3, …): "([0,1]*24)"."""
    f, phase, k, n = (model.moe_layer_freq, model.moe_layer_phase, model.first_k_dense,
                      model.n_layers)
    if k == 0 and phase == 0:
        return str(f)
    if f == 1:
        return f"([0]*{k}+[1]*{n - k})"
    if k == 0 and n % f == 0:
        period = ",".join("1" if j == phase else "0" for j in range(f))
        return f"([{period}]*{n // f})"
    moe = set(model.moe_layer_indices)
    return "[" + ",".join("1" if i in moe else "0" for i in range(n)) + "]"


def megatron_moe_args(config: PlanConfig, model: ModelSpec) -> list[tuple[str, object]]:
    """(flag, value) pairs, value None for a switch: the MoE shape and its expert parallelism,
    and MLA's ranks and head widths. Empty for a dense multi-head model."""
    args: list[tuple[str, object]] = []
    if model.is_moe:
        args += [("--num-experts", model.n_experts), ("--moe-router-topk", model.top_k),
                 ("--moe-ffn-hidden-size", model.expert_ffn)]
        if model.n_shared_experts:
            # Megatron-Core holds the shared experts as one MLP of their summed width
            args.append(("--moe-shared-expert-intermediate-size",
                         model.n_shared_experts * model.shared_expert_ffn))
        if model.first_k_dense or model.moe_layer_freq != 1:  # (phase 0 when freq = 1)
            args.append(("--moe-layer-freq", f'"{moe_layer_pattern(model)}"'))
        args += router_args(model)
        args += [("--expert-model-parallel-size", config.ep),
                 # Megatron defaults the expert TP to the dense TP: always say it
                 ("--expert-tensor-parallel-size", config.etp)]
        args += dispatcher_args(config) + [("--moe-grouped-gemm", None)]
        if config.moe_permute_fusion:
            # TransformerConfig.moe_permute_fusion: TE's fused permute/unpermute (moe_utils.py
            # @ d98e8a64dd), what the plan's permutation is costed as (formulas.moe_layer)
            args.append(("--moe-permute-fusion", None))
        if config.moe_capacity_factor is not None:
            args.append(("--moe-expert-capacity-factor", config.moe_capacity_factor))
        if config.moe_forced_balance:
            # TransformerConfig.moe_router_force_load_balancing, a flag through Megatron-LM's
            # ArgumentGroupFactory (arguments.py l.2373; router.py l.861 @ d98e8a64dd)
            args.append(("--moe-router-force-load-balancing", None))
        if config.moe_a2a_overlap:
            args.append(("--overlap-moe-expert-parallel-comm", None))
        if config.moe_shared_expert_overlap:
            args.append(("--moe-shared-expert-overlap", None))
    if model.mtp_layers and config.mtp:
        # DeepSeek-V3's multi-token prediction (TransformerConfig.mtp_num_layers)
        args.append(("--mtp-num-layers", model.mtp_layers))
    if model.is_mla:
        args.append(("--multi-latent-attention", None))
        if model.q_lora_rank is not None:
            args.append(("--q-lora-rank", model.q_lora_rank))
        args += [("--kv-lora-rank", model.kv_lora_rank),
                 ("--qk-head-dim", model.qk_nope_head_dim),
                 ("--qk-pos-emb-head-dim", model.qk_rope_head_dim),
                 ("--v-head-dim", model.v_head_dim)]
    return args


def dispatcher_args(config: PlanConfig) -> list[tuple[str, object]]:
    """The plan's token dispatcher: alltoall (plan3d's default) or allgather by name; DeepEP as
    Megatron's flex dispatcher with its deepep backend (transformer_config.py @ d98e8a64dd
    `moe_token_dispatcher_type`, `moe_flex_dispatcher_backend`)."""
    if config.moe_dispatcher == "deepep":
        return [("--moe-token-dispatcher-type", "flex"),
                ("--moe-flex-dispatcher-backend", "deepep")]
    return [("--moe-token-dispatcher-type", config.moe_dispatcher or "alltoall")]


def bridge_moe_fields(config: PlanConfig, model: ModelSpec) -> dict[str, object]:
    """megatron_moe_args as Megatron-Bridge model.* keys: each flag is the TransformerConfig field
    it is generated from (argument_utils.py @ d98e8a64dd: `--moe-router-topk` ↔
    `moe_router_topk`), but `--num-experts` (`num_moe_experts`), switches as true, and the layer
    pattern as the list Megatron evaluates. MLA's ranks are fields of MLATransformerConfig, not of
    GPTModelProvider: check_expressible refuses an MLA model for nemo before this runs."""
    out: dict[str, object] = {}
    for flag, value in megatron_moe_args(config, model):
        key = {"--num-experts": "num_moe_experts"}.get(flag, flag[2:].replace("-", "_"))
        out[key] = True if value is None else value
    if "moe_layer_freq" in out:
        out["moe_layer_freq"] = [int(i in model.moe_layer_indices)
                                 for i in range(model.n_layers)]
    return out


def router_args(model: ModelSpec) -> list[tuple[str, object]]:
    """The router as Megatron computes it (core/transformer/moe/moe_utils.py @ d98e8a64dd
    `topk_routing_with_score_function`): softmax over the top-k logits (renormalised top-k, the
    default) or over all experts first (--moe-router-pre-softmax: no renormalising, and what
    Megatron requires at k = 1); sigmoid scores renormalised over the top k whenever k > 1;
    group-limited routing; the routed output scale; the aux-loss-free expert bias, which
    Megatron allows with sigmoid scores only (transformer_config.py)."""
    from ..errors import PlanError

    args: list[tuple[str, object]] = []
    if model.router != "softmax":
        args.append(("--moe-router-score-function", model.router))
        if not model.norm_topk_prob and model.top_k > 1:
            raise PlanError(f"megatron: {model.name} routes by sigmoid without renormalising "
                            "the top-k scores; Megatron always renormalises them for k > 1")
    elif not model.norm_topk_prob or model.top_k == 1:
        args.append(("--moe-router-pre-softmax", None))
    if model.n_expert_groups is not None:
        args += [("--moe-router-num-groups", model.n_expert_groups),
                 ("--moe-router-group-topk", model.topk_groups)]
    if model.routed_scaling_factor != 1.0:
        args.append(("--moe-router-topk-scaling-factor", model.routed_scaling_factor))
    if model.router_expert_bias:
        if model.router == "softmax":
            raise PlanError(f"megatron: {model.name}'s expert bias needs sigmoid scores "
                            "(Megatron refuses --moe-router-enable-expert-bias with softmax)")
        args.append(("--moe-router-enable-expert-bias", None))
    return args


EXPRESSES_EXPERT_PARALLELISM = {"megatron", "torchtitan", "nemo"}
"""Emitters that write a MoE plan's expert settings (ep, etp, the MoE shape): Megatron by its
flags, torchtitan by its model registry (deepseek_v3, qwen3) and
parallelism.expert_parallel_degree, Megatron-Bridge by the same settings as model.* keys
(bridge_moe_fields) — but not MLA, whose ranks GPTModelProvider does not hold. DeepSpeed writes
ep > 1 as AutoEP's "expert_parallel" section over the Hugging Face model, which carries the MoE
and MLA shape itself (frameworks/deepspeed_moe.py); with ep = 1 its Megatron-DeepSpeed model does
not hold the shapes below."""

WRITES_MLA = {"megatron", "torchtitan"}


def check_expressible(framework: str, config: PlanConfig, model: ModelSpec) -> None:
    """A PlanError when `framework`'s emitter would silently drop the plan's expert parallelism
    or MLA (the launch would then hold every expert on every GPU, or build a different model)."""
    from ..errors import PlanError

    if framework in WRITES_MLA or (framework == "deepspeed" and config.ep > 1):
        return
    if framework in EXPRESSES_EXPERT_PARALLELISM:
        if model.is_mla:
            raise PlanError(f"{framework}: {model.name}'s multi-head latent attention is not a "
                            "GPTModelProvider setting (Megatron-Bridge's DeepSeek provider holds "
                            "it); use --emit megatron")
        return
    if config.ep > 1 or config.etp > 1:
        raise PlanError(f"{framework}: the emitter does not write expert parallelism yet (plan "
                        f"ep={config.ep}, etp={config.etp}); use --emit megatron, or a plan "
                        "with --ep 1 --etp 1")
    if model.is_mla or model.n_shared_experts or model.first_k_dense or (
            model.is_moe and model.moe_layer_freq != 1) or (
            model.is_moe and model.moe_ffn is not None and model.moe_ffn != model.ffn):
        raise PlanError(f"{framework}: the emitter does not write {model.name}'s MoE/MLA shape "
                        "(shared experts, dense layers, expert width, MLA) yet; use "
                        "--emit megatron")
