"""A model folder (a Hugging Face snapshot: a folder with its config.json) works wherever a model
name does, named after the folder."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.catalog import load_model, model_folder_name
from planner.cli import app
from planner.errors import PlanError

# meta-llama/Llama-3.1-8B's config.json (the keys the importer reads)
LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
            "tie_word_embeddings": False}


def snapshot(folder, config=LLAMA_8B):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text("{}")  # what else a snapshot holds is ignored
    return folder


def test_folder_loads_its_config_named_after_the_folder(tmp_path):
    folder = snapshot(tmp_path / "Llama-3.1-8B")
    preset = load_model("llama-3.1-8b")
    for given in (str(folder), str(folder) + "/"):
        model = load_model(given)
        assert model.name == "Llama-3.1-8B"
        assert model.n_params == preset.n_params  # 8,030,261,248
        assert str(folder / "config.json") in model.source
    # the config.json itself still works, named after its folder as before
    assert load_model(str(folder / "config.json")).name == "Llama-3.1-8B"


def test_hugging_face_cache_snapshot_is_named_after_the_repository(tmp_path):
    # ~/.cache/huggingface/hub/models--ORG--NAME/snapshots/COMMIT/config.json
    folder = snapshot(tmp_path / "hub" / "models--meta-llama--Llama-3.1-8B" / "snapshots"
                      / "d04e592bb4f6aa9cfee91e2e20afa771667e1d4b")
    assert model_folder_name(folder) == "Llama-3.1-8B"
    assert load_model(str(folder)).name == "Llama-3.1-8B"


def test_relative_folder_and_dot(tmp_path, monkeypatch):
    folder = snapshot(tmp_path / "my-model")
    monkeypatch.chdir(folder)
    assert load_model(".").name == "my-model"
    monkeypatch.chdir(tmp_path)
    assert load_model("my-model").name == "my-model"  # an existing folder, no slash needed


def test_folder_without_config_is_one_clear_error(tmp_path):
    empty = tmp_path / "weights-only"
    empty.mkdir()
    with pytest.raises(PlanError, match=r"weights-only: a model folder needs a config\.json"):
        load_model(str(empty))
    with pytest.raises(PlanError, match=r"not found"):
        load_model(str(tmp_path / "absent") + "/")


def test_cli_takes_a_folder_wherever_a_model_name_goes(tmp_path):
    folder = snapshot(tmp_path / "Llama-3.1-8B")
    runner = CliRunner()
    r = runner.invoke(app, ["explain", "--model", str(folder), "--gpus", "8", "--hw",
                            "h100-nvlink", "--tp", "8", "--gbs", "32", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["model"]["name"] == "Llama-3.1-8B"
    r = runner.invoke(app, ["search", "--model", str(folder), "--gpus", "8", "--hw",
                            "h100-nvlink", "--gbs", "32", "--top", "1", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["plans"][0]["model"]["name"] == "Llama-3.1-8B"
    r = runner.invoke(app, ["compare", "--model", str(folder), "--gpus", "8", "--hw",
                            "h100-nvlink", "--gbs", "32", "--train-tokens", "1T", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["model"] == "Llama-3.1-8B"
    r = runner.invoke(app, ["explain", "--model", str(folder), "--gpus", "8", "--tp", "8",
                            "--gbs", "32", "--emit", "megatron"])
    assert r.exit_code == 0, r.output


def test_calibrate_measurements_name_a_folder_beside_them(tmp_path):
    from planner.calibrate import load_measurements

    snapshot(tmp_path / "Llama-3.1-8B")
    runs = tmp_path / "runs.csv"
    runs.write_text("model,dp,tp,pp,mbs,gbs,step_s\nLlama-3.1-8B,1,8,1,1,8,2.0\n")
    (m,) = load_measurements(runs)
    assert m.model.name == "Llama-3.1-8B"
