"""From a row to a run (issue 19): every row's `explain` arguments reproduce it exactly, the footer
prints the command for row 1, and a layout string that contradicts a flag is an error naming both."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()


@pytest.mark.parametrize("args", [
    ["--model", "70b", "--gpus", "512", "--hw", "h100-nvlink"],
    ["--model", "deepseek-v3", "--gpus", "2048"],
    ["--model", "70b", "--gpus", "64", "--framework", "torchtitan"],
    ["--model", "405b", "--gpus", "64", "--tp", "8", "--pp", "8"],  # offloads to fit
    ["--model", "8b", "--gpus", "64", "--seq-len", "32768", "--framework", "deepspeed"],
    ["--model", "8b", "--gpus", "64", "--adam-moments", "bf16"],  # a setting beside the layout
])
def test_each_rows_explain_arguments_reproduce_it_exactly(args):
    r = runner.invoke(app, ["search", *args, "--json", "--top", "3"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert len(data["explain_args"]) == len(data["plans"])
    for plan, argv in zip(data["plans"], data["explain_args"]):
        assert argv[argv.index("--plan") + 1] in (plan_label(plan),)
        again = runner.invoke(app, [*argv, "--json"])
        assert again.exit_code == 0, again.output
        e = json.loads(again.stdout)
        assert e["config"] == plan["config"]  # every setting, not only the numbers
        assert e["time"]["step_s"] == plan["time"]["step_s"]
        assert e["memory"]["total_bytes"] == plan["memory"]["total_bytes"]


def plan_label(plan: dict) -> str:
    from planner.schema import PlanConfig

    return PlanConfig(**plan["config"]).short_label()


def test_the_footer_prints_the_command_for_row_1_and_it_runs():
    r = runner.invoke(app, ["search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink",
                            "--top", "3"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if x.startswith("Run row 1: plan3d explain"))
    argv = shlex.split(line.removeprefix("Run row 1: plan3d "))
    row1 = json.loads(runner.invoke(app, ["search", "--model", "70b", "--gpus", "512", "--hw",
                                          "h100-nvlink", "--top", "1", "--json"]).stdout)
    e = json.loads(runner.invoke(app, [*argv, "--json"]).stdout)
    assert e["config"] == row1["plans"][0]["config"]
    assert '--plan "' in line  # the layout in one quoted argument, as the table prints it


def test_a_layout_that_contradicts_a_flag_is_an_error_naming_both():
    r = runner.invoke(app, ["explain", "--model", "70b", "--gpus", "512", "--plan",
                            "dp128 tp2 pp1 cp2 z3 sel", "--zero", "1"])
    assert r.exit_code == 2
    assert r.stderr.strip() == ("plan3d: error: --plan 'dp128 tp2 pp1 cp2 z3 sel' says zero 3 "
                                "but --zero 1 was given: leave one of them out")
    # forgetting --zero 3 no longer gives another plan: the string carries it
    r = runner.invoke(app, ["explain", "--model", "70b", "--gpus", "512", "--plan",
                            "dp128 tp2 pp1 cp2 z3 sel", "--json"])
    assert r.exit_code == 0, r.output
    c = json.loads(r.stdout)["config"]
    assert (c["dp"], c["tp"], c["cp"], c["zero_stage"], c["recompute"]) == (
        128, 2, 2, 3, "selective")


def test_a_flag_typed_at_its_default_still_contradicts_the_layout():
    # --precision bf16 is the default, but typed beside a layout in fp8 it contradicts it; not
    # typed, the layout's fp8 is taken
    layout = "dp256 tp2 pp1 z3 full18 fp8"
    r = runner.invoke(app, ["explain", "--model", "70b", "--gpus", "512", "--gbs", "512",
                            "--plan", layout, "--precision", "bf16"])
    assert r.exit_code == 2
    assert r.stderr.strip() == (f"plan3d: error: --plan '{layout}' says precision fp8 but "
                                "--precision bf16 was given: leave one of them out")
    r = runner.invoke(app, ["explain", "--model", "70b", "--gpus", "512", "--gbs", "512",
                            "--plan", layout, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["precision"] == "fp8"


def test_emit_takes_the_layout_too():
    r = runner.invoke(app, ["explain", "--model", "70b", "--gpus", "512", "--plan",
                            "dp128 tp2 pp1 cp2 z3 sel", "--emit", "torchtitan"])
    assert r.exit_code == 0, r.output
    assert re.search(r"context_parallel_degree[ =]+2\b", r.stdout)
    assert re.search(r"tensor_parallel_degree[ =]+2\b", r.stdout)


@pytest.mark.parametrize("args", [
    ["--model", "deepseek-v3", "--gpus", "2048"],
    ["--model", "70b", "--gpus", "512", "--hw", "h100-nvlink", "--headroom", "0"],
])
def test_the_footer_at_80_columns_pastes_as_the_same_command(args):
    """At 80 columns the command is broken only between words, with ` \\` continuations: bash
    reads the pasted lines as the one command the --json row carries."""
    import subprocess

    r = runner.invoke(app, ["search", *args, "--top", "3"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("Run row 1: plan3d explain"))
    block = [lines[start].removeprefix("Run row 1: ")]
    while block[-1].endswith(" \\"):
        block.append(lines[start + len(block)])
    assert len(block) > 1  # it does not fit one line at 80 columns
    assert all(len(x) <= 80 for x in block)
    # bash joins the continuations; the stand-in `plan3d` prints the words it was given
    argv = subprocess.run(["bash", "-c", 'plan3d() { printf "%s\\n" "$@"; }\n' + "\n".join(block)],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    want = json.loads(runner.invoke(app, ["search", *args, "--top", "1", "--json"]).stdout)
    assert argv == want["explain_args"][0]


def test_search_emit_never_writes_a_row_that_fits_only_inside_the_margin(monkeypatch):
    # 70B on 512 H100, --top 2: rows m (7.657 and 7.724 s, 97-99 % of memory) are faster than
    # row 1 (8.044 s). A framework that could express only those rows gets no settings at all:
    # --emit looks for the best *ranked* plan it can express, never a marked one
    from planner import api

    real = api.launch_settings

    def only_the_fast(model, plan, framework):
        if plan.time.step_s > 7.8:
            raise api.PlanError("cannot express this one (test)")
        return real(model, plan, framework)

    monkeypatch.setattr(api, "launch_settings", only_the_fast)
    r = runner.invoke(app, ["search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink",
                            "--top", "2", "--emit", "megatron"])
    assert r.exit_code == 2 and r.stdout == "", r.output
    assert "none of the plans shown can be expressed in megatron" in r.stderr


def test_row_1_under_a_narrower_headroom_is_explained_with_the_same_margin():
    # 70B on 512 H100 with --headroom 0.05: row 1 (dp32 tp4 pp4 v8 z1 full1) holds 74.8 of
    # 79.6 GiB, 94 %: outside a 5 % margin (94 < 95), inside the default 10 % one (94 > 90).
    # The footer's command carries --headroom 0.05, so explain does not call it "inside the
    # margin, search marks it m" — what it said before explain took --headroom.
    r = runner.invoke(app, ["search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink",
                            "--headroom", "0.05", "--top", "1"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if x.startswith("Run row 1: plan3d explain"))
    argv = shlex.split(line.removeprefix("Run row 1: plan3d "))
    assert argv[argv.index("--headroom") + 1] == "0.05"
    text = " ".join(runner.invoke(app, [*argv, "--brief"]).stdout.split())
    assert "(94%)" in text and "margin" not in text
    default = [a for i, a in enumerate(argv) if "--headroom" not in argv[max(i - 1, 0):i + 1]]
    text = " ".join(runner.invoke(app, [*default, "--brief"]).stdout.split())
    assert "inside the 10% memory margin (search marks it m, never row 1)." in text


def test_explain_refuses_a_headroom_outside_0_to_1():
    r = runner.invoke(app, ["explain", "--model", "8b", "--gpus", "8", "--headroom", "1.5"])
    assert r.exit_code == 2
    assert "--headroom is the fraction of memory a recommended plan leaves free, in [0, 1)" \
        in r.output and "Traceback" not in r.output
