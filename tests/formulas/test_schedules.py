"""The split-backward pipeline schedules of planner.formulas.pipeline (issue 15): hand cases from
the papers' tables, sympy identities, and the cost model's use of them. The event simulation
against these closed forms is in tests/test_timeline.py."""

from __future__ import annotations

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.formulas import pipeline as PL
from planner.formulas.choices import Schedule

SPLIT = list(PL.SPLIT_BACKWARD)
p, m, v, F, B, W = sp.symbols("p m v F B W", positive=True)


# ---- hand cases ------------------------------------------------------------------------------

def test_zero_bubble_paper_table_with_10ms_passes():
    # Qi et al. 2024 Table 1 at p = 4 with T_F = T_B = T_W = 10 ms:
    #   1F1B  (p − 1)(T_F + T_B + T_W) = 3 · 30 = 90 ms
    #   ZB-H1 (p − 1)(T_F + T_B − T_W) = 3 · 10 = 30 ms
    #   ZB-H2 (p − 1)(T_F + T_B − 2T_W) = 0 in their steady state; a step whose optimizer waits
    #         for the pipeline keeps the last stage's (p − 1)·T_F = 30 ms start.
    assert PL.bubble_time_s(4, Schedule.ONE_F_ONE_B, 0.01, 0.01, 0.01) == pytest.approx(0.09)
    assert PL.bubble_time_s(4, Schedule.ZB_H1, 0.01, 0.01, 0.01) == pytest.approx(0.03)
    assert PL.bubble_time_s(4, Schedule.ZB_H2, 0.01, 0.01, 0.01) == pytest.approx(0.03)
    # with B = 2W the paper's (p − 1)(F + B − 2W) = (p − 1)F: the two agree
    assert PL.bubble_time_s(4, Schedule.ZB_H2, 0.01, 0.02, 0.01) == pytest.approx(0.03)
    # and with B > 2W theirs is the bubble: 3 · (10 + 30 − 20) = 60 ms
    assert PL.bubble_time_s(4, Schedule.ZB_H2, 0.01, 0.03, 0.01) == pytest.approx(0.06)


def test_dualpipe_deepseek_table_2():
    # DeepSeek-V3 report Table 2 / deepseek-ai/DualPipe README, PP = 8 with F = 1, a whole
    # backward B′ = 2, W = 1 and F&B = F + B′ = 3: (PP/2 − 1)(F&B + B′ − 3W) = 3·(3 + 2 − 3) = 6.
    # Here B is the input gradient alone, B′ − W = 1.
    assert PL.bubble_time_s(8, Schedule.DUALPIPE, 1.0, 1.0, 1.0) == 6
    # ZB1P (= ZB-H1) in the same table: (PP − 1)(F + B′ − 2W) = 7·(1 + 2 − 2) = 7
    assert PL.bubble_time_s(8, Schedule.ZB_H1, 1.0, 1.0, 1.0) == 7
    # DualPipeV on PP = 8 stages = 4 GPUs: the same (8/2 − 1)·2 = 6 in chunk times, whose chunk
    # is half a GPU's stage: F = B = W = 2 per GPU stage gives chunks of 1 and a bubble of 6.
    assert PL.bubble_time_s(4, Schedule.DUALPIPEV, 2.0, 2.0, 2.0) == 6
    # unequal times, p = 8 (k = 3), F = 1, B = 2, W = 1: max((k − 1)F + 2kB − kW, k(2F + B − W))
    # = max(2 + 12 − 3, 3·3) = 11, under the table's k(F + 2B − W) = 3·4 = 12
    assert PL.bubble_time_s(8, Schedule.DUALPIPE, 1.0, 2.0, 1.0) == 11


@pytest.mark.parametrize("schedule,first,last", [
    # p = 8, m = 32
    (Schedule.ONE_F_ONE_B, 8, 1),
    (Schedule.ZB_H1, 8, 8),  # Qi et al. 2024 Table 1: p·M_B on every stage
    (Schedule.ZB_H2, 15, 15),  # (2p − 1)·M_B
    (Schedule.ZBV, 8, 8),  # 2p half-stage chunks: 1F1B's first stage
    (Schedule.DUALPIPE, 9, 9),  # DeepSeek-V3 Table 2: PP + 1
    (Schedule.DUALPIPEV, 8.5, 8.5),  # PP + 1 = 17 chunks of half a stage
])
def test_in_flight(schedule, first, last):
    assert PL.in_flight_first_stage(8, 32, 1, schedule) == first
    assert PL.in_flight_last_stage(8, 32, 1, schedule) == last


def test_parameter_copies():
    # DeepSeek-V3 Table 2: DualPipe "Parameter 2×"; DualPipeV's two chunks are one share
    assert PL.parameter_copies(Schedule.DUALPIPE) == 2
    assert {PL.parameter_copies(s) for s in Schedule if s is not Schedule.DUALPIPE} == {1}


# ---- identities ------------------------------------------------------------------------------

def test_existing_schedules_unchanged():
    # the old formulas, whatever times are passed
    for schedule in (Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED):
        assert PL.bubble_fraction(p, m, v, schedule, F, B, W) == (p - 1) / (v * m + p - 1)
        assert PL.pipeline_slots(p, m, v, schedule, F, B, W) == m + (p - 1) / v


def test_zb_h1_without_w_is_1f1b():
    # W = 0: nothing to defer, ZB-H1 is 1F1B
    assert PL.bubble_time_s(p, Schedule.ZB_H1, F, B, 0) == PL.bubble_time_s(
        p, Schedule.ONE_F_ONE_B, F, B, 0)
    assert sp.simplify(PL.bubble_fraction(p, m, 1, Schedule.ZB_H1, F, B, 0)
                       - PL.bubble_fraction(p, m, 1)) == 0


@pytest.mark.parametrize("schedule", [Schedule.ZB_H1, Schedule.ZB_H2, Schedule.ZBV,
                                      Schedule.DUALPIPEV])
def test_one_stage_has_no_bubble(schedule):
    assert PL.bubble_fraction(1, m, 1, schedule, F, B, W) == 0
    assert PL.pipeline_slots(1, m, 1, schedule, F, B, W) == m


def test_dualpipe_two_stages_have_no_bubble():
    # p = 2: each GPU is the first stage of one direction and the last of the other
    assert PL.bubble_fraction(2, m, 1, Schedule.DUALPIPE, F, B, W) == 0


def test_dualpipe_meets_deepseek_table_form_at_equal_times():
    # DeepSeek-V3 Table 2: (PP/2 − 1)(F&B + B′ − 3W), B′ = B + W, F&B = F + B′; at F = B = W
    # that is (p/2 − 1)·2F, and DualPipeV's, on 2p half chunks, (p − 1)·F
    assert sp.simplify(PL.bubble_time_s(p, Schedule.DUALPIPE, F, F, F) - (p / 2 - 1) * 2 * F) == 0
    assert sp.simplify(PL.bubble_time_s(p, Schedule.DUALPIPEV, F, F, F) - (p - 1) * F) == 0


@settings(max_examples=200, deadline=None)
@given(pp=st.sampled_from([2, 4, 8, 16, 32]), w=st.floats(0.01, 1.0),
       f_over_w=st.floats(1.0, 4.0), b_over_f=st.floats(1.0, 4.0))
def test_deepseek_table_is_an_upper_bound(pp, w, f_over_w, b_over_f):
    # for W ≤ F ≤ B the published k(F + 2B − W) never undercuts the simulated schedule
    f = w * f_over_w
    b = f * b_over_f
    k = pp / 2 - 1
    assert PL.bubble_time_s(pp, Schedule.DUALPIPE, f, b, w) <= k * (f + 2 * b - w) + 1e-9
    kv = pp - 1
    assert PL.bubble_time_s(pp, Schedule.DUALPIPEV, f, b, w) <= kv * (f + 2 * b - w) / 2 + 1e-9


@pytest.mark.parametrize("schedule", SPLIT)
def test_fraction_slots_and_time_agree(schedule):
    idle = PL.bubble_time_s(p, schedule, F, B, W)
    slots = PL.pipeline_slots(p, m, 1, schedule, F, B, W)
    assert sp.simplify(slots - m - idle / (F + B + W)) == 0
    assert sp.simplify(PL.bubble_fraction(p, m, 1, schedule, F, B, W) - (slots - m) / slots) == 0


@settings(max_examples=200, deadline=None)
@given(pp=st.integers(2, 64), w=st.floats(0.01, 1.0), f_over_w=st.floats(1.0, 4.0),
       b_over_w=st.floats(1.0, 4.0))
def test_splitting_never_loses_to_1f1b(pp, w, f_over_w, b_over_w):
    # for W ≤ F, W ≤ B: ZB-H2 ≤ ZB-H1 ≤ 1F1B, and ZB-V (half chunks) ≤ ZB-H1
    f, b = w * f_over_w, w * b_over_w
    one = PL.bubble_time_s(pp, Schedule.ONE_F_ONE_B, f, b, w)
    h1 = PL.bubble_time_s(pp, Schedule.ZB_H1, f, b, w)
    assert PL.bubble_time_s(pp, Schedule.ZB_H2, f, b, w) <= h1 + 1e-12 <= one + 2e-12
    assert PL.bubble_time_s(pp, Schedule.ZBV, f, b, w) <= h1
    # and a synchronous step never beats the last stage's late start, (p − 1)·F (a V: F/2)
    assert PL.bubble_time_s(pp, Schedule.ZB_H2, f, b, w) >= (pp - 1) * f - 1e-12
    assert PL.bubble_time_s(pp, Schedule.ZBV, f, b, w) >= (pp - 1) * f / 2 - 1e-12


# ---- the cost model ----------------------------------------------------------------------------

def _plan(schedule, pp=4, n_micro=16):
    from planner.catalog import load_hardware, load_model
    from planner.formulas.choices import Attention, Recompute, ZeroStage
    from planner.model.cost import Choices, numbers, plan_costs
    from planner.schema import PlanConfig

    model, hw = load_model("llama-3.1-70b"), load_hardware("h100-nvlink")
    # tp 4: at tp 8 the forward's exposed TP collectives (4 NCCL calls per layer and direction,
    # each 32.2 µs of ring latency + 317.4 µs of transfer: 1.40 ms a layer, issue 22) make
    # F = 95.0 ms > B = 93.1 ms, outside the domain where ZB-V's closed form is exact; at tp 4
    # F = 154.1 ms ≤ B = 181.9 ms
    config = PlanConfig(dp=2, tp=4, pp=pp, cp=1, vpp=1, mbs=1, n_micro=n_micro,
                        gbs=2 * n_micro, seq_len=8192, zero_stage=ZeroStage.OPTIMIZER,
                        recompute=Recompute.SELECTIVE, sequence_parallel=True,
                        schedule=schedule, attention=Attention.FLASH)
    seen = {}

    def keep(name, value):
        seen[name] = value
        return value

    return plan_costs(numbers(model, hw, config), Choices.of(config), keep), seen


def test_cost_model_uses_the_schedule_bubble():
    base, _ = _plan(Schedule.ONE_F_ONE_B)
    for schedule in SPLIT:
        costs, seen = _plan(schedule)
        f, w = seen["forward_microbatch_s"], seen["wgrad_microbatch_s"]
        stage = costs["stage_microbatch_s"]
        b = stage - f - w
        assert 0 < w <= f <= b  # the domain the closed forms are checked in
        idle = PL.bubble_time_s(4, schedule, f, b, w)
        assert costs["bubble_s"] == pytest.approx(idle, rel=1e-12)
        assert costs["bubble_fraction"] == pytest.approx(idle / (16 * stage + idle), rel=1e-12)
        # the stage's own work is the schedule's business only through the bubble, and through
        # the pipeline sends: a V crosses 2(p − 1) GPU boundaries per micro-batch, not p − 1
        if schedule in (Schedule.ZBV, Schedule.DUALPIPEV):
            assert stage > base["stage_microbatch_s"]
            assert costs["pp_bytes"] == pytest.approx(2 * base["pp_bytes"], rel=1e-12)
        else:
            assert stage == pytest.approx(base["stage_microbatch_s"], rel=1e-12)
        assert costs["bubble_s"] < base["bubble_s"]
        assert seen["parameter_copies"] == (2 if schedule is Schedule.DUALPIPE else 1)
    assert base["bubble_s"] == pytest.approx(3 * base["stage_microbatch_s"], rel=1e-12)


@pytest.mark.parametrize("framework", ["megatron", "deepspeed"])
def test_emit_refuses_split_schedules_it_cannot_write(framework):
    # launch settings that silently ran 1F1B would not be the plan: one clear line instead
    from planner.catalog import load_model
    from planner.errors import PlanError
    from planner.formulas.choices import ZeroStage
    from planner.frameworks.emit import emit
    from planner.schema import PlanConfig

    config = PlanConfig(dp=8, tp=1, pp=4, vpp=1, mbs=1, n_micro=8, gbs=64, seq_len=8192,
                        sequence_parallel=False, schedule=Schedule.ZBV,
                        zero_stage=ZeroStage.PARAMETERS)
    with pytest.raises(PlanError, match=f"{framework}: there is no zbv schedule"):
        emit(framework, config, load_model("8b"))


@pytest.mark.parametrize("schedule, name", [(Schedule.ZBV, "ZBVZeroBubble"),
                                            (Schedule.DUALPIPEV, "DualPipeV")])
def test_torchtitan_writes_its_v_schedules_with_two_stages_per_rank(schedule, name):
    # torchtitan runs ZBVZeroBubble and DualPipeV with exactly two stages per rank: pp = 4 is
    # 8 stages of 32/8 = 4 layers (the embedding and the output weighed as a layer each: 34
    # weighted over 8 stages, ⌈34/8⌉ = 5 per stage would make 7; the even 4 makes 8)
    import tomllib

    from planner.catalog import load_model
    from planner.formulas.choices import ZeroStage
    from planner.frameworks.emit import emit
    from planner.schema import PlanConfig

    config = PlanConfig(dp=8, tp=1, pp=4, vpp=1, mbs=1, n_micro=8, gbs=64, seq_len=8192,
                        sequence_parallel=False, schedule=schedule,
                        zero_stage=ZeroStage.PARAMETERS, framework="torchtitan")
    par = tomllib.loads(emit("torchtitan@0.2", config, load_model("8b")).text)["parallelism"]
    assert par["pipeline_parallel_schedule"] == name
    assert par["pipeline_parallel_layers_per_stage"] == 4


def test_pipeline_hops():
    # p = 4: 1F1B 3 sends per micro-batch; interleaved v = 2: 7 (GPU 3 → GPU 0 included);
    # a V: down 3 and up 3 = 6 (the turn at GPU 3 is local); DualPipe: 3 in its own direction
    assert PL.pipeline_hops(4, 1, Schedule.ONE_F_ONE_B) == 3
    assert PL.pipeline_hops(4, 2, Schedule.INTERLEAVED) == 7
    assert PL.pipeline_hops(4, 1, Schedule.ZBV) == PL.pipeline_hops(4, 1, Schedule.DUALPIPEV) == 6
    assert PL.pipeline_hops(4, 1, Schedule.DUALPIPE) == PL.pipeline_hops(4, 1, Schedule.ZB_H1) == 3
    assert PL.pipeline_hops(1, 1, Schedule.ZBV) == 0  # one GPU: the V never leaves it


def test_simulated_routes_make_the_hops():
    from planner.outputs.timeline import _route

    for schedule in (Schedule.ZBV, Schedule.DUALPIPEV, Schedule.DUALPIPE, Schedule.ZB_H1):
        for micro in (0, 7):
            route = _route(schedule, 4, 1, micro, 8)
            sends = sum(a[0] != b[0] for a, b in zip(route, route[1:]))
            assert sends == PL.pipeline_hops(4, 1, schedule)


def test_ends_on_first_gpu_follows_the_simulated_routes():
    from planner.outputs.timeline import _route

    for schedule in Schedule:
        if schedule is Schedule.INTERLEAVED:  # its last chunk is on GPU p − 1
            continue
        # some micro-batch's last stage (its LM head) runs on GPU 0
        ends = {_route(schedule, 4, 1, i, 8)[-1][0] for i in range(8)}
        assert PL.ends_on_first_gpu(schedule) == int(0 in ends)
    assert PL.ends_on_first_gpu(Schedule.INTERLEAVED) == 0
