"""Model presets and hardware profiles: built-in data files, the user's own files, and Hugging Face
`config.json` import. A path works wherever a preset name does; for a model, so does a folder
holding a `config.json` (a Hugging Face snapshot), named after the folder."""

from __future__ import annotations

import json
import tomllib
from functools import cache
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from .errors import PlanError, describe_validation
from .schema import HardwareProfile, ModelSpec

# Size aliases → the preset they stand for (documented in the README).
MODEL_ALIASES = {
    "7b": "llama-2-7b",
    "8b": "llama-3.1-8b",
    "13b": "llama-2-13b",
    "22b": "megatron-22b",
    "70b": "llama-3.1-70b",
    "175b": "gpt3-175b",
    "405b": "llama-3.1-405b",
    "530b": "megatron-530b",
    "1t": "megatron-1t",
}


def _data_dir(name: str) -> Path:
    """The folder of built-in data files: inside the installed package (wheel), or at the top of
    the source tree (editable install, checkout)."""
    packaged = resources.files("planner") / "_data" / name
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / name


def _builtin(folder: str) -> dict[str, Path]:
    return {p.stem: p for p in sorted(_data_dir(folder).glob("*.toml"))}


def model_presets() -> dict[str, Path]:
    return _builtin("model_presets")


def hardware_presets() -> dict[str, Path]:
    return _builtin("hardware_profiles")


def _format_validation(err: ValidationError, where: str, model_cls=None) -> str:
    """pydantic's errors for a person: the file, each field's path, what was expected."""
    return describe_validation(err, where, model_cls)


# Plausible ranges, beyond which a number is a typo or a unit mistake (and the arithmetic would
# leave the range where its results mean anything). (field path, low, high, unit).
MODEL_LIMITS = [
    ("n_layers", 1, 100_000, "layers"), ("hidden", 1, 2**20, ""), ("n_heads", 1, 2**16, ""),
    ("n_kv_heads", 1, 2**16, ""), ("head_dim", 1, 2**16, ""), ("ffn", 1, 2**24, ""),
    ("vocab", 1, 2**24, "tokens"), ("seq_len", 1, 2**30, "tokens"),
    ("max_positions", 1, 2**30, "positions"), ("n_experts", 1, 2**16, ""),
    ("top_k", 1, 2**16, ""), ("moe_ffn", 1, 2**24, ""), ("shared_ffn", 1, 2**24, ""),
    ("n_shared_experts", 0, 2**16, ""), ("q_lora_rank", 1, 2**20, ""),
    ("kv_lora_rank", 1, 2**20, ""), ("qk_nope_head_dim", 1, 2**16, ""),
    ("qk_rope_head_dim", 1, 2**16, ""), ("v_head_dim", 1, 2**16, ""),
]
HARDWARE_LIMITS = [
    ("hbm_gib", 1e-3, 1e6, "GiB"), ("hbm_tb_per_s", 1e-3, 1e4, "TB/s"),
    ("peak_tflops.bf16", 1e-3, 1e7, "TFLOP/s"), ("peak_tflops.fp16", 1e-3, 1e7, "TFLOP/s"),
    ("peak_tflops.fp8", 1e-3, 1e7, "TFLOP/s"), ("peak_tflops.fp4", 1e-3, 1e7, "TFLOP/s"),
    ("gpus_per_domain", 1, 2**20, "GPUs"),
    ("sm_count", 1, 10**6, "SMs"), ("gemm_tile[0]", 1, 2**16, ""), ("gemm_tile[1]", 1, 2**16, ""),
    ("fast.gb_per_s", 1e-3, 1e7, "GB/s"), ("fast.busbw_gb_per_s", 1e-3, 1e7, "GB/s"),
    ("fast.latency_us", 1e-6, 1e7, "µs"), ("network.gb_per_s", 1e-3, 1e7, "GB/s"),
    ("network.busbw_gb_per_s", 1e-3, 1e7, "GB/s"), ("network.latency_us", 1e-6, 1e7, "µs"),
    ("efficiency.gemm.bf16", 1e-4, 1.0, "(a fraction of peak)"),
    ("efficiency.gemm.fp16", 1e-4, 1.0, "(a fraction of peak)"),
    ("efficiency.gemm.fp8", 1e-4, 1.0, "(a fraction of peak)"),
    ("efficiency.gemm.fp4", 1e-4, 1.0, "(a fraction of peak)"),
    ("efficiency.hbm", 1e-4, 1.0, "(a fraction of peak)"),
    ("efficiency.kernel_overhead_us", 0.0, 1e6, "µs"), ("runtime.reserved_gib", 0.0, 1e6, "GiB"),
    ("tdp_w", 1e-3, 1e6, "W"),
    # network topology (schema.Topology)
    ("fast.nvls_busbw_gb_per_s", 1e-3, 1e7, "GB/s"), ("topology.gpus_per_node", 1, 2**12, "GPUs"),
    ("topology.nics_per_node", 1, 2**12, "NICs"), ("topology.pod_gpus", 1, 2**30, "GPUs"),
    ("topology.oversubscription", 1.0, 1e3, "(1 = full bisection)"),
    ("topology.domain_gpus_used", 1, 2**20, "GPUs"),
]


def _at(obj, path: str):
    for part in path.split("."):
        name, _, index = part.partition("[")
        obj = getattr(obj, name, None)
        if obj is not None and index:
            obj = obj[int(index.rstrip("]"))]
    return obj


def _check_ranges(obj, limits, where: str) -> None:
    """A PlanError naming the first field outside its plausible range."""
    for path, lo, hi, unit in limits:
        value = _at(obj, path)
        if value is None:
            continue
        if not (lo <= value <= hi):  # also false for nan; inf is above any hi
            raise PlanError(f"{where}: {path} = {_num(value)} is out of range: expected "
                            f"{_num(lo)} to {_num(hi)}{(' ' + unit) if unit else ''} "
                            "(check the units its name says)")


def _num(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def _read_file(path: Path) -> dict:
    if path.is_dir():
        raise PlanError(f"{path}: is a folder; give a .toml or .json file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PlanError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PlanError(f"{path}: not a text file (not UTF-8 at byte {exc.start})") from None
    kind = "JSON" if path.suffix.lower() == ".json" else "TOML"
    try:
        data = json.loads(text) if kind == "JSON" else tomllib.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, TOMLDecodeError
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise PlanError(f"{path}: not valid {kind} ({detail})") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: expected a table/object of fields at the top level, got "
                        f"{type(data).__name__}")
    return data


def _unknown(kind: str, name: str, known: list[str]) -> PlanError:
    import difflib

    close = difflib.get_close_matches(name.strip().lower(), known, n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    shown = name if len(name) <= 60 else name[:57] + "..."
    return PlanError(f"unknown {kind} {shown!r}{hint} (known: {', '.join(known)}; "
                     f"or give a path to a .toml or .json file)")


def _looks_like_path(name: str) -> bool:
    return name.endswith((".toml", ".json")) or "/" in name or "\\" in name


def _path(name: str) -> Path | None:
    """`name` as an existing path, or None (also for names no file system accepts)."""
    if not name.strip():
        return None
    try:
        path = Path(name).expanduser()
        return path if path.exists() else None
    except (OSError, ValueError, RuntimeError):  # too long, NUL byte, ~unknown-user
        return None


# ---------------------------------------------------------------------------------------------
# Models

# Hugging Face architectures whose config.json this importer understands.
HF_LLAMA_FAMILY = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                   "MixtralForCausalLM", "Qwen3ForCausalLM"}
HF_GPT2_FAMILY = {"GPT2LMHeadModel"}
# Mixture-of-experts families with their own keys (moe_intermediate_size, shared experts, MLA).
HF_QWEN_MOE_FAMILY = {"Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"}
HF_DEEPSEEK_FAMILY = {"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"}
HF_GPT_OSS_FAMILY = {"GptOssForCausalLM"}
HF_MOE_FAMILY = HF_QWEN_MOE_FAMILY | HF_DEEPSEEK_FAMILY | HF_GPT_OSS_FAMILY


def _hf_arch(data: dict) -> str:
    archs = data.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    model_type = data.get("model_type")
    return model_type if isinstance(model_type, str) else "?"


def model_from_hf_config(data: dict, where: str) -> ModelSpec:
    """A Hugging Face `config.json` (Llama/Mistral/Qwen2/Mixtral keys, or GPT-2's
    n_embd/n_layer/n_head/n_inner) as a ModelSpec."""
    arch = _hf_arch(data)
    model_type = data.get("model_type") if isinstance(data.get("model_type"), str) else None

    missing: list[str] = []  # every key the config lacks, reported at once

    def need(key):
        if key not in data or data[key] is None:
            if key not in missing:
                missing.append(key)
            return 1  # a stand-in, so that the other keys are read too
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PlanError(f"{where}: Hugging Face config '{key}' should be a positive whole "
                            f"number, got {value!r}")
        return value

    def optional(key):
        return need(key) if data.get(key) is not None else None

    name = Path(where).parent.name or Path(where).stem
    if arch in HF_GPT2_FAMILY or model_type == "gpt2":
        hidden = need("n_embd")
        spec = dict(
            name=name, source=f"Hugging Face config {where}", n_layers=need("n_layer"),
            hidden=hidden, n_heads=need("n_head"), ffn=optional("n_inner") or 4 * hidden,
            vocab=need("vocab_size"), seq_len=need("n_positions"), mlp="gelu", norm="layernorm",
            bias=True, position_embedding="learned", tied_embeddings=True,
            dropout=bool(data.get("resid_pdrop", 0.1)))
    elif arch in HF_LLAMA_FAMILY or model_type in {"llama", "mistral", "qwen2", "mixtral",
                                                   "qwen3"}:
        n_heads = need("num_attention_heads")
        spec = dict(
            name=name, source=f"Hugging Face config {where}",
            n_layers=need("num_hidden_layers"), hidden=need("hidden_size"), n_heads=n_heads,
            n_kv_heads=optional("num_key_value_heads") or n_heads,
            head_dim=optional("head_dim"), ffn=need("intermediate_size"),
            vocab=need("vocab_size"),
            seq_len=min(need("max_position_embeddings"), 8192), mlp="swiglu", norm="rmsnorm",
            bias=bool(data.get("attention_bias", False)), position_embedding="rotary",
            tied_embeddings=bool(data.get("tie_word_embeddings", False)),
            dropout=bool(data.get("attention_dropout", 0.0)),
            n_experts=optional("num_local_experts") or 1,
            top_k=optional("num_experts_per_tok") or 1)
    elif arch in HF_MOE_FAMILY or model_type in {"qwen2_moe", "qwen3_moe", "deepseek_v2",
                                                 "deepseek_v3", "gpt_oss"}:
        spec = _hf_moe_spec(data, where, arch, model_type, name, need, optional)
    else:
        raise PlanError(
            f"{where}: unsupported architecture '{arch}' (supported: "
            f"{', '.join(sorted(HF_LLAMA_FAMILY | HF_GPT2_FAMILY | HF_MOE_FAMILY))}); write a "
            "plan3d model file "
            "instead (see model_presets/)")
    if missing:
        keys = ", ".join(f"'{k}'" for k in missing)
        raise PlanError(f"{where}: Hugging Face config lacks {keys} (needed for {arch})")
    spec.update(hf_architecture_fields(data, where, arch, model_type))
    try:
        model = ModelSpec(**spec)
    except ValidationError as err:
        raise PlanError(_format_validation(err, f"{where} (as imported)", ModelSpec)) from None
    _check_ranges(model, MODEL_LIMITS, where)
    return model


HF_READ = frozenset({
    # shape (read by model_from_hf_config and _hf_moe_spec)
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "vocab_size", "max_position_embeddings", "attention_bias",
    "tie_word_embeddings", "attention_dropout", "num_local_experts", "num_experts_per_tok",
    "experts_per_token", "num_experts", "moe_intermediate_size",
    "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers",
    "n_routed_experts", "n_shared_experts", "first_k_dense_replace", "moe_layer_freq",
    "scoring_func", "n_group", "topk_group", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "v_head_dim", "initial_context_length", "n_embd", "n_layer", "n_head",
    "n_inner", "n_positions", "resid_pdrop",
    # architecture details (hf_architecture_fields)
    "rope_theta", "rope_scaling", "rms_norm_eps", "layer_norm_epsilon", "norm_topk_prob",
    "routed_scaling_factor", "topk_method", "num_nextn_predict_layers", "hidden_act",
    "activation_function", "layer_types"})
"""config.json keys plan3d reads into the model."""

HF_NOT_ARCHITECTURE = frozenset({
    "architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
    "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "use_cache",
    "pretraining_tp", "output_router_logits", "router_aux_loss_coef", "router_z_loss_coef",
    "aux_loss_alpha", "seq_aux", "embd_pdrop", "attn_pdrop", "summary_type", "summary_use_proj",
    "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
    "task_specific_params", "_name_or_path", "auto_map", "quantization_config", "ep_size",
    "max_window_layers", "use_sliding_window", "scale_attn_weights", "reorder_and_upcast_attn",
    "scale_attn_by_inverse_layer_idx", "use_return_dict", "bias_dropout_fusion"})
"""config.json keys that do not shape the trained model (token ids, initialisation, dtype of
the checkpoint, training-loss coefficients, serving options)."""

HF_GATED_ACTIVATIONS = {"silu", "swish"}  # hidden_act of a SwiGLU MLP (Llama, Qwen, DeepSeek)


def _hf_rope(data: dict, where: str) -> dict:
    """Rotary base and scaling: rope_theta and rope_scaling as transformers' rope utilities
    name them (modeling_rope_utils.py: rope_type llama3 with factor, low_freq_factor,
    high_freq_factor, original_max_position_embeddings; yarn with factor, beta_fast, beta_slow,
    mscale, mscale_all_dim, original_max_position_embeddings). Other kinds are refused."""
    out: dict = {}
    if data.get("rope_theta") is not None:
        out["rope_theta"] = float(data["rope_theta"])
    scaling = data.get("rope_scaling")
    if not scaling:
        return out
    kind = scaling.get("rope_type") or scaling.get("type")
    if kind == "default":
        return out
    if kind not in ("llama3", "yarn"):
        raise PlanError(f"{where}: rope_scaling type '{kind}' is not supported (llama3, yarn); "
                        "write a plan3d model file instead")
    names = {"factor": "rope_factor", "original_max_position_embeddings":
             "rope_original_max_positions", "low_freq_factor": "rope_low_freq_factor",
             "high_freq_factor": "rope_high_freq_factor", "beta_fast": "rope_beta_fast",
             "beta_slow": "rope_beta_slow", "mscale": "rope_mscale",
             "mscale_all_dim": "rope_mscale_all_dim"}
    out["rope_scaling"] = kind
    for key, value in scaling.items():
        if key in ("rope_type", "type"):
            continue
        if key in names:
            out[names[key]] = value
        elif value not in (None, False, 0, ""):  # passed through by name, never dropped
            out.setdefault("unmodelled", []).append(f"rope_scaling.{key}={json.dumps(value)}")
    return out


def hf_architecture_fields(data: dict, where: str, arch: str, model_type: str | None) -> dict:
    """The ModelSpec fields a framework needs to build the same model, beyond its shape:
    rotary base and scaling, norm epsilon, QK-norm, q/k/v biases, router details, MTP; and the
    config's other non-empty keys, by name, in `unmodelled`."""
    out = _hf_rope(data, where)
    eps = data.get("rms_norm_eps", data.get("layer_norm_epsilon"))
    if eps is not None:
        out["norm_eps"] = float(eps)
    family = (model_type or "").lower()
    # Qwen3 attention normalises q and k per head (modeling_qwen3.py q_norm/k_norm); Qwen2 has
    # biases on q, k, v (modeling_qwen2.py, bias=True) and no attention_bias key
    out["qk_norm"] = family in ("qwen3", "qwen3_moe") or arch.startswith("Qwen3")
    out["qkv_bias"] = family in ("qwen2", "qwen2_moe") or arch.startswith("Qwen2")
    if data.get("norm_topk_prob") is not None:
        out["norm_topk_prob"] = bool(data["norm_topk_prob"])
    elif family in ("deepseek_v2",):
        out["norm_topk_prob"] = False  # DeepSeek-V2: softmax over all experts, no renormalising
    if data.get("routed_scaling_factor") is not None:
        out["routed_scaling_factor"] = float(data["routed_scaling_factor"])
    if data.get("topk_method") == "noaux_tc":  # the per-expert bias: aux-loss-free balancing
        out["balancing"] = "aux_free"
    out["mtp_layers"] = int(data.get("num_nextn_predict_layers") or 0)
    act = data.get("hidden_act") or data.get("activation_function")
    unmodelled = out.pop("unmodelled", [])
    gated = "n_embd" not in data
    if act is not None and gated and act not in HF_GATED_ACTIVATIONS:
        unmodelled.append(f"hidden_act={act}")
    types = data.get("layer_types") or []
    if any(t != "full_attention" for t in types):
        unmodelled.append("layer_types=" + ",".join(sorted(set(types))))
    if family == "gpt_oss" or arch in HF_GPT_OSS_FAMILY:
        unmodelled += ["attention sinks (learned, per head)", "router bias"]
    for key in sorted(set(data) - HF_READ - HF_NOT_ARCHITECTURE):
        value = data[key]
        if value in (None, False, 0, "", [], {}) or (
                key == "sliding_window" and data.get("use_sliding_window") is False):
            continue
        text = json.dumps(value) if not isinstance(value, str) else value
        unmodelled.append(f"{key}={text if len(text) <= 40 else text[:37] + '...'}")
    out["unmodelled"] = tuple(unmodelled)
    return out


def _hf_moe_spec(data: dict, where: str, arch: str, model_type: str | None, name: str, need,
                 optional) -> dict:
    """The ModelSpec fields of a Qwen2-MoE / Qwen3-MoE, DeepSeek-V2/V3 or gpt-oss config.json.

    Keys as the transformers configuration classes name them (configuration_qwen2_moe.py,
    configuration_qwen3_moe.py, configuration_deepseek_v3.py, configuration_gpt_oss.py):
    Qwen: num_experts, moe_intermediate_size, shared_expert_intermediate_size (Qwen2-MoE: one
    shared expert of that width), decoder_sparse_step (MoE where (i + 1) mod step = 0),
    mlp_only_layers; DeepSeek:
    n_routed_experts, n_shared_experts, first_k_dense_replace, moe_layer_freq, scoring_func and
    the MLA ranks and head dims; gpt-oss: num_local_experts, experts of width intermediate_size,
    biases on every linear (attention_bias)."""
    n_heads = need("num_attention_heads")
    spec = dict(
        name=name, source=f"Hugging Face config {where}", n_layers=need("num_hidden_layers"),
        hidden=need("hidden_size"), n_heads=n_heads,
        n_kv_heads=optional("num_key_value_heads") or n_heads, vocab=need("vocab_size"),
        seq_len=min(need("max_position_embeddings"), 8192), mlp="swiglu", norm="rmsnorm",
        bias=bool(data.get("attention_bias", False)), position_embedding="rotary",
        tied_embeddings=bool(data.get("tie_word_embeddings", False)),
        dropout=bool(data.get("attention_dropout", 0.0)),
        top_k=optional("num_experts_per_tok") or optional("experts_per_token") or 1)
    deepseek = arch in HF_DEEPSEEK_FAMILY or model_type in {"deepseek_v2", "deepseek_v3"}
    if arch in HF_QWEN_MOE_FAMILY or model_type in {"qwen2_moe", "qwen3_moe"}:
        if data.get("mlp_only_layers"):
            raise PlanError(f"{where}: 'mlp_only_layers' (dense layers at chosen places) is not "
                            "supported; write a plan3d model file with first_k_dense / "
                            "moe_layer_freq instead")
        shared = optional("shared_expert_intermediate_size")
        # layer i is MoE when (i + 1) mod decoder_sparse_step = 0 (Qwen2MoeDecoderLayer,
        # Qwen3MoeDecoderLayer in transformers' modeling_qwen2_moe.py, modeling_qwen3_moe.py
        # @ 16b6c53c8e): layers step − 1, 2·step − 1, …, phase step − 1 of DeepSeek's i mod f
        step = optional("decoder_sparse_step") or 1
        spec.update(head_dim=optional("head_dim"), ffn=need("intermediate_size"),
                    n_experts=need("num_experts"), moe_ffn=need("moe_intermediate_size"),
                    n_shared_experts=1 if shared else 0, shared_ffn=shared,
                    moe_layer_freq=step, moe_layer_phase=step - 1)
    elif deepseek:
        # MLA: the key/value heads are not shared (num_key_value_heads = heads; unused)
        spec.update(ffn=need("intermediate_size"), n_experts=need("n_routed_experts"),
                    moe_ffn=need("moe_intermediate_size"),
                    n_shared_experts=optional("n_shared_experts") or 0,
                    first_k_dense=data.get("first_k_dense_replace") or 0,
                    moe_layer_freq=optional("moe_layer_freq") or 1,
                    router="sigmoid" if data.get("scoring_func") == "sigmoid" else "softmax",
                    # V3's bias-based balancing (topk_method noaux_tc, §2.1.2)
                    balancing="aux_free" if data.get("topk_method") == "noaux_tc" else "aux_loss",
                    # group-limited routing (V2: group_limited_greedy, V3: noaux_tc); 1 group =
                    # none
                    n_expert_groups=(optional("n_group") if (data.get("n_group") or 1) > 1
                                     else None),
                    topk_groups=(optional("topk_group") if (data.get("n_group") or 1) > 1
                                 else None),
                    q_lora_rank=optional("q_lora_rank"), kv_lora_rank=need("kv_lora_rank"),
                    qk_nope_head_dim=need("qk_nope_head_dim"),
                    qk_rope_head_dim=need("qk_rope_head_dim"), v_head_dim=need("v_head_dim"))
    else:  # gpt-oss: experts as wide as intermediate_size, biases on every linear
        spec.update(head_dim=optional("head_dim"), ffn=need("intermediate_size"),
                    n_experts=need("num_local_experts"))
        if data.get("initial_context_length") is not None:
            spec["seq_len"] = need("initial_context_length")
    return spec


def _model_from_file(path: Path) -> ModelSpec:
    data = _read_file(path)
    if "peak_tflops" in data or "hbm_gib" in data:
        raise PlanError(f"{path}: this is a hardware profile (it has "
                        f"{'peak_tflops' if 'peak_tflops' in data else 'hbm_gib'}), not a model; "
                        "give it to --hw")
    if "architectures" in data or "model_type" in data:
        return model_from_hf_config(data, str(path))
    data.setdefault("name", path.stem)
    try:
        model = ModelSpec(**data)
    except ValidationError as err:
        raise PlanError(_format_validation(err, str(path), ModelSpec)) from None
    _check_ranges(model, MODEL_LIMITS, str(path))
    return model


@cache
def _preset_model(key: str) -> ModelSpec:
    return _model_from_file(model_presets()[key])


def load_model(name: str) -> ModelSpec:
    """A preset by name or size alias (`70b`), or a model file / HF config.json by path. Presets
    are read once per process; a user's file is read each time (it may have changed)."""
    key = name.strip().lower()
    presets = model_presets()
    if key in MODEL_ALIASES:
        key = MODEL_ALIASES[key]
    if key in presets:
        return _preset_model(key)
    path = _path(name)
    if path is not None or _looks_like_path(name):
        if path is None:
            raise PlanError(f"model file {name!r} not found")
        if path.is_dir():
            return _model_from_folder(path)
        return _model_from_file(path)
    raise _unknown("model", name, sorted(presets) + sorted(MODEL_ALIASES))


def model_folder_name(folder: Path) -> str:
    """The name a model folder gives its model: the folder's own name, or NAME for a snapshot in
    the Hugging Face hub cache (`…/models--ORG--NAME/snapshots/COMMIT/`, whose own name is a
    commit hash)."""
    folder = Path(folder).absolute()
    parent = folder.parent
    if parent.name == "snapshots" and parent.parent.name.startswith("models--"):
        return parent.parent.name.split("--")[-1]
    return folder.name


def _model_from_folder(folder: Path) -> ModelSpec:
    """A model folder (a Hugging Face snapshot, or any folder holding its config.json), named
    after the folder."""
    config = folder / "config.json"
    if not config.is_file():
        raise PlanError(f"{folder}: a model folder needs a config.json (as a Hugging Face "
                        "snapshot has); there is none — give the folder of a snapshot, a "
                        "config.json, a plan3d model file or a preset name")
    model = _model_from_file(config)
    return model.model_copy(update={"name": model_folder_name(folder)})


# ---------------------------------------------------------------------------------------------
# Hardware


def _hardware_from_file(path: Path) -> HardwareProfile:
    data = _read_file(path)
    if "n_layers" in data or "architectures" in data or "model_type" in data:
        raise PlanError(f"{path}: this is a model file, not a hardware profile; give it to "
                        "--model")
    data.setdefault("name", path.stem)
    try:
        profile = HardwareProfile(**data)
    except ValidationError as err:
        raise PlanError(_format_validation(err, str(path), HardwareProfile)) from None
    _check_ranges(profile, HARDWARE_LIMITS, str(path))
    return profile


@cache
def _preset_hardware(key: str) -> HardwareProfile:
    return _hardware_from_file(hardware_presets()[key])


def load_hardware(name: str) -> HardwareProfile:
    """A built-in profile by name (`h100-nvlink`), or a profile file by path (read each time)."""
    key = name.strip().lower()
    presets = hardware_presets()
    if key in presets:
        return _preset_hardware(key)
    path = _path(name)
    if path is not None or _looks_like_path(name):
        if path is None:
            raise PlanError(f"hardware profile file {name!r} not found")
        return _hardware_from_file(path)
    raise _unknown("hardware profile", name, sorted(presets))
