"""`--emit megatron` fed to megatron-core 0.16.1: its TransformerConfig / ModelParallelConfig
(validated in __post_init__) built from the emitted flags, `initialize_model_parallel` on
torch's fake process-group backend, its pipeline-layout parser and layer split, and a GPTModel
built on the meta device for the parameter count.

Each test compares what megatron-core derives with plan3d's plan (`--json`): the data-parallel,
context-parallel and expert groups, micro-batches, virtual stages, layers on every pipeline rank
(none above the layers plan3d costed), and the parameter count (equal once the vocabulary is
padded as Megatron pads it); and the built config against the Hugging Face config.json field by
field where the repository holds one (tests/data/hf).

The flag → TransformerConfig mapping below is Megatron-LM's (megatron/training/arguments.py and
argument_utils.py @ d98e8a64dd: dataclass fields as flags, `--norm-epsilon` → layernorm_epsilon,
`--disable-bias-linear` → add_bias_linear False, `--swiglu` → gated_linear_unit); Megatron-LM's
own parse_args runs in test_megatron_lm.py where a checkout is given.

Stubs (what needs a GPU or Transformer Engine): `apply_rope_fusion`, `bias_activation_fusion`,
`masked_softmax_fusion`, `gradient_accumulation_fusion` are off (fused kernels); `fp8` is not
passed to the config (its recipe checks query Transformer Engine), the fp8 flags are checked by
name; the model is built with the local (non-TE) layer spec on the meta device, experts as
SequentialMLP (the count is the same as TE's grouped GEMM), and MoELayer's CUDA side stream
(`torch.cuda.Stream`) is None."""

from __future__ import annotations

import ast
import copy

import pytest

from .conftest import (
    emitted,
    flag_values,
    hf_config,
    model_of,
    overlap_case,
    plan_json,
    stub_te_optimizer,
)
from .matrix import ROWS

torch = pytest.importorskip("torch", reason="the parser suite needs torch (pip install torch)")
pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core)")

from megatron.core import parallel_state as ps  # noqa: E402
from megatron.core.transformer import TransformerConfig  # noqa: E402
from megatron.core.transformer.transformer_block import get_num_layers_to_build  # noqa: E402

MEGATRON_ROWS = [(rid, args) for rid, args, fmts in ROWS if "megatron" in fmts]

INT, FLOAT, STR, TRUE, FALSE = int, float, str, "true", "false"
TO_CONFIG = {
    "--tensor-model-parallel-size": ("tensor_model_parallel_size", INT),
    "--pipeline-model-parallel-size": ("pipeline_model_parallel_size", INT),
    "--context-parallel-size": ("context_parallel_size", INT),
    "--sequence-parallel": ("sequence_parallel", TRUE),
    "--expert-model-parallel-size": ("expert_model_parallel_size", INT),
    "--expert-tensor-parallel-size": ("expert_tensor_parallel_size", INT),
    "--num-virtual-stages-per-pipeline-rank": ("virtual_pipeline_model_parallel_size", INT),
    "--pipeline-model-parallel-layout": ("pipeline_model_parallel_layout", STR),
    "--decoder-first-pipeline-num-layers": ("num_layers_in_first_pipeline_stage", INT),
    "--decoder-last-pipeline-num-layers": ("num_layers_in_last_pipeline_stage", INT),
    "--cp-comm-type": ("cp_comm_type", STR),
    "--hierarchical-context-parallel-sizes": ("hierarchical_context_parallel_sizes", "ints"),
    "--num-layers": ("num_layers", INT),
    "--hidden-size": ("hidden_size", INT),
    "--ffn-hidden-size": ("ffn_hidden_size", INT),
    "--num-attention-heads": ("num_attention_heads", INT),
    "--num-query-groups": ("num_query_groups", INT),
    "--kv-channels": ("kv_channels", INT),
    "--swiglu": ("gated_linear_unit", TRUE),
    "--normalization": ("normalization", STR),
    "--norm-epsilon": ("layernorm_epsilon", FLOAT),
    "--qk-layernorm": ("qk_layernorm", TRUE),
    "--disable-bias-linear": ("add_bias_linear", FALSE),
    "--add-qkv-bias": ("add_qkv_bias", TRUE),
    "--attention-dropout": ("attention_dropout", FLOAT),
    "--hidden-dropout": ("hidden_dropout", FLOAT),
    "--num-experts": ("num_moe_experts", INT),
    "--moe-router-topk": ("moe_router_topk", INT),
    "--moe-ffn-hidden-size": ("moe_ffn_hidden_size", INT),
    "--moe-shared-expert-intermediate-size": ("moe_shared_expert_intermediate_size", INT),
    "--moe-layer-freq": ("moe_layer_freq", "pattern"),
    "--moe-router-score-function": ("moe_router_score_function", STR),
    "--moe-router-pre-softmax": ("moe_router_pre_softmax", TRUE),
    "--moe-router-num-groups": ("moe_router_num_groups", INT),
    "--moe-router-group-topk": ("moe_router_group_topk", INT),
    "--moe-router-topk-scaling-factor": ("moe_router_topk_scaling_factor", FLOAT),
    "--moe-router-enable-expert-bias": ("moe_router_enable_expert_bias", TRUE),
    "--moe-token-dispatcher-type": ("moe_token_dispatcher_type", STR),
    "--moe-flex-dispatcher-backend": ("moe_flex_dispatcher_backend", STR),
    "--moe-shared-expert-overlap": ("moe_shared_expert_overlap", TRUE),
    "--moe-expert-capacity-factor": ("moe_expert_capacity_factor", FLOAT),
    "--moe-router-force-load-balancing": ("moe_router_force_load_balancing", TRUE),
    "--overlap-moe-expert-parallel-comm": ("overlap_moe_expert_parallel_comm", TRUE),
    "--mtp-num-layers": ("mtp_num_layers", INT),
    "--q-lora-rank": ("q_lora_rank", INT),
    "--kv-lora-rank": ("kv_lora_rank", INT),
    "--qk-head-dim": ("qk_head_dim", INT),
    "--qk-pos-emb-head-dim": ("qk_pos_emb_head_dim", INT),
    "--v-head-dim": ("v_head_dim", INT),
    "--rotary-scaling-factor": ("rotary_scaling_factor", FLOAT),
    "--mscale": ("mscale", FLOAT),
    "--mscale-all-dim": ("mscale_all_dim", FLOAT),
    "--recompute-granularity": ("recompute_granularity", STR),
    "--recompute-method": ("recompute_method", STR),
    "--recompute-num-layers": ("recompute_num_layers", INT),
    "--cpu-offloading-num-layers": ("cpu_offloading_num_layers", INT),
    "--bf16": ("bf16", TRUE),
    "--fp16": ("fp16", TRUE),
}
"""Flags that are TransformerConfig / ModelParallelConfig / MLATransformerConfig fields."""

ELSEWHERE = {
    # GPTModel's constructor (rotary, vocabulary, position table), the training loop, the
    # distributed optimizer / DDP config, the kernel choices and the MLA switch
    "--rotary-base", "--position-embedding-type", "--use-rope-scaling", "--rope-scaling-factor",
    "--untie-embeddings-and-output-weights", "--make-vocab-size-divisible-by",
    "--max-position-embeddings", "--seq-length", "--micro-batch-size", "--global-batch-size",
    "--group-query-attention", "--multi-latent-attention", "--moe-grouped-gemm",
    "--moe-permute-fusion",
    "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
    "--accumulate-allreduce-grads-in-fp32", "--grad-reduce-in-bf16", "--attention-backend",
    "--use-megatron-fsdp", "--data-parallel-sharding-strategy", "--no-gradient-accumulation-fusion",
    "--ckpt-format", "--num-distributed-optimizer-instances", "--outer-dp-sharding-strategy",
    "--optimizer-cpu-offload", "--optimizer-offload-fraction", "--use-precision-aware-optimizer",
    "--overlap-cpu-optimizer-d2h-h2d", "--fp8-format", "--fp8-recipe", "--fp8-param-gather",
    "--yarn-original-max-position-embeddings",
    "--yarn-beta-fast", "--yarn-beta-slow", "--recompute-modules",
    "--exp-avg-dtype", "--exp-avg-sq-dtype",  # OptimizerConfig: test_precision_aware_optimizer
}


def _value(kind, values: list[str]):
    if kind == TRUE:
        return True
    if kind == FALSE:
        return False
    if kind == "ints":
        return [int(v) for v in values]
    if kind == "pattern":  # an integer, or the Python list expression Megatron evaluates
        text = values[0]
        return int(text) if text.isdigit() else _eval_pattern(text)
    return kind(values[0])


def _eval_pattern(text: str) -> list[int]:
    """Megatron's moe_freq_type evaluates a list expression like "([0]*3+[1]*58)"; only list
    literals, + and * appear (checked through ast before evaluating)."""
    tree = ast.parse(text, mode="eval")
    allowed = (ast.Expression, ast.BinOp, ast.List, ast.Constant, ast.Add, ast.Mult, ast.Load)
    assert all(isinstance(n, allowed) for n in ast.walk(tree)), text
    return list(eval(compile(tree, "<pattern>", "eval")))  # noqa: S307 (checked above)


def config_kwargs(flags: dict[str, list[str]]) -> dict:
    """TransformerConfig keyword arguments from the emitted flags; every flag is accounted for."""
    unknown = set(flags) - set(TO_CONFIG) - ELSEWHERE
    assert not unknown, f"flags neither mapped nor known elsewhere: {sorted(unknown)}"
    kwargs = {TO_CONFIG[f][0]: _value(TO_CONFIG[f][1], v) for f, v in flags.items()
              if f in TO_CONFIG}
    kwargs.update(apply_rope_fusion=False, bias_activation_fusion=False,
                  masked_softmax_fusion=False, gradient_accumulation_fusion=False,
                  pipeline_dtype=torch.bfloat16 if kwargs.get("bf16") else torch.float16)
    if kwargs.get("gated_linear_unit"):
        kwargs["activation_func"] = torch.nn.functional.silu
    if "--moe-grouped-gemm" in flags:
        kwargs["moe_grouped_gemm"] = False  # SequentialMLP: same parameters, no TE needed
    if "--cpu-offloading-num-layers" in flags:
        kwargs["cpu_offloading"] = True
    return kwargs


MLA_ARG_DEFAULTS = {"q_lora_rank": None, "rotary_scaling_factor": 1.0}
"""Megatron-LM's defaults for the MLA flags left out where MLATransformerConfig's differ
(`_add_mla_args`, arguments.py @ d98e8a64dd: --q-lora-rank None, no query compression, against
512; --rotary-scaling-factor 1.0 against 40); core_transformer_config_from_args copies every
argument into the config (argument_utils.py @ d98e8a64dd)."""


def build_config(flags):
    kwargs = config_kwargs(flags)
    if "--multi-latent-attention" in flags:
        from megatron.core.transformer.transformer_config import MLATransformerConfig

        rotary = {"rotary_base": float(flags["--rotary-base"][0])} if "--rotary-base" in flags \
            else {}
        return MLATransformerConfig(**{**MLA_ARG_DEFAULTS, **kwargs}, **rotary,
                                    multi_latent_attention=True)
    return TransformerConfig(**kwargs)


def _layers_per_rank(config, pp: int, vpp: int) -> list[int]:
    layout = config.pipeline_model_parallel_layout
    if layout is not None:  # transformer_block's helper drops pp_rank for a layout: ask it
        from megatron.core.transformer.enums import LayerType

        return [sum(layout.layout[r][v].count(LayerType.decoder) for v in range(vpp))
                for r in range(pp)]
    return [sum(get_num_layers_to_build(config, vp_stage=v if vpp > 1 else None, pp_rank=r)
                for v in range(vpp)) for r in range(pp)]


@pytest.mark.parametrize("rid,args", MEGATRON_ROWS, ids=[r for r, _ in MEGATRON_ROWS])
def test_config_groups_and_split_match_the_plan(rid, args, fake_world):
    plan = plan_json(args)
    c = plan["config"]
    flags = flag_values(emitted(args, "megatron"))
    config = build_config(flags)
    # micro-batches: gbs / (mbs · dp), as Megatron's get_num_microbatches computes them
    gbs, mbs = int(flags["--global-batch-size"][0]), int(flags["--micro-batch-size"][0])
    assert gbs % (mbs * c["dp"]) == 0 and gbs // (mbs * c["dp"]) == c["n_micro"]
    vpp = config.virtual_pipeline_model_parallel_size or 1
    if config.pipeline_model_parallel_layout is not None:
        vpp = config.pipeline_model_parallel_layout.virtual_pipeline_model_parallel_size
    assert vpp == c["vpp"]
    world = c["dp"] * c["tp"] * c["pp"] * c["cp"]
    fake_world(world)
    ps.initialize_model_parallel(
        config.tensor_model_parallel_size, config.pipeline_model_parallel_size,
        config.virtual_pipeline_model_parallel_size,
        context_parallel_size=config.context_parallel_size,
        hierarchical_context_parallel_sizes=config.hierarchical_context_parallel_sizes,
        expert_model_parallel_size=config.expert_model_parallel_size,
        expert_tensor_parallel_size=config.expert_tensor_parallel_size,
        num_distributed_optimizer_instances=int(
            flags.get("--num-distributed-optimizer-instances", ["1"])[0]),
        create_gloo_process_groups=False)
    assert ps.get_data_parallel_world_size() == c["dp"]
    assert ps.get_context_parallel_world_size() == c["cp"]
    assert ps.get_tensor_model_parallel_world_size() == c["tp"]
    assert ps.get_pipeline_model_parallel_world_size() == c["pp"]
    if config.num_moe_experts:  # a dense model's expert groups default to the dense TP
        assert ps.get_expert_model_parallel_world_size() == c["ep"]
        assert ps.get_expert_tensor_parallel_world_size() == c["etp"]
        # expert data parallelism: the rest of dp·cp·tp once ep·etp ranks hold the experts
        assert ps.get_expert_data_parallel_world_size() == (
            c["dp"] * c["cp"] * c["tp"] // (c["ep"] * c["etp"]))
    if c.get("cp_kind") == "hierarchical":
        sizes = [len(ps.get_hierarchical_context_parallel_groups(check_initialized=False))]
        assert sizes == [2]  # [a2a, p2p] groups
    layers = _layers_per_rank(config, c["pp"], vpp)
    assert sum(layers) == config.num_layers
    # no rank holds a layer more than plan3d costed on its fullest stage
    assert max(layers) <= plan["memory"]["stage_layers"], (layers, plan["memory"]["stage_layers"])


def _flag(flags, name, kind=float, default=None):
    return kind(flags[name][0]) if name in flags else default


@pytest.mark.parametrize("rid,args", MEGATRON_ROWS, ids=[r for r, _ in MEGATRON_ROWS])
def test_built_model_is_the_planned_model(rid, args, fake_world):
    """The config against plan3d's model (and its HF config.json where the repository holds
    one), then the parameter count of a GPTModel built on the meta device at tp = pp = 1."""
    from planner.catalog import load_model

    model = load_model(model_of(args))
    flags = flag_values(emitted(args, "megatron"))
    config = build_config(flags)
    assert config.num_layers == model.n_layers and config.hidden_size == model.hidden
    assert config.num_attention_heads == model.n_heads
    assert (config.num_query_groups or config.num_attention_heads) == model.kv_heads
    assert config.layernorm_epsilon == model.norm_eps
    # --qk-layernorm: Qwen3's per-head norms, or MLA's latent norms (test_mla_latent_norms_built)
    assert config.qk_layernorm == (model.qk_norm or model.is_mla)
    assert config.normalization == ("RMSNorm" if model.norm == "rmsnorm" else "LayerNorm")
    assert _flag(flags, "--rotary-base", float, 10000.0) == (model.rope_theta or 10000.0)
    assert ("--use-rope-scaling" in flags) == (model.rope_scaling == "llama3")
    hf = hf_config(model.name)
    if hf is not None:
        _compare_with_hf(config, flags, hf)
    _compare_parameters(config, flags, model, plan_json(args), fake_world)


def _compare_with_hf(config, flags, hf: dict) -> None:
    """Field by field against config.json (transformers' names)."""
    assert config.num_layers == hf["num_hidden_layers"]
    assert config.hidden_size == hf["hidden_size"]
    assert config.num_attention_heads == hf["num_attention_heads"]
    assert config.layernorm_epsilon == hf["rms_norm_eps"]
    assert _flag(flags, "--rotary-base", float, 10000.0) == float(hf.get("rope_theta", 10000))
    assert config.add_bias_linear == bool(hf.get("attention_bias", False))
    assert config.num_moe_experts == (hf.get("n_routed_experts") or hf.get("num_experts")
                                      or hf.get("num_local_experts"))
    rope = hf.get("rope_scaling") or {}
    if rope.get("rope_type") == "llama3":  # Megatron's fixed low/high factors and context
        assert ("--use-rope-scaling" in flags and
                _flag(flags, "--rope-scaling-factor") == rope["factor"])
        assert (rope["low_freq_factor"], rope["high_freq_factor"],
                rope["original_max_position_embeddings"]) == (1.0, 4.0, 8192)
    if config.num_moe_experts is None:
        return
    assert config.moe_router_topk == hf["num_experts_per_tok"]
    if "moe_intermediate_size" in hf:
        assert config.moe_ffn_hidden_size == hf["moe_intermediate_size"]
    if hf.get("n_shared_experts"):
        assert config.moe_shared_expert_intermediate_size == (
            hf["n_shared_experts"] * hf["moe_intermediate_size"])
    if hf.get("first_k_dense_replace"):
        freq = config.moe_layer_freq
        assert freq[:hf["first_k_dense_replace"]] == [0] * hf["first_k_dense_replace"]
        assert all(freq[hf["first_k_dense_replace"]:])
    if hf.get("scoring_func"):
        assert config.moe_router_score_function == hf["scoring_func"]
    if hf.get("n_group", 1) > 1:
        assert config.moe_router_num_groups == hf["n_group"]
        assert config.moe_router_group_topk == hf["topk_group"]
    scale = hf.get("routed_scaling_factor", 1.0)
    assert (config.moe_router_topk_scaling_factor or 1.0) == scale
    assert config.moe_router_enable_expert_bias == (hf.get("topk_method") == "noaux_tc")
    assert (config.mtp_num_layers or 0) == hf.get("num_nextn_predict_layers", 0)
    if hf.get("model_type", "").startswith("qwen3"):
        assert config.qk_layernorm
    if hf.get("norm_topk_prob") is False and config.moe_router_score_function == "softmax":
        assert config.moe_router_pre_softmax
    if rope.get("type", rope.get("rope_type")) == "yarn" and "kv_lora_rank" in hf:
        assert config.rotary_scaling_factor == rope["factor"]
        assert config.mscale == rope["mscale"] and config.mscale_all_dim == rope["mscale_all_dim"]
        assert config.original_max_position_embeddings == rope["original_max_position_embeddings"]
        assert (config.beta_fast, config.beta_slow) == (rope["beta_fast"], rope["beta_slow"])
    if "kv_lora_rank" in hf:  # DeepSeek's MLA normalises its latents (q_a_, kv_a_layernorm)
        assert config.qk_layernorm
        assert (config.q_lora_rank, config.kv_lora_rank) == (hf["q_lora_rank"], hf["kv_lora_rank"])
        assert (config.qk_head_dim, config.qk_pos_emb_head_dim, config.v_head_dim) == (
            hf["qk_nope_head_dim"], hf["qk_rope_head_dim"], hf["v_head_dim"])


def _on_one_rank(config, fake_world):
    """The config at tp = pp = cp = ep = 1 (no layout, recompute or offload), the model-parallel
    state initialised for one rank: what a meta-device build takes."""
    import dataclasses

    fake_world(1)
    ps.initialize_model_parallel(1, 1, create_gloo_process_groups=False)
    return dataclasses.replace(
        config, tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
        virtual_pipeline_model_parallel_size=None, context_parallel_size=1,
        expert_model_parallel_size=1, expert_tensor_parallel_size=1, sequence_parallel=False,
        pipeline_model_parallel_layout=None, num_layers_in_first_pipeline_stage=None,
        num_layers_in_last_pipeline_stage=None, hierarchical_context_parallel_sizes=None,
        cp_comm_type=None, mtp_num_layers=None, cpu_offloading=False,
        cpu_offloading_num_layers=0, recompute_granularity=None, recompute_method=None,
        recompute_num_layers=None, use_cpu_initialization=True, perform_initialization=False)


class _CoreAttention(torch.nn.Module):
    """A parameterless stand-in for core attention (softmax(QKᵀ)V holds no weights)."""

    def __init__(self, *args, **kwargs):
        super().__init__()


MLA_MODELS = ("deepseek-v3", "planner/reference/models/torchtitan-deepseek-v3-16b.toml")
"""MLA with query compression (DeepSeek-V3: r_q 1536) and without (the 16B flavour, DeepSeek-V2-
Lite's shape: no query latent, so no query norm)."""


@pytest.mark.parametrize("name", MLA_MODELS)
def test_mla_latent_norms_built(name, fake_world):
    """An MLA model's `--emit megatron` builds the RMSNorms on the query and key-value latents
    (HF DeepSeek's q_a_layernorm, kv_a_layernorm), which plan3d counts in the attention block
    (formulas.params.mla_replicated_params): Megatron-Core builds them only under
    --qk-layernorm (gpt_layer_specs.py @ d98e8a64dd; IdentityOp without it). The first layer's
    MLASelfAttention, built on the meta device from the emitted flags, holds norms of widths
    r_q and r_kv and exactly plan3d's attention parameters at t = 1 (DeepSeek-V3: 187,107,328,
    formulas.params.mla_attention_params' docstring, of which 1,536 + 512 are the norms)."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer import multi_latent_attention
    from megatron.core.transformer.spec_utils import build_module

    from planner.catalog import load_model
    from planner.frameworks.emit import emit
    from planner.schema import PlanConfig

    model = load_model(name)
    config = PlanConfig(dp=8, tp=1, pp=1, ep=8, mbs=1, n_micro=1, gbs=8, seq_len=4096,
                        zero_stage=1, recompute="full", sequence_parallel=False)
    built = build_config(flag_values(emit("megatron", config, model).text))
    assert built.qk_layernorm
    one = _on_one_rank(built, fake_world)
    spec = copy.deepcopy(get_gpt_decoder_block_spec(one, use_transformer_engine=False))
    # the local spec's DotProductAttention takes no k_channels (MLA runs TE's core attention
    # @ 0.16.1); core attention holds no parameters, so a stub stands in for it
    spec.layer_specs[0].submodules.self_attention.submodules.core_attention = _CoreAttention
    with torch.device("meta"), pytest.MonkeyPatch.context() as mp:
        # YarnRotaryEmbedding asks for the CUDA device (MLA does not pass it
        # use_cpu_initialization @ 0.16.1): its inverse frequencies go to the CPU
        mp.setattr(torch.cuda, "current_device", lambda: "cpu")
        # without Transformer Engine, megatron.core.extensions.transformer_engine hands out
        # MagicMocks, which MLASelfAttention's isinstance(…, TELinear) cannot take
        mp.setattr(multi_latent_attention, "HAVE_TE", False)
        layer = build_module(spec.layer_specs[0], config=one, layer_number=1)
    attention = layer.self_attention

    def width(norm: str) -> int:
        module = getattr(attention, norm, None)
        return 0 if module is None else sum(p.numel() for p in module.parameters())

    assert (width("q_layernorm"), width("kv_layernorm")) == (model.q_lora_rank or 0,
                                                             model.kv_lora_rank)
    assert sum(p.numel() for p in attention.parameters()) == model.attention_params
    if name == "deepseek-v3":
        assert model.attention_params == 187_107_328


def _compare_parameters(config, flags, model, plan, fake_world) -> None:
    """GPTModel on the meta device, one rank, the vocabulary padded as Megatron-LM pads it
    (⌈V/(128·tp)⌉·128·tp): its parameters equal plan3d's Ψ plus the padding rows (and, where
    the plan leaves them out, the QK-norm weights and the MTP module, counted apart)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_decoder_block_spec,
        get_gpt_layer_local_spec,
    )

    if config.num_moe_experts and config.num_moe_experts > 64:
        pytest.skip("a meta-device build of this many experts is slow; the MoE shape is "
                    "checked field by field above")
    one = _on_one_rank(config, fake_world)
    tp = config.tensor_model_parallel_size
    vocab = -(-model.vocab // (128 * tp)) * 128 * tp
    if one.num_moe_experts:
        spec = get_gpt_decoder_block_spec(one, use_transformer_engine=False)
    else:
        spec = get_gpt_layer_local_spec(qk_layernorm=one.qk_layernorm,
                                        normalization=one.normalization)
    with torch.device("meta"), pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.cuda, "Stream", lambda *a, **k: None)  # MoELayer's side stream
        built = GPTModel(one, spec, vocab_size=vocab,
                         max_sequence_length=int(flags["--max-position-embeddings"][0]),
                         share_embeddings_and_output_weights="--untie-embeddings-and-output-"
                         "weights" not in flags, position_embedding_type="rope",
                         rotary_base=int(_flag(flags, "--rotary-base", float, 10000)))
    count = sum(p.numel() for p in built.parameters())
    heads = (2 if "--untie-embeddings-and-output-weights" in flags else 1)
    padding = (vocab - model.vocab) * model.hidden * heads
    qk_norm = 2 * model.dim_head * model.n_layers if model.qk_norm else 0
    assert plan["model"]["n_params"] + padding + qk_norm == count


def test_shared_expert_overlap_builds():
    # moe: --moe-shared-expert-overlap (no CLI flag yet: the plan's field) is a TransformerConfig
    # field Megatron-Core accepts with the alltoall dispatcher and DeepSeek-V3's shared expert
    from planner.catalog import load_model
    from planner.frameworks.emit import emit
    from planner.schema import PlanConfig

    config = PlanConfig(dp=64, tp=1, pp=16, ep=64, mbs=1, n_micro=16, gbs=1024, seq_len=4096,
                        zero_stage=1, recompute="full", sequence_parallel=False,
                        moe_shared_expert_overlap=True)
    built = build_config(flag_values(emit("megatron", config, load_model("deepseek-v3")).text))
    assert built.moe_shared_expert_overlap and built.moe_token_dispatcher_type == "alltoall"


def test_the_overlap_refusals_are_megatron_cores():
    # moe: --overlap-moe-expert-parallel-comm beside the settings TransformerConfig.__post_init__
    # refuses with it (transformer_config.py l.3030-3046 @ d98e8a64dd; l.1886-1891 @ 0.16.1):
    # plan3d refuses each pairing quoting Megatron-Core's assertion, and megatron-core 0.16.1,
    # fed the emitted flags, raises it (test_megatron_lm.py checks d98e8a64dd's own config)
    from planner.catalog import load_model

    dsv3 = load_model("deepseek-v3")
    refusal, flags = overlap_case(dsv3)
    assert refusal is None and build_config(flags).overlap_moe_expert_parallel_comm
    said = "disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm"
    refusal, flags = overlap_case(dsv3, moe_shared_expert_overlap=True)
    assert refusal.startswith("megatron: --moe-a2a-overlap") and f'"{said}"' in refusal
    with pytest.raises(AssertionError, match=said):
        build_config(flags)
    # two MTP layers: d98e8a64dd says "MTP supports at most one layer when enabling
    # overlap_moe_expert_parallel_comm.", 0.16.1 "MTP layernum only supports 1 ..."
    refusal, flags = overlap_case(dsv3.model_copy(update={"mtp_layers": 2}))
    assert "MTP supports at most one layer" in refusal and "--no-mtp" in refusal
    with pytest.raises(AssertionError, match="MTP layernum only supports 1"):
        build_config(flags)
    assert overlap_case(dsv3.model_copy(update={"mtp_layers": 2}), mtp=False)[0] is None
    # `moe` among the recompute modules: d98e8a64dd's l.3030-3032 (0.16.1 predates the check)
    refusal, flags = overlap_case(dsv3, recompute_modules=["core_attn", "moe"])
    assert "disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm" \
        in refusal and flags["--recompute-modules"] == ["core_attn", "moe"]
    assert overlap_case(dsv3, recompute_modules=["core_attn", "moe_act"])[0] is None


MEGATRON_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
"""--exp-avg-dtype's choices as arguments.py's map_dtype turns them into torch dtypes (l.1082,
l.3675 @ d98e8a64dd; fp8 left out: plan3d never writes it)."""


def test_precision_aware_optimizer_builds():
    # --adam-moments bf16: the emitted flags are among Megatron-LM's choices and build
    # megatron-core's OptimizerConfig with the distributed optimizer (its precision-aware check
    # of Transformer Engine ≥ 2.1 and its FusedAdam stubbed, conftest.stub_te_optimizer)
    from megatron.core.optimizer import OptimizerConfig

    args = next(a for rid, a, _ in ROWS if rid == "adam-bf16-8b")
    flags = flag_values(emitted(args, "megatron"))
    assert "--use-precision-aware-optimizer" in flags and "--use-distributed-optimizer" in flags
    moments = [flags[f][0] for f in ("--exp-avg-dtype", "--exp-avg-sq-dtype")]
    assert moments == ["bf16", "bf16"]
    with pytest.MonkeyPatch.context() as mp:
        stub_te_optimizer(mp)
        built = OptimizerConfig(use_distributed_optimizer=True, use_precision_aware_optimizer=True,
                                exp_avg_dtype=MEGATRON_DTYPES[moments[0]],
                                exp_avg_sq_dtype=MEGATRON_DTYPES[moments[1]])
    assert (built.exp_avg_dtype, built.exp_avg_sq_dtype, built.main_params_dtype) == (
        torch.bfloat16, torch.bfloat16, torch.float32)


def test_qwen_decoder_sparse_step_builds_transformers_moe_layers(tmp_path, fake_world):
    """A Qwen-MoE config.json with decoder_sparse_step 2: megatron-core's layer specs, from the
    emitted --moe-layer-freq (gpt_layer_specs.py `get_gpt_decoder_layer_specs`: 1 = MoE),
    put a MoE layer where transformers does, (i + 1) mod step = 0 (Qwen3MoeDecoderLayer,
    modeling_qwen3_moe.py @ 16b6c53c8e): layers 1, 3, …, 47, not Megatron's integer 0, 2, …"""
    import json

    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer.moe.moe_layer import MoELayer

    from .conftest import HF

    hf = json.loads((HF / "Qwen3-30B-A3B" / "config.json").read_text())
    hf["decoder_sparse_step"] = 2
    (tmp_path / "config.json").write_text(json.dumps(hf))
    args = f"--model {tmp_path / 'config.json'} --gpus 32 --tp 2 --pp 2 --ep 8 --etp 1"
    flags = flag_values(emitted(args, "megatron"))
    one = _on_one_rank(build_config(flags), fake_world)
    spec = get_gpt_decoder_block_spec(one, use_transformer_engine=False)
    built = [i for i, layer in enumerate(spec.layer_specs)
             if layer.submodules.mlp.module is MoELayer]
    step = hf["decoder_sparse_step"]
    assert built == [i for i in range(hf["num_hidden_layers"]) if (i + 1) % step == 0]
    assert len(built) == 24
