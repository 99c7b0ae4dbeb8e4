"""The whole model in Megatron's names: what `--emit megatron` and `--emit nemo` write so the
framework builds the model plan3d planned, not only its shape.

Flag names are those of Megatron-LM @ d98e8a64dd (megatron/training/arguments.py
`_add_network_size_args`, `_add_mla_args`; the rest generated from the TransformerConfig fields
by megatron/training/argument_utils.py); the NeMo / Megatron-Bridge keys are the same settings as
TransformerConfig / GPTModelProvider fields (megatron/core/transformer/transformer_config.py
@ d98e8a64dd; megatron-bridge 0.3.1 src/megatron/bridge/models/gpt_provider.py).

What Megatron cannot express is refused with the reason (a PlanError), never dropped:
- llama3 rotary scaling other than Megatron's fixed low/high frequency factors 1 and 4 and
  original context 8,192 (`_apply_scaling` in core/models/common/embeddings/
  rotary_pos_embedding.py @ d98e8a64dd takes only the factor from the command line);
- sigmoid routing without renormalised top-k probabilities (core/transformer/moe/moe_utils.py
  @ d98e8a64dd `topk_routing_with_score_function` renormalises sigmoid scores whenever k > 1).
"""

from __future__ import annotations

import math

from ..errors import PlanError
from ..schema import ModelSpec, PlanConfig

VOCAB_DIVISOR = 128
"""--make-vocab-size-divisible-by's default: the vocabulary is padded to a multiple of 128·tp
(megatron/core/tokenizers/utils/build_tokenizer.py @ d98e8a64dd `vocab_size_with_padding`)."""

LLAMA3_SCALING = {"rope_low_freq_factor": 1.0, "rope_high_freq_factor": 4.0,
                  "rope_original_max_positions": 8192}
"""The llama3 rotary-scaling constants Megatron fixes (rotary_pos_embedding.py @ d98e8a64dd
`_apply_scaling` defaults); only --rope-scaling-factor is a flag."""

MLA_YARN_DEFAULTS = {"rope_original_max_positions": 4096, "rope_beta_fast": 32.0,
                     "rope_beta_slow": 1.0}
"""MLATransformerConfig's YaRN defaults with no flag of their own for MLA
(transformer_config.py @ d98e8a64dd: original_max_position_embeddings 4096, beta_fast 32,
beta_slow 1)."""

Pairs = list[tuple[str, object]]


def padded_vocab(vocab: int, tp: int, divisor: int = VOCAB_DIVISOR) -> int:
    """The vocabulary Megatron builds: ⌈V / (divisor·tp)⌉·divisor·tp."""
    multiple = divisor * tp
    return math.ceil(vocab / multiple) * multiple


def _llama3_scaling(fw: str, m: ModelSpec) -> None:
    for field, value in LLAMA3_SCALING.items():
        if getattr(m, field) not in (None, value):
            raise PlanError(f"{fw}: {m.name}'s llama3 rotary scaling has {field} = "
                            f"{getattr(m, field)}; Megatron fixes it at {value} (only "
                            "--rope-scaling-factor is a flag)")


def _yarn_args(fw: str, m: ModelSpec) -> Pairs:
    """YaRN: MLA's own fields (DeepSeek), or --position-embedding-type yarn for other
    attention (argument_utils.py `_apply_yarn_config_from_args` @ d98e8a64dd)."""
    out: Pairs = [("--rotary-scaling-factor", m.rope_factor)]
    if m.rope_mscale is not None:
        out.append(("--mscale", m.rope_mscale))
    if m.rope_mscale_all_dim is not None:
        out.append(("--mscale-all-dim", m.rope_mscale_all_dim))
    if m.is_mla:
        for field, value in MLA_YARN_DEFAULTS.items():
            if getattr(m, field) not in (None, value):
                raise PlanError(f"{fw}: {m.name}'s YaRN {field} = {getattr(m, field)} has no "
                                f"flag under MLA (MLATransformerConfig fixes {value})")
        return out
    out = [("--position-embedding-type", "yarn")] + out
    if m.rope_original_max_positions is not None:
        out.append(("--yarn-original-max-position-embeddings", m.rope_original_max_positions))
    if m.rope_beta_fast is not None:
        out.append(("--yarn-beta-fast", m.rope_beta_fast))
    if m.rope_beta_slow is not None:
        out.append(("--yarn-beta-slow", m.rope_beta_slow))
    return out


def rotary_args(fw: str, m: ModelSpec) -> Pairs:
    """The rotary embedding: type, base, scaling."""
    if m.position_embedding != "rotary":
        return []
    out: Pairs = [] if m.rope_scaling == "yarn" and not m.is_mla else [
        ("--position-embedding-type", "rope")]
    out.append(("--rotary-base", int(m.rope_theta or 10000)))
    if m.rope_scaling == "llama3":
        _llama3_scaling(fw, m)
        out += [("--use-rope-scaling", None), ("--rope-scaling-factor", m.rope_factor)]
    elif m.rope_scaling == "yarn":
        out += _yarn_args(fw, m)
    return out


def qk_layernorm(m: ModelSpec) -> bool:
    """Megatron's `--qk-layernorm` (TransformerConfig.qk_layernorm): the per-head query and key
    norms (Qwen3's q_norm, k_norm) and, under MLA, the RMSNorms on the query and key-value
    latents (DeepSeek's q_a_layernorm, kv_a_layernorm), which plan3d always counts and costs for
    an MLA model (formulas.params.mla_replicated_params, model.layer_time's recompute). Megatron
    builds the latent norms only under this flag: gpt_layer_specs.py @ d98e8a64dd makes the
    MLA up-projections TELayerNormColumnParallelLinear (the norm fused in) with qk_layernorm and
    plain column-parallel linears without; the local spec's q_layernorm/kv_layernorm are
    IdentityOp without it. Megatron-Bridge's DeepSeek-V3 provider sets it too."""
    return m.qk_norm or m.is_mla


def megatron_model_args(c: PlanConfig, m: ModelSpec) -> Pairs:
    """The model's shape and architecture as Megatron-LM `pretrain_gpt.py` arguments (without
    the MoE/MLA ones: moe_launch.megatron_moe_args)."""
    out: Pairs = [("--num-layers", m.n_layers), ("--hidden-size", m.hidden),
                  ("--ffn-hidden-size", m.ffn), ("--num-attention-heads", m.n_heads)]
    if m.kv_heads != m.n_heads:
        out += [("--group-query-attention", None), ("--num-query-groups", m.kv_heads)]
    if m.dim_head * m.n_heads != m.hidden and not m.is_mla:  # MLA gives its head widths itself
        out.append(("--kv-channels", m.dim_head))
    out += [("--seq-length", c.seq_len),
            ("--max-position-embeddings", max(m.positions, c.seq_len))]
    if m.mlp.value == "swiglu":
        out.append(("--swiglu", None))
    out += [("--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"),
            ("--norm-epsilon", m.norm_eps)]
    if qk_layernorm(m):
        out.append(("--qk-layernorm", None))
    out += rotary_args("megatron", m)
    if not m.tied_embeddings:
        out.append(("--untie-embeddings-and-output-weights", None))
    if not m.bias:
        out.append(("--disable-bias-linear", None))
    if m.qkv_bias and not m.bias:
        out.append(("--add-qkv-bias", None))
    if not m.dropout:
        out += [("--attention-dropout", "0.0"), ("--hidden-dropout", "0.0")]
    out.append(("--make-vocab-size-divisible-by", VOCAB_DIVISOR))
    return out


def vocab_note(c: PlanConfig, m: ModelSpec) -> str:
    return (f"The vocabulary ({m.vocab:,}) comes from the tokenizer (--tokenizer-type/"
            f"--tokenizer-model); Megatron pads it to a multiple of {VOCAB_DIVISOR}·tp = "
            f"{VOCAB_DIVISOR * c.tp}: {padded_vocab(m.vocab, c.tp):,} rows. --vocab-size applies "
            "only to NullTokenizer.")


def unmodelled_note(m: ModelSpec) -> str | None:
    """The config fields plan3d does not model, by name: the settings do not carry them."""
    if not m.unmodelled:
        return None
    return (f"Not in these settings (plan3d does not model them; set them by hand): "
            f"{'; '.join(m.unmodelled)}.")


def _bridge_rotary(m: ModelSpec) -> dict[str, object]:
    if m.position_embedding != "rotary":
        return {"position_embedding_type": "learned_absolute"}
    out: dict[str, object] = {"position_embedding_type": "rope",
                              "rotary_base": float(m.rope_theta or 10000)}
    if m.rope_scaling == "llama3":
        _llama3_scaling("nemo", m)
        out.update(rope_scaling=True, rope_scaling_factor=m.rope_factor)
    elif m.rope_scaling == "yarn" and m.is_mla:
        out.update(rotary_scaling_factor=m.rope_factor, mscale=m.rope_mscale or 1.0,
                   mscale_all_dim=m.rope_mscale_all_dim or 0.0)
    elif m.rope_scaling == "yarn":
        raise PlanError(f"nemo: {m.name}'s YaRN rotary scaling on non-MLA attention has no "
                        "GPTModelProvider field; use --emit megatron")
    return out


def bridge_model_fields(c: PlanConfig, m: ModelSpec) -> dict[str, object]:
    """The architecture as Megatron-Bridge model.* keys (TransformerConfig and
    GPTModelProvider field names)."""
    out: dict[str, object] = {
        "normalization": "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm",
        "layernorm_epsilon": m.norm_eps,
        "gated_linear_unit": m.mlp.value == "swiglu",
        "add_bias_linear": m.bias,
        "add_qkv_bias": m.qkv_bias or m.bias,
        "qk_layernorm": qk_layernorm(m),
        "share_embeddings_and_output_weights": m.tied_embeddings,
        "kv_channels": m.dim_head if not m.is_mla else None,
        "make_vocab_size_divisible_by": VOCAB_DIVISOR,
        "vocab_size": m.vocab,
        "hidden_dropout": 0.1 if m.dropout else 0.0,
        "attention_dropout": 0.1 if m.dropout else 0.0,
    }
    if out["kv_channels"] is None:
        del out["kv_channels"]
    out.update(_bridge_rotary(m))
    return out
