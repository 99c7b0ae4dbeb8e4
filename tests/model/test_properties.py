"""Properties of the cost model over random valid plans (hypothesis).

Plans are drawn for a few presets on the A100 profile and are valid by construction: the
strategy builds what planner.model.estimate.check_config accepts (and filters on it as well).

What holds, precisely (each is a test below; the exceptions were found by search and are pinned
by examples so that they are documented, not assumed):

* Memory per GPU never rises with the ZeRO stage from 0 to 1 to 2. From 2 to 3 it can: ZeRO-3
  materialises two whole layers (the one computed and the one prefetched) next to its shards.
  The rise is at most (1 + fragmentation)·(the two layers), there is none at dp·cp = 1 (nothing
  to shard, nothing gathered: FSDP's NO_SHARD), and none when each stage's weight saving
  w·Ψ_stage·(1 − 1/d) covers the two gathered layers.
* Memory never rises with recompute (none → selective → full).
* Model-state memory (weights + gradients + optimizer) of each pipeline stage never rises with tp
  or pp.
* Total memory with pp: never rises under GPipe. Under 1F1B with an even split (p·v | L) it can
  rise only by the embedding-dropout masks the first stage keeps for its min(p, m) in-flight
  micro-batches (Korthikanti 2022 §4.3): the layer activations, min(p, m)·(L/p) layers' worth,
  do not grow with p. It does rise with an uneven split (the fullest stage holds ⌈L/p⌉ layers,
  so min(p, m)·⌈L/p⌉ can exceed L) and under the interleaved schedule, whose first stage holds
  (1 + (p − 1)/(p·v))·L layers' worth of activations, growing with p.
* The bubble lies in [0, 1), and falls strictly with m when p > 1.
* Communication volumes are non-negative and equal their derived closed forms.
* plan_costs on numpy arrays of plans equals plan_costs on each plan's floats (rtol 1e-12).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from planner.catalog import load_hardware, load_model
from planner.formulas import activations, memory, params, pipeline
from planner.formulas.choices import Attention, Recompute, Schedule, ZeroStage
from planner.model import constraints
from planner.model.cost import Choices, numbers, plan_costs
from planner.schema import PlanConfig

HW = load_hardware("a100-nvlink")
MODELS = ("gpt3-175b", "llama-2-70b", "llama-3.1-8b", "mixtral-8x7b", "megatron-22b")
PROPS = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow])
REL = 1e-12


def valid(model, config) -> bool:
    """The layout obeys the rules every framework shares (planner.model.constraints). These properties
    are of the cost model's formulas, so they are checked on every such layout, also those the
    plan's framework would not run (GPipe, ZeRO-3 with pipeline parallelism under Megatron)."""
    return constraints.broken(model, constraints.of(config)) is None


@st.composite
def plans(draw, choices: Choices | None = None, schedule: Schedule | None = None):
    """(model, config) for a valid plan; `choices` or `schedule` fix the discrete half."""
    model = load_model(draw(st.sampled_from(MODELS)))
    if choices is not None:
        schedule = choices.schedule
    schedule = schedule or draw(st.sampled_from(list(Schedule)))
    seq_par = choices.sequence_parallel if choices else draw(st.booleans())
    tps = [t for t in (1, 2, 4, 8)
           if model.n_heads % t == 0 and model.kv_heads % t == 0 and model.ffn % t == 0
           and (t > 1 or not seq_par)]
    tp = draw(st.sampled_from(tps))
    interleaved = schedule is Schedule.INTERLEAVED
    pp = draw(st.sampled_from([p for p in (1, 2, 4, 8, 16) if not interleaved or p >= 2]))
    vpp = draw(st.sampled_from([v for v in (1, 2, 3) if pp * v <= model.n_layers])) \
        if interleaved else 1
    # Megatron's interleaved schedule runs micro-batches in groups of pp
    n_micro = pp * draw(st.integers(1, 64 // pp)) if interleaved else draw(st.integers(1, 64))
    dp = draw(st.sampled_from([1, 2, 3, 4, 8, 64]))
    mbs = draw(st.sampled_from([1, 2]))
    config = PlanConfig(
        dp=dp, tp=tp, pp=pp, cp=draw(st.sampled_from([1, 2])), vpp=vpp, mbs=mbs,
        n_micro=n_micro, gbs=mbs * n_micro * dp, seq_len=draw(st.sampled_from([2048, 4096])),
        zero_stage=choices.zero_stage if choices else draw(st.sampled_from(list(ZeroStage))),
        recompute=choices.recompute if choices else draw(st.sampled_from(list(Recompute))),
        sequence_parallel=seq_par, schedule=schedule,
        attention=choices.attention if choices else draw(st.sampled_from(list(Attention))),
        grad_dtype=draw(st.sampled_from(["fp32", "bf16"])),
        overlap_grad_reduce=draw(st.booleans()))
    assume(valid(model, config))  # built to be valid; this keeps it so if the rules tighten
    return model, config


def costs(model, config) -> dict:
    return plan_costs(numbers(model, HW, config), Choices.of(config))


def with_(config, **changes) -> PlanConfig:
    return PlanConfig(**{**config.model_dump(), **changes})


def not_above(new, old):
    return new <= old * (1 + REL)


def model_states(config, psi):
    """Weights + gradients + optimizer state of a psi-parameter stage (the memory module's)."""
    d, z = config.dp * config.cp, int(config.zero_stage)
    g = 4 if config.grad_dtype == "fp32" else 2
    return (memory.weight_bytes(psi, 2, d, z) + memory.gradient_bytes(psi, g, d, z)
            + memory.optimizer_bytes(psi, 4, 8, d, z))


def prefetch_bytes(model, config):
    sharded = params.layer_sharded_params(
        model.hidden, model.n_heads, model.kv_heads, model.dim_head, model.ffn,
        model.n_mlp_matrices, int(model.bias), model.n_experts, model.router_experts)
    replicated = params.layer_replicated_params(model.hidden, int(model.bias), model.norm_width,
                                                model.n_experts)
    return memory.zero3_prefetch_bytes(sharded, replicated, config.tp, 2)


# ---- memory vs ZeRO stage ------------------------------------------------------------------

@PROPS
@given(plans())
def test_memory_never_rises_from_zero0_to_zero1_to_zero2(plan):
    model, config = plan
    totals = [costs(model, with_(config, zero_stage=z))["total_bytes"] for z in (0, 1, 2)]
    assert not_above(totals[1], totals[0]) and not_above(totals[2], totals[1]), totals


@PROPS
@given(plans())
def test_zero3_rise_is_bounded_by_the_gathered_layers(plan):
    model, config = plan
    z2 = costs(model, with_(config, zero_stage=ZeroStage.GRADIENTS))
    z3 = costs(model, with_(config, zero_stage=ZeroStage.PARAMETERS))
    gathered = (1 + HW.runtime.fragmentation_fraction) * prefetch_bytes(model, config)
    d = config.dp * config.cp
    assert not_above(z3["total_bytes"], z2["total_bytes"] + gathered)
    # nothing to shard, nothing gathered (FSDP's NO_SHARD at world size 1); a MoE model's experts
    # shard over their own group, edp = dp·cp·tp/(ep·etp), which can exceed 1 at d = 1
    if d == 1 and config.edp == 1:
        assert z3["total_bytes"] == pytest.approx(z2["total_bytes"], rel=REL)
    # the weights ZeRO-3 shards are model states (no allocator slack on them); the layers it
    # gathers are allocated and freed each step, with the allocator's slack φ
    saving_covers = all(
        2 * z3[k] * (1 - 1 / d) >= gathered
        for k in ("params_first_stage", "params_last_stage"))
    if saving_covers:
        assert not_above(z3["total_bytes"], z2["total_bytes"])


def test_zero3_can_use_more_memory_than_zero2():
    """Pinned: 3 layers per stage sharded over d = 2 save 1.5 layers of weights, and ZeRO-3
    gathers 2 whole layers: Megatron 22B, dp 2, tp 8, pp 16."""
    model = load_model("megatron-22b")
    config = PlanConfig(dp=2, tp=8, pp=16, n_micro=64, gbs=128, seq_len=2048)
    assert valid(model, config)
    z2 = costs(model, with_(config, zero_stage=2))["total_bytes"]
    z3 = costs(model, with_(config, zero_stage=3))["total_bytes"]
    assert z3 > z2


def test_zero3_at_d1_costs_what_zero2_costs():
    """At dp·cp = 1 there is nothing to shard or gather: PyTorch FSDP switches to NO_SHARD at world
    size 1 (torch/distributed/fsdp/_init_utils.py warns 'FSDP is switching to use `NO_SHARD`
    instead of ShardingStrategy.FULL_SHARD since the world size is 1'), so ZeRO-3 holds no
    gathered layers there."""
    model = load_model("llama-3.1-8b")
    config = PlanConfig(dp=1, gbs=1, seq_len=4096, sequence_parallel=False)
    totals = [costs(model, with_(config, zero_stage=z))["total_bytes"] for z in range(4)]
    assert totals[3] == pytest.approx(totals[2], rel=REL) == totals[0]


# ---- memory vs recompute -------------------------------------------------------------------

@PROPS
@given(plans())
def test_memory_never_rises_with_recompute(plan):
    model, config = plan
    r = [costs(model, with_(config, recompute=rc))
         for rc in (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)]
    for key in ("total_bytes", "layer_activation_bytes"):
        assert not_above(r[1][key], r[0][key]) and not_above(r[2][key], r[1][key]), key


# ---- model states vs tp and pp ---------------------------------------------------------------

@PROPS
@given(plans(), st.sampled_from(["tp", "pp"]))
def test_model_states_of_each_stage_never_rise_with_tp_or_pp(plan, degree):
    model, config = plan
    bigger = with_(config, **{degree: 2 * getattr(config, degree)})
    assume(valid(model, bigger))
    a, b = costs(model, config), costs(model, bigger)
    for key in ("params_first_stage", "params_last_stage"):
        assert not_above(b[key], a[key]), key
        assert not_above(model_states(bigger, b[key]), model_states(config, a[key])), key


# ---- total memory vs pp ----------------------------------------------------------------------

@PROPS
@given(plans(schedule=Schedule.GPIPE))
def test_total_memory_never_rises_with_pp_under_gpipe(plan):
    model, config = plan
    bigger = with_(config, pp=2 * config.pp)
    assume(valid(model, bigger))
    assert not_above(costs(model, bigger)["total_bytes"], costs(model, config)["total_bytes"])


@PROPS
@given(plans(schedule=Schedule.ONE_F_ONE_B))
def test_total_memory_with_pp_under_1f1b_rises_only_by_embedding_masks(plan):
    model, config = plan
    p, m = config.pp, config.n_micro
    bigger = with_(config, pp=2 * p)
    assume(valid(model, bigger) and model.n_layers % (2 * p) == 0)  # even split both ways
    a, b = costs(model, config), costs(model, bigger)
    # the first stage's layer activations, min(p, m)·(L/p)·per-layer, do not grow with p
    assert not_above(b["inflight_first"] * b["stage_layers"], a["inflight_first"] * a["stage_layers"])
    # the first stage's embedding-dropout masks do: one per in-flight micro-batch
    mask = activations.embedding_activation_bytes(config.seq_len, config.mbs, model.hidden,
                                                  int(model.dropout), config.tp, config.cp,
                                                  config.sequence_parallel)
    extra = (1 + HW.runtime.fragmentation_fraction) * (min(2 * p, m) - min(p, m)) * mask
    assert not_above(b["total_bytes"], a["total_bytes"] + extra)
    if not model.dropout:
        assert not_above(b["total_bytes"], a["total_bytes"])


@PROPS
@given(plans(schedule=Schedule.INTERLEAVED))
def test_interleaved_first_stage_holds_korthikanti_factor(plan):
    model, config = plan
    p, v, m, L = config.pp, config.vpp, config.n_micro, model.n_layers
    assume(L % (p * v) == 0 and m >= p + (p - 1) / v)
    r = costs(model, config)
    assert r["inflight_first"] * r["stage_layers"] == pytest.approx(
        L * (1 + (p - 1) / (p * v)), rel=REL)


@pytest.mark.parametrize("name,small,large", [
    # 1F1B, even split, GPT-3 with dropout: +16 micro-batches' embedding masks, 16·2sbh·... bytes
    ("1f1b-embedding-masks",
     dict(model="gpt3-175b", dp=64, tp=8, pp=16, n_micro=64, seq_len=2048, zero_stage=3,
          recompute="full", sequence_parallel=False), dict(pp=32)),
    # 1F1B, uneven split: 96 layers over 64 stages puts 2 layers on the first; 64·2 > 96
    ("1f1b-uneven-split",
     dict(model="gpt3-175b", dp=8, tp=8, pp=32, n_micro=128, seq_len=2048, zero_stage=1,
          recompute="none"), dict(pp=64)),
    # interleaved: (1 + (p − 1)/(p·v))·L layers of activations on the first stage grows with p
    ("interleaved-factor",
     dict(model="llama-2-70b", dp=64, tp=8, pp=2, vpp=2, n_micro=64, seq_len=4096,
          zero_stage=3, recompute="none", schedule="interleaved"), dict(pp=4)),
])
def test_total_memory_can_rise_with_pp(name, small, large):
    """Pinned exceptions to 'more pipeline stages, less memory per GPU'."""
    small = dict(small)
    model = load_model(small.pop("model"))
    config = PlanConfig(gbs=small["dp"] * small["n_micro"], **small)
    bigger = with_(config, **large)
    assert valid(model, config) and valid(model, bigger)
    assert costs(model, bigger)["total_bytes"] > costs(model, config)["total_bytes"], name


# ---- bubble ----------------------------------------------------------------------------------

@PROPS
@given(st.integers(1, 128), st.integers(1, 4096), st.integers(1, 8))
def test_bubble_in_unit_interval_and_falls_with_m(p, m, v):
    b, b_next = pipeline.bubble_fraction(p, m, v), pipeline.bubble_fraction(p, m + 1, v)
    assert 0 <= b < 1
    if p == 1:
        assert b == 0 == b_next
    else:
        assert b_next < b
        assert pipeline.bubble_fraction(p, m, v + 1) < b  # interleaving shrinks it


@PROPS
@given(plans())
def test_plan_bubble_in_unit_interval(plan):
    model, config = plan
    assert 0 <= costs(model, config)["bubble_fraction"] < 1


# ---- communication volumes -------------------------------------------------------------------

@PROPS
@given(plans())
def test_comm_volumes_nonnegative_and_equal_their_closed_forms(plan):
    model, config = plan
    r = costs(model, config)
    for key in ("dp_bytes", "tp_bytes", "pp_bytes", "cp_bytes"):
        assert r[key] >= 0, key
    t, p, c, v, m, b = config.tp, config.pp, config.cp, config.vpp, config.n_micro, config.mbs
    s, h, d = config.seq_len, model.hidden, config.dp * config.cp
    g, w, act = (4 if config.grad_dtype == "fp32" else 2), 2, 2
    bsh = b * (s / c) * h  # one micro-batch's activation on one context-parallel rank
    z = int(config.zero_stage)
    # dp: a fixed multiple of the stage's parameter shard (so linear in Ψ/(tp·pp))
    # (ZeRO-2 reduce-scatters every micro-batch's gradients, then gathers the weights once;
    #  ZeRO-3 gathers twice and reduce-scatters once per micro-batch)
    def per_param(d):
        return {0: 2 * (d - 1) / d * g, 1: (d - 1) / d * (g + w), 2: (d - 1) / d * (m * g + w),
                3: (d - 1) / d * m * (2 * w + g)}[z]

    # a MoE model's routed experts are reduced over their own group, edp = dp·cp·tp/(ep·etp)
    edp = d * t / (config.ep * config.etp)
    # DualPipe holds (and so reduces) two copies of its stages
    copies = pipeline.parameter_copies(config.schedule)
    assert r["dp_bytes"] == pytest.approx(copies * (per_param(d) * r["stage_params"] + per_param(edp)
                                                    * r["expert_stage_params"]), rel=REL, abs=0)
    # tp: (layers on the stage)·m·(forward passes + backward)·2 all-reduces of act·bsh
    passes = 3 if config.recompute is Recompute.FULL else 2
    tp_want = r["stage_layers"] * m * passes * 2 * 2 * (t - 1) / t * act * bsh
    assert r["tp_bytes"] == pytest.approx(tp_want, rel=REL, abs=0)
    # pp: 2m·hops/p boundary messages of act·bsh/t per GPU, hops = v·p − 1 (2(p − 1) for a V)
    hops = pipeline.pipeline_hops(p, v, config.schedule)
    assert r["pp_bytes"] == pytest.approx(2 * m * hops / p * act * bsh / t, rel=REL, abs=0)
    # cp: K and V chunks (k/a of h, /t) passed c − 1 times forward, 2(c − 1) backward
    kv = act * 2 * bsh * model.kv_heads / model.n_heads / t
    assert r["cp_bytes"] == pytest.approx(r["stage_layers"] * m * 3 * (c - 1) * kv, rel=REL,
                                          abs=0)


@PROPS
@given(plans())
def test_activation_volumes_scale_with_micro_batch_size(plan):
    model, config = plan
    a, b = costs(model, config), costs(model, with_(config, mbs=2 * config.mbs,
                                                    gbs=2 * config.gbs))
    for key in ("tp_bytes", "pp_bytes", "cp_bytes"):
        assert b[key] == pytest.approx(2 * a[key], rel=REL, abs=0), key
    # gradients do not depend on the micro-batch; (the reported stage is the most loaded one in
    # memory, which a larger micro-batch can switch from last to first, so compare per parameter)
    assert b["dp_bytes"] / b["stage_params"] == pytest.approx(
        a["dp_bytes"] / a["stage_params"], rel=REL, abs=0)


# ---- numpy arrays vs floats ------------------------------------------------------------------

CHOICES = st.builds(Choices, st.sampled_from(list(ZeroStage)), st.sampled_from(list(Recompute)),
                    st.sampled_from(list(Schedule)), st.booleans(),
                    st.sampled_from(list(Attention)))


@settings(max_examples=50, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_numpy_evaluation_matches_floats(data):
    choices = data.draw(CHOICES)
    batch = data.draw(st.lists(plans(choices=choices), min_size=1, max_size=12))
    xs = [vars(numbers(model, HW, config)) for model, config in batch]
    stacked = SimpleNamespace(**{k: np.array([x[k] for x in xs], dtype=np.float64)
                                 for k in xs[0]})
    vector = plan_costs(stacked, choices)
    scalars = [plan_costs(numbers(model, HW, config), choices) for model, config in batch]
    assert set(vector) == set(scalars[0])
    for key, value in vector.items():
        want = np.array([float(r[key]) for r in scalars])
        got = np.broadcast_to(np.asarray(value, dtype=np.float64), want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=key)
