"""Megatron's token permutation with and without --moe-permute-fusion (issue 23: small-expert
models too fast). Un-fused, Megatron-Core un-permutes by PyTorch's atomic scatter_add_ and the
permutation's backward is an index_add_ (moe_utils.py @ d98e8a64dd); plan3d costs that pass at
the rate TileOPs measured for it (formulas.moe_layer.SCATTER_ADD_BYTES_PER_S) beyond the
streaming pass the permutation traffic is already costed at. Hand-derived values, the term's
place in the layer (once forward, once backward), the launch settings, and the search."""

from __future__ import annotations

import json

import numpy as np
import pytest
import sympy as sp
import yaml
from typer.testing import CliRunner

from planner.catalog import load_hardware, load_model
from planner.cli import app
from planner.formulas import moe_layer as ML
from planner.frameworks.emit import emit
from planner.model.estimate import estimate
from planner.schema import PlanConfig
from planner.search.evaluate import evaluate_space
from planner.search.request import PlanRequest
from planner.search.space import config_at

H800 = load_hardware("h800-nvlink")
QWEN = load_model("qwen3-30b-a3b")
# the Pai-Megatron-Patch run of planner/reference/published_moe.json: tp1 pp2 ep8, s 8192
ROW = dict(dp=8, tp=1, pp=2, ep=8, mbs=1, n_micro=16, gbs=128, seq_len=8192, zero_stage=1,
           sequence_parallel=False,
           recompute="none", moe_capacity_factor=1.0, grad_dtype="bf16")
ARGS = ["explain", "-m", "qwen3-30b-a3b", "-n", "16", "--hw", "h800-nvlink", "--gbs", "128",
        "--seq-len", "8192", "--dp", "8", "--tp", "1", "--pp", "2", "--ep", "8", "--mbs", "1",
        "--zero", "1", "--recompute", "none", "--moe-capacity-factor", "1.0", "--json"]


def test_scatter_bytes_and_excess_by_hand():
    # Qwen3-30B-A3B on one GPU: T = 8192 tokens, k = 8, h = 2048, bf16:
    # 2·2048·(8192·8 + 8192) = 4096·73,728 = 301,989,888 B
    moved = ML.unpermute_scatter_bytes(8192, 8, 2048, 2)
    assert moved == 301_989_888
    # at 0.25 TB/s: 1.207959552 ms; streamed at 3.35 TB/s · 0.89 = 2.9815 TB/s: 0.10128... ms
    excess = ML.atomic_scatter_excess_s(moved, 0.25e12, 3.35e12 * 0.89)
    assert excess == pytest.approx(301_989_888 / 0.25e12 - 301_989_888 / 2.9815e12, rel=1e-12)
    assert excess == pytest.approx(1.10667e-3, rel=1e-4)


def test_weighting_bytes_by_hand():
    # Megatron's un-fused weighing (bf16 multiply, one zero-fill of the output), Qwen3-30B-A3B
    # on one GPU: 2048·(8192·8·(2·2) + 1·2·8192) = 2048·278,528 = 570,425,344 B
    assert ML.score_weighting_bytes(8192, 8, 2048, 2, 0, 1) == 570_425_344
    # torchtitan's, cast to fp32 and back (20 B a value) and two passes over the output:
    # 2048·(8192·8·20 + 2·2·8192) = 2048·1,343,488 = 2,751,463,424 B
    assert ML.score_weighting_bytes(8192, 8, 2048, 2, 1, 2) == 2_751_463_424
    t, k, h, a = sp.symbols("T k h a", positive=True)
    assert sp.expand(ML.score_weighting_bytes(t, k, h, a, 1, 2)
                     - ML.score_weighting_bytes(t, k, h, a, 0, 1)) == sp.expand(h * (16 * t * k
                                                                                  + a * t))


def test_the_rate_is_the_benchmarks():
    # TileOPs #608 (H200, bf16): 2,048 tokens, top-2, h 4,096 in 0.20 ms:
    # 2·4096·(2048·2 + 2048) = 50,331,648 B / 0.20 ms = 0.2517 TB/s
    assert ML.unpermute_scatter_bytes(2048, 2, 4096) / 0.20e-3 == pytest.approx(
        ML.SCATTER_ADD_BYTES_PER_S, rel=0.01)


def test_excess_symbols_and_arrays():
    b, w, s = sp.symbols("B W_sc W_s", positive=True)
    assert sp.simplify(ML.atomic_scatter_excess_s(b, w, s) - b * (s - w) / (w * s)) == 0
    assert ML.atomic_scatter_excess_s(b, s, s) == 0  # as fast as streaming: nothing more
    tokens = np.array([4096.0, 8192.0])
    got = ML.unpermute_scatter_bytes(tokens, 8, 2048)
    assert got.tolist() == [ML.unpermute_scatter_bytes(4096, 8, 2048), 301_989_888]


def _terms(*extra: str) -> dict:
    r = CliRunner().invoke(app, [*ARGS, *extra])
    assert r.exit_code == 0, r.output
    return {t["key"]: t["value"] for t in json.loads(r.stdout)["terms"]}


def test_unfused_layer_adds_the_scatter_once_each_way():
    fused, unfused = _terms(), _terms("--no-moe-permute-fusion")
    assert "moe_atomic_scatter_s" not in fused and "moe_weighting_s" not in fused
    scatter, weigh = unfused["moe_atomic_scatter_s"], unfused["moe_weighting_s"]
    # T = b·s/(c·t) = 8192 tokens on the profile's HBM (3.35 TB/s at 0.89): the hand values,
    # the weighing 570,425,344 B / 2.9815 TB/s = 0.191322 ms
    assert scatter == pytest.approx(1.10667e-3, rel=1e-4)
    assert weigh == pytest.approx(0.191322e-3, rel=1e-4)
    assert unfused["forward_layer_s"] - fused["forward_layer_s"] == pytest.approx(scatter + weigh)
    # the backward's index_add_ once (not doubled with the rest of the layer); the weighing's
    # memory-bound pass twice, as the layer's other element-wise work
    assert unfused["backward_layer_s"] - fused["backward_layer_s"] == pytest.approx(
        scatter + 2 * weigh)


def test_published_row_moves_by_its_layers():
    fused = estimate(QWEN, H800, PlanConfig(**ROW)).time.step_s
    unfused = estimate(QWEN, H800, PlanConfig(**ROW, moe_permute_fusion=False)).time.step_s
    # 2·T_scat + 3·T_weigh a layer and micro-batch, 24 layers a stage, m + p − 1 = 17 stage
    # slots: (2 · 1.10667 + 3 · 0.191322) ms · 24 · 17 = 1.1372 s (the bubble's slots
    # included), and the straggler wait, which scales with the micro-batch's compute
    # (T_strag ∝ T_mb: +0.4 %)
    moved = (2 * 1.10667e-3 + 3 * 0.191322e-3) * 24 * 17
    assert unfused - fused == pytest.approx(moved, rel=1e-2)
    assert unfused - fused > moved


def test_other_frameworks_have_no_switch():
    # torchtitan has no fused permutation: its MoE always scatter-adds (MoE.forward's
    # scatter_add, torch.gather's backward: models/moe/moe.py @ 176498cd4), so the switch
    # changes nothing and both cost the scatter
    config = dict(ROW, zero_stage=2, moe_capacity_factor=None, framework="torchtitan")
    a = estimate(QWEN, H800, PlanConfig(**config)).time.step_s
    b = estimate(QWEN, H800, PlanConfig(**config, moe_permute_fusion=False)).time.step_s
    assert a == b
    r = CliRunner().invoke(app, [*ARGS[:ARGS.index("--zero")], "--zero", "2", "--recompute",
                                 "none", "--framework", "torchtitan", "--json"])
    terms = {t["key"]: t["value"] for t in json.loads(r.stdout)["terms"]}
    assert terms["moe_atomic_scatter_s"] == pytest.approx(1.10667e-3, rel=1e-4)


def test_emitted_flag_follows_the_plan():
    fused = emit("megatron", PlanConfig(**ROW), QWEN).text
    unfused = emit("megatron", PlanConfig(**ROW, moe_permute_fusion=False), QWEN).text
    assert "--moe-permute-fusion" in fused and "--moe-permute-fusion" not in unfused
    model = yaml.safe_load(emit("nemo", PlanConfig(**ROW), QWEN).text)["model"]
    assert model["moe_permute_fusion"] is True


def test_search_costs_the_unfused_path_as_estimate_does():
    req = PlanRequest(gpus=16, ep=[8], pp=[2], recompute=["none"], moe_permute_fusion=False,
                      seq_len=8192, gbs=128)
    cols, c = evaluate_space(QWEN, H800, req)
    rng = np.random.default_rng(5)
    for i in rng.choice(len(cols["tp"]), size=min(8, len(cols["tp"])), replace=False):
        config = config_at(QWEN, req, cols, int(i))
        assert config.moe_permute_fusion is False
        assert estimate(QWEN, H800, config).time.step_s == pytest.approx(c["step_s"][i],
                                                                         rel=1e-9)


def test_search_row_one_command_carries_the_switch():
    args = ["search", "-m", "qwen3-30b-a3b", "-n", "16", "--hw", "h800-nvlink", "--gbs", "128",
            "--seq-len", "8192", "--pp", "2", "--ep", "8", "--top", "1",
            "--no-moe-permute-fusion"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "--no-moe-permute-fusion" in r.output.split("Run row 1:")[1]
