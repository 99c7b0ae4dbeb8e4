"""`--emit nemo` (a Megatron-Bridge ConfigContainer override) checked against Megatron-Bridge
0.3.1's config classes and built with megatron-core 0.16.1's.

Megatron-Bridge does not import without a GPU stack: its package imports Transformer Engine at
import time (megatron/bridge/peft/lora_layers.py `import transformer_engine.pytorch`), and its
dependencies Transformer Engine (core_cu13) and mamba-ssm build only against CUDA. So the suite
installs its wheel alone (`pip install --no-deps megatron-bridge==0.3.1`) and reads its config
classes' fields from the source with `ast` (no import): every key of every YAML section must be a
field (or an __init__ argument) of the class ConfigContainer holds there — GPTModelProvider for
model, TrainingConfig, GPTDatasetConfig, DistributedDataParallelConfig, OptimizerConfig,
DistributedInitConfig, CheckpointConfig — including the fields their megatron-core bases
declare, and mixed_precision must name one of its recipes. Without the wheel that part skips,
saying so.

Then the sections whose classes are megatron-core's are built with it: model.* (less the
GPTModelProvider-only keys) as a TransformerConfig, ddp.* as DistributedDataParallelConfig,
optimizer.* as OptimizerConfig; the layers per pipeline rank are compared with the plan's
(none over what plan3d costed), and the model fields with plan3d's model.

Stubs: as test_megatron_core.py (the fused-kernel switches off); OptimizerConfig's check that
Transformer Engine ≥ 2.1 and its FusedAdam are installed for the precision-aware optimizer
(offload, --adam-moments) answers yes (conftest.stub_te_optimizer)."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
from pathlib import Path

import pytest
import yaml

from .conftest import emitted, model_of, plan_json, stub_te_optimizer
from .matrix import ROWS

torch = pytest.importorskip("torch", reason="the parser suite needs torch (pip install torch)")
pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core)")

from megatron.core.distributed import DistributedDataParallelConfig  # noqa: E402
from megatron.core.optimizer import OptimizerConfig  # noqa: E402
from megatron.core.transformer import TransformerConfig  # noqa: E402

from .test_megatron_core import _layers_per_rank  # noqa: E402

NEMO_ROWS = [(rid, args) for rid, args, fmts in ROWS if "nemo" in fmts]

SECTIONS = {
    "model": ("models/gpt_provider.py", "GPTModelProvider"),
    "train": ("training/config.py", "TrainingConfig"),
    "dataset": ("training/config.py", "GPTDatasetConfig"),
    "ddp": ("training/config.py", "DistributedDataParallelConfig"),
    "optimizer": ("training/config.py", "OptimizerConfig"),
    "dist": ("training/config.py", "DistributedInitConfig"),
    "checkpoint": ("training/config.py", "CheckpointConfig"),
}
"""ConfigContainer's sections and their classes (training/config.py @ 0.3.1 ConfigContainer)."""

CORE_BASES = {
    "TransformerConfig": TransformerConfig, "MCoreTransformerConfig": TransformerConfig,
    "MCoreDistributedDataParallelConfig": DistributedDataParallelConfig,
    "MCoreOptimizerConfig": OptimizerConfig,
}


def _bridge_root() -> Path | None:
    spec = importlib.util.find_spec("megatron.bridge")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _class_fields(root: Path, path: str, name: str) -> set[str]:
    """A class's annotated fields and __init__ arguments, with its bases' (the same file's by
    ast, megatron-core's by dataclasses.fields), read without importing Megatron-Bridge."""
    if name in CORE_BASES:
        return {f.name for f in dataclasses.fields(CORE_BASES[name])}
    if name == "MCoreGPTDatasetConfig":
        from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

        return {f.name for f in dataclasses.fields(GPTDatasetConfig)}
    tree = ast.parse((root / path).read_text())
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None:
        return set()
    out = {n.target.id for n in cls.body
           if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    for n in cls.body:
        if isinstance(n, ast.FunctionDef) and n.name == "__init__":
            out |= {a.arg for a in n.args.args + n.args.kwonlyargs}
    for base in cls.bases:
        if isinstance(base, ast.Name):
            out |= _class_fields(root, path, base.id)
        elif isinstance(base, ast.Subscript) and isinstance(base.value, ast.Name):
            out |= _class_fields(root, path, base.value.id)
    return out


def _doc(args: str) -> dict:
    return yaml.safe_load(emitted(args, "nemo"))


@pytest.mark.parametrize("rid,args", NEMO_ROWS, ids=[r for r, _ in NEMO_ROWS])
def test_every_key_is_a_megatron_bridge_field(rid, args):
    root = _bridge_root()
    if root is None:
        pytest.skip("Megatron-Bridge's wheel is not installed (pip install --no-deps "
                    "megatron-bridge==0.3.1: it does not import without Transformer Engine)")
    doc = _doc(args)
    for section, keys in doc.items():
        if section == "mixed_precision":
            recipes = (root / "training/mixed_precision.py").read_text()
            assert f"def {keys}(" in recipes or f'"{keys}"' in recipes, keys
            continue
        path, cls = SECTIONS[section]
        fields = _class_fields(root, path, cls)
        unknown = set(keys) - fields
        assert not unknown, f"{section}: not fields of {cls}: {sorted(unknown)}"


def _dtypes(cls, section: dict) -> dict:
    """A YAML section with the strings given to a torch.dtype field turned into the dtype, as
    Megatron-Bridge does when it applies an override (training/utils/omegaconf_utils.py @ 0.3.1:
    getattr(torch, value.split(".")[-1]) where the field's current value is a torch.dtype)."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    return {k: (getattr(torch, v.split(".")[-1])
                if isinstance(defaults.get(k), torch.dtype) and isinstance(v, str) else v)
            for k, v in section.items()}


PROVIDER_ONLY = {"seq_length", "vocab_size", "make_vocab_size_divisible_by",
                 "share_embeddings_and_output_weights", "position_embedding_type", "rotary_base",
                 "rope_scaling", "rope_scaling_factor", "rotary_percent"}
"""GPTModelProvider's own fields (gpt_provider.py @ 0.3.1), not TransformerConfig's."""


@pytest.mark.parametrize("rid,args", NEMO_ROWS, ids=[r for r, _ in NEMO_ROWS])
def test_megatron_core_builds_the_sections(rid, args, fake_world):
    from megatron.core import parallel_state as ps

    from planner.catalog import load_model

    plan = plan_json(args)
    c = plan["config"]
    doc = _doc(args)
    model = {k: v for k, v in doc["model"].items() if k not in PROVIDER_ONLY}
    model.update(apply_rope_fusion=False, bias_activation_fusion=False,
                 masked_softmax_fusion=False, gradient_accumulation_fusion=False,
                 pipeline_dtype=torch.bfloat16, bf16=doc["mixed_precision"].startswith("bf16"))
    if model.get("gated_linear_unit"):
        model["activation_func"] = torch.nn.functional.silu
    # TE's fused permutation (a kernel choice, a real field): without TE it cannot be built
    assert model.pop("moe_permute_fusion", True) is True
    config = TransformerConfig(**model)
    DistributedDataParallelConfig(**doc["ddp"])
    with pytest.MonkeyPatch.context() as mp:  # the precision-aware optimizer asks TE ≥ 2.1
        stub_te_optimizer(mp)
        optimizer = OptimizerConfig(**_dtypes(OptimizerConfig, doc["optimizer"]))
    if "exp_avg_dtype" in doc["optimizer"]:  # --adam-moments: the precision-aware optimizer
        assert optimizer.use_precision_aware_optimizer
        assert (optimizer.exp_avg_dtype, optimizer.exp_avg_sq_dtype) == (
            {"bf16": torch.bfloat16}[c["adam_moments"]],) * 2
    assert doc["train"]["global_batch_size"] // (doc["train"]["micro_batch_size"] * c["dp"]) \
        == c["n_micro"]
    assert doc["dataset"]["seq_length"] == doc["model"]["seq_length"] == c["seq_len"]
    fake_world(c["dp"] * c["tp"] * c["pp"] * c["cp"])
    ps.initialize_model_parallel(
        config.tensor_model_parallel_size, config.pipeline_model_parallel_size,
        config.virtual_pipeline_model_parallel_size,
        context_parallel_size=config.context_parallel_size,
        hierarchical_context_parallel_sizes=config.hierarchical_context_parallel_sizes,
        num_distributed_optimizer_instances=doc["ddp"].get(
            "num_distributed_optimizer_instances", 1),
        create_gloo_process_groups=False)
    assert ps.get_data_parallel_world_size() == c["dp"]
    vpp = config.virtual_pipeline_model_parallel_size or 1
    if config.pipeline_model_parallel_layout is not None:
        vpp = config.pipeline_model_parallel_layout.virtual_pipeline_model_parallel_size
    assert vpp == c["vpp"]
    layers = _layers_per_rank(config, c["pp"], vpp)
    assert sum(layers) == config.num_layers
    assert max(layers) <= plan["memory"]["stage_layers"]
    m = load_model(model_of(args))
    assert (config.layernorm_epsilon, config.qk_layernorm, config.add_bias_linear) == (
        m.norm_eps, m.qk_norm, m.bias)
    assert doc["model"]["rotary_base"] == m.rope_theta
    assert doc["model"].get("rope_scaling", False) == (m.rope_scaling == "llama3")
    assert doc["model"]["vocab_size"] == m.vocab
