"""The launch settings of the recipes and the recompute levels (issue 21): what each framework
writes for them, and what it refuses."""

from __future__ import annotations

import pytest

from planner.catalog import load_model
from planner.errors import PlanError
from planner.frameworks.emit import emit
from planner.schema import PlanConfig

M70 = load_model("70b")
BASE = dict(dp=16, tp=8, pp=4, mbs=1, n_micro=64, gbs=1024, seq_len=8192, zero_stage=1,
            sequence_parallel=True)


def test_megatron_writes_the_recipe_and_partial_recompute():
    c = PlanConfig(**BASE, recompute="full", recompute_layers=5, precision="fp8",
                   fp8_recipe="current", fp8_param_gather=True)
    text = emit("megatron", c, M70).text
    # current scaling is Megatron's "tensorwise" (transformer_config.py fp8_recipe @ d98e8a6)
    for flag in ("--fp8-format hybrid", "--fp8-recipe tensorwise", "--fp8-param-gather",
                 "--recompute-granularity full", "--recompute-method block",
                 "--recompute-num-layers 5"):
        assert flag in text, flag
    assert "--recompute-method uniform" not in text
    c = PlanConfig(**{**BASE, "sequence_parallel": False}, recompute="full",
                   distribute_saved_activations=True)
    assert "--distribute-saved-activations" in emit("megatron", c, M70).text


def test_megatron_writes_the_recompute_modules_and_nvfp4():
    c = PlanConfig(**BASE, recompute="selective", recompute_modules=("core_attn", "mlp"))
    assert "--recompute-modules core_attn mlp" in emit("megatron", c, M70).text
    c = PlanConfig(**BASE, recompute="full", precision="nvfp4")
    text = emit("megatron", c, M70).text
    assert "--fp4-format e2m1" in text and "--fp4-recipe nvfp4" in text
    assert "--fp8-format" not in text


def test_bridge_takes_the_recipe_preset_and_says_where_its_param_gather_differs():
    c = PlanConfig(**BASE, recompute="full", recompute_layers=3, precision="fp8",
                   fp8_recipe="blockwise")
    out = emit("nemo", c, M70)
    assert "mixed_precision: bf16_with_fp8_subchannel_scaling_mixed" in out.text
    assert "recompute_method: block" in out.text and "recompute_num_layers: 3" in out.text
    # the delayed preset gathers fp8 parameters; a plan costed without says so in a note
    out = emit("nemo", PlanConfig(**BASE, precision="fp8"), M70)
    assert any("fp8_param_gather=True" in n for n in out.notes)


def test_torchtitan_refuses_what_its_settings_cannot_say():
    tt = dict(BASE, zero_stage=3, framework="torchtitan")
    with pytest.raises(PlanError, match="per-layer activation checkpointing"):
        emit("torchtitan", PlanConfig(**tt, recompute="full", recompute_layers=4), M70)
    # (the 0.2 TOML settings: 0.3 takes float8 only through its registry's float8 entries)
    with pytest.raises(PlanError, match="tensorwise"):
        emit("torchtitan@0.2", PlanConfig(**tt, precision="fp8", fp8_recipe="mxfp8"), M70)
    assert "float8" in emit("torchtitan@0.2", PlanConfig(**tt, precision="fp8"), M70).text
