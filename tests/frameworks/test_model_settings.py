"""The whole model in the launch settings (issue 20): the Hugging Face import reads the
architecture fields, the presets carry the same values, and --emit megatron writes them in
Megatron-LM's flags (the parser suite, tests/parsers, then feeds them to the frameworks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.catalog import load_model
from planner.errors import PlanError
from planner.frameworks.emit import emit
from planner.frameworks.model_settings import padded_vocab
from planner.frameworks.moe_launch import bridge_moe_fields
from planner.schema import PlanConfig

HF = Path(__file__).parents[1] / "data" / "hf"
ARCHITECTURE = ("rope_theta", "rope_scaling", "rope_factor", "rope_low_freq_factor",
                "rope_high_freq_factor", "rope_original_max_positions", "rope_beta_fast",
                "rope_beta_slow", "rope_mscale", "rope_mscale_all_dim", "norm_eps", "qk_norm",
                "qkv_bias", "norm_topk_prob", "routed_scaling_factor", "router_expert_bias",
                "mtp_layers")
PLAN = PlanConfig(dp=8, tp=8, pp=1, mbs=1, n_micro=1, gbs=8, seq_len=4096)


@pytest.mark.parametrize("folder, preset", [
    ("Llama-3.1-70B", "llama-3.1-70b"), ("DeepSeek-V3", "deepseek-v3"),
    ("Qwen3-235B-A22B", "qwen3-235b-a22b"), ("Qwen3-30B-A3B", "qwen3-30b-a3b"),
    ("Mixtral-8x22B-v0.1", "mixtral-8x22b"), ("gpt-oss-120b", "gpt-oss-120b")])
def test_import_and_preset_agree_on_the_architecture(folder, preset):
    imported, built_in = load_model(str(HF / folder / "config.json")), load_model(preset)
    for field in ARCHITECTURE:
        assert getattr(imported, field) == getattr(built_in, field), field


def test_hf_fields_by_hand():
    m = load_model(str(HF / "DeepSeek-V3" / "config.json"))
    # config.json: rope_scaling {type yarn, factor 40, mscale 1.0, mscale_all_dim 1.0,
    # original_max_position_embeddings 4096}, routed_scaling_factor 2.5, topk_method noaux_tc,
    # num_nextn_predict_layers 1, rms_norm_eps 1e-6
    assert (m.rope_scaling, m.rope_factor, m.rope_original_max_positions) == ("yarn", 40, 4096)
    assert (m.routed_scaling_factor, m.router_expert_bias, m.mtp_layers) == (2.5, True, 1)
    assert m.norm_eps == 1e-6 and m.unmodelled == ()
    qwen2 = load_model(str(HF / "Qwen1.5-MoE-A2.7B" / "config.json"))
    # Qwen2-MoE: q/k/v biases (no attention_bias key), norm_topk_prob false; its sliding_window
    # is off (use_sliding_window false), so nothing is left unmodelled
    assert qwen2.qkv_bias and not qwen2.norm_topk_prob and qwen2.unmodelled == ()


def test_unknown_fields_pass_through_by_name():
    oss = load_model(str(HF / "gpt-oss-120b" / "config.json"))
    names = " ".join(oss.unmodelled)
    assert "sliding_window=128" in names and "attention sinks" in names
    r = emit("megatron", PLAN, oss)
    assert any("sliding_window=128" in note for note in r.notes)


def _flags(text: str) -> str:
    return " ".join(text.replace("\\\n", " ").split())


def test_llama_3_1_70b_carries_its_rotary_and_norm():
    text = _flags(emit("megatron", PLAN, load_model("llama-3.1-70b")).text)
    for flag in ("--rotary-base 500000", "--use-rope-scaling", "--rope-scaling-factor 8.0",
                 "--norm-epsilon 1e-05", "--position-embedding-type rope"):
        assert flag in text, flag
    assert "--qk-layernorm" not in text  # neither per-head QK norms nor MLA


def test_qwen3_carries_qk_norm_and_deepseek_its_router_and_mtp():
    qwen = _flags(emit("megatron", PLAN, load_model("qwen3-30b-a3b")).text)
    assert "--qk-layernorm" in qwen and "--norm-epsilon 1e-06" in qwen
    assert "--rotary-base 1000000" in qwen and "--moe-router-pre-softmax" not in qwen
    ds = _flags(emit("megatron", PLAN, load_model("deepseek-v3")).text)
    for flag in ("--moe-router-score-function sigmoid", "--moe-router-enable-expert-bias",
                 "--moe-router-topk-scaling-factor 2.5", "--moe-router-num-groups 8",
                 "--moe-router-group-topk 4", "--mtp-num-layers 1",
                 "--rotary-scaling-factor 40.0", "--mscale 1.0", "--mscale-all-dim 1.0",
                 # MLA's latent norms (q_a_layernorm, kv_a_layernorm) are built under it
                 "--qk-layernorm"):
        assert flag in ds, flag


def test_what_megatron_cannot_express_is_refused():
    llama = load_model("llama-3.1-8b").model_copy(update={"rope_high_freq_factor": 2.0})
    with pytest.raises(PlanError, match="rope_high_freq_factor"):
        emit("megatron", PLAN, llama)
    ds = load_model("deepseek-v3").model_copy(update={"norm_topk_prob": False})
    with pytest.raises(PlanError, match="renormalis"):
        emit("megatron", PLAN, ds)


def test_padded_vocabulary():
    # Megatron pads to a multiple of 128·tp: 128,256 at tp 8 → ⌈128256/1024⌉·1024 = 126·1024
    assert padded_vocab(128256, 8) == 129024
    assert padded_vocab(32000, 2) == 32000  # 32000 = 125·256 already


def test_nemo_carries_the_model():
    text = emit("nemo", PLAN, load_model("llama-3.1-70b")).text
    assert "rotary_base: 500000.0" in text and "layernorm_epsilon: 1.0e-05" in text
    assert "rope_scaling: true" in text


def test_hf_rope_scaling_kind_unknown_is_refused(tmp_path):
    cfg = json.loads((HF / "Llama-3.1-70B" / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": "dynamic", "factor": 2.0}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(PlanError, match="dynamic"):
        load_model(str(path))


def _qwen_moe_every_second_layer(tmp_path) -> Path:
    """Qwen3-30B-A3B's config.json with decoder_sparse_step 2."""
    cfg = json.loads((HF / "Qwen3-30B-A3B" / "config.json").read_text())
    cfg["decoder_sparse_step"] = 2
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_qwen_decoder_sparse_step_places_moe_layers_as_transformers_does(tmp_path):
    # transformers' Qwen3MoeDecoderLayer (modeling_qwen3_moe.py @ 16b6c53c8e) makes layer i MoE
    # when (i + 1) mod decoder_sparse_step = 0: with step 2 over 48 layers, 1, 3, …, 47 (24)
    m = load_model(str(_qwen_moe_every_second_layer(tmp_path)))
    hf_moe = tuple(i for i in range(48) if (i + 1) % 2 == 0)
    assert (m.moe_layer_freq, m.moe_layer_phase) == (2, 1)
    assert m.moe_layer_indices == hf_moe and m.n_moe_layers == 24
    # Megatron's integer --moe-layer-freq 2 would be layers 0, 2, … (i mod 2 = 0): the list
    # [0, 1] repeated is written instead
    text = _flags(emit("megatron", PLAN, m).text)
    assert '--moe-layer-freq "([0,1]*24)"' in text
    assert [i for i, x in enumerate([0, 1] * 24) if x] == list(hf_moe)
    # Megatron-Bridge's model.moe_layer_freq: the same list
    assert bridge_moe_fields(PLAN, m)["moe_layer_freq"] == [0, 1] * 24
    # torchtitan's qwen3 registry entries have a MoE block in every layer: no match
    with pytest.raises(PlanError, match="registry"):
        emit("torchtitan", PLAN, m)


def test_moe_layer_phase_below_the_frequency():
    from planner.schema import ModelSpec

    fields = {**load_model("qwen3-30b-a3b").model_dump(), "moe_layer_freq": 3}
    del fields["moe_layer_phase"]
    # phase 2 of 3 over 48 layers: 2, 5, …, 47 → 16 MoE layers
    assert ModelSpec(**fields, moe_layer_phase=2).n_moe_layers == 16
    with pytest.raises(ValueError, match="moe_layer_phase .3. must be below"):
        ModelSpec(**fields, moe_layer_phase=3)


def test_deepspeed_without_ep_refuses_a_moe_layer_frequency():
    # DeepSpeed at ep = 1 writes no MoE shape: a model whose MoE layers are not all of them
    # (here Mixtral with every second layer MoE) is refused rather than written dense-free
    mixtral = load_model("mixtral-8x7b")
    plan = PlanConfig(dp=8, tp=1, pp=1, mbs=1, n_micro=1, gbs=8, seq_len=4096, zero_stage=2)
    emit("deepspeed", plan, mixtral)  # every layer MoE: expressible
    with pytest.raises(PlanError, match="dense layers"):
        emit("deepspeed", plan, mixtral.model_copy(update={"moe_layer_freq": 2}))
