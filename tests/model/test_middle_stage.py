"""The fit verdict on the heaviest GPU: a middle pipeline rank that holds more MoE layers than the
first or the last (DeepSeek-V3's first three layers are dense) is costed too, and the output
names it (model/parameters.split_moe_layers, model/states.stage_memory)."""

from __future__ import annotations

import itertools
import json

import pytest
from typer.testing import CliRunner

from planner.catalog import load_hardware, load_model
from planner.cli import app
from planner.formulas import params as P
from planner.formulas import pipeline as PL
from planner.model.cost import Choices, layout_costs, numbers, plan_costs
from planner.model.estimate import estimate
from planner.model.runtime import runtime_holdings
from planner.model.states import rank_bytes, stage_memory
from planner.schema import PlanConfig
from planner.search.core import search
from planner.search.request import PlanRequest

runner = CliRunner()
H800 = load_hardware("h800-nvlink")
H100 = load_hardware("h100-nvlink")
GIB = 2**30

# the reviewer's row 1 (torchtitan, 2048 H800): dp32 tp4 pp16 v2 ep8 z2 sel
TITAN_ROW = ["explain", "--model", "deepseek-v3", "--gpus", "2048", "--hw", "h800-nvlink",
             "--plan", "dp32 tp4 pp16 v2 ep8 z2 sel", "--gbs", "1024", "--framework",
             "torchtitan", "--json"]


def test_deepseek_v3_middle_rank_by_hand():
    out = json.loads(runner.invoke(app, TITAN_ROW).stdout)
    m = out["memory"]
    terms = {t["key"]: t["value"] for t in out["terms"]}
    # Rank 2 holds stages 2 and 18 = layers {3, 4} and {35, 36}: 4 MoE layers, against 2 on
    # rank 0 ({0, 31, 32}) and on rank 15 ({29, 30}) (tests/formulas/test_rank_placement.py),
    # with (2·(16 − 2 − 1) + (2 − 1)·16 + 1)/2 = 21.5 micro-batches in flight (rank 1: 22.5,
    # but 2 MoE layers)
    assert m["stage"] == "middle" and m["stage_rank"] == 2
    assert terms["moe_layers_first"] == terms["moe_layers_last"] == 2
    assert "rank 2's first backward (21.5 micro-batches'" in m["peak_at"]
    # Its parameters per GPU, L_s = v·⌈61/32⌉ = 4 layers, t = 4. A dense layer: 568,328,192
    # split over t (MLA's projections 171,966,464 + the SwiGLU MLP 3·7168·18432 = 396,361,728)
    # and 15,155,200 whole (MLA's down-projections, norms); a MoE layer trades the MLP for the
    # shared expert 3·7168·2048 = 44,040,192 (−352,321,536 over t) and adds the router
    # 256·7168 = 1,835,008 whole:
    #   4·(568,328,192/4 + 15,155,200) + 4·(−352,321,536/4 + 1,835,008)
    #   = 628,948,992 − 344,981,504 = 283,967,488
    # and the routed experts apart, 4 layers · 256·3·7168·2048 / ep 8 = 5,637,144,576
    psi, psi_e = 283_967_488, 5_637_144_576
    assert m["params_per_gpu"] == psi
    assert terms["expert_stage_params"] == psi_e
    # torchtitan's FSDP2 at ZeRO-2: fp32 weights, fp32 gradients and Adam's m, v sharded, the
    # dense part over dp·cp = 32, the experts over edp = dp·tp/ep = 32·4/8 = 16:
    #   weights 4·283,967,488/32 + 4·5,637,144,576/16 = 35,495,936 + 1,409,286,144
    assert m["weights_bytes"] == 4 * psi / 32 + 4 * psi_e / 16 == 1_444_782_080
    assert m["gradients_bytes"] == 1_444_782_080
    assert m["optimizer_bytes"] == 8 * psi / 32 + 8 * psi_e / 16 == 2_889_564_160
    # held unsharded across the pipelined step (reshard_after_forward off, gradients whole
    # until the last micro-batch): 16-bit weights + fp32 gradients, 6 bytes per parameter of
    # both parts, 6·(283,967,488 + 5,637,144,576) = 35,526,672,384 B = 33.1 GiB — four MoE
    # layers' 7.9 GiB of routed experts each; the overhead adds the allocator's slack and the
    # runtime to it
    assert m["overhead_bytes"] > 6 * (psi + psi_e)
    # the verdict: 88.3 GiB of 79.6 — it was 66.9 GiB "on the first stage" when only the ends
    # were costed
    assert m["total_bytes"] / GIB == pytest.approx(88.3, abs=0.05)
    assert not m["fits"]


def test_the_reviewers_torchtitan_row_1_fits():
    # plan3d search --model deepseek-v3 --gpus 2048 --hw h800-nvlink --framework torchtitan
    # gave row 1 dp32 tp4 pp16 v2 ep8 z2 sel at 66.9 GiB; its rank 2 needs 88.3 (above). Row 1
    # now fits on its heaviest GPU, whichever rank that is
    req = PlanRequest(gpus=2048, framework="torchtitan")
    result = search(load_model("deepseek-v3"), H800, req, top=3)
    row1 = result.plans[0]
    assert row1.memory.fits and row1.memory.total_bytes <= row1.memory.capacity_bytes
    again = estimate(load_model("deepseek-v3"), H800, row1.config)
    assert again.memory.total_bytes == pytest.approx(row1.memory.total_bytes, rel=1e-12)
    layout = (row1.config.dp, row1.config.tp, row1.config.pp, row1.config.vpp, row1.config.ep)
    assert layout != (32, 4, 16, 2, 8)


def test_the_middle_rank_is_named():
    r = runner.invoke(app, TITAN_ROW[:-1])
    assert "on the middle (rank 2) pipeline stage" in r.stdout
    assert "most loaded: middle (rank 2) pipeline stage" in r.stdout


MOE_PLANS = [
    # (model, framework, hw, config)
    ("deepseek-v3", "torchtitan", H800, dict(dp=32, tp=4, pp=16, vpp=2, ep=8, zero_stage=2,
                                              schedule="interleaved", n_micro=32)),
    ("deepseek-v3", "torchtitan", H100, dict(dp=8, tp=4, pp=16, ep=8, zero_stage=2,
                                              n_micro=128)),
    ("deepseek-v3", "torchtitan", H100, dict(dp=16, tp=2, pp=16, ep=8, zero_stage=2,
                                              schedule="zbv", n_micro=64)),
    ("deepseek-v3", "megatron", H100, dict(dp=32, tp=4, pp=4, vpp=5, ep=64, zero_stage=1,
                                            schedule="interleaved", n_micro=32)),
    ("deepseek-v3", "megatron", H100, dict(dp=128, tp=1, pp=16, ep=64, zero_stage=1,
                                            n_micro=16, recompute="full")),
    ("qwen3-235b-a22b", "megatron", H100, dict(dp=16, tp=2, pp=8, vpp=4, ep=32, zero_stage=1,
                                                schedule="interleaved", n_micro=16)),
    ("mixtral-8x7b", "megatron", H100, dict(dp=8, tp=2, pp=4, ep=8, zero_stage=1, n_micro=8)),
]


def _config(fw, cfg):
    base = dict(mbs=1, seq_len=4096, recompute="selective", sequence_parallel=cfg["tp"] > 1,
                framework=fw, gbs=cfg["dp"] * cfg["n_micro"])
    return PlanConfig(**{**base, **cfg})


@pytest.mark.parametrize("model,fw,hw,cfg", MOE_PLANS)
def test_the_peak_is_no_less_than_any_costed_rank(model, fw, hw, cfg):
    config = _config(fw, cfg)
    x, c = numbers(load_model(model), hw, config), Choices.of(config)
    k = layout_costs(x, c)
    mem = stage_memory(x, c, k)
    assert len(k.middle) >= 1  # rank 1 at least (DeepSeek-V3: ranks 1 … 4, k + f = 3 + 1)
    # the peak: the costed ranks' largest (weights … overhead with its buffers) plus the
    # runtime, the same on every rank; no rank the plan has above it
    rt = runtime_holdings(x, c, k)
    totals = [sum(parts[:5]) for rank, parts in mem.costed]
    assert mem.total_bytes == pytest.approx(max(totals) + rt.outside + rt.workspaces, rel=1e-12)
    for total in totals:
        assert mem.total_bytes >= total
    stage = {0: "first", 1: "last", 2: "middle"}[round(mem.kind)]
    assert stage == estimate(load_model(model), hw, config).memory.stage


@pytest.mark.parametrize("model", ["llama-3.1-70b", "llama-3.1-8b", "gpt3-175b"])
@pytest.mark.parametrize("fw,schedule,vpp,zero", [
    ("megatron", "1f1b", 1, 1), ("megatron", "interleaved", 2, 1),
    ("torchtitan", "1f1b", 1, 2), ("torchtitan", "interleaved", 2, 3),
    ("torchtitan", "zbv", 1, 2), ("deepspeed", "1f1b", 1, 1), ("torchtitan", "gpipe", 1, 3)])
def test_a_dense_middle_stage_never_exceeds_the_first(model, fw, schedule, vpp, zero):
    # same L_s layers as the first stage, no more micro-batches in flight, no embedding: the
    # dense model's peak stays on the first or the last stage, unchanged by the middle ranks
    for pp, n_micro in itertools.product((4, 8), (8, 32)):
        config = _config(fw, dict(dp=2, tp=2, pp=pp, vpp=vpp, zero_stage=zero,
                                  schedule=schedule, n_micro=n_micro))
        x, c = numbers(load_model(model), H100, config), Choices.of(config)
        k = layout_costs(x, c)
        assert k.middle == ()
        first = stage_memory(x, c, k).costed[0][1]
        for r in range(1, pp - 1):
            inflight = PL.in_flight_on_rank(r, pp, n_micro, vpp, c.schedule)
            psi = P.layer_params_per_gpu(k.layers, k.t, k.layer_sharded, k.layer_replicated)
            # its layers' activations with its micro-batches in flight and a backward's, at
            # most what the first stage holds beside its layers' (embedding, loss, backward)
            act = inflight * k.layers * k.layer_act + (
                k.act_first - k.inflight_first * k.layers * k.layer_act)
            mid = rank_bytes(x, c, k, psi, act, inflight, 0, 0)
            assert sum(mid[:5]) <= sum(first[:5]) * (1 + 1e-12), (pp, n_micro, r)
        costs = plan_costs(x, c)
        assert costs["peak_stage"] in (0, 1)
        assert costs["peak_rank"] in (0, pp - 1)
