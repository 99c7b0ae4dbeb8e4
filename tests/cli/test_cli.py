"""The command line, end to end, through typer's CliRunner."""

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()
EXPLAIN = ["explain", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink", "--tp", "8",
           "--pp", "4", "--mbs", "1", "--gbs", "1024", "--zero", "1", "--recompute", "selective",
           "--sp"]


def run(*args):
    return runner.invoke(app, list(args))


def test_version():
    r = run("--version")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("plan3d ")


def test_explain_json_has_the_stable_fields():
    r = run(*EXPLAIN, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    # dp inferred: 512 / (8·4·1) = 16; n_micro = 1024 / (16·1) = 64
    assert d["config"]["dp"] == 16 and d["config"]["n_micro"] == 64
    for key in ("dp", "tp", "pp", "cp", "vpp", "mbs", "n_micro", "gbs", "zero_stage",
                "recompute", "sequence_parallel", "precision"):
        assert key in d["config"]
    assert d["model"]["n_params"] == pytest.approx(70.55e9, rel=1e-3)
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                "overhead_bytes", "total_bytes", "capacity_bytes", "fits"):
        assert key in d["memory"]
    assert set(d["comm"]) >= {"dp_bytes", "tp_bytes", "pp_bytes", "cp_bytes"}
    # bubble (p−1)/(m+p−1) = 3/67
    assert d["bubble_fraction"] == pytest.approx(3 / 67)
    for key in ("step_s", "compute_s", "bubble_s", "exposed_comm_s", "tokens_per_s", "mfu",
                "model_flops", "hardware_flops"):
        assert key in d["time"]
    assert isinstance(d["warnings"], list)
    m = d["memory"]
    parts = sum(m[k] for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes",
                               "activations_bytes", "overhead_bytes"))
    assert parts == pytest.approx(m["total_bytes"], rel=1e-12)
    t = d["time"]
    parts = (t["compute_s"] + t["bubble_s"] + t["exposed_comm_s"] + t["optimizer_s"]
             + t["straggler_s"])
    assert parts == pytest.approx(t["step_s"], rel=1e-9)


def test_explain_table_shows_formulas_and_fit():
    r = run(*EXPLAIN)
    assert r.exit_code == 0, r.output
    assert "(p - 1)/(m·v + p - 1)" in r.output  # the bubble, from the same code
    assert "Fits:" in r.output
    assert "\x1b[" not in r.output  # no colour codes when not a terminal


def test_explain_auto_picks_a_fitting_setting():
    r = run("explain", "--model", "70b", "--gpus", "64", "--hw", "h100-nvlink", "--tp", "8",
            "--zero", "auto", "--recompute", "auto", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["memory"]["fits"] is True


def test_explain_warns_on_tp_across_nodes_and_bubble():
    r = run("explain", "--model", "175b", "--gpus", "512", "--hw", "h100-nvlink", "--tp", "16",
            "--pp", "8", "--gbs", "32", "--json")
    assert r.exit_code == 0, r.output
    codes = {w["code"] for w in json.loads(r.stdout)["warnings"]}
    # dp = 512/(16·8) = 4, n_micro = 32/4 = 8, bubble = 7/15 = 47 % (> 25 %)
    assert {"tp-across-domain", "bubble-high"} <= codes


def test_search_json():
    r = run("search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink", "--json",
            "--top", "3")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert set(d) >= {"plans", "considered", "feasible", "constraints"}
    # --top 3 ranked plans, then the two faster ones inside the memory margin, marked m
    assert d["ranks"] == ["1", "1=", "1=", "m", "m"]
    assert d["considered"] >= d["feasible"] > 0
    steps = [p["time"]["step_s"] for p in d["plans"]]
    # the ranked ones in step order (a tie group reads in order); the marked ones faster
    assert steps[:3] == sorted(steps[:3]) and max(steps[3:]) < steps[0]
    for p in d["plans"]:
        c = p["config"]
        assert c["dp"] * c["tp"] * c["pp"] * c["cp"] == 512
        assert p["memory"]["fits"]


def test_search_plan_reproduces_with_explain():
    r = run("search", "--model", "8b", "--gpus", "64", "--hw", "a100-nvlink", "--json",
            "--top", "1")
    plan = json.loads(r.stdout)["plans"][0]
    c = plan["config"]
    args = ["explain", "--model", "8b", "--gpus", "64", "--hw", "a100-nvlink", "--json"]
    for flag, key in (("--dp", "dp"), ("--tp", "tp"), ("--pp", "pp"), ("--cp", "cp"),
                      ("--vpp", "vpp"), ("--mbs", "mbs"), ("--gbs", "gbs"), ("--zero", "zero_stage"),
                      ("--recompute", "recompute"), ("--schedule", "schedule"),
                      ("--precision", "precision"), ("--grad-dtype", "grad_dtype"),
                      ("--seq-len", "seq_len"), ("--attention", "attention")):
        args += [flag, str(c[key])]
    args.append("--sp" if c["sequence_parallel"] else "--no-sp")
    r2 = run(*args)
    assert r2.exit_code == 0, r2.output
    again = json.loads(r2.stdout)
    assert again["time"]["step_s"] == pytest.approx(plan["time"]["step_s"], rel=1e-9)
    assert again["memory"]["total_bytes"] == pytest.approx(plan["memory"]["total_bytes"],
                                                           rel=1e-9)


def test_search_nothing_fits_exits_1_with_diagnosis():
    r = run("search", "--model", "1t", "--gpus", "8", "--hw", "a100-nvlink")
    assert r.exit_code == 1
    assert "no plan of megatron-1t fits" in r.output and "GiB" in r.output


@pytest.mark.parametrize("args, needle", [
    (["explain", "--model", "llama-3.1-7b", "--gpus", "8"], "did you mean"),
    (["explain", "--model", "70b", "--gpus", "8", "--hw", "h100"], "unknown hardware profile"),
    (["explain", "--model", "70b", "--gpus", "512", "--tp", "3"], "must divide"),
    (["explain", "--model", "70b", "--gpus", "512", "--tp", "8", "--pp", "3"], "must divide"),
    (["explain", "--model", "70b", "--gpus", "512", "--gbs", "100"], "divisible"),
    (["explain", "--model", "70b", "--gpus", "0"], "gpus"),
    (["explain", "--model", "70b", "--gpus", "8", "--zero", "5"], "--zero"),
    (["explain", "--model", "70b", "--gpus", "8", "--tp", "abc"], "whole numbers"),
    (["explain", "--model", "70b", "--gpus", "8", "--seq-len", "0"], "seq-len"),
])
def test_bad_input_is_one_line_exit_2(args, needle):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert needle in r.output
    assert "Traceback" not in r.output


def test_models_and_hardware_listings():
    r = run("models", "--json")
    assert r.exit_code == 0
    names = {m["name"] for m in json.loads(r.stdout)}
    assert {"gpt3-175b", "llama-3.1-405b", "mixtral-8x7b", "megatron-1t"} <= names
    r = run("hardware", "--json")
    assert r.exit_code == 0
    names = {h["name"] for h in json.loads(r.stdout)}
    assert {"a100-nvlink", "h100-nvlink", "h200-nvlink", "b200-nvlink", "gb200-nvl72",
            "mi300x"} <= names


def test_every_command_is_documented():
    readme = open("README.md", encoding="utf-8").read()
    for command in app.registered_commands:
        name = command.name or command.callback.__name__
        assert f"plan3d {name}" in readme, name


def test_search_with_tp_across_nodes_shows_the_cost():
    # 96 heads: tp 16 divides them; on 8-GPU nodes the table must carry the warning
    r = run("search", "--model", "175b", "--gpus", "1024", "--hw", "h100-nvlink", "--tp", "16",
            "--top", "2")
    assert r.exit_code == 0, r.output
    assert "tp-across-domain" in r.output


def test_tp_across_nodes_is_slower_than_inside():
    base = ["search", "--model", "175b", "--gpus", "1024", "--hw", "h100-nvlink", "--top", "1",
            "--json", "--pp", "8", "--zero", "1", "--recompute", "selective", "--mbs", "1"]
    inside = json.loads(run(*base, "--tp", "8").stdout)["plans"][0]["time"]
    across = json.loads(run(*base, "--tp", "16").stdout)["plans"][0]["time"]
    # tp 16 leaves the node on its 8 ranks' NICs (8 × 46 GB/s ≈ NVLink's 370): slower, not 5×
    assert across["tp_exposed_s"] > inside["tp_exposed_s"]


def test_explain_draws_a_zbv_timeline():
    r = run("explain", "--model", "8b", "--gpus", "32", "--hw", "h100-nvlink", "--tp", "1",
            "--pp", "4", "--mbs", "1", "--gbs", "64", "--schedule", "zbv", "--timeline",
            "--framework", "torchtitan", "--zero", "3")
    assert r.exit_code == 0, r.output
    assert "Pipeline schedule (zbv, p=4, m=8" in r.output


def test_dualpipe_with_odd_pp_is_refused_in_one_line():
    r = run("explain", "--model", "8b", "--gpus", "24", "--hw", "h100-nvlink", "--tp", "1",
            "--pp", "3", "--mbs", "1", "--gbs", "48", "--schedule", "dualpipe")
    assert r.exit_code != 0
    assert "dualpipe needs an even pp" in r.output
    assert "Traceback" not in r.output
