"""What else the search weighed (planner/alternatives.py): each option's verdict and its reason."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from planner.catalog import load_hardware, load_model
from planner.cli import app
from planner.outputs.render import share_of_capacity
from planner.results import Memory
from planner.search.alternatives import step_differences
from planner.search.core import search
from planner.search.request import PlanRequest

H100 = load_hardware("h100-nvlink")
runner = CliRunner()


def _verdicts(model: str, gpus: int, **request) -> dict:
    result = search(load_model(model), H100, PlanRequest(gpus=gpus, **request), top=5)
    return {a.option.split(" (")[0]: a for a in result.alternatives}, result


def test_megatron_405b_on_16384_gpus():
    # the command: Megatron-Core runs 1F1B and interleaved only, so zero-bubble and
    # DualPipe are named as torchtitan's, and interleaving wins: without it the bubble of a
    # pp ≥ 8 pipeline at n_micro = 16–64 is (p − 1)/(m + p − 1) ≥ 10 % of the step
    options, result = _verdicts("405b", 16384)
    assert list(options) == ["interleaved 1F1B", "zero-bubble", "DualPipe, DualPipeV",
                             "context parallelism as an all-to-all",
                             "hierarchical context parallelism", "offload to host memory",
                             "hybrid sharding", "partial recompute"]  # fit: partial recompute
    for name in ("zero-bubble", "DualPipe, DualPipeV"):
        assert options[name].verdict == "not run"
        assert "megatron does not run it" in options[name].why
        assert "--framework torchtitan" in options[name].why
    interleaved = options["interleaved 1F1B"]
    assert interleaved.verdict == "wins"
    assert interleaved.step_s < (1 - result.tie_band) * interleaved.versus_step_s
    assert "bubble −" in interleaved.why  # it wins on the bubble
    # hybrid sharding is outside the default space: tried on the fastest layouts, and said so
    assert "tried on the 3 fastest layouts" in options["hybrid sharding"].why


def test_torchtitan_runs_the_v_schedules_and_they_lose_to_no_pipeline():
    # 70B on 512 H100 under torchtitan: FSDP without a pipeline is fastest; the V schedules'
    # fastest plans use pp > 1 (a schedule needs a pipeline) and are slower by more than the band
    options, result = _verdicts("70b", 512, framework="torchtitan")
    zb, dual = options["zero-bubble"], options["DualPipe, DualPipeV"]
    assert " zbv " in zb.plan and " dualpipev " in dual.plan
    assert " pp1 " not in zb.plan and " pp1 " not in dual.plan
    for option in (zb, dual):
        assert option.verdict == "loses"
        assert option.step_s > (1 + result.tie_band) * option.versus_step_s


def test_deepspeed_refuses_hybrid_sharding_with_its_reason():
    options, _ = _verdicts("8b", 64, framework="deepspeed")
    hsdp = options["hybrid sharding"]
    assert hsdp.verdict == "not run" and "deepspeed" in hsdp.why.lower()


def test_hybrid_sharding_read_off_the_search_when_searched():
    options, _ = _verdicts("70b", 512, dp_shard="auto")
    hsdp = options["hybrid sharding"]
    assert "tried on" not in hsdp.why and hsdp.plan is not None and "hsdp" in hsdp.plan


def test_step_differences_name_every_part_and_their_sum():
    parts = dict(compute_s=5.0, bubble_s=0.5, tp_exposed_s=0.0, dp_exposed_s=0.2,
                 pp_exposed_s=0.0, cp_exposed_s=0.0, ep_exposed_s=0.0, optimizer_s=0.1,
                 offload_s=0.0, exposed_comm_s=0.2, step_s=5.8)
    plan = SimpleNamespace(**parts)
    # other: bubble 0.5 → 0.2 (−0.3 s), exposed TP 0 → 0.1 (+0.1 s); step 5.8 → 5.6 (−0.2 s):
    # every part that differs, the largest first, and their sum
    other = SimpleNamespace(**{**parts, "bubble_s": 0.2, "tp_exposed_s": 0.1,
                               "exposed_comm_s": 0.3, "step_s": 5.6})
    assert step_differences(plan, other) == "bubble −0.300 s, exposed TP +0.100 s = −0.200 s"
    assert step_differences(plan, plan) == ""
    # the expert all-to-all's exposed time, a part of its own (Time.ep_exposed_s)
    moe = SimpleNamespace(**{**parts, "ep_exposed_s": 0.3, "exposed_comm_s": 0.5,
                             "step_s": 6.1})
    assert step_differences(plan, moe) == "exposed all-to-all (EP) +0.300 s"


def test_row_1_is_the_fastest_plan_that_fits_with_the_margin():
    result = search(load_model("405b"), H100, PlanRequest(gpus=16384), top=5)
    safe = [p for p, lab in zip(result.plans, result.ranks) if not lab.endswith("m")]
    assert result.plans[0].time.step_s == min(p.time.step_s for p in safe)
    assert result.summary[0].startswith(f"Row 1, the plan to run: "
                                        f"{result.plans[0].config.short_label()}, ")


@pytest.mark.parametrize("needed, shown", [(0.996, "99%"), (0.5, "50%"), (1.0, "100%"),
                                           (1.234, "123%")])
def test_a_plan_that_fits_never_reads_100_percent(needed, shown):
    memory = Memory.model_construct(total_bytes=needed * 80, capacity_bytes=80)
    assert share_of_capacity(memory) == shown


def test_cli_shows_and_json_carries_the_alternatives():
    args = ["search", "--model", "405b", "--gpus", "16384", "--hw", "h100-nvlink", "--top", "3"]
    # short by default (issue 19): the options weighed are behind --why
    assert "Also weighed:" not in runner.invoke(app, args, env={"COLUMNS": "80"}).stdout
    out = runner.invoke(app, [*args, "--why"], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    text = out.stdout
    assert "Also weighed:" in text
    assert "- zero-bubble (ZB-H1, ZB-H2, ZB-V): not run — megatron does not run it" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert [a["verdict"] for a in data["alternatives"]][1:3] == ["not run", "not run"]
    assert set(data["alternatives"][0]) == {"option", "verdict", "plan", "step_s", "versus",
                                            "versus_step_s", "why"}


def test_a_schedule_the_framework_lacks_names_who_runs_it():
    base = ["explain", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink", "--tp", "8",
            "--pp", "4"]
    zbv = runner.invoke(app, [*base, "--schedule", "zbv", "--framework", "megatron"])
    assert zbv.exit_code == 2
    assert ("megatron: there is no zbv schedule in megatron (it runs 1f1b, interleaved); choose "
            "one of them, or --framework torchtitan, which runs it") in zbv.output
    zb = runner.invoke(app, [*base, "--schedule", "zb-h1"])
    assert "(no framework plan3d models runs it)" in zb.output
    # without --framework, the schedule implies the one framework that runs it, said on stderr
    drawn = runner.invoke(app, [*base, "--schedule", "zbv", "--timeline"],
                          env={"COLUMNS": "100"})
    assert drawn.exit_code == 0, drawn.output
    assert "under torchtitan" in drawn.stdout.splitlines()[0] and "zbv" in drawn.stdout
    assert drawn.stderr.strip() == ("plan3d: --schedule zbv: costed for torchtitan, the "
                                    "framework plan3d models that runs it (--framework to choose)")
    assert "stage 0  F" in drawn.stdout  # the timeline is drawn


def test_context_parallel_kinds_are_weighed_where_the_framework_runs_them():
    # Megatron runs the ring, the all-to-all and the hierarchical form: both others are read off
    # the search (every kind the framework runs is searched by default) and compared with the
    # fastest plan of another kind at cp > 1
    options, result = _verdicts("70b", 512)
    a2a = options["context parallelism as an all-to-all"]
    # weighed against the same layout with the ring: only the kind differs
    assert a2a.versus == a2a.plan.replace("a2a ", " ")
    # Ulysses moves less here but exposes its all-to-all, which the ring hides under attention:
    # within the band of the ring, not a win
    assert a2a.verdict == "ties"
    assert abs(a2a.step_s / a2a.versus_step_s - 1) <= result.tie_band
    hierarchical = options["hierarchical context parallelism"]
    assert "h2 " in hierarchical.plan and hierarchical.versus == hierarchical.plan.replace(
        "h2 ", " ")
    # torchtitan runs the ring only: the others are named with who runs them
    options, _ = _verdicts("8b", 64, framework="torchtitan")
    assert options["context parallelism as an all-to-all"].why == (
        "torchtitan does not run it; megatron does (--framework megatron); deepspeed does "
        "(--framework deepspeed).")


def test_offload_that_would_win_is_weighed_but_not_ranked_by_default():
    # 405B on 1,024 H100: the least offload that lets a plan drop recompute is faster than every
    # plan that fits without offload, but `--offload fit` (the default) ranks offload only when
    # nothing else fits, because no measured run checks offload's time; `--offload auto` ranks it
    options, result = _verdicts("405b", 1024)
    offload = options["offload to host memory"]
    assert offload.verdict == "wins" and "not ranked" in offload.why
    assert offload.step_s < (1 - result.tie_band) * offload.versus_step_s
    assert all(p.config.offload_optimizer == 0 and p.config.offload_activations == 0
               and not p.config.offload_params for p in result.plans)
    auto = search(load_model("405b"), H100, PlanRequest(gpus=1024, offload="auto"), top=5)
    first = auto.plans[0].config  # ranked: the first plan of auto's tie offloads
    assert first.offload_optimizer > 0 or first.offload_activations > 0 or first.offload_params


def test_deepspeed_weighs_partitioned_checkpoints_where_a_plan_needs_them():
    # fit: 70B at 8,192 tokens on 32 H100 under DeepSpeed: partition_activations splits each
    # full-recompute checkpoint (2·s·b·h/c) over the tp ranks. The search adds the split only to
    # full-recompute plans without sequence parallelism that do not fit without it, so each row
    # it adds is over the capacity unsplit and within it split, and explain reproduces it
    from planner.model.estimate import estimate
    from planner.search.evaluate import evaluate_space
    from planner.search.space import config_at

    model = load_model("70b")
    req = PlanRequest(gpus=32, framework="deepspeed", seq_len=8192)
    cols, costs = evaluate_space(model, H100, req)
    split = cols["rc_dist"] > 0
    assert split.any() and (cols["tp"][split] > 1).all() and not cols["sp"][split].any()
    assert (costs["total_bytes"][split] <= H100.capacity_bytes).all()
    for i in np.flatnonzero(split)[:3]:
        config = config_at(model, req, cols, int(i))
        assert config.distribute_saved_activations and "full+dist" in config.short_label()
        plan = estimate(model, H100, config)
        assert plan.memory.total_bytes == pytest.approx(costs["total_bytes"][i], rel=1e-9)
        whole = estimate(model, H100, config.model_copy(
            update={"distribute_saved_activations": False}))
        assert whole.memory.total_bytes > H100.capacity_bytes  # it did not fit unsplit
        assert plan.time.step_s > whole.time.step_s  # the all-gather before each rerun
    options, _ = _verdicts("70b", 32, framework="deepspeed", seq_len=8192)
    part = options["partitioned checkpoints"]
    assert part.verdict in ("wins", "ties", "loses") and "full+dist" in part.plan
    assert options["contiguous checkpoint buffers"].verdict == "not searched"
    assert options["partial recompute"].verdict == "not searched"  # Megatron's block method
    # asked for, it is fixed, not weighed
    options, _ = _verdicts("70b", 32, framework="deepspeed", seq_len=8192, sp=[False],
                           recompute=["full"], distribute_saved_activations=True)
    assert options["partitioned checkpoints"].verdict == "not searched"


def test_fp8_searches_weigh_the_other_recipes_on_row_one():
    # fit: on 64 H100 at fp8, Megatron's delayed scaling is the default; current scaling and
    # blockwise run on Hopper too (mxfp8 needs Blackwell and is not tried), each with and
    # without --fp8-param-gather: the fastest that fits on row 1's layout is compared with it
    options, result = _verdicts("70b", 64, precision="fp8")
    recipes = options["other fp8 recipes and --fp8-param-gather"]
    assert recipes.verdict in ("wins", "ties", "loses")
    assert recipes.versus == result.plans[0].config.short_label()
    assert recipes.plan.split()[:-1] == recipes.versus.split()  # row 1's layout, recipe added
    assert "mxfp8" not in recipes.plan  # Blackwell's recipe is refused on H100
    assert "other fp8 recipes and --fp8-param-gather" not in _verdicts("70b", 64)[0]  # bf16


def test_fastest_first_is_the_stable_sorts_head():
    """alternatives._fastest_first: the first k of a stable argsort, ties in order of place."""
    from planner.search.alternatives import _fastest_first

    rng = np.random.default_rng(0)
    for n, k in ((1000, 3), (5, 3), (3, 3), (2, 3), (50, 1)):
        step = rng.integers(0, 7, n).astype(float)  # many ties
        assert _fastest_first(step, k).tolist() == np.argsort(step, kind="stable")[:k].tolist()
    step = np.array([np.nan, 2.0, np.nan, 1.0])
    assert _fastest_first(step, 3).tolist() == [3, 1, 0]


def test_expert_parallelism_is_weighed_and_its_absence_explained():
    # DeepSeek-V3 on 2,048 H100 under DeepSpeed: AutoEP needs tp = pp = cp = 1, so dp = 2,048
    # ranks, and the default batch (4 Mi tokens / 4,096 = 1,024 sequences) fills only half:
    # no layout splits the experts, and both --why and the short lines say which batch would
    # (2,048 = ⌈1,024/2,048⌉·2,048)
    options, result = _verdicts("deepseek-v3", 2048, framework="deepspeed")
    ep = options["expert parallelism"]
    assert ep.verdict == "not searched" and ep.why.endswith("--gbs 2048 weighs it.")
    assert all(p.config.ep == 1 for p in result.plans)
    assert any(line.startswith("No expert parallelism in this search: deepspeed splits the "
                               "experts only with tp = pp = cp = 1") for line in result.summary)
    # at that batch the experts split and row 1 runs them (AutoEP over 64 of the 2,048 ranks)
    options, result = _verdicts("deepseek-v3", 2048, framework="deepspeed", gbs=2048)
    assert options["expert parallelism"].verdict == "wins" and result.plans[0].config.ep > 1
    # --ep 1 asks for the experts whole: named in --why, not in the short lines
    options, result = _verdicts("qwen3-30b-a3b", 64, ep=[1])
    assert options["expert parallelism"].why == "--ep 1 leaves it out."
    assert not any(line.startswith("No expert parallelism") for line in result.summary)
    # --ep 8 asks for split experts: nothing without them to weigh against, no short line
    options, result = _verdicts("qwen3-30b-a3b", 64, ep=[8])
    assert options["expert parallelism"].verdict == "not searched"
    assert options["expert parallelism"].why.startswith("--ep 8 asks for it")
    assert not any(line.startswith("No expert parallelism") for line in result.summary)
    # DeepSpeed with --tp 2: the pinned tp, not the batch, keeps AutoEP out
    options, _ = _verdicts("qwen3-30b-a3b", 128, framework="deepspeed", tp=[2], gbs=100)
    assert options["expert parallelism"].why.endswith("which --tp 2 rules out.")
    # a dense model weighs no such option
    options, _ = _verdicts("8b", 64)
    assert "expert parallelism" not in options


@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "deepspeed"])
def test_ep_needs_pure_dp_is_what_the_rules_say(framework):
    # Framework.ep_needs_pure_dp, which the expert-parallelism reason reads, against the
    # framework's own rules: Qwen3-30B-A3B at ep 2 on 8 GPUs runs with tp 1 everywhere and is
    # refused with tp 2 exactly where the flag says so (DeepSpeed's AutoEP)
    from planner.errors import PlanError
    from planner.frameworks import FRAMEWORKS
    from planner.model.estimate import estimate
    from planner.schema import PlanConfig

    model = load_model("qwen3-30b-a3b")

    def runs(tp: int) -> bool:
        cfg = PlanConfig(dp=8 // tp, tp=tp, ep=2, gbs=8 // tp, n_micro=1, seq_len=4096,
                         framework=framework, sequence_parallel=tp > 1,
                         zero_stage=3 if framework == "torchtitan" else 1)
        try:
            estimate(model, H100, cfg)
        except PlanError:
            return False
        return True

    assert runs(1)
    assert runs(2) is not FRAMEWORKS[framework].ep_needs_pure_dp
