"""fit: `layernorm` and `moe_act` in --recompute-modules (Megatron-Core transformer_layer.py
l.470-530, moe/experts.py activation_recompute, gpt_layer_specs.py @ d98e8a64dd): what each
drops from a layer's saved set, hand-derived, and what they cost to rerun."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.errors import PlanError
from planner.model.cost import Choices, numbers, plan_costs
from planner.model.estimate import estimate
from planner.schema import PlanConfig

MiB = 2**20
H100 = load_hardware("h100-nvlink")


def noted(model, **kw):
    base = dict(dp=8, tp=2, pp=1, ep=8, mbs=1, n_micro=1, gbs=8, seq_len=4096, zero_stage=1,
                recompute="selective", sequence_parallel=True)
    config = PlanConfig(**{**base, **kw})
    seen = {}

    def note(name, value):
        seen[name] = value
        return value

    plan_costs(numbers(load_model(model), H100, config), Choices.of(config), note)
    return seen


def test_layernorm_drops_a_moe_layers_pre_mlp_norm_output():
    # Mixtral 8x7B (not MLA), tp 2 with SP: the pre-MLP norm's 16-bit output,
    # 2 B · 4096 · 1 · 4096 / 2 = 16 MiB per layer and micro-batch
    a = noted("mixtral-8x7b", recompute_modules=("core_attn",))
    b = noted("mixtral-8x7b", recompute_modules=("core_attn", "layernorm"))
    assert float(a["layer_activation_bytes"]) - float(b["layer_activation_bytes"]) == 16 * MiB


def test_moe_act_drops_the_experts_fc2_input():
    # Mixtral: k = 2 experts of f_e = 14336 per token, on the busiest rank λ times the mean;
    # fc2's 16-bit input, 2 · 4096 · λ · 2 · 14336 / 2 = λ · 112 MiB
    a = noted("mixtral-8x7b", recompute_modules=("core_attn",))
    b = noted("mixtral-8x7b", recompute_modules=("core_attn", "moe_act"))
    lam = float(a["moe_load"])
    assert lam >= 1
    assert float(a["layer_activation_bytes"]) - float(b["layer_activation_bytes"]) == \
        pytest.approx(lam * 112 * MiB, rel=1e-12)
    # its rerun reads the gate and up outputs and writes one (3 · 2 B · 4096 · λ·2·14336 / 2),
    # memory-bound: the backward's recompute time grows by that over the HBM bandwidth
    rerun = 3 * 2 * 4096 * lam * 2 * 14336 / 2
    x = numbers(load_model("mixtral-8x7b"), H100, PlanConfig(
        dp=8, tp=2, pp=1, ep=8, mbs=1, n_micro=1, gbs=8, seq_len=4096, zero_stage=1,
        recompute="selective", sequence_parallel=True))
    assert float(b["recompute_layer_s"]) - float(a["recompute_layer_s"]) == pytest.approx(
        rerun / (x.hbm_bw * x.hbm_eff), rel=1e-9)


def test_a_dense_layer_has_nothing_to_drop_for_layernorm():
    # Transformer Engine fuses a dense layer's two norms into the QKV and fc1 linears
    # (gpt_layer_specs.py): Megatron-Core recomputes no norm there
    kw = dict(model="70b", dp=8, tp=8, pp=1, ep=1, gbs=8)
    plan = estimate(load_model(kw.pop("model")), H100, PlanConfig(
        **{**dict(mbs=1, n_micro=1, seq_len=4096, zero_stage=1, recompute="selective",
                  sequence_parallel=True), **kw, "recompute_modules": ("core_attn", "layernorm")}))
    same = estimate(load_model("70b"), H100, PlanConfig(
        **{**dict(mbs=1, n_micro=1, seq_len=4096, zero_stage=1, recompute="selective",
                  sequence_parallel=True), **kw, "recompute_modules": ("core_attn",)}))
    assert plan.memory.activations_bytes == same.memory.activations_bytes
    assert plan.time.step_s == same.time.step_s


def test_what_megatron_core_refuses_is_refused():
    dense = PlanConfig(dp=8, tp=8, pp=1, mbs=1, n_micro=1, gbs=8, seq_len=4096, zero_stage=1,
                       recompute="selective", sequence_parallel=True,
                       recompute_modules=("moe_act",))
    with pytest.raises(PlanError, match="moe_act"):
        estimate(load_model("70b"), H100, dense)
    delayed = PlanConfig(dp=8, tp=2, pp=1, ep=8, mbs=1, n_micro=1, gbs=8, seq_len=4096,
                         zero_stage=1, recompute="selective", sequence_parallel=True,
                         precision="fp8", recompute_modules=("layernorm",))
    with pytest.raises(PlanError, match="delayed"):
        estimate(load_model("mixtral-8x7b"), H100, delayed)
    current = PlanConfig(**{**delayed.model_dump(), "fp8_recipe": "current"})
    assert estimate(load_model("mixtral-8x7b"), H100, current).memory.total_bytes > 0


def test_megatron_writes_them_and_the_cli_takes_them():
    from typer.testing import CliRunner

    from planner.cli import app
    from planner.frameworks.emit import emit

    c = PlanConfig(dp=8, tp=2, pp=2, ep=8, mbs=1, n_micro=8, gbs=64, seq_len=4096, zero_stage=1,
                   recompute="selective", sequence_parallel=True,
                   recompute_modules=("core_attn", "layernorm", "moe_act"))
    text = emit("megatron", c, load_model("qwen3-30b-a3b")).text
    assert "--recompute-modules core_attn layernorm moe_act" in text
    assert "--moe-grouped-gemm" in text  # what moe_act needs (transformer_config.py)
    runner = CliRunner()
    args = ["explain", "--model", "qwen3-30b-a3b", "--gpus", "32", "--tp", "2", "--pp", "2",
            "--ep", "8", "--etp", "1", "--recompute", "selective", "--recompute-modules"]
    r = runner.invoke(app, [*args, "layernorm,moe_act"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["explain", "--model", "70b", "--gpus", "64", "--tp", "8", "--pp",
                            "1", "--recompute", "selective", "--recompute-modules", "moe_act"])
    assert r.exit_code != 0 and "moe_act" in r.stderr
