"""Every preset and profile loads and is plausible; user files and Hugging Face configs work."""

import json
import re

import pytest

from planner.catalog import hardware_presets, load_hardware, load_model, model_presets
from planner.errors import PlanError


@pytest.mark.parametrize("name", sorted(hardware_presets()))
def test_profile_is_plausible(name):
    hw = load_hardware(name)
    assert 100 <= hw.peak_tflops.bf16 <= 10_000  # TFLOP/s, dense
    assert hw.peak_tflops.fp16 <= hw.peak_tflops.bf16 * 1.01
    if hw.peak_tflops.fp8 is not None:
        assert hw.peak_tflops.fp8 == pytest.approx(2 * hw.peak_tflops.bf16, rel=0.05)
        assert hw.efficiency.gemm.fp8 is not None
    assert 16 <= hw.hbm_gib <= 300 and 1 <= hw.hbm_tb_per_s <= 20
    assert hw.gpus_per_domain in (8, 72)
    for link in (hw.fast, hw.network):
        assert link.busbw_gb_per_s <= link.gb_per_s  # achievable ≤ nominal
        assert 0.1 <= link.latency_us <= 100
    # NVLink ≫ a NIC: 4x on every profile but the export-limited H800, whose NVLink (160 GB/s,
    # DeepSeek-V3 report §3.2.2) is 3.5x its 400 Gb/s NIC's 46 GB/s
    assert hw.fast.busbw_gb_per_s > 3 * hw.network.busbw_gb_per_s
    assert 0.2 <= hw.efficiency.gemm.bf16 <= 0.9 and 0.5 <= hw.efficiency.hbm <= 1
    assert 0 < hw.runtime.reserved_gib < 10


@pytest.mark.parametrize("name", sorted(model_presets()))
def test_preset_parameter_count_matches_its_name(name):
    model = load_model(name)
    assert model.source
    size = re.search(r"-(\d+(?:\.\d+)?)([bt])$", name)
    if size is None:  # MoE names: their published totals (sources in tests/test_moe.py)
        published = {"mixtral-8x7b": 46.7e9, "mixtral-8x22b": 141e9, "deepseek-v3": 671e9,
                     "qwen3-235b-a22b": 235e9, "qwen3-30b-a3b": 30.5e9}
        assert model.n_params == pytest.approx(published[name], rel=0.01)
        return
    nominal = float(size.group(1)) * (1e9 if size.group(2) == "b" else 1e12)
    # names round: llama-2-7b is 6.74B (−3.7 %), megatron-1t 1.008T
    assert model.n_params == pytest.approx(nominal, rel=0.05)


def test_aliases_resolve():
    assert load_model("70b").name == "llama-3.1-70b"
    assert load_model("175b").name == "gpt3-175b"
    assert load_model("1T").name == "megatron-1t"


LLAMA_HF = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
            "tie_word_embeddings": False}


def test_hugging_face_llama_config_matches_the_preset(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_HF))
    model = load_model(str(path))
    preset = load_model("llama-3.1-8b")
    assert model.n_params == preset.n_params  # 8,030,261,248
    assert model.seq_len == 8192  # max_position_embeddings capped for training


def test_hugging_face_gpt2_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                                "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None,
                                "vocab_size": 50257, "n_positions": 1024}))
    # GPT-2 small: 124,439,808 parameters (tied embeddings, learned positions)
    assert load_model(str(path)).n_params == 124_439_808


def test_hugging_face_mixtral_config(tmp_path):
    cfg = dict(LLAMA_HF, architectures=["MixtralForCausalLM"], model_type="mixtral",
               vocab_size=32000, num_local_experts=8, num_experts_per_tok=2,
               max_position_embeddings=32768)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert load_model(str(path)).n_params == load_model("mixtral-8x7b").n_params


def test_unsupported_architecture_and_missing_keys(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["T5ForConditionalGeneration"]}))
    with pytest.raises(PlanError, match="unsupported architecture"):
        load_model(str(path))
    broken = dict(LLAMA_HF)
    del broken["hidden_size"]
    path.write_text(json.dumps(broken))
    with pytest.raises(PlanError, match="hidden_size"):
        load_model(str(path))


def test_user_model_and_profile_files(tmp_path):
    model = tmp_path / "tiny.toml"
    model.write_text('n_layers = 4\nhidden = 256\nn_heads = 4\nffn = 1024\nvocab = 1000\n'
                     'seq_len = 512\nmlp = "gelu"\n')
    assert load_model(str(model)).name == "tiny"
    hw = tmp_path / "my.toml"
    text = (hardware_presets()["h100-nvlink"]).read_text().replace('name = "h100-nvlink"',
                                                                  'name = "my-cluster"')
    hw.write_text(text)
    assert load_hardware(str(hw)).name == "my-cluster"
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("hbm_gib", "hbm_gb"))
    with pytest.raises(PlanError, match="hbm_gib"):
        load_hardware(str(bad))


def test_a_changed_user_file_is_read_again(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('n_layers = 4\nhidden = 256\nn_heads = 4\nffn = 1024\nvocab = 1000\n'
                    'seq_len = 512\n')
    assert load_model(str(path)).n_layers == 4
    path.write_text(path.read_text().replace("n_layers = 4", "n_layers = 8"))
    assert load_model(str(path)).n_layers == 8
