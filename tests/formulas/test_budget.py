"""Time to train with a goodput (formulas/budget.py): hand-derived cases, identities on symbols."""

from __future__ import annotations

import pytest
import sympy as sp

from planner.catalog import load_hardware, load_model
from planner.errors import PlanError
from planner.formulas import budget as B
from planner.model.estimate import estimate, with_budget
from planner.schema import PlanConfig


def test_wall_clock_hand_case():
    # 15T tokens at 1,000,000 tokens/s: 15e12 / 1e6 = 1.5e7 s of training; at goodput 0.9 the
    # wall clock is 1.5e7 / 0.9 = 16,666,666.7 s = 192.90 days
    assert B.wall_clock_s(15e12, 1e6, 0.9) == pytest.approx(16_666_666.67, rel=1e-9)
    assert B.wall_clock_s(15e12, 1e6, 0.9) / B.SECONDS_PER_DAY == pytest.approx(192.901, rel=1e-5)
    # goodput 1 is the uninterrupted run
    assert B.wall_clock_s(15e12, 1e6, 1) == B.training_s(15e12, 1e6) == 1.5e7


def test_gpu_hours_and_energy_count_the_wall_clock():
    # 1,024 GPUs held 16,666,666.7 s: 1024 · 16,666,666.7 / 3600 = 4,740,740.7 GPU-hours
    assert B.gpu_hours(1024, 15e12, 1e6, 0.9) == pytest.approx(4_740_740.74, rel=1e-9)
    # at 700 W: 1024 · 700 · 16,666,666.7 = 1.194667e13 J = 3,318.5 MWh (1 MWh = 3.6e9 J)
    assert B.energy_j(1024, 15e12, 1e6, 700, 0.9) == pytest.approx(1.1946667e13, rel=1e-7)
    assert B.energy_j(1024, 15e12, 1e6, 700, 0.9) / 3.6e9 == pytest.approx(3318.52, rel=1e-5)
    # without a goodput (the default 1) the old figures: 1024 · 1.5e7 / 3600 = 4,266,666.7
    assert B.gpu_hours(1024, 15e12, 1e6) == pytest.approx(4_266_666.67, rel=1e-9)


def test_symbolic_identities():
    T, tau, g, N, P = sp.symbols("T tau g N P", positive=True)
    assert sp.simplify(B.wall_clock_s(T, tau, g) - T / (tau * g)) == 0
    assert sp.simplify(B.gpu_hours(N, T, tau, g) - N * T / (tau * g) / 3600) == 0
    assert sp.simplify(B.energy_j(N, T, tau, P, g) - N * P * T / (tau * g)) == 0


@pytest.fixture(scope="module")
def plan():
    model, hw = load_model("8b"), load_hardware("h100-nvlink")
    config = PlanConfig(dp=8, tp=1, pp=1, mbs=1, n_micro=4, gbs=32, seq_len=8192,
                        sequence_parallel=False)
    return estimate(model, hw, config)


def test_with_budget_applies_the_goodput(plan):
    ideal = with_budget(plan, 1e12, gpu_hour_price=2.0, gpu_power_w=700, goodput=1.0)
    real = with_budget(plan, 1e12, gpu_hour_price=2.0, gpu_power_w=700, goodput=0.8)
    assert ideal.budget.goodput == 1.0 and real.budget.goodput == 0.8
    assert real.budget.goodput_from == "--goodput"
    # without --goodput, the plan's own from failures and checkpoints (model/goodput.py)
    own = with_budget(plan, 1e12, gpu_hour_price=2.0, gpu_power_w=700)
    assert own.budget.goodput == plan.goodput.fraction and own.budget.goodput_from == "model"
    assert own.budget.days == pytest.approx(ideal.budget.days / plan.goodput.fraction)
    # every figure over the wall clock: 1/0.8 = 1.25 times the uninterrupted run
    for key in ("days", "gpu_hours", "cost", "energy_mwh"):
        assert getattr(real.budget, key) == pytest.approx(1.25 * getattr(ideal.budget, key))
    # days from tokens/s: 1e12 / (τ · 0.8) / 86,400; GPU-hours = 8 GPUs · days · 24; cost = ·2
    tau = plan.time.tokens_per_s
    assert real.budget.days == pytest.approx(1e12 / (tau * 0.8) / 86_400)
    assert real.budget.gpu_hours == pytest.approx(8 * real.budget.days * 24)
    assert real.budget.cost == pytest.approx(2.0 * real.budget.gpu_hours)
    assert real.budget.energy_mwh == pytest.approx(real.budget.gpu_hours * 700 / 1e6)


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.01, float("nan")])
def test_goodput_out_of_range_is_refused(plan, bad):
    with pytest.raises(PlanError, match=r"--goodput .* \(0, 1\]"):
        with_budget(plan, 1e12, goodput=bad)


def test_cli_goodput_model_and_flag():
    import json

    from typer.testing import CliRunner

    from planner.cli import app

    args = ["explain", "--model", "8b", "--gpus", "8", "--hw", "h100-nvlink", "--gbs", "32",
            "--train-tokens", "1T", "--json"]
    runner = CliRunner()
    default = json.loads(runner.invoke(app, args).stdout)["budget"]
    ideal = json.loads(runner.invoke(app, [*args, "--goodput", "1"]).stdout)["budget"]
    own = json.loads(runner.invoke(app, args).stdout)["goodput"]["fraction"]
    assert default["goodput"] == own and default["goodput_from"] == "model"
    assert ideal["goodput"] == 1.0 and ideal["goodput_from"] == "--goodput"
    assert default["days"] == pytest.approx(ideal["days"] / own)
    r = runner.invoke(app, [*args, "--goodput", "0"])
    assert r.exit_code == 2 and "--goodput" in r.stderr and len(r.stderr.splitlines()) == 1
    r = runner.invoke(app, ["search", "--model", "8b", "--gpus", "8", "--hw", "h100-nvlink",
                            "--train-tokens", "1T", "--goodput", "0.5", "--json", "--top", "1"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["plans"][0]["budget"]["goodput"] == 0.5


def test_deadline_step_hand_case_and_inverse():
    # 60 days at goodput 0.9 is 60 · 86,400 · 0.9 = 4,665,600 s of training; 15T tokens at
    # 512 · 8,192 = 4,194,304 tokens per step is 3,576,278.7 steps: 1.304596 s per step at most
    assert B.deadline_step_s(60 * 86_400, 15e12, 512 * 8192, 0.9) == pytest.approx(1.304596,
                                                                                   rel=1e-6)
    D, T, Bt, g = sp.symbols("D T B g", positive=True)
    step = B.deadline_step_s(D, T, Bt, g)
    assert sp.simplify(B.wall_clock_s(T, Bt / step, g) - D) == 0


def test_search_deadline_sizes_the_cluster():
    import json

    from typer.testing import CliRunner

    from planner.cli import app

    runner = CliRunner()
    base = ["search", "--model", "8b", "--hw", "h100-nvlink", "--gbs", "256",
            "--train-tokens", "1T", "--json", "--top", "1"]
    # the days of the best plan on 32 and 64 GPUs at this batch; a deadline between them
    days = {n: json.loads(runner.invoke(app, [*base, "--gpus", str(n)]).stdout)["plans"][0]
            ["budget"]["days"] for n in (32, 64)}
    assert days[64] < days[32]
    deadline = (days[32] + days[64]) / 2
    r = runner.invoke(app, [*base, "--gpus", "256", "--deadline-days", f"{deadline:.6f}"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)["plans"][0]
    assert plan["config"]["dp"] * plan["config"]["tp"] * plan["config"]["pp"] \
        * plan["config"]["cp"] == 64
    assert plan["budget"]["days"] == pytest.approx(days[64]) and plan["budget"]["days"] <= deadline
    # no time without tokens; not with another ranking
    r = runner.invoke(app, ["search", "--model", "8b", "--gpus", "64", "--deadline-days", "9"])
    assert r.exit_code == 2 and "--deadline-days needs --train-tokens" in r.stderr
    r = runner.invoke(app, [*base, "--gpus", "64", "--deadline-days", "9", "--sort", "memory"])
    assert r.exit_code == 2 and "leave out --target-step-s and --sort" in r.stderr
    # too soon for any size: exit 1
    r = runner.invoke(app, [*base, "--gpus", "64", "--deadline-days", "0.001"])
    assert r.exit_code == 1
