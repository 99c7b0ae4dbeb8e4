"""One spelling per concept, help in panels, and errors that say everything at once (issue 19)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()


def test_every_missing_hugging_face_key_is_reported_at_once(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    r = runner.invoke(app, ["explain", "--model", str(path), "--gpus", "8"])
    assert r.exit_code == 2
    assert ("lacks 'num_attention_heads', 'num_hidden_layers', 'intermediate_size', "
            "'vocab_size', 'max_position_embeddings' (needed for llama)") in r.stderr


def test_did_you_mean_for_the_framework():
    r = runner.invoke(app, ["search", "--model", "8b", "--gpus", "8", "--framework", "megatorn"])
    assert r.exit_code == 2
    assert "unknown framework 'megatorn'; did you mean megatron?" in r.stderr


def test_the_expert_parallel_error_leads_with_the_cause():
    r = runner.invoke(app, ["search", "--model", "70b", "--gpus", "64", "--ep", "2"])
    assert r.exit_code == 2
    assert r.stderr.startswith("plan3d: error: llama-3.1-70b has no routed experts")
    r = runner.invoke(app, ["explain", "--model", "mixtral-8x7b", "--gpus", "64", "--ep", "3"])
    assert "ep = 1, 2, 4, 8 work" in r.stderr


def test_one_spelling_of_the_price_and_compare_takes_the_plan_flags():
    for cmd in (["search", "--model", "70b", "--gpus", "512"],
                ["explain", "--model", "70b", "--gpus", "512", "--tp", "8"]):
        r = runner.invoke(app, [*cmd, "--train-tokens", "1T", "--price", "2", "--json"])
        assert r.exit_code == 0, r.output
        r = runner.invoke(app, [*cmd, "--train-tokens", "1T", "--gpu-hour-price", "2"])
        assert r.exit_code == 2  # the old spelling is gone
    r = runner.invoke(app, ["compare", "--model", "70b", "--hw", "h100-nvlink", "--gpus", "256",
                            "--train-tokens", "1T", "--framework", "torchtitan", "--zero", "3",
                            "--json"])
    assert r.exit_code == 0, r.output
    cell = json.loads(r.stdout)["cells"][0]["plan"]["config"]
    assert cell["framework"] == "torchtitan" and cell["zero_stage"] == 3


def test_validate_defaults_like_every_other_command():
    r = runner.invoke(app, ["validate", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["hardware"] == "h100-nvlink"


def test_help_comes_in_panels():
    r = runner.invoke(app, ["search", "--help"], env={"COLUMNS": "100"})
    assert r.exit_code == 0
    for panel in ("What to plan", "Layout", "Memory and recompute", "Schedule and overlap",
                  "Mixture of experts", "Time and cost", "Output", "Ranking"):
        assert f"─ {panel} ─" in r.stdout, panel
