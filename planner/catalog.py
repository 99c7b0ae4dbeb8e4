"""Model presets and hardware profiles: built-in data files, the user's own files, and Hugging Face
`config.json` import. A path works wherever a preset name does."""

from __future__ import annotations

import difflib
import json
import tomllib
from functools import cache
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from .errors import PlanError
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


def _format_validation(err: ValidationError, where: str) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        parts.append(f"{loc}: {e['msg']}")
    return f"{where}: " + "; ".join(parts)


def _read_file(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise PlanError(f"{path}: not valid {kind} ({exc})") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: expected a table/object at the top level")
    return data


def _unknown(kind: str, name: str, known: list[str]) -> PlanError:
    close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return PlanError(f"unknown {kind} '{name}'{hint} (known: {', '.join(known)}; "
                     f"or give a path to a file)")


def _looks_like_path(name: str) -> bool:
    return name.endswith((".toml", ".json")) or "/" in name or "\\" in name


# ---------------------------------------------------------------------------------------------
# Models

# Hugging Face architectures whose config.json this importer understands.
HF_LLAMA_FAMILY = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                   "MixtralForCausalLM", "Qwen3ForCausalLM"}
HF_GPT2_FAMILY = {"GPT2LMHeadModel"}


def model_from_hf_config(data: dict, where: str) -> ModelSpec:
    """A Hugging Face `config.json` (Llama/Mistral/Qwen2/Mixtral keys, or GPT-2's
    n_embd/n_layer/n_head/n_inner) as a ModelSpec."""
    archs = data.get("architectures") or []
    arch = archs[0] if archs else data.get("model_type", "?")

    def need(key):
        if key not in data or data[key] is None:
            raise PlanError(f"{where}: Hugging Face config lacks '{key}' (needed for {arch})")
        return data[key]

    name = Path(where).parent.name or Path(where).stem
    if arch in HF_GPT2_FAMILY or data.get("model_type") == "gpt2":
        hidden = need("n_embd")
        spec = dict(
            name=name, source=f"Hugging Face config {where}", n_layers=need("n_layer"),
            hidden=hidden, n_heads=need("n_head"), ffn=data.get("n_inner") or 4 * hidden,
            vocab=need("vocab_size"), seq_len=need("n_positions"), mlp="gelu", norm="layernorm",
            bias=True, position_embedding="learned", tied_embeddings=True,
            dropout=bool(data.get("resid_pdrop", 0.1)))
    elif arch in HF_LLAMA_FAMILY or data.get("model_type") in {"llama", "mistral", "qwen2",
                                                                "mixtral", "qwen3"}:
        n_experts = data.get("num_local_experts") or 1
        spec = dict(
            name=name, source=f"Hugging Face config {where}",
            n_layers=need("num_hidden_layers"), hidden=need("hidden_size"),
            n_heads=need("num_attention_heads"),
            n_kv_heads=data.get("num_key_value_heads") or data["num_attention_heads"],
            head_dim=data.get("head_dim"), ffn=need("intermediate_size"),
            vocab=need("vocab_size"),
            seq_len=min(need("max_position_embeddings"), 8192), mlp="swiglu", norm="rmsnorm",
            bias=bool(data.get("attention_bias", False)), position_embedding="rotary",
            tied_embeddings=bool(data.get("tie_word_embeddings", False)),
            dropout=bool(data.get("attention_dropout", 0.0)), n_experts=n_experts,
            top_k=data.get("num_experts_per_tok") or 1)
    else:
        raise PlanError(
            f"{where}: unsupported architecture '{arch}' (supported: "
            f"{', '.join(sorted(HF_LLAMA_FAMILY | HF_GPT2_FAMILY))}); write a plan3d model file "
            "instead (see model_presets/)")
    try:
        return ModelSpec(**spec)
    except ValidationError as err:
        raise PlanError(_format_validation(err, where)) from None


def _model_from_file(path: Path) -> ModelSpec:
    data = _read_file(path)
    if "architectures" in data or "model_type" in data:
        return model_from_hf_config(data, str(path))
    data.setdefault("name", path.stem)
    try:
        return ModelSpec(**data)
    except ValidationError as err:
        raise PlanError(_format_validation(err, str(path))) from None


@cache
def load_model(name: str) -> ModelSpec:
    """A preset by name or size alias (`70b`), or a model file / HF config.json by path."""
    key = name.strip().lower()
    presets = model_presets()
    if key in MODEL_ALIASES:
        key = MODEL_ALIASES[key]
    if key in presets:
        return _model_from_file(presets[key])
    path = Path(name).expanduser()
    if path.is_file() or _looks_like_path(name):
        if not path.is_file():
            raise PlanError(f"model file '{name}' not found")
        return _model_from_file(path)
    raise _unknown("model", name, sorted(presets) + sorted(MODEL_ALIASES))


# ---------------------------------------------------------------------------------------------
# Hardware


def _hardware_from_file(path: Path) -> HardwareProfile:
    data = _read_file(path)
    data.setdefault("name", path.stem)
    try:
        return HardwareProfile(**data)
    except ValidationError as err:
        raise PlanError(_format_validation(err, str(path))) from None


@cache
def load_hardware(name: str) -> HardwareProfile:
    """A built-in profile by name (`h100-nvlink`), or a profile file by path."""
    key = name.strip().lower()
    presets = hardware_presets()
    if key in presets:
        return _hardware_from_file(presets[key])
    path = Path(name).expanduser()
    if path.is_file() or _looks_like_path(name):
        if not path.is_file():
            raise PlanError(f"hardware profile file '{name}' not found")
        return _hardware_from_file(path)
    raise _unknown("hardware profile", name, sorted(presets))
