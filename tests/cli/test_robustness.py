"""Bad input, edge cases, pipes: every path answers with one clear line (exit 2), a diagnosis
(exit 1) or a correct plan (exit 0) — never a traceback, never a NaN, never a half-written file."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()
BAD = Path(__file__).parents[1] / "data" / "bad"
RUNS = Path(__file__).parents[1] / "data" / "calibrate" / "runs.csv"
GEMM = ("--fit", "gemm")  # what these runs constrain (a network fit ends on its bound: refused)
SEARCH_70B = ["search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink"]
EXPLAIN_70B = ["explain", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink", "--tp", "8",
               "--pp", "4", "--gbs", "1024"]


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def strict_json(text: str):
    """json.loads that refuses NaN and Infinity (which are not JSON)."""
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


def assert_one_line_error(r, code=2, *needles):
    assert r.exit_code == code, (r.exit_code, r.output)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("plan3d: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ---------------------------------------------------------------------------------------------
# Numbers out of range or inconsistent: exit 2, one line naming the flag and what is right

@pytest.mark.parametrize("args, needles", [
    # unknown names, with the closest matches
    (["explain", "-m", "llama-3.1-7b", "-n", "8"], ["unknown model 'llama-3.1-7b'",
                                                   "did you mean llama-3.1-70b"]),
    (["explain", "-m", "70b", "-n", "8", "--hw", "h100-nvlnk"], ["unknown hardware profile",
                                                               "did you mean h100-nvlink"]),
    (["explain", "-m", "", "-n", "8"], ["unknown model ''"]),
    (["explain", "-m", "nope.toml", "-n", "8"], ["model file 'nope.toml' not found"]),
    (["search", "-m", "70b", "-n", "8", "--hw", "missing/profile.toml"],
     ["hardware profile file", "not found"]),
    (["explain", "-m", "/", "-n", "8"], ["a model folder needs a config.json"]),
    # GPU count: ≤ 0, not an integer, absurd
    (["explain", "-m", "70b", "-n", "0"], ["--gpus", "positive whole number"]),
    (["explain", "-m", "70b", "-n", "-8"], ["--gpus", "positive whole number"]),
    (["explain", "-m", "70b", "-n", "8.5"], ["--gpus", "expected a whole number, got '8.5'"]),
    (["search", "-m", "70b", "-n", "many"], ["--gpus", "expected a whole number"]),
    (["search", "-m", "70b", "-n", "1000000000"], ["--gpus must be at most 1,048,576"]),
    # divisibility
    (["explain", "-m", "70b", "-n", "512", "--tp", "3"], ["must divide"]),
    (["explain", "-m", "70b", "-n", "48", "--tp", "3"], ["tp=3 must divide the attention heads"]),
    (["explain", "-m", "70b", "-n", "512", "--tp", "8", "--pp", "3"], ["tp·pp·cp", "must divide"]),
    (["explain", "-m", "70b", "-n", "512", "--cp", "3"], ["must divide --gpus 512"]),
    (["explain", "-m", "70b", "-n", "512", "--dp", "3"], ["must equal --gpus 512"]),
    (["explain", "-m", "70b", "-n", "512", "--gbs", "100"], ["divisible by dp·mbs",
                                                            "multiple of"]),
    (["explain", "-m", "70b", "-n", "64", "--tp", "8", "--pp", "4", "--vpp", "32", "--gbs", "64"],
     ["exceed the 80 layers"]),
    (["explain", "-m", "70b", "-n", "64", "--tp", "8", "--vpp", "2", "--gbs", "64"],
     ["interleaved schedule needs pp ≥ 2"]),
    (["explain", "-m", "70b", "-n", "64", "--tp", "8", "--pp", "4", "--vpp", "2", "--gbs", "50"],
     ["n_micro to be a multiple of pp"]),
    (["explain", "-m", "70b", "-n", "64", "--tp", "8", "--pp", "4", "--vpp", "2", "--gbs", "64",
      "--schedule", "1f1b"], ["needs --schedule interleaved"]),
    (["explain", "-m", "8b", "-n", "8", "--sp"], ["sequence parallelism needs tp > 1"]),
    # sequence length, batch, micro-batch
    (["explain", "-m", "70b", "-n", "8", "--seq-len", "0"], ["--seq-len", "positive"]),
    (["search", "-m", "70b", "-n", "8", "--seq-len", "-4096"], ["--seq-len", "positive"]),
    (["search", "-m", "70b", "-n", "8", "--seq-len", "1000000000000"], ["--seq-len",
                                                                       "at most"]),
    (["search", "-m", "70b", "-n", "8", "--gbs", "10" + "0" * 30], ["--gbs must be at most"]),
    (["search", "-m", "70b", "-n", "8", "--tokens-per-step", "-1"], ["--tokens-per-step"]),
    (["search", "-m", "70b", "-n", "8", "--mbs", "0"], ["--mbs must be ≥ 1"]),
    (["search", "-m", "70b", "-n", "8", "--mbs", "1" + "0" * 30], ["--mbs must be at most"]),
    (["search", "-m", "70b", "-n", "8", "--tp", "9" * 30], ["--tp must be at most"]),
    (["search", "-m", "70b", "-n", "8", "--tp", ","], ["--tp was given an empty value"]),
    (["search", "-m", "70b", "-n", "8", "--zero", ""], ["--zero was given an empty value"]),
    (["search", "-m", "70b", "-n", "8", "--tp", "four"], ["--tp takes whole numbers"]),
    (["search", "-m", "70b", "-n", "8", "--zero", "5"], ["--zero", "not one of 0, 1, 2, 3"]),
    (["search", "-m", "70b", "-n", "8", "--recompute", "some"], ["--recompute"]),
    (["search", "-m", "70b", "-n", "8", "--precision", "fp4"], ["--precision"]),
    (["search", "-m", "70b", "-n", "8", "--grad-dtype", "fp64"], ["--grad-dtype"]),
    (["search", "-m", "70b", "-n", "8", "--top", "0"], ["--top", "≥ 1"]),
    (["search", "-m", "70b", "-n", "8", "--headroom", "nan"], ["headroom"]),
    (["search", "-m", "70b", "-n", "8", "--sort", "fastest"], ["sort"]),
    (["explain", "-m", "70b", "-n", "8", "--precision", "fp8", "--hw", "a100-nvlink"],
     ["has no fp8 figures"]),
    # budget flags: no NaN or infinity gets in
    (["search", *SEARCH_70B[1:], "--train-tokens", "nan"], ["--train-tokens"]),
    (["search", *SEARCH_70B[1:], "--train-tokens", "1e400"], ["--train-tokens"]),
    (["search", *SEARCH_70B[1:], "--train-tokens", "lots"], ["--train-tokens", "suffix"]),
    (["search", *SEARCH_70B[1:], "--train-tokens", "1T", "--price", "nan"],
     ["--price"]),
    (["search", *SEARCH_70B[1:], "--train-tokens", "1T", "--price", "-2"],
     ["--price"]),
    (["search", *SEARCH_70B[1:], "--train-tokens", "1T", "--gpu-power-w", "inf"],
     ["--gpu-power-w"]),
    (["search", *SEARCH_70B[1:], "--emit", "jax"], ["unknown framework"]),
    # typer's own usage errors: one line too
    (["explain", "--gpus", "8"], ["Missing option '--model'", "plan3d explain --help"]),
    (["explain", "-m", "70b", "-n", "8", "--bogus"], ["No such option: --bogus"]),
    (["frobnicate"], ["No such command"]),
    (["calibrate"], ["Missing argument"]),
    (["calibrate", str(RUNS), "--fit", ","], ["--fit was given no factor"]),
    (["calibrate", str(RUNS), "--fit", "gemm,speed"], ["cannot fit 'speed'"]),
    (["calibrate", str(RUNS), "--name", " "], ["--name was given an empty name"]),
    (["calibrate", str(RUNS), "--hw", "h100"], ["unknown hardware profile"]),
    (["schema", "serch"], ["did you mean search"]),
])
def test_bad_input_is_one_line_and_exit_2(args, needles):
    assert_one_line_error(run(*args), 2, *needles)


def test_vpp_that_does_not_divide_the_stage_is_a_plan_with_its_warning():
    # 80 layers over pp·vpp = 4·3 = 12 chunks: uneven. Megatron places the layers with
    # --pipeline-model-parallel-layout so that every GPU holds 80/4 = 20: no warning, 20 layers;
    # torchtitan cuts 12 stages of ⌈80/12⌉ = 7 layers, so its fullest GPU holds 3·7 = 21
    r = run("explain", "-m", "70b", "-n", "64", "--tp", "8", "--pp", "4", "--vpp", "3",
            "--gbs", "64", "--json")
    assert r.exit_code == 0, r.output
    plan = strict_json(r.stdout)
    assert "uneven-stages" not in {w["code"] for w in plan["warnings"]}
    assert plan["memory"]["stage_layers"] == 20
    r = run("explain", "-m", "70b", "-n", "64", "--tp", "8", "--pp", "4", "--vpp", "3",
            "--gbs", "64", "--zero", "3", "--framework", "torchtitan", "--json")
    assert r.exit_code == 0, r.output
    plan = strict_json(r.stdout)
    assert {w["code"] for w in plan["warnings"]} >= {"uneven-stages"}
    assert plan["memory"]["stage_layers"] == 21


def test_a_billion_gpus_is_refused_and_a_million_get_a_plan():
    # how fast: benchmarks/bench_limits.py (no timed tests)
    assert_one_line_error(run("search", "-m", "405b", "-n", "1000000000"), 2, "--gpus",
                          "1,048,576")
    r = run("search", "-m", "405b", "-n", str(2**20), "--json")
    assert r.exit_code == 0, r.output
    plans = strict_json(r.stdout)["plans"]
    c = plans[0]["config"]
    assert c["dp"] * c["tp"] * c["pp"] * c["cp"] == 2**20
    r = run("search", "-m", "405b", "-n", str(2**20 - 1))  # odd: nothing divides it usefully
    assert r.exit_code in (0, 1), r.output


@pytest.mark.parametrize("args", [
    ["explain", "-m", "70b", "-n", "8", "--tp", "8", "--gbs", str(2**40)],
    ["explain", "-m", "70b", "-n", "8", "--tp", "8", "--mbs", "1000000", "--gbs", "1000000"],
    ["explain", "-m", "70b", "-n", "8", "--tp", "8", "--seq-len", "1000000000"],
    ["explain", "-m", "8b", "-n", "8", "--tp", "8", "--seq-len", str(2**30), "--attention",
     "classic", "--recompute", "none"],
    ["search", "-m", "8b", "-n", "8", "--gbs", str(2**40), "--train-tokens", "1e18",
     "--price", "1e6", "--gpu-power-w", "1e6"],
    ["search", "-m", "8b", "-n", "1024", "--tokens-per-step", str(2**50)],
    ["search", "-m", "8b", "-n", "8", "--mbs", "1000000"],
    ["search", "-m", "405b", "-n", "8", "--seq-len", str(2**30)],
])
# a numpy warning is a computation gone wrong (a step of 10¹¹ s once overflowed the ranking's
# int64 ticks): as an error, it makes the CLI exit 3
@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_absurd_values_give_finite_json_or_a_clear_refusal(args):
    r = run(*args, "--json")  # how fast: benchmarks/bench_limits.py
    assert r.exit_code in (0, 1, 2), r.output
    assert "Traceback" not in r.output
    if r.stdout.strip():
        data = strict_json(r.stdout)  # no NaN, no Infinity
        plans = data["plans"] if "plans" in data else [data]
        for p in plans:
            c = p["config"]
            assert c["dp"] * c["tp"] * c["pp"] * c["cp"] == int(args[args.index("-n") + 1])
            assert p["memory"]["fits"] is (r.exit_code == 0)
    if r.exit_code:
        assert r.stderr.startswith("plan3d: error: ")


def test_timeline_of_a_huge_batch_refuses_instead_of_hanging():
    r = run("explain", "-m", "70b", "-n", "64", "--tp", "8", "--pp", "8", "--gbs", "8000000",
            "--timeline")  # how fast: benchmarks/bench_limits.py
    assert_one_line_error(r, 2, "--timeline", "smaller --gbs")


# ---------------------------------------------------------------------------------------------
# Broken files: the message names the file, the field and what was expected

@pytest.mark.parametrize("flag, name, needles", [
    ("--model", "malformed.toml", ["not valid TOML"]),
    ("--model", "malformed.json", ["not valid JSON", "line 1 column"]),
    ("--hw", "malformed.toml", ["not valid TOML"]),
    ("--model", "not_utf8.toml", ["not a text file"]),
    ("--model", "top_level_list.json", ["expected a table/object"]),
    ("--model", "model_missing_field.toml", ["hidden: required, but missing"]),
    ("--model", "model_wrong_types.toml", ["n_layers: expected a whole number, got 'thirty-two'",
                                           "ffn: expected a whole number",
                                           "bias: expected true or false"]),
    ("--model", "model_unknown_field.toml", ["hidden_size: unknown field (did you mean hidden"]),
    ("--model", "model_out_of_range.toml", ["seq_len", "out of range"]),
    ("--model", "hf_unsupported.json", ["unsupported architecture 'T5ForConditionalGeneration'",
                                        "LlamaForCausalLM"]),
    ("--model", "hf_wrong_type.json", ["'hidden_size' should be a positive whole number"]),
    ("--hw", "profile_missing_section.toml", ["network: required, but missing"]),
    ("--hw", "profile_wrong_types.toml", ["gpus_per_domain: expected a whole number"]),
    ("--hw", "profile_wrong_unit.toml", ["hbm_gib: required, but missing",
                                         "hbm_gb: unknown field (did you mean hbm_gib"]),
    ("--hw", "profile_percent_not_fraction.toml", ["efficiency.gemm.bf16 = 68 is out of range",
                                                   "fraction"]),
    ("--hw", "profile_infinite.toml", ["hbm_tb_per_s = inf is out of range"]),
    ("--hw", "../../../model_presets/gpt3-175b.toml", ["model file, not a hardware profile"]),
    ("--model", "../../../hardware_profiles/a100-nvlink.toml", ["hardware profile",
                                                                "give it to --hw"]),
])
def test_broken_files_name_the_file_the_field_and_the_expectation(flag, name, needles):
    path = BAD / name
    args = ["search", "--model", "8b", "--gpus", "8", "--hw", "h100-nvlink"]
    args[args.index(flag) + 1] = str(path)
    line = assert_one_line_error(run(*args), 2, *needles)
    assert path.name in line


@pytest.mark.parametrize("name, needles", [
    ("runs_missing_column.csv", ["missing column 'step_s'"]),
    ("runs_bad_value.csv", ["row 1", "'tp'", "expected a whole number, got 'eight'"]),
    ("runs_malformed.json", ["not valid JSON"]),
    ("runs_unknown_model.csv", ["'model'", "did you mean llama-3.1-70b"]),
    ("does_not_exist.csv", ["cannot read file"]),
])
def test_calibrate_file_errors_are_one_line_and_write_nothing(tmp_path, name, needles):
    out = tmp_path / "fitted.toml"
    r = run("calibrate", BAD / name, "-o", out)
    assert_one_line_error(r, 2, name, *needles)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_unwritable_outputs_are_refused_and_nothing_is_half_written(tmp_path):
    r = run("calibrate", RUNS, *GEMM, "-o", tmp_path / "no" / "such" / "dir" / "fitted.toml")
    assert_one_line_error(r, 2, "cannot write", "fitted.toml")
    r = run("calibrate", RUNS, *GEMM, "-o", tmp_path)  # a folder
    assert_one_line_error(r, 2, "cannot write")
    r = run(*EXPLAIN_70B, "--timeline-out", tmp_path / "missing" / "x.svg")
    assert_one_line_error(r, 2, "cannot write", "x.svg")
    r = run(*EXPLAIN_70B, "--timeline-out", tmp_path / "x.png")
    assert_one_line_error(r, 2, "--timeline-out writes SVG")
    assert list(tmp_path.iterdir()) == []


def test_outputs_are_written_whole_and_only_on_success(tmp_path):
    svg = tmp_path / "schedule.svg"
    r = run(*EXPLAIN_70B, "--timeline-out", svg)
    assert r.exit_code == 0, r.output
    assert svg.read_text().rstrip().endswith("</svg>")
    fitted = tmp_path / "fitted.toml"
    r = run("calibrate", RUNS, *GEMM, "-o", fitted)
    assert r.exit_code == 0, r.output
    assert "[efficiency" in fitted.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fitted.toml", "schedule.svg"]
    # a plan that does not fit: exit 1, and its picture is not written
    big = tmp_path / "big.svg"
    r = run("explain", "-m", "1t", "-n", "8", "--tp", "8", "--timeline-out", big)
    assert r.exit_code == 1
    assert not big.exists()
    assert "not written" in r.stderr


# ---------------------------------------------------------------------------------------------
# Fits nowhere: exit 1 with the diagnosis, not an empty table

def test_a_model_that_fits_nowhere_exits_1_with_a_diagnosis():
    r = run("search", "-m", "1t", "-n", "8", "--json")
    assert r.exit_code == 1
    assert r.stdout == ""  # no empty table, no empty JSON
    line = assert_one_line_error(r, 1, "no plan of megatron-1t fits on 8", "GiB")
    assert "would fit with" in line
    r = run("explain", "-m", "1t", "-n", "8", "--tp", "8", "--json")
    assert r.exit_code == 1
    plan = strict_json(r.stdout)  # the breakdown is still there to read
    assert plan["memory"]["fits"] is False
    assert_one_line_error(r, 1, "this plan does not fit", "GiB per GPU")
    r = run("explain", "-m", "1t", "-n", "8", "--tp", "8")
    assert r.exit_code == 1
    assert "DOES NOT FIT" in r.stdout


def test_nothing_satisfies_the_constraints_exits_1():
    r = run("search", "-m", "8b", "-n", "8", "--mbs", "1000")
    line = assert_one_line_error(r, 1, "no layout of llama-3.1-8b satisfies the constraints")
    assert "--mbs 1, 2, 4, 8" in line  # the values of the fixed dimension that would work


def test_a_fixed_value_no_rule_admits_leads_the_reasons():
    # --ep 3 on DeepSeek-V3's 256 routed experts: the rule naming ep=3 is the cause, said
    # first though other rules removed more candidates, and the expert degrees that work listed
    r = run("search", "-m", "deepseek-v3", "-n", "2048", "--hw", "h800-nvlink", "--ep", "3")
    line = assert_one_line_error(r, 1, "no layout of deepseek-v3 satisfies the constraints")
    assert line.split(" candidates, ", 1)[1].startswith("ep=3 must divide the 256 routed")
    assert "--ep 1, 2, 4, 8, 16, 32, 64, 128" in line


# ---------------------------------------------------------------------------------------------
# The interface: help documents the exit codes; internal errors are one line too

def test_help_documents_the_exit_codes():
    r = run("--help")
    assert r.exit_code == 0
    text = " ".join(r.stdout.split())
    for needle in ("0 success", "1 no plan fits", "2 bad usage or input", "3 internal error"):
        assert needle in text


def test_an_internal_error_is_one_line_exit_3(monkeypatch):
    from planner import api

    def boom(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(api, "search_request", boom)
    monkeypatch.delenv("PLAN3D_DEBUG", raising=False)
    line = assert_one_line_error(run(*SEARCH_70B), 3, "internal error", "ZeroDivisionError",
                                 "please report")
    assert "PLAN3D_DEBUG" in line


# ---------------------------------------------------------------------------------------------
# Real processes: pipes, non-TTY output, --json streams

def plan3d(*args, **kwargs):
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    env.pop("FORCE_COLOR", None)
    env.pop("PLAN3D_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "planner", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=60, **kwargs)


def closed_pipe(args, read_first_line: bool):
    """Run plan3d with stdout to a pipe the reader closes (`| head -1`); (exit code, stderr)."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "PLAN3D_DEBUG")}
    p = subprocess.Popen([sys.executable, "-m", "planner", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    if read_first_line:
        p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    p.stderr.close()
    return p.wait(timeout=60), err


@pytest.mark.parametrize("args, first", [
    (SEARCH_70B + ["--top", "50"], True),
    (SEARCH_70B + ["--json", "--top", "50"], False),
    (EXPLAIN_70B + ["--timeline"], False),
    (["schema"], True),
    (["--help"], False),
])
def test_a_closed_pipe_ends_quietly(args, first):
    code, err = closed_pipe(args, first)
    assert code in (0, 141), (code, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert err == ""


def test_non_tty_output_is_plain_text_with_whole_tables():
    r = plan3d(*SEARCH_70B, "--top", "5")
    assert r.returncode == 0, r.stderr
    assert "\x1b[" not in r.stdout and "\x1b[" not in r.stderr
    lines = r.stdout.splitlines()
    header = next(line for line in lines if "mem GiB" in line)
    # a table row opens with its rank and layout ("1=  dp256 …"); a wrapped line of the prose
    # below the table may open with a number too ("51.5% full): …"), so the layout is matched;
    # the rank may carry the tie, margin and warning marks ("1=!", "2m")
    rows = [line for line in lines if re.match(r"\s*\d+=?[m!]*\s+dp\d", line) and "/" in line]
    assert len(rows) == 5
    # every row on one line, as wide as the header (no wrapped cells)
    assert all(len(row.rstrip()) <= len(header.rstrip()) + 2 for row in rows)
    columns = len(re.split(r"\s{2,}", header.strip()))
    assert columns == 12  # at the piped default width (160), every column of the table
    # a row has every cell (the variants cell is empty for a layout without variants)
    assert all(len(re.split(r"\s{2,}", row.strip())) in (columns - 1, columns) for row in rows)
    r = plan3d(*EXPLAIN_70B)
    assert r.returncode == 0, r.stderr
    assert "\x1b[" not in r.stdout
    r = plan3d("--help")
    assert "\x1b[" not in r.stdout


def test_json_is_alone_on_stdout_and_diagnostics_go_to_stderr():
    # a plan with warnings: they are in the JSON, not printed around it
    r = plan3d("explain", "-m", "175b", "-n", "512", "--tp", "16", "--pp", "8", "--gbs", "32",
               "--json")
    assert r.returncode == 0, r.stderr
    data = strict_json(r.stdout)
    assert data["warnings"] and r.stderr == ""
    r = plan3d("search", "-m", "1t", "-n", "8", "--json")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("plan3d: error: no plan of megatron-1t fits")
    r = plan3d("search", "-m", "70b", "-n", "0", "--json")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1
    r = plan3d("search", "-m", "70b", "-n", "eight", "--json")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("plan3d: error: --gpus: expected a whole number, got 'eight'")
    assert r.stderr.count("\n") == 1


# ---------------------------------------------------------------------------------------------
# Units: explicit, and the same number printed the same way by every command

def test_units_are_explicit_and_consistent_across_commands():
    r = run(*SEARCH_70B, "--top", "1")
    assert r.exit_code == 0
    for header in ("mem GiB", "step", "tokens/s", "MFU", "causal", "exp.", "comm"):
        assert header in r.stdout
    cell = next(w for w in r.stdout.split() if "/79.6" in w)  # used/capacity, both 0.1 GiB
    used = cell.split("/")[0]
    best = strict_json(run(*SEARCH_70B, "--top", "1", "--json").stdout)["plans"][0]
    c = best["config"]
    args = ["explain", "-m", "70b", "-n", "512", "--hw", "h100-nvlink", "--dp", c["dp"],
            "--tp", c["tp"], "--pp", c["pp"], "--cp", c["cp"], "--vpp", c["vpp"], "--mbs",
            c["mbs"], "--zero", c["zero_stage"], "--recompute", c["recompute"],
            "--sp" if c["sequence_parallel"] else "--no-sp", "--schedule", c["schedule"],
            "--recompute-layers", c["recompute_layers"]]  # fit: partial recompute
    r = run(*args)
    assert r.exit_code == 0, r.output
    assert f"Fits: {used} of 79.6 GiB per GPU" in r.stdout
    assert "GiB = 2³⁰ bytes" in r.stdout and "GB = 10⁹ bytes" in r.stdout
    assert "Time per step (s" in r.stdout
    r = run("hardware")
    assert "HBM" in r.stdout and "GiB" in r.stdout and "GB/s" in r.stdout and "79.6" in r.stdout
    r = run("models")
    assert "params" in r.stdout and "(10⁹)" in r.stdout
    r = run("validate")
    assert "measured" in r.stdout and "model" in r.stdout and " s " in r.stdout
