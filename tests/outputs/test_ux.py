"""What a user sees (issue 14): tables that fit any terminal, the answer first, one figure for
each quantity, settings that can be redirected, errors that say what would work, validation by
GPU, an honest ranking, a timeline readable without colour, a fast explain."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.catalog import load_hardware, load_model
from planner.cli import app
from planner.model.validation import MODEL_UNCERTAINTY, validate
from planner.outputs.timeline import simulate, to_svg, to_text_cells
from planner.search.core import search
from planner.search.ranking import TIE_BAND, TIE_BAND_SOURCE
from planner.search.request import PlanRequest

ROOT = Path(__file__).parents[2]
runner = CliRunner()
EXPLAIN = ["explain", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink", "--tp", "8",
           "--pp", "4", "--gbs", "1024"]
SEARCH = ["search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink"]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAN3D_CACHE_DIR", str(tmp_path / "cache"))


def run(*args, columns: int | None = None):
    env = {"COLUMNS": str(columns)} if columns else {}
    return runner.invoke(app, [str(a) for a in args], env=env)


# ---- 1. any terminal ---------------------------------------------------------------------------

COMMANDS = [
    SEARCH,
    SEARCH + ["--train-tokens", "15T", "--price", "2.5"],
    EXPLAIN,
    EXPLAIN + ["--timeline"],
    ["validate"],
    ["validate", "--hw", "h100-nvlink"],
    ["models"],
    ["hardware"],
    ["calibrate", str(ROOT / "tests" / "data" / "calibrate" / "runs.csv"), "--hw", "h100-nvlink"],
]


@pytest.mark.parametrize("columns", [80, 140])
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_every_command_fits_the_terminal_without_truncating(args, columns):
    r = run(*args, columns=columns)
    assert r.exit_code == 0, r.output
    assert "…" not in r.stdout, r.stdout  # rich's mark of a truncated cell
    too_long = [line for line in r.stdout.splitlines() if len(line.rstrip()) > columns]
    assert not too_long, too_long


def test_models_says_which_are_moe_at_80_columns():
    # the mlp column (×E routed experts) is the last optional one to go: at 80 columns the
    # vocabulary and FFN width give way first
    out = run("models", columns=80).stdout
    assert re.search(r"^ deepseek-v3 .* swiglu ×256 *$", out, re.M), out
    assert re.search(r"^ mixtral-8x7b .* swiglu ×8 *$", out, re.M), out


def test_explains_verdict_wraps_short_of_the_width():
    # the verdict's words wrap at 78 at 80 columns (the width less 2): the peak line, 80
    # columns before, now breaks before 'the rest'
    lines = run(*EXPLAIN, "--brief", columns=80).stdout.splitlines()
    assert lines and max(len(line.rstrip()) for line in lines) <= 78, lines


def test_calibrate_reads_at_80_columns():
    # the answer first (the runs' error before → after); each factor on one row of its table, its
    # reason in words under it, not folded into a strip a few characters wide; each run on one
    # row, its model beside it where the width allows it (its long layout at 140)
    runs = ["calibrate", str(ROOT / "tests" / "data" / "calibrate" / "runs.csv"), "--hw",
            "h100-nvlink"]
    lines = run(*runs, columns=80).stdout.splitlines()
    assert lines[0] == ("Calibration of h100-nvlink: median |error| 39.7% → 31.2%, max 40.7% → "
                        "51.7%")
    assert max(len(line.rstrip()) for line in lines) <= 78
    factors = ["efficiency.gemm.bf16", "efficiency.gemm.fp16", "efficiency.gemm.fp8",
               "efficiency.hbm", "fast.busbw_gb_per_s", "network.busbw_gb_per_s"]
    rows = [line.split() for line in lines if line.split()[:1] in ([f] for f in factors)]
    assert [r[0] for r in rows] == factors and rows[0][1:] == ["0.63", "0.5336", "fitted"]
    assert rows[4][1:] == ["370", "GB/s", "450", "GB/s", "at-bound"]
    reasons = [line for line in lines if line.split(":")[0] in factors]
    assert [r.split(":")[0] for r in reasons] == factors
    assert reasons[1] == "efficiency.gemm.fp16: no run uses fp16"
    assert [line.split()[:2] for line in lines if line.startswith(" 8b-")] == [
        ["8b-tp8", "3.100"], ["8b-dp8", "4.200"]]
    assert "llama-3.1-8b" in next(line for line in lines if line.startswith(" 8b-tp8"))
    wide = run(*runs, columns=140).stdout
    assert "dp1 tp8 pp1 mbs1 gbs32 s8192 z1 selective bf16 sp" in wide


def test_search_keeps_the_layout_and_decisive_numbers_at_80_columns():
    r = run(*SEARCH, "--top", "3", columns=80)
    header = " ".join(r.stdout.splitlines()[2:4])
    for word in ("layout", "step", "tokens/s", "MFU", "causal", "mem", "bubble"):
        assert word in header
    best = json.loads(run(*SEARCH, "--top", "3", "--json").stdout)["plans"][0]["config"]
    row = next(line for line in r.stdout.splitlines() if " dp" in line)
    assert f"dp{best['dp']} tp{best['tp']} pp{best['pp']}" in row
    # wider terminals add columns: the exposed communication, the micro-batches (and the
    # absolute memory, which the 80-column table shows only when its layouts leave room)
    wide = run(*SEARCH, "--top", "3", columns=140).stdout
    assert "mem GiB" in wide and "comm" in wide and "n_micro" in wide
    assert "n_micro" not in r.stdout


# ---- 2. the answer first -----------------------------------------------------------------------

def test_explain_opens_with_the_verdict_then_sections():
    out = run(*EXPLAIN, "--train-tokens", "15T", "--price", "2").stdout
    lines = out.splitlines()
    # 38.5 GiB with the fixed 2 GiB runtime allowance; 38.2 once the runtime's holdings are
    # counted from the plan's groups (issue 21: CUDA context 0.42 GiB, NCCL buffers for TP, DP
    # and the world with NVLS on TP and the pipeline FIFOs 1.2 GiB, GEMM workspaces 0.1 GiB)
    assert lines[1].startswith("Fits: 38.2 of 79.6 GiB per GPU")
    assert lines[2].startswith("Peak at the first stage's first backward")
    step = next(i for i, line in enumerate(lines) if line.startswith("Step "))
    # 16.54 s before issue 22's straggler term (the slowest of this plan's GPUs beyond 8): 16.88;
    # 16.90 once the DP collectives are priced per NCCL call (Megatron's buckets, each with its
    # latency; issue 22): the step grows by ~0.02 s and no more, since the overlap hides them;
    # 17.04 once the TP collectives are too (4 calls per layer and direction, each with NCCL's
    # ring latency 8.4 + 7·3.4 = 32.2 µs against 7 × the profile's 1 µs: +100.8 µs a layer and
    # direction, exposed in the forward: 20 layers × 64 micro-batches × ~0.1 ms ≈ 0.13 s);
    # 17.041 with the pipeline sends too (22.4 µs of NCCL latency each against the profile's
    # 5 µs: 64 micro-batches × 1.5 sends × 17.4 µs ≈ 1.7 ms);
    # 17.36 with the DP overlap as Megatron runs it (issue 22): pp = 4 without a virtual
    # pipeline, so --overlap-param-gather leaves the three later stages each gathering its one
    # bucket whole before its first forward, 3·T_ag = 3·105.6 ms = 0.317 s on the warm-up's path;
    # 17.75 with attention at cuDNN's measured H100 rates (forward 0.53, backward 0.46 of the peak,
    # where the GEMM figure 0.63 had priced both: hardware_profiles/h100-nvlink.toml); 17.82 with
    # cuDNN's backward at its measured causal ratio (0.43)
    assert 2 < step <= 4 and lines[step].startswith("Step 17.82")
    assert "tokens/s" in lines[step] and "MFU" in lines[step]
    assert "days" in out[:out.index("Model")]
    assert out.index("Fits:") < out.index("Memory per GPU") < out.index("Time per step")


def test_brief_and_section():
    brief = run(*EXPLAIN, "--brief").stdout
    assert "Fits:" in brief and "formula" not in brief and len(brief.splitlines()) <= 9
    memory = run(*EXPLAIN, "--section", "memory").stdout
    assert "Memory per GPU" in memory and "Time per step" not in memory
    bad = run(*EXPLAIN, "--section", "memroy")
    assert bad.exit_code == 2 and "--section" in bad.output


def test_formulas_name_their_constants():
    terms = {t["key"]: t for t in json.loads(run(*EXPLAIN, "--json").stdout)["terms"]}
    for t in terms.values():  # no product of constants printed as a bare float
        assert not re.search(r"\d\.\d+e-\d+", t["formula"]), (t["symbol"], t["formula"])
    # attention at the framework's kernel's measured rate (Megatron: cuDNN's, 0.53 on H100)
    assert terms["attention_s"]["formula"] == "2·b·h·s²/(F_peak·c·t·η_att)"
    assert "F_peak" in terms["head_s"]["formula"] and "η" in terms["head_s"]["formula"]
    # T_step in named sub-terms, the DP tail once
    assert terms["step_s"]["formula"] == ("max(T_net,busy, T_nvl,busy, "
                                          "T_dp,tail + T_opt + T_stage·(m + (p - 1)/v) + T_strag)")
    # the wave efficiency folded: its ceilings are sub-terms w₁, w₂, … each shown once
    wave = terms["wave_efficiency"]["formula"]
    assert "ceil" not in wave and len(wave) < 110
    subs = [t for k, t in terms.items() if k.startswith("wave_efficiency:")]
    assert len(subs) >= 4 and len({s["formula"] for s in subs}) == len(subs)
    # w₃ = ⌈b·s/(128·c)⌉ = ⌈8192/128⌉ = 64 row tiles of a micro-batch
    assert any(s["formula"] == "ceil(b·s/(128·c))" and s["value"] == 64 for s in subs)


def test_the_readme_examples_are_real_output():
    sys.path.insert(0, str(ROOT / "scripts"))
    import readme_examples

    found = readme_examples.examples((ROOT / "README.md").read_text())
    assert len(found) >= 2 and any("explain" in cmd for _, cmd, _ in found)
    for columns, command, block in found:
        args = shlex.split(command)[1:]
        out = run(*args, columns=columns).stdout
        real = "\n".join(line.rstrip() for line in out.splitlines()).rstrip() + "\n"
        assert block == real, f"stale README example ({command}): python scripts/readme_examples.py"


# ---- 3. one figure each ------------------------------------------------------------------------

def test_one_bubble_figure_and_visible_rounding():
    r = run(*SEARCH, "--tokens-per-step", "1000", "--top", "1", columns=140)
    assert "1,000 is not a whole number of 8,192-token sequences" in r.stderr
    assert "1 sequence = 8,192 tokens" in r.stderr
    plan = json.loads(run(*SEARCH, "--tokens-per-step", "1000", "--top", "1", "--json")
                      .stdout)["plans"][0]
    share = plan["time"]["bubble_s"] / plan["time"]["step_s"]
    assert plan["bubble_fraction"] == pytest.approx(7 / 8)  # (p−1)/(m+p−1), p = 8, m = 1
    assert share < 0.6  # the DP tail and optimizer are in the step too
    row = next(line for line in r.stdout.splitlines() if " dp" in line)
    assert f"{share:.1%}" in row  # the table
    words = " ".join(r.stdout.split())
    assert f"bubble {share:.0%}" in words  # the Best line
    assert f"bubble is {share:.0%} of the step" in words  # the warning
    assert "88%" not in words and "87.5%" not in words


def test_mfu_conventions():
    d = json.loads(run(*EXPLAIN, "--json").stdout)
    t = d["time"]
    # full − causal = 3 passes · B · L · ½ · 4·s²·a·d_h = 6·B·L·s²·h (a·d_h = h):
    # 6 · 1024 · 80 · 8192² · 8192 = 2.7022e17
    assert t["model_flops"] - t["model_flops_causal"] == pytest.approx(
        6 * 1024 * 80 * 8192**2 * 8192, rel=1e-12)
    assert t["mfu_causal"] / t["mfu"] == pytest.approx(t["model_flops_causal"] / t["model_flops"])
    causal = run(*SEARCH, "--top", "1", columns=140).stdout
    full = run(*SEARCH, "--top", "1", "--mfu-convention", "full", columns=140).stdout
    assert re.search(r"layout +s +tokens/s +causal", causal)
    assert re.search(r"layout +s +tokens/s +full", full)
    bad = run(*SEARCH, "--mfu-convention", "half")
    assert bad.exit_code == 2 and "--mfu-convention" in bad.output


# ---- 4. settings you can redirect --------------------------------------------------------------

@pytest.mark.parametrize("command", [EXPLAIN, SEARCH])
def test_emit_puts_only_the_settings_on_stdout(command):
    r = run(*command, "--emit", "megatron")
    assert r.exit_code == 0, r.output
    launch = json.loads(run(*command, "--emit", "megatron", "--json").stdout)["launch"]
    assert r.stdout == launch["text"].rstrip("\n") + "\n"
    assert "Option names follow" in r.stderr


# ---- 5. errors that help -----------------------------------------------------------------------

def test_no_layout_names_the_rule_and_the_values_that_work():
    r = run(*SEARCH, "--tp", "3")
    assert r.exit_code == 1 and r.stderr.count("\n") == 1
    # 3 does not divide 512: every candidate goes; tp that would work
    assert "dp·tp·pp·cp must equal 512 GPUs (with tp 3) (removed 4,480)" in r.stderr
    assert "--tp 1, 2, 4, 8" in r.stderr
    r = run("search", "--model", "70b", "--gpus", "96", "--tp", "3")
    assert "tp=3 must divide the attention heads (64) and the KV heads (8)" in r.stderr
    assert "--tp 1, 2, 4, 8" in r.stderr
    r = run("search", "--model", "70b", "--gpus", "500")
    assert r.exit_code == 1 and r.stderr.count("\n") == 1
    # 500 = 2²·5³ against a global batch of 512 = 2⁹ sequences: dp must be a power of two
    assert "global batch 512 must be divisible by dp·mbs" in r.stderr and "removed" in r.stderr
    assert "--gpus 488, 496, 504, 512" in r.stderr
    assert len(r.stderr) < 700


# ---- 6. validate by GPU ------------------------------------------------------------------------

def test_validate_picks_the_runs_of_the_profile_gpu():
    h100 = run("validate", "--hw", "h100-nvlink", "--json")
    data = json.loads(h100.stdout)
    assert data["gpu"] == "H100" and len(data["cases"]) == 24
    a100 = json.loads(run("validate", "--hw", "a100-nvlink", "--json").stdout)
    assert a100["gpu"] == "A100" and len(a100["cases"]) == 20
    # validate defaults like every other command (issue 19): h100-nvlink
    assert json.loads(run("validate", "--json").stdout)["gpu"] == "H100"
    none = run("validate", "--hw", "b200-nvlink")
    assert none.exit_code == 2 and "no published runs were measured on NVIDIA B200" in none.stderr


def test_the_stated_uncertainty_is_the_validation_median():
    # calibrate's σ: the measured median, per GPU
    for gpu, hw in (("A100", "a100-nvlink"), ("H100", "h100-nvlink")):
        assert validate(load_hardware(hw)).median_abs_error == pytest.approx(
            MODEL_UNCERTAINTY[gpu], abs=0.005)


def test_the_tie_band_is_a_fixed_bound_the_model_keeps():
    # the tie band is stated, not measured (issue 19: as the validate median it moved 4.9 → 5.3 →
    # 4.6 → 4.2 % in one session, relabelling ties): 5 %, and what keeps the statement true is
    # validate's median |error| within it on every GPU with published runs (A100 3.6 %, H100
    # 4.2 % when this was written; H100 4.95 % since Megatron's per-chunk overlap under the
    # interleaved schedule). A model change that breaks it fails here.
    assert TIE_BAND == 0.05
    for hw in ("a100-nvlink", "h100-nvlink"):
        assert validate(load_hardware(hw)).median_abs_error <= TIE_BAND, hw
    # every GPU ties at the same band, with the same stated source
    for hw in ("h100-nvlink", "b200-nvlink"):
        r = search(load_model("8b"), load_hardware(hw), PlanRequest(gpus=8), top=3)
        assert (r.tie_band, r.tie_band_source) == (TIE_BAND, TIE_BAND_SOURCE)


# ---- 7. an honest ranking ----------------------------------------------------------------------

def test_ties_are_shown_and_layouts_are_distinct():
    hw = load_hardware("h100-nvlink")
    r = search(load_model("70b"), hw, PlanRequest(gpus=512), top=10)
    assert r.tie_band == TIE_BAND and "validate" in r.tie_band_source
    # the 10 ranked rows, one per layout; after them the 2 faster plans inside the margin (`m`),
    # one of them row 1's layout without recompute (dp32 tp4 pp4 v7 z1 at 97 % of memory)
    assert r.ranks[10:] == ["m", "m"]
    ranked = r.plans[:10]
    layouts = [(p.config.dp, p.config.tp, p.config.pp, p.config.cp) for p in ranked]
    assert len(set(layouts)) == len(layouts) == 10
    steps = [p.time.step_s for p in ranked]
    groups: dict[str, list[float]] = {}
    for rank, s in zip(r.ranks, steps):  # `1` and the `1=` tied with it form one group
        groups.setdefault(rank.rstrip("="), []).append(s)
    assert steps == sorted(steps)  # row 1 the fastest, ties after it in step order (issue 19)
    for g in groups.values():
        assert max(g) <= g[0] * (1 + r.tie_band)
    assert r.ranks[:2] == ["1", "1="] and "Ties:" in r.reason
    out = " ".join(run(*SEARCH, columns=100).stdout.split())
    assert "1=" in out and f"±{TIE_BAND:.0%}" in out


# ---- 9. the timeline ---------------------------------------------------------------------------

def test_timeline_reads_without_colour_and_fits_the_width():
    tl = simulate(load_plan_schedule(), 4, 8, 1, 1.0, 2.0)
    rows = to_text_cells(tl, 60, head_s=0.5)
    text = ["".join(ch for ch, _ in row) for row in rows]
    assert all(len(t) == 60 for t in text)
    assert text[0].startswith("F1") and "B1" in text[-1] and "h" in text[-1]
    assert "h" not in "".join(text[:-1])
    assert ">F1<" in to_svg(tl) and ">B1<" in to_svg(tl)
    r = run("explain", "--model", "8b", "--gpus", "32", "--hw", "h100-nvlink", "--pp", "4",
            "--gbs", "64", "--no-sp", "--timeline", columns=80)
    stage_rows = [line for line in r.stdout.splitlines() if line.startswith("stage ")]
    assert len(stage_rows) == 4 and all(len(line) <= 80 for line in stage_rows)
    assert "F1" in stage_rows[0] and "B" in stage_rows[0] and "h" in stage_rows[3]


def load_plan_schedule():
    from planner.formulas.choices import Schedule

    return Schedule.ONE_F_ONE_B


def test_timeline_out_says_what_it_wrote(tmp_path):
    path = tmp_path / "s.svg"
    r = run("explain", "--model", "8b", "--gpus", "32", "--hw", "h100-nvlink", "--pp", "4",
            "--gbs", "64", "--no-sp", "--timeline-out", path)
    assert r.exit_code == 0 and path.exists()
    assert f"wrote {path}" in r.stderr


# ---- 11. a fast explain ------------------------------------------------------------------------

PROBE = """
import sys
from planner.catalog import load_hardware, load_model
from planner.model.explain import explain
from planner.schema import PlanConfig
c = PlanConfig(dp=16, tp=8, pp=4, mbs=1, n_micro=64, gbs=1024, seq_len=8192)
plan = explain(load_model("70b"), load_hardware("h100-nvlink"), c)
print("sympy" in sys.modules, [t.formula for t in plan.terms][-3])
"""


def test_a_repeated_explain_reads_the_formulas_back_without_sympy(tmp_path):
    env = {"PLAN3D_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    first = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                           env=env, cwd=ROOT, check=True).stdout
    second = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            env=env, cwd=ROOT, check=True).stdout
    assert first.startswith("True") and second.startswith("False")
    assert first.split(" ", 1)[1] == second.split(" ", 1)[1]
    assert len(list(tmp_path.glob("formulas-*.json"))) == 1


GUARD = """
import sys
from planner.cli import main
sys.argv = ["plan3d", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
sys.stderr.write(" ".join(m for m in ("numpy", "rich", "pydantic", "sympy") if m in sys.modules))
"""


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_import_no_heavy_library(flag):
    r = subprocess.run([sys.executable, "-c", GUARD, flag], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.stderr == "", r.stderr


def test_causal_mfu_never_exceeds_what_runs_at_long_context():
    # 8B at 128k tokens (cp 8): the full square counts twice the attention a causal kernel runs,
    # so full-square MFU passes HFU (what runs: causal half + selective recompute + flash's
    # backward recomputation); the causal convention stays below it
    t = json.loads(run("explain", "-m", "8b", "-n", "64", "--tp", "8", "--cp", "8", "--seq-len",
                       "131072", "--gbs", "8", "--json").stdout)["time"]
    assert t["mfu"] > t["hfu"] > t["mfu_causal"]
