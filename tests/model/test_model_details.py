"""Hand-derived checks of the cost model's finer points (found in review)."""

import json

import pytest
from typer.testing import CliRunner

from planner.catalog import load_hardware, load_model
from planner.cli import app
from planner.formulas import comm as C
from planner.formulas import timing as T
from planner.frameworks.emit import emit
from planner.model.cost import Choices, numbers, plan_costs
from planner.schema import PlanConfig


def costs(model, hw, **cfg):
    config = PlanConfig(**cfg)
    return plan_costs(numbers(load_model(model), load_hardware(hw), config), Choices.of(config))


def test_zero2_reduces_gradients_every_micro_batch():
    # Ψ = 1e9, g = 4, w = 2, d = 8, m = 4:
    # ZeRO-1: (7/8)·(4 + 2)·1e9 = 5.25e9 per step, nothing per micro-batch
    # ZeRO-2: (7/8)·(4·4 + 2)·1e9 = 15.75e9 (reduce-scatter each micro-batch, gather once)
    # ZeRO-3: (7/8)·4·(2·2 + 4)·1e9 = 28e9
    assert C.dp_gradient_bytes(1e9, 4, 2, 8, 4, 1) == pytest.approx(5.25e9)
    assert C.dp_gradient_bytes(1e9, 4, 2, 8, 4, 2) == pytest.approx(15.75e9)
    assert C.dp_gradient_bytes(1e9, 4, 2, 8, 4, 3) == pytest.approx(28e9)
    # and the step pays for it where the network is the bottleneck: 8B on 512 A100 across nodes,
    # 2,048-token micro-batches (~0.5 s of compute each) against a ~1.4 s reduce-scatter of
    # 32 GB of fp32 gradients at 23 GB/s — ZeRO-2 exposes it 8 times, ZeRO-1 once
    base = dict(dp=512, tp=1, pp=1, mbs=1, n_micro=8, gbs=4096, seq_len=2048,
                sequence_parallel=False)
    z1 = costs("8b", "a100-nvlink", zero_stage=1, **base)
    z2 = costs("8b", "a100-nvlink", zero_stage=2, **base)
    assert z2["dp_bytes"] == pytest.approx(z1["dp_bytes"] * (8 * 4 + 2) / (4 + 2))
    assert z2["dp_exposed_s"] > 2 * z1["dp_exposed_s"]
    assert z2["step_s"] > z1["step_s"]


def test_nvlink_domain_must_tile_the_group():
    # NVL72: a 48-rank span does not tile 72 (every other group straddles two domains),
    # a 36-rank span does; 8-GPU nodes: any power of two up to 8
    assert C.inside_domain(48, 72) == 0 and C.inside_domain(36, 72) == 1
    assert C.inside_domain(72, 72) == 1 and C.inside_domain(144, 72) == 0
    assert C.inside_domain(8, 8) == 1 and C.inside_domain(16, 8) == 0
    r = CliRunner().invoke(app, ["explain", "--model", "70b", "--gpus", "96", "--hw",
                                 "gb200-nvl72", "--tp", "4", "--pp", "2", "--gbs", "96",
                                 "--zero", "1", "--json"])
    assert json.loads(r.stdout)["comm"]["dp_link"] == "network"  # dp span 4·12 = 48


def test_moe_keeps_activations_for_top_k_experts():
    # Mixtral, one layer, s = 4096, b = 1, t = 1, selective, no dropout, flash, perfectly
    # balanced routing (moe_imbalance 1):
    # replicated 4·2·s·h = 8·4096·4096 = 134,217,728
    # sharded 2·s·(d_h(2a + 2k) + n·f·top_k) = 2·4096·(128·(64 + 16) + 3·14336·2)
    #       = 8192·(10,240 + 86,016) = 788,529,152
    # dispatcher: the second token copy 2·s·h and the fp32 router scores 4·s·E
    #       = 4096·(8192 + 32) = 33,685,504;  total 956,432,384
    r = costs("mixtral-8x7b", "h100-nvlink", dp=1, mbs=1, n_micro=1, gbs=1, seq_len=4096,
              recompute="selective", sequence_parallel=False, moe_imbalance=1.0)
    assert r["layer_activation_bytes"] == 956_432_384
    # without expert parallelism the derived load is 1 (one GPU holds every expert and runs
    # exactly T·k rows: formulas.moe_layer.rank_load at ep = 1), so the default gives the same
    r = costs("mixtral-8x7b", "h100-nvlink", dp=1, mbs=1, n_micro=1, gbs=1, seq_len=4096,
              recompute="selective", sequence_parallel=False)
    assert r["layer_activation_bytes"] == 956_432_384
    # a fixed imbalance 1.25 makes the busiest rank hold 2.5 expert copies per token:
    # sharded 8192·(10,240 + 3·14336·2.5) = 964,689,920; dispatcher 4096·(1.5·8192 + 32)
    # = 50,462,720; total 134,217,728 + 964,689,920 + 50,462,720 = 1,149,370,368
    r = costs("mixtral-8x7b", "h100-nvlink", dp=1, mbs=1, n_micro=1, gbs=1, seq_len=4096,
              recompute="selective", sequence_parallel=False, moe_imbalance=1.25)
    assert r["layer_activation_bytes"] == 1_149_370_368


def test_flash_backward_is_two_and_a_half_forwards_of_attention():
    assert T.backward_layer_s(1.0, 0.4, T.FLASH_BACKWARD_FACTOR) == pytest.approx(2 + 1.0)
    assert T.backward_layer_s(1.0, 0.4, T.CLASSIC_BACKWARD_FACTOR) == pytest.approx(2 + 0.8)


def test_fp8_runs_attention_and_head_in_bf16():
    base = dict(dp=8, tp=8, pp=1, mbs=1, n_micro=8, gbs=64, seq_len=8192)
    bf16 = costs("70b", "h100-nvlink", precision="bf16", **base)
    fp8 = costs("70b", "h100-nvlink", precision="fp8", **base)
    hw = load_hardware("h100-nvlink")
    # the GEMMs speed up by (peak·η) fp8 / bf16; attention and head do not
    ratio = (hw.peak_tflops.fp8 * hw.efficiency.gemm.fp8) / (hw.peak_tflops.bf16 *
                                                             hw.efficiency.gemm.bf16)
    assert ratio > 1.5
    assert fp8["step_s"] > bf16["step_s"] / ratio  # not everything got faster


def test_full_recompute_holds_one_working_layer():
    base = dict(dp=1, tp=8, pp=1, mbs=1, n_micro=1, gbs=1, seq_len=4096, sequence_parallel=True)
    full = costs("70b", "h100-nvlink", recompute="full", **base)
    none = costs("70b", "h100-nvlink", recompute="none", **base)
    # 80 layers' inputs 2·s·h/t + one whole layer + the loss (single stage, one micro-batch):
    # Megatron's vocab-parallel cross entropy holds the 16-bit logits and the fp32 softmax,
    # (2 + 4)·s·V/t, and the final norm's and LM head's inputs 2·2·s·h/t (sequence parallel)
    inputs = 80 * 2 * 4096 * 8192 / 8
    loss = 6 * 4096 * 129024 / 8  # V padded to a multiple of 128·8: 129,024
    head = 2 * 2 * 4096 * 8192 / 8
    # and the layer's activation gradients during its backward: the residual stream's at the full
    # sequence and SwiGLU's two f-wide ones, 2·s·(h + 2f/t) = 2·4096·(8192 + 2·28672/8)
    gradients = 2 * 4096 * (8192 + 2 * 28672 / 8)
    assert full["activations_bytes"] == pytest.approx(
        inputs + none["layer_activation_bytes"] + loss + head + gradients, rel=1e-12)


def test_megatron_uneven_stages():
    # 126 layers over pp 16: middle stages ⌈126/16⌉ = 8 → 14·8 = 112, first + last = 14 → 7 + 7
    config = PlanConfig(dp=128, tp=8, pp=16, mbs=1, n_micro=16, gbs=2048, seq_len=8192)
    text = emit("megatron", config, load_model("405b")).text
    assert "--decoder-first-pipeline-num-layers 7" in text
    assert "--decoder-last-pipeline-num-layers 7" in text


def test_search_emit_falls_back_to_an_expressible_plan():
    r = CliRunner().invoke(app, ["search", "--model", "405b", "--gpus", "16384", "--top", "2",
                                 "--emit", "megatron", "--json"])
    assert r.exit_code == 0, r.output
    launch = json.loads(r.stdout)["launch"]
    assert "--pipeline-model-parallel-size" in launch["text"]


def test_wave_quantisation_by_hand():
    # 8192 × 3584 output in 128×256 tiles: 64·14 = 896 tiles over 132 SMs → ⌈896/132⌉ = 7 waves,
    # 896 / (7·132) = 896/924 = 0.9697
    assert T.wave_efficiency(8192, 3584, 132, 128, 256) == pytest.approx(896 / 924)
    # sliced 8 ways more (N = 448): 64·2 = 128 tiles → one wave of 132: 128/132
    assert T.wave_efficiency(8192, 448, 132, 128, 256) == pytest.approx(128 / 132)
    # 2048 × 1024 in 128×128 on 108 SMs: 16·8 = 128 tiles → 2 waves: 128/216
    assert T.wave_efficiency(2048, 1024, 108, 128, 128) == pytest.approx(128 / 216)
    # the layer's FLOP-weighted mean lies between its GEMMs' own efficiencies, and is 1 for a
    # GEMM set that tiles the SMs exactly (132 SMs, 128×128 tiles, 132·128 rows, 128 columns)
    w = T.layer_gemm_wave_efficiency(132 * 128, 128, 1, 1, 128, 128, 2, 1, 132)
    assert w == pytest.approx(1.0)
