"""Hybrid sharding (HSDP, issue 15 item 2): ZeRO shards over dp_shard·cp ranks and replicates
dp/dp_shard times; the gradients reduce-scatter inside the shard group and all-reduce across the
replicas, each on its own link. Hand-derived cases with the arithmetic in comments, the
reduction to today's flat model at dp_shard = dp, the frameworks' rules and settings, and the
search dimension."""

from __future__ import annotations

import shlex
import tomllib
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.catalog import load_hardware, load_model
from planner.errors import PlanError
from planner.formulas import comm as C
from planner.formulas.choices import Attention, Recompute, Schedule, ZeroStage
from planner.frameworks import FRAMEWORKS
from planner.frameworks.emit import emit
from planner.model import constraints
from planner.model.cost import Choices, numbers, plan_costs
from planner.model.estimate import estimate
from planner.model.links import group_links
from planner.schema import PlanConfig
from planner.search.core import search
from planner.search.request import PlanRequest
from planner.search.space import dp_shard_candidates

GIB = 2**30
MODEL = load_model("70b")
H100 = load_hardware("h100-nvlink")  # 8 GPUs per NVLink domain


def config(**changes) -> PlanConfig:
    """dp64 tp8 on 512 GPUs, 8 micro-batches of one 8,192-token sequence per DP rank."""
    base = dict(dp=64, tp=8, pp=1, gbs=512, n_micro=8, seq_len=8192,
                zero_stage=ZeroStage.PARAMETERS, recompute=Recompute.FULL)
    return PlanConfig(**{**base, **changes})


def costs(c: PlanConfig) -> dict:
    return plan_costs(numbers(MODEL, H100, c), Choices.of(c))


# ---- memory: every sharded state over the shard group ----------------------------------------

def test_zero3_model_states_are_16_bytes_per_param_over_the_shard_group():
    # torchtitan FSDP2 (ZeRO-3): fp32 weights 4 + fp32 grads 4 + Adam m, v 8 = 16 B/param, all
    # sharded. dp_shard 8 of dp 64 (cp 1): 16·Ψ_gpu/8 = 2·Ψ_gpu; flat: 16·Ψ_gpu/64 = Ψ_gpu/4
    hybrid = costs(config(framework="torchtitan", dp_shard=8))
    flat = costs(config(framework="torchtitan"))
    psi = hybrid["stage_params"]
    assert psi == flat["stage_params"]
    assert hybrid["weights_bytes"] == pytest.approx(4 * psi / 8, rel=1e-12)
    assert hybrid["gradients_bytes"] == pytest.approx(4 * psi / 8, rel=1e-12)
    assert hybrid["optimizer_bytes"] == pytest.approx(8 * psi / 8, rel=1e-12)
    states = ("weights_bytes", "gradients_bytes", "optimizer_bytes")
    assert sum(hybrid[k] for k in states) == pytest.approx(16 * psi / 8, rel=1e-12)
    assert sum(flat[k] for k in states) == pytest.approx(16 * psi / 64, rel=1e-12)


def test_zero1_optimizer_over_the_shard_group_with_context_parallel():
    # Megatron partial distributed optimizer, dp 32 cp 2, dp_shard 4: the optimizer state
    # (12 B/param: fp32 master + m + v) over dp_shard·cp = 4·2 = 8 ranks, not dp·cp = 64
    c = config(dp=32, cp=2, gbs=256, zero_stage=ZeroStage.OPTIMIZER, dp_shard=4)
    out = costs(c)
    assert out["optimizer_bytes"] == pytest.approx(12 * out["stage_params"] / 8, rel=1e-12)


# ---- communication: two levels, each on its link ---------------------------------------------

def test_replica_allreduce_volume_by_hand():
    # Ψ = 10⁹, g = 4 B (fp32), shard s = 8, replicas r = 8: each rank all-reduces its 1/8 shard
    # across 8 replicas: 2·(8 − 1)/8 · 4·10⁹/8 = 2·0.875·0.5·10⁹ = 0.875·10⁹ B
    psi, mb, step = 1e9, C.When.MICRO_BATCH, C.When.STEP_REDUCE
    assert C.hsdp_replica_bytes(psi, 4, 8, 8, ZeroStage.PARAMETERS, mb) == pytest.approx(0.875e9)
    assert C.hsdp_replica_bytes(psi, 4, 8, 8, ZeroStage.GRADIENTS, mb) == pytest.approx(0.875e9)
    assert C.hsdp_replica_bytes(psi, 4, 8, 8, ZeroStage.OPTIMIZER, step) == pytest.approx(0.875e9)
    # nothing is reduce-scattered at these points: no cross-replica all-reduce
    assert C.hsdp_replica_bytes(psi, 4, 8, 8, ZeroStage.OPTIMIZER, mb) == 0
    assert C.hsdp_replica_bytes(psi, 4, 8, 8, ZeroStage.PARAMETERS, step) == 0
    # one replica: the flat reduction, nothing more
    assert C.hsdp_replica_bytes(psi, 4, 64, 1, ZeroStage.PARAMETERS, mb) == 0
    # per step under ZeRO-3 with 8 rounds: 8·0.875·10⁹ = 7·10⁹
    assert C.hsdp_replica_step_bytes(psi, 4, 8, 8, 8, ZeroStage.PARAMETERS) == pytest.approx(7e9)


def test_two_level_zero1_traffic_by_hand():
    # Megatron ZeRO-1, fp32 gradients (g = 4), bf16 weights (w = 2), s = 8, r = 8, per step:
    #   reduce-scatter in the shard group   (8 − 1)/8 · 4Ψ = 3.5Ψ
    #   all-gather of the new weights       (8 − 1)/8 · 2Ψ = 1.75Ψ
    #   all-reduce of the shard, replicas   2·(8 − 1)/8 · 4Ψ/8 = 0.875Ψ     → 6.125Ψ
    # flat over d = 64: (64 − 1)/64 · (4 + 2)Ψ = 5.90625Ψ
    hybrid = costs(config(zero_stage=ZeroStage.OPTIMIZER, dp_shard=8))
    flat = costs(config(zero_stage=ZeroStage.OPTIMIZER))
    psi = hybrid["stage_params"]
    assert hybrid["dp_bytes"] == pytest.approx(6.125 * psi, rel=1e-12)
    assert flat["dp_bytes"] == pytest.approx(5.90625 * psi, rel=1e-12)


def test_each_phase_on_its_own_link():
    # 64 GPUs, tp 1, dp 64 in 8-GPU domains, dp_shard 8: the shard group is 8 consecutive ranks
    # (stride 1, span 8: one domain, NVLink); the replicas are 8 ranks 8 apart (span 64: the
    # network). Flat, the whole dp group spans 64 GPUs: the network.
    c = PlanConfig(dp=64, tp=1, gbs=64, n_micro=1, seq_len=4096, dp_shard=8,
                   zero_stage=ZeroStage.PARAMETERS)
    x = numbers(MODEL, H100, c)
    links = group_links(x, 1, 1, 1)
    assert links.dp.inside == 1 and links.replica.inside == 0
    assert links.replica.r == 1 and links.replica.k == 8  # one replica per domain, 8 domains
    flat = group_links(numbers(MODEL, H100, replace_config(c, dp_shard=None)), 1, 1, 1)
    assert flat.dp.inside == 0 and flat.replica is None
    out = plan_costs(x, Choices.of(c))
    # ZeRO-3 gathers stay on NVLink: the shard group's traffic is on the NVLink link, and only
    # the replica all-reduce crosses the network: 2·7/8·gΨ/8 per micro-batch
    replica = C.hsdp_replica_step_bytes(out["stage_params"], x.g_bytes, 8, 8, 1,
                                        ZeroStage.PARAMETERS)
    assert out["network_busy_s"] == pytest.approx(replica / links.replica.bw, rel=1e-12)


def replace_config(c: PlanConfig, **changes) -> PlanConfig:
    return PlanConfig(**{**c.model_dump(), **changes})


# ---- dp_shard = dp is today's model, exactly -------------------------------------------------

DENSE = ("llama-2-70b", "llama-3.1-8b", "gpt3-175b")


@st.composite
def dense_plans(draw):
    model = load_model(draw(st.sampled_from(DENSE)))
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if model.n_heads % t == 0
                               and model.kv_heads % t == 0 and model.ffn % t == 0]))
    pp = draw(st.sampled_from([1, 2, 4]))
    dp = draw(st.sampled_from([2, 4, 8, 16, 64]))
    n_micro = draw(st.integers(pp, 16))
    c = PlanConfig(dp=dp, tp=tp, pp=pp, cp=draw(st.sampled_from([1, 2])), n_micro=n_micro,
                   gbs=n_micro * dp, seq_len=4096, sequence_parallel=tp > 1,
                   zero_stage=draw(st.sampled_from(list(ZeroStage))),
                   recompute=draw(st.sampled_from(list(Recompute))),
                   framework=draw(st.sampled_from(["megatron", "torchtitan", "deepspeed"])))
    return model, c


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(dense_plans())
def test_dp_shard_equal_to_dp_reproduces_the_flat_model_exactly(plan):
    model, c = plan
    flat = plan_costs(numbers(model, H100, c), Choices.of(c))
    same = plan_costs(numbers(model, H100, replace_config(c, dp_shard=c.dp)), Choices.of(c))
    assert flat == same
    # and through the hybrid expressions themselves: a batch where another row replicates
    # builds the shard group and the replica all-reduce; the row with r = 1 must not move
    x = vars(numbers(model, H100, c))
    rows = [dict(x), {**x, "dp_replicate": 2}]
    stacked = SimpleNamespace(**{k: np.array([r[k] for r in rows], dtype=np.float64)
                                 for k in x})
    alone = SimpleNamespace(**{k: np.array([x[k]], dtype=np.float64) for k in x})
    hybrid, plain = plan_costs(stacked, Choices.of(c)), plan_costs(alone, Choices.of(c))
    for key, value in plain.items():
        got = np.broadcast_to(np.asarray(hybrid[key], dtype=np.float64), (2,))[0]
        want = np.broadcast_to(np.asarray(value, dtype=np.float64), (1,))[0]
        assert got == want or (np.isnan(got) and np.isnan(want)), key


# ---- rules, labels -----------------------------------------------------------------------------

def test_label_shows_the_shard_group_only_when_it_replicates():
    assert config(dp_shard=8).short_label().startswith("dp64 hsdp8 tp8")
    assert "hsdp8" in config(dp_shard=8).label()
    assert "hsdp" not in config(dp_shard=64).label()
    assert "hsdp" not in config().short_label()
    assert config(dp_shard=8).dp_replicate == 8 and config().dp_replicate == 1


def test_rules_refuse_what_no_framework_runs():
    with pytest.raises(PlanError, match="must divide dp"):
        estimate(MODEL, H100, config(dp_shard=7))
    with pytest.raises(PlanError, match="mixture of experts"):
        moe = load_model("mixtral-8x7b")
        estimate(moe, H100, PlanConfig(dp=64, tp=8, gbs=64, seq_len=4096, dp_shard=8))


@pytest.mark.parametrize("framework, zero, runs", [
    ("megatron", ZeroStage.NONE, False), ("megatron", ZeroStage.OPTIMIZER, True),
    ("megatron", ZeroStage.PARAMETERS, True),
    ("torchtitan", ZeroStage.NONE, False), ("torchtitan", ZeroStage.GRADIENTS, True),
    ("torchtitan", ZeroStage.PARAMETERS, True),
    ("deepspeed", ZeroStage.OPTIMIZER, False), ("deepspeed", ZeroStage.PARAMETERS, False),
])
def test_framework_rules(framework, zero, runs):
    layout = constraints.of(config(framework=framework, zero_stage=zero, dp_shard=8))
    assert (FRAMEWORKS[framework].broken(MODEL, layout) is None) == runs
    # without hybrid sharding the new rules hold
    flat = constraints.of(config(framework=framework, zero_stage=zero))
    assert all(r.holds(MODEL, flat) for r in FRAMEWORKS[framework].rules[-1:])


# ---- the frameworks write it -------------------------------------------------------------------

def test_torchtitan_emit_round_trip():
    c = config(framework="torchtitan", dp_shard=8, cp=1)
    par = tomllib.loads(emit("torchtitan@0.2", c, MODEL).text)["parallelism"]
    # 8 replicas × 8 shard ranks = dp 64
    assert par["data_parallel_replicate_degree"] == 8
    assert par["data_parallel_shard_degree"] == 8
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == c.dp
    flat = tomllib.loads(emit("torchtitan@0.2", config(framework="torchtitan"), MODEL).text)
    assert flat["parallelism"]["data_parallel_replicate_degree"] == 1
    assert flat["parallelism"]["data_parallel_shard_degree"] == 64


def megatron_flags(text: str) -> dict:
    tokens = shlex.split(text.replace("\\\n", " "))
    flags, i = {}, 0
    while i < len(tokens):
        if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            flags[tokens[i]] = tokens[i + 1]
            i += 2
        else:
            flags[tokens[i]] = None
            i += 1
    return flags


@pytest.mark.parametrize("zero", [ZeroStage.OPTIMIZER, ZeroStage.PARAMETERS])
def test_megatron_emit_round_trip(zero):
    c = config(zero_stage=zero, dp_shard=16)
    flags = megatron_flags(emit("megatron", c, MODEL).text)
    # r = dp/dp_shard = 64/16 = 4 instances, each sharded over dp·cp/4 = 16 ranks
    assert int(flags["--num-distributed-optimizer-instances"]) == 4
    assert "--use-distributed-optimizer" in flags
    assert (flags.get("--outer-dp-sharding-strategy") == "no_shard") == (zero >= 2)
    flat = megatron_flags(emit("megatron", config(zero_stage=zero), MODEL).text)
    assert "--num-distributed-optimizer-instances" not in flat


def test_nemo_and_deepspeed():
    doc = emit("nemo", config(zero_stage=ZeroStage.OPTIMIZER, dp_shard=16), MODEL).text
    assert "num_distributed_optimizer_instances: 4" in doc
    with pytest.raises(PlanError, match="hpZ"):
        emit("deepspeed", config(framework="deepspeed", dp_shard=8), MODEL)


# ---- the search dimension ----------------------------------------------------------------------

def test_search_with_dp_shard_returns_only_those_plans():
    req = PlanRequest(gpus=512, dp_shard=[8], framework="torchtitan")
    result = search(MODEL, H100, req, top=10)
    assert result.plans
    assert all(p.config.dp_shard == 8 for p in result.plans)
    assert all(p.config.dp % 8 == 0 for p in result.plans)
    # each plan's costs are the estimate's (the search and the scalar model agree)
    for p in result.plans[:3]:
        again = estimate(MODEL, H100, p.config)
        assert again.time.step_s == pytest.approx(p.time.step_s, rel=1e-9)


def test_open_dp_shard_candidates():
    # dp 64 with tp·cp = 2 in 8-GPU domains: s·2 a multiple of 8 → s ∈ {4, 8, 16, 32}, and 64
    assert dp_shard_candidates(64, 2, 8) == [4, 8, 16, 32, 64]
    # tp·cp = 8 fills a domain already: every divisor of dp
    assert dp_shard_candidates(8, 8, 8) == [1, 2, 4, 8]
    req = PlanRequest(gpus=256, dp_shard="auto", framework="torchtitan", tp=[8], pp=[1],
                      cp=[1], mbs=[1], schedule=[Schedule.ONE_F_ONE_B], sp=[True],
                      recompute=[Recompute.FULL], attention=Attention.FLASH)
    result = search(MODEL, H100, req, top=50)
    assert {p.config.dp_shard for p in result.plans} <= {1, 2, 4, 8, 16, 32}
    assert result.considered >= 2 * 6  # ZeRO-2 and 3 × six shard groups of dp 32


def test_hsdp_rule_arrays_and_ints_agree():
    # dp 8 with shard groups 1..16 on a dense and a MoE model: 3 of 8 fails to divide, 16 > dp
    # fails, and any s < dp on the MoE model fails
    shards = np.array([1, 2, 3, 4, 8, 16])
    for model, ok in ((MODEL, [True, True, False, True, True, False]),
                      (load_model("mixtral-8x7b"), [False, False, False, False, True, False])):
        layouts = SimpleNamespace(dp=np.full(len(shards), 8), dp_shard=shards)
        rule = constraints.HSDP_RULES[0]
        assert np.asarray(rule.holds(model, layouts)).tolist() == ok
        assert [bool(rule.holds(model, SimpleNamespace(dp=8, dp_shard=int(s))))
                for s in shards] == ok


def test_emitters_refuse_hybrid_zero0():
    c = config(zero_stage=ZeroStage.NONE, dp_shard=8)
    for framework in ("megatron", "nemo", "torchtitan"):
        with pytest.raises(PlanError, match="ZeRO-0|zero_stage 2 or 3"):
            emit(framework, replace_config(c, framework="torchtitan" if framework == "torchtitan"
                                           else "megatron", tp=1, dp=512, gbs=512, n_micro=1),
                 MODEL)


# ---- the command line ----------------------------------------------------------------------------

def test_cli_dp_shard():
    import json

    from typer.testing import CliRunner

    from planner.cli import app

    runner = CliRunner()
    base = ["--model", "70b", "--gpus", "512", "--hw", "h100-nvlink"]
    r = runner.invoke(app, ["search", *base, "--dp-shard", "8", "--framework", "torchtitan",
                            "--json"])
    assert r.exit_code == 0, r.output
    plans = json.loads(r.stdout)["plans"]
    assert plans and all(p["config"]["dp_shard"] == 8 for p in plans)
    r = runner.invoke(app, ["explain", *base, "--tp", "8", "--pp", "4", "--zero", "1",
                            "--dp-shard", "4", "--brief"])
    assert r.exit_code == 0, r.output
    assert "dp16 hsdp4 tp8 pp4" in r.output
    for bad, said in ((["--dp-shard", "auto"], "for search"), (["--dp-shard", "7"], "divide dp"),
                      (["--dp-shard", "x"], "whole numbers"), (["--dp-shard", "8,16"], "one value")):
        r = runner.invoke(app, ["explain", *base, "--tp", "8", "--zero", "1", *bad])
        assert r.exit_code != 0 and said in r.output, r.output
        assert "Traceback" not in r.output


def test_dp_replicate_names_the_same_plans_by_their_replicas():
    # torchtitan's data_parallel_replicate_degree: dp 64 with 4 replicas is dp_shard 64/4 = 16
    from typer.testing import CliRunner

    from planner.cli import app

    runner = CliRunner()
    base = ["explain", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink", "--tp", "8",
            "--zero", "1", "--json"]
    by_replicas = runner.invoke(app, [*base, "--dp-replicate", "4"])
    by_shard = runner.invoke(app, [*base, "--dp-shard", "16"])
    assert by_replicas.stdout == by_shard.stdout and '"dp_shard": 16' in by_replicas.stdout
    both = runner.invoke(app, [*base, "--dp-replicate", "4", "--dp-shard", "16"])
    assert both.exit_code == 2 and "give one of --dp-shard and --dp-replicate" in both.stderr
    odd = runner.invoke(app, [*base, "--dp-replicate", "3"])
    assert odd.exit_code == 2 and "--dp-replicate 3 must divide dp = 64" in odd.stderr
    # search: every plan has the replicas asked for (dp/dp_shard ∈ {2, 4})
    req = PlanRequest(gpus=512, dp_replicate=[2, 4])
    result = search(load_model("70b"), load_hardware("h100-nvlink"), req, top=5)
    assert {p.config.dp_replicate for p in result.plans} <= {2, 4}
