"""plan3d calibrate: reading measured runs, fitting a profile's factors, writing the profile."""

from __future__ import annotations

import math
import re
import statistics
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from planner.calibrate import (
    Measurement,
    calibrate,
    calibration_note,
    calibration_toml,
    load_measurements,
    profile_to_toml,
    profile_with_factors,
)
from planner.catalog import hardware_presets, load_hardware
from planner.errors import PlanError
from planner.formulas.choices import Attention, Precision, Recompute, Schedule, ZeroStage
from planner.model.cost import Choices, numbers, plan_costs
from planner.model.validation import case_config, case_model, measured_step_s, published_cases
from planner.schema import HardwareProfile

DATA = Path(__file__).parents[1] / "data" / "calibrate"

TRUTH = {"gemm.bf16": 0.45, "hbm": 0.70, "fast_busbw": 300.0, "net_busbw": 35.0}

# model, dp, tp, pp, mbs, gbs: TP inside and across the node, DP inside and across nodes,
# pipelines whose stage boundaries cross the network, 7B/8B/70B, mbs 1–4
LAYOUTS = [
    ("8b", 1, 8, 1, 1, 32), ("8b", 2, 4, 1, 2, 64), ("8b", 1, 8, 2, 1, 64),
    ("8b", 4, 2, 1, 4, 64), ("7b", 1, 16, 1, 1, 16), ("70b", 1, 8, 4, 1, 64),
    ("70b", 2, 8, 2, 1, 64), ("8b", 8, 1, 1, 1, 64), ("8b", 16, 1, 1, 2, 128),
    ("7b", 2, 8, 1, 2, 64), ("70b", 1, 8, 8, 1, 32), ("8b", 2, 2, 2, 4, 64),
]
# all inside one 8-GPU NVLink domain: no collective or pipeline transfer crosses the network
IN_NODE = [
    ("8b", 1, 8, 1, 1, 32), ("8b", 2, 4, 1, 2, 64), ("8b", 4, 2, 1, 4, 64),
    ("8b", 8, 1, 1, 1, 64), ("7b", 2, 2, 2, 2, 32), ("70b", 1, 4, 2, 1, 32),
    ("7b", 1, 8, 1, 4, 16), ("8b", 1, 2, 4, 1, 32),
]


def with_factors(hw: HardwareProfile, values: dict[str, float]) -> HardwareProfile:
    # the truth a calibration can express: fast_busbw carries the NVLS figure in proportion
    # (calibrate._factors), as the profile it writes does
    return profile_with_factors(hw, values)


def step_s(m: Measurement, hw: HardwareProfile) -> float:
    return float(plan_costs(numbers(m.model, hw, m.config), Choices.of(m.config))["step_s"])


def synthetic(layouts, truth: HardwareProfile, seq_len=4096) -> list[Measurement]:
    """Runs 'measured' on the truth profile: exactly what the model predicts there."""
    out = []
    for i, (model, dp, tp, pp, mbs, gbs) in enumerate(layouts):
        m = Measurement.from_fields(dict(id=f"run{i}", model=model, dp=dp, tp=tp, pp=pp, mbs=mbs,
                                         gbs=gbs, seq_len=seq_len, step_s=1.0), where=f"run{i}")
        out.append(m.model_copy(update={"step_s": step_s(m, truth)}))
    return out


@pytest.fixture(scope="module")
def h100() -> HardwareProfile:
    return load_hardware("h100-nvlink")


def factor(result, key):
    return next(f for f in result.factors if f.key == key)


# --------------------------------------------------------------------------------------------
# The fit


# Three factors far enough off that the runs need each (each lowers the squared log error by far
# more than 3.841·σ², σ = 4.9 % on H100: calibrate.CHI2_95_ONE_DOF); HBM left as the profile has
# it. (TRUTH moves all four by 20–25 %: there the runs need only two of them, see
# test_fits_only_what_the_runs_need.)
RECOVERABLE = {"gemm.bf16": 0.45, "fast_busbw": 200.0, "net_busbw": 15.0}


def test_synthetic_recovery(h100):
    truth = with_factors(h100, RECOVERABLE)
    runs = synthetic(LAYOUTS, truth)
    result = calibrate(runs, h100)
    # the starting profile is far off, so the test means something
    assert result.median_abs_error_before > 0.1
    for key, value in RECOVERABLE.items():
        f = factor(result, key)
        assert f.fitted and f.status == "fitted", (key, f.reason)
        assert f.after == pytest.approx(value, rel=0.02), key
        assert f.before == pytest.approx(h100.efficiency.gemm.bf16 if key == "gemm.bf16" else
                                          {"fast_busbw": h100.fast.busbw_gb_per_s,
                                           "net_busbw": h100.network.busbw_gb_per_s}[key])
        # each fitted value with its 1σ uncertainty: never below what the model's own 4.9 %
        # error on one run allows, and here a few per cent of the value
        assert 0 < f.rel_std < 0.15 and f.reason.startswith("1σ ±")
    hbm = factor(result, "hbm")
    assert not hbm.fitted and hbm.after == hbm.before and "do not need it" in hbm.reason
    assert result.max_abs_error_after < 1e-3
    assert all(abs(r.error_after) < 1e-3 for r in result.runs)
    assert result.converged and result.warnings == []
    # the fitted profile carries the fitted values, and predicts the runs by itself
    p = result.profile
    assert p.name == "h100-nvlink-calibrated"
    assert p.efficiency.gemm.bf16 == factor(result, "gemm.bf16").after
    assert p.network.busbw_gb_per_s == factor(result, "net_busbw").after
    for m in runs:
        assert step_s(m, p) == pytest.approx(m.step_s, rel=1e-3)
    # precisions no run uses keep their value and say why
    for key in ("gemm.fp16", "gemm.fp8"):
        f = factor(result, key)
        assert not f.fitted and f.after == f.before and "no run uses" in f.reason
    assert p.efficiency.gemm.fp16 == h100.efficiency.gemm.fp16
    assert p.efficiency.gemm.fp8 == h100.efficiency.gemm.fp8
    # untouched parts of the profile stay as they were
    assert p.peak_tflops == h100.peak_tflops and p.runtime == h100.runtime
    assert p.fast.gb_per_s == h100.fast.gb_per_s and p.fast.latency_us == h100.fast.latency_us
    assert p.efficiency.hbm == h100.efficiency.hbm
    # NVLS moved with the NVLink ring's figure, in proportion: 480 · 200 / 370 = 259.46 GB/s
    fast = factor(result, "fast_busbw")
    assert p.fast.nvls_busbw_gb_per_s == pytest.approx(480 * fast.after / 370, rel=1e-4)
    assert fast.carried["fast.nvls_busbw_gb_per_s"][0] == 480


def test_the_tuner_reads_what_calibration_sets(h100):
    # calibrate sets x.fast_bw, x.nvls_bw and x.net_bw; the tuner's link for a group that leaves
    # the node must take its bandwidths from them, not from figures frozen when the profile was
    # read: tp16 stride 1 spans 2 nodes (8 ranks each, all 8 NICs): W_net,group = 8 · net_bw
    from planner.model.links import group_links
    from planner.model.nccl import tuner_link

    m = Measurement.from_fields(dict(id="r", model="8b", dp=1, tp=16, pp=1, mbs=1, gbs=1,
                                     seq_len=4096, step_s=1.0))
    x = numbers(m.model, h100, m.config)
    for net_bw, nvls_bw in ((46e9, 480e9), (15e9, 260e9)):
        x.net_bw, x.nvls_bw = net_bw, nvls_bw
        link = tuner_link(x, group_links(x, 16, 1, 1).tp, 1.0)
        assert link.net_busbw == pytest.approx(8 * net_bw) and link.nvls_bw == nvls_bw


def test_a_uniform_slowdown_moves_the_gemm_efficiency_not_the_network(h100):
    # clean runs, every one 10 % slower than the model predicts: all four factors could share it
    # (least squares with all four free moves each by 9–13 %), but one explains it within the
    # model's uncertainty — the GEMM efficiency, which moves most of every step: 0.63 → ~0.56
    # (0.63 / 1.1 = 0.573 if the whole step were GEMMs; communication and bubble that do not
    # scale with it ask a little more of it). What it leaves, rms 2.3 %, is the part of each
    # step a GEMM efficiency cannot scale — most of it the TP collectives' NCCL latencies per
    # call (32.2 µs per 8-rank ring all-gather or reduce-scatter, 4 per layer and direction):
    # under 2.5 %, well within σ = 5.0 % (the model's own uncertainty on H100)
    runs = [m.model_copy(update={"step_s": m.step_s * 1.1}) for m in synthetic(LAYOUTS, h100)]
    result = calibrate(runs, h100)
    assert [f.key for f in result.fitted] == ["gemm.bf16"]
    assert factor(result, "gemm.bf16").after == pytest.approx(0.56, abs=0.01)
    for key in ("hbm", "fast_busbw", "net_busbw"):
        f = factor(result, key)
        assert f.after == f.before and "do not need it" in f.reason, key
    assert result.profile.network == h100.network and result.profile.fast == h100.fast
    assert result.rms_log_error_after < 0.025 < 0.09 < result.rms_log_error_before


def test_fits_only_what_the_runs_need(h100):
    # TRUTH moves all four by 20–35 % (the network here to 30 of 46 GB/s: at TRUTH's 35 the
    # runs that cross nodes move less than the model's uncertainty once NCCL's per-channel caps
    # bound the starting profile's LL128 and tree collectives too — 8 channels × 36.7 GB/s over
    # 2 nodes, formulas/collectives.channel_caps); GEMM and the network explain the runs to 1 %,
    # and HBM and NVLink add less than the model's uncertainty: they stay, each with its reason
    # (the starting profile is off by rms 0.276 in log step time — 0.299 while attention ran at
    # the GEMM figure TRUTH moves; since at its own measured rate, which TRUTH leaves: TRUTH's
    # NVLink at 300 of 370 GB/s carries NVLS to 389 of 480 GB/s with it)
    truth = with_factors(h100, {**TRUTH, "net_busbw": 30.0})
    result = calibrate(synthetic(LAYOUTS, truth), h100)
    assert sorted(f.key for f in result.fitted) == ["gemm.bf16", "net_busbw"]
    assert result.rms_log_error_after < 0.02 and result.rms_log_error_before > 0.27
    for key in ("hbm", "fast_busbw"):
        assert "do not need it" in factor(result, key).reason


def test_one_run_fits_one_factor_and_says_why_not_the_others(h100):
    # one run: any one factor explains it exactly; the one that needs the least change is taken
    # and the others cannot be told from it
    result = calibrate(synthetic(LAYOUTS[:1], with_factors(h100, TRUTH)), h100)
    assert [f.key for f in result.fitted] == ["gemm.bf16"]
    assert "cannot tell it from gemm.bf16" in factor(result, "hbm").reason
    assert "cannot tell it from gemm.bf16" in factor(result, "fast_busbw").reason


def test_unidentifiable_network_left_unchanged(h100):
    truth = with_factors(h100, {"gemm.bf16": 0.45, "fast_busbw": 200.0, "net_busbw": 35.0})
    runs = synthetic(IN_NODE, truth)
    assert all(m.config.n_gpus <= h100.gpus_per_domain for m in runs)
    result = calibrate(runs, h100, name="my-node")
    net = factor(result, "net_busbw")
    assert not net.fitted and net.status == "left"
    assert net.after == net.before == h100.network.busbw_gb_per_s
    assert net.sensitivity == 0.0
    assert "network" in net.reason and "no run's step time depends on it" in net.reason
    assert result.profile.network == h100.network
    assert result.profile.name == "my-node"
    # what the runs do pin down is still recovered
    for key in ("gemm.bf16", "fast_busbw"):
        assert factor(result, key).after == pytest.approx(RECOVERABLE[key], rel=0.02), key
    assert result.max_abs_error_after < 1e-3


def test_only_requested_factors_move(h100):
    truth = with_factors(h100, {"gemm.bf16": 0.5})
    runs = synthetic(LAYOUTS[:6], truth)
    result = calibrate(runs, h100, fit=("gemm",))
    assert factor(result, "gemm.bf16").after == pytest.approx(0.5, rel=1e-3)
    for key in ("hbm", "fast_busbw", "net_busbw"):
        f = factor(result, key)
        assert not f.fitted and f.after == f.before and "not asked for" in f.reason
    assert [f.key for f in result.fitted] == ["gemm.bf16"]


def test_fit_stays_within_physical_bounds(h100):
    # runs 3x faster than even perfect GEMMs allow: the efficiency stops at its bound of 1
    runs = [m.model_copy(update={"step_s": m.step_s / 3})
            for m in synthetic(LAYOUTS[:4], h100)]
    result = calibrate(runs, h100, fit=("gemm", "hbm"))
    for key in ("gemm.bf16", "hbm"):
        f = factor(result, key)
        assert f.status == "at-bound" and f.after == pytest.approx(1.0), key
        assert 0.05 <= f.after <= 1.0
    assert any("upper bound" in w for w in result.warnings)
    assert result.max_abs_error_after < result.max_abs_error_before


def test_published_a100_cases_gemm_only():
    hw = load_hardware("a100-nvlink")
    runs = [Measurement(id=c["id"], model=case_model(c), config=case_config(c)[0],
                        step_s=measured_step_s(c))
            for c in published_cases() if c["kind"] == "measured_throughput"]
    assert len(runs) >= 15
    result = calibrate(runs, hw, fit=("gemm",))
    fp16 = factor(result, "gemm.fp16")
    assert fp16.fitted and 0.55 <= fp16.after <= 0.80
    assert not factor(result, "gemm.bf16").fitted  # the 2021–22 runs are fp16
    # what least squares minimises, and the worst case, both improve
    assert result.rms_log_error_after < result.rms_log_error_before
    assert result.max_abs_error_after < result.max_abs_error_before
    # the median need not: 0.68 (fitted to Korthikanti's per-layer table) already sits near the
    # median's minimum, and the least-squares optimum (~0.70) is pulled up by a few runs the
    # model overpredicts by 10–13 %. Guard the numbers the report quotes (with the link model of
    # issue 12, where groups leave a node on all their ranks' NICs: 2.60 % → 4.26 %; before it,
    # 3.58 % → 5.46 % with the optimum at ~0.71). Issue 22's straggler term (the slowest of N
    # GPUs beyond the 8 the efficiency was measured on) raises the large runs' predictions:
    # 2.60 % → 3.59 % before the fit, 3.92 % after it (optimum ~0.715). Issue 22's TP
    # collectives priced per NCCL call (each of the 2–4 per layer and direction pays the tuner's
    # latency, 8.4 + 7·3.4 = 32.2 µs for an 8-rank ring all-gather, against 7 × the profile's
    # 1 µs before) raise every TP run's prediction: 4.11 % before the fit (validate's A100
    # median), 3.90 % after it (optimum ~0.720).
    assert result.median_abs_error_before == pytest.approx(0.0411, abs=5e-4)
    assert result.median_abs_error_after == pytest.approx(0.0390, abs=2e-3)
    assert result.median_abs_error_after < 0.10  # still within the validation target

    # and it is the least-squares optimum: moving it 1 % either way is worse
    def sum_squares(eta):
        data = hw.model_dump()
        data["efficiency"]["gemm"]["fp16"] = eta
        p = HardwareProfile(**data)
        return sum(math.log(step_s(m, p) / m.step_s) ** 2 for m in runs)

    best = sum_squares(fp16.after)
    assert best < sum_squares(fp16.after * 1.01) and best < sum_squares(fp16.after * 0.99)


def test_memory_reported_not_fitted(h100):
    runs = load_measurements(DATA / "runs.csv", h100)
    result = calibrate(runs, h100, fit=("gemm",))
    by_id = {r.id: r for r in result.runs}
    assert by_id["8b-tp8"].measured_mem_gib is None and by_id["8b-tp8"].mem_error is None
    row = by_id["8b-dp8"]
    m = next(m for m in runs if m.id == "8b-dp8")
    expect = float(plan_costs(numbers(m.model, h100, m.config),
                              Choices.of(m.config))["total_bytes"]) / 2**30
    assert row.predicted_mem_gib == pytest.approx(expect)
    assert row.mem_error == pytest.approx(expect / 61.5 - 1)
    assert statistics.median(abs(r.error_after) for r in result.runs) == pytest.approx(
        result.median_abs_error_after)


# --------------------------------------------------------------------------------------------
# Reading measurements


def test_load_csv_with_defaults():
    runs = load_measurements(DATA / "runs.csv")
    assert [m.id for m in runs] == ["8b-tp8", "8b-dp8", "70b-pp"]
    a, b, c = (m.config for m in runs)
    assert runs[0].model.name == "llama-3.1-8b"
    # defaults: seq_len the model's, ZeRO-1, selective, sp = tp > 1, bf16, 1f1b, flash
    assert a.seq_len == 8192 and a.zero_stage is ZeroStage.OPTIMIZER
    assert a.recompute is Recompute.SELECTIVE and a.sequence_parallel is True
    assert a.precision is Precision.BF16 and a.schedule is Schedule.ONE_F_ONE_B
    assert a.attention is Attention.FLASH and a.cp == 1 and a.vpp == 1 and a.n_micro == 32
    assert runs[0].peak_mem_gib is None and runs[0].step_s == 3.1
    assert b.zero_stage is ZeroStage.PARAMETERS and b.recompute is Recompute.FULL
    assert b.sequence_parallel is False and b.n_micro == 4 and runs[1].peak_mem_gib == 61.5
    # vpp > 1 → interleaved by default
    assert c.vpp == 2 and c.schedule is Schedule.INTERLEAVED and c.n_micro == 16
    assert runs[2].layout == "dp1 tp4 pp2 v2 mbs1 gbs16 s4096 z1 none bf16 sp"


def test_load_json():
    runs = load_measurements(DATA / "runs.json")
    assert [m.id for m in runs][0] == "json-1"
    assert runs[1].id == "row 2" and runs[1].where.endswith("runs.json row 2")
    second = runs[1].config
    assert second.sequence_parallel is False and second.attention is Attention.CLASSIC
    assert second.precision is Precision.FP16 and runs[1].step_s == 1.5
    assert runs[1].model.name == "llama-2-7b"


def write(tmp_path, text, name="runs.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


HEADER = "model,dp,tp,pp,mbs,gbs,step_s\n"


@pytest.mark.parametrize("text, expected", [
    ("model,dp,tp,pp,mbs,gbs\n8b,1,8,1,1,8\n", r"missing column 'step_s'"),
    (HEADER + "8b,1,8,1,1,8,2.0\n8b,1,8,1,1,8,-1.5\n",
     r"row 2, field 'step_s': must be a positive number, got '-1.5'"),
    (HEADER + "llama-9b,1,8,1,1,8,2.0\n", r"row 1, field 'model': unknown model 'llama-9b'"),
    (HEADER + "8b,one,8,1,1,8,2.0\n", r"row 1, field 'dp': expected a whole number, got 'one'"),
    (HEADER + "8b,1,8,1,1,8,fast\n", r"row 1, field 'step_s': expected a number, got 'fast'"),
    (HEADER + "8b,1,8,1,1,8,\n", r"row 1, field 'step_s': missing value"),
    (HEADER + "8b,2,4,1,3,8,2.0\n",
     r"row 1, field 'gbs': global batch 8 must be mbs·n_micro·dp .* = 1\.33333"),
    ("model,dp,tp,pp,mbs,gbs,step_s,gpus\n8b,2,4,1,1,8,2.0,16\n",
     r"row 1, field 'gpus': 16 GPUs, but dp·tp·pp·cp = 2·4·1·1 = 8"),
    (HEADER.replace("step_s", "step_time") + "8b,1,8,1,1,8,2\n", r"unknown column 'step_time'"),
    ("model,dp,tp,pp,mbs,gbs,step_s,zero\n8b,1,8,1,1,8,2.0,5\n",
     r"row 1, field 'zero': must be between 0 and 3, got 5"),
    ("model,dp,tp,pp,mbs,gbs,step_s,recompute\n8b,1,8,1,1,8,2.0,some\n",
     r"row 1, field 'recompute': expected one of none, selective, full"),
    (HEADER + "8b,1,8,1,1,8\n", r"row 1: 6 cells, but the header has 7 columns"),
    (HEADER, r"no runs"),
])
def test_bad_csv_messages(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(PlanError, match=expected) as err:
        load_measurements(path)
    assert str(path) in str(err.value)


def test_bad_json_messages(tmp_path):
    path = write(tmp_path, '[{"model": "8b", "dp": 1, "tp": 8, "pp": 1, "mbs": 1, "gbs": 8}]',
                 "runs.json")
    with pytest.raises(PlanError, match=r"runs\.json row 1: missing field 'step_s'"):
        load_measurements(path)
    path = write(tmp_path, '[{"model": "8b", "dp": 1, "tp": 8, "pp": 1, "mbs": 1, "gbs": 8, '
                 '"step_s": -2}]', "neg.json")
    with pytest.raises(PlanError, match=r"neg\.json row 1, field 'step_s': must be a positive"):
        load_measurements(path)


def test_layout_checked_against_profile(tmp_path, h100):
    # tp = 3 divides neither the 32 heads nor the 8 KV heads of Llama 3.1 8B
    path = write(tmp_path, HEADER + "8b,1,8,1,1,8,2.0\n8b,1,3,1,1,8,2.0\n")
    runs = load_measurements(path)  # no profile: structural checks only
    with pytest.raises(PlanError, match=r"row 2: tp=3 must divide the attention heads"):
        calibrate(runs, h100)
    with pytest.raises(PlanError, match=r"row 2: tp=3"):
        load_measurements(path, h100)
    a100_fp8 = write(tmp_path, "model,dp,tp,pp,mbs,gbs,step_s,precision\n8b,1,8,1,1,8,2,fp8\n",
                     "fp8.csv")
    with pytest.raises(PlanError, match=r"fp8\.csv row 1: a100-nvlink has no fp8 figures"):
        load_measurements(a100_fp8, load_hardware("a100-nvlink"))


def test_bad_fit_names_and_empty(h100):
    runs = load_measurements(DATA / "runs.csv")
    with pytest.raises(PlanError, match=r"cannot fit 'flops'"):
        calibrate(runs, h100, fit=("gemm", "flops"))
    with pytest.raises(PlanError, match=r"no measurements"):
        calibrate([], h100)


# --------------------------------------------------------------------------------------------
# Writing the profile


@pytest.mark.parametrize("name", sorted(hardware_presets()))
def test_profile_to_toml_round_trips_every_preset(tmp_path, name):
    hw = load_hardware(name)
    text = profile_to_toml(hw, "a note\nover two lines")
    assert text.startswith("# a note\n# over two lines\n")
    path = write(tmp_path, text, f"{name}.toml")
    assert load_hardware(str(path)) == hw


def test_calibrated_toml_round_trip(tmp_path, h100):
    result = calibrate(synthetic(LAYOUTS, with_factors(h100, RECOVERABLE)), h100)
    when = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    text = calibration_toml(result, "cluster-runs.csv", when)
    path = write(tmp_path, text, "my-cluster.toml")
    loaded = load_hardware(str(path))
    assert loaded == result.profile
    assert loaded.efficiency.gemm.bf16 == pytest.approx(0.45, rel=0.02)
    assert loaded.efficiency.gemm.fp8 == h100.efficiency.gemm.fp8
    assert loaded.tdp_w == h100.tdp_w
    header = [line for line in text.splitlines() if line.startswith("#")]
    joined = "\n".join(header)
    assert "calibrated by plan3d calibrate" in joined
    assert "cluster-runs.csv" in joined and "2025-03-01T12:00:00+00:00" in joined
    assert f"efficiency.gemm.bf16: {h100.efficiency.gemm.bf16:g} -> 0.45" in joined
    # the 1σ depends on the model's stated uncertainty (the floor of the residual variance)
    assert re.search(r"network.busbw_gb_per_s: 46 GB/s -> 15 GB/s\s+\(1σ ±[\d.]+ GB/s\)",
                     joined.replace("\n#", " "))
    was = f"{h100.efficiency.gemm.bf16:g}"  # the shipped profile's value
    assert f"efficiency.gemm.fp16 = {h100.efficiency.gemm.fp16:g}: no run uses fp16" in joined
    assert f"bf16 = 0.45  # calibrated; was {was}" in text
    assert "nvls_busbw_gb_per_s = 259.46  # with fast_busbw; was 480" in text
    # an absent optional field is left out, not written as an empty value
    no_fp8 = load_hardware("a100-nvlink")
    assert "fp8" not in profile_to_toml(no_fp8, "")
    assert calibration_note(result, "x.csv", when).count("\n") >= 8


def test_toml_strings_are_escaped(tmp_path, h100):
    data = h100.model_dump()
    data["description"] = 'quotes " and \\ back\tslash — ünïcode'
    hw = HardwareProfile(**data)
    path = write(tmp_path, profile_to_toml(hw, "note"), "odd.toml")
    assert load_hardware(str(path)).description == data["description"]


def test_fit_is_deterministic(h100):
    # how fast: benchmarks/bench_limits.py (no timed tests)
    runs = synthetic(LAYOUTS, with_factors(h100, TRUTH))
    first = calibrate(runs, h100)
    second = calibrate(runs, h100)
    assert first == second
    assert np.isfinite([f.after for f in first.factors]).all()


# --------------------------------------------------------------------------------------------
# Refusing a profile that fits worse than the one it started from


def test_refuses_a_fit_worse_than_the_start(tmp_path, h100):
    from planner.calibrate import check_not_worse, check_writable

    # a starting profile whose BF16 GEMM efficiency (0.03) lies below the fit's physical lower
    # bound (0.05), and runs measured exactly as that profile predicts: before the fit every
    # error is 0; a fit could only start from the bound, 0.05, which predicts every GEMM
    # 0.03/0.05 = 0.6× as long — worse than where it started. The fit leaves it as it was (it
    # lowers no error), and writing refuses a profile in which nothing moved
    start = with_factors(h100, {"gemm.bf16": 0.03})
    runs = synthetic(LAYOUTS[:4], start)
    result = calibrate(runs, start, fit=("gemm",))
    assert result.rms_log_error_before == pytest.approx(0.0, abs=1e-12)
    f = factor(result, "gemm.bf16")
    assert f.after == 0.03 and f.status == "left" and "do not need it" in f.reason
    assert result.rms_log_error_after == result.rms_log_error_before
    with pytest.raises(PlanError, match=r"not written: the runs moved no factor .* --force"):
        check_writable(result)
    # a result that fits worse than its start is still refused by check_not_worse
    worse = result.model_copy(update={"rms_log_error_after": 0.2})
    with pytest.raises(PlanError, match=r"fits the runs worse than h100-nvlink did .* --force"):
        check_not_worse(worse)
    with pytest.raises(PlanError, match=r"fits the runs worse"):
        check_writable(worse.model_copy(update={"factors": calibrate(
            synthetic(LAYOUTS[:4], with_factors(h100, {"gemm.bf16": 0.5})), h100,
            fit=("gemm",)).factors}))
    # a fit that improves passes
    check_writable(calibrate(synthetic(LAYOUTS[:4], with_factors(h100, {"gemm.bf16": 0.5})),
                             h100, fit=("gemm",)))


def test_refuses_to_write_what_it_cannot_tell(h100):
    from planner.calibrate import check_writable

    good = calibrate(synthetic(LAYOUTS[:4], with_factors(h100, {"gemm.bf16": 0.5})), h100,
                     fit=("gemm",))
    g = factor(good, "gemm.bf16")
    vague = good.model_copy(update={"factors": [
        f.model_copy(update={"rel_std": 1.5}) if f.key == g.key else f for f in good.factors]})
    with pytest.raises(PlanError, match=r"efficiency.gemm.bf16 = 0.5 is uncertain by more than "
                                        r"its value"):
        check_writable(vague)
    stuck = good.model_copy(update={"converged": False})
    with pytest.raises(PlanError, match=r"did not converge"):
        check_writable(stuck)


def test_measurements_carry_the_context_parallel_kind_and_hybrid_sharding(tmp_path):
    # a run measured with Ulysses CP or with HSDP is costed as it ran: the columns reach the
    # plan's config (and its cost: the all-to-all traffic differs from the ring's)
    path = tmp_path / "runs.csv"
    path.write_text("model,dp,tp,pp,cp,mbs,gbs,seq_len,step_s,cp_kind,cp_a2a,dp_shard\n"
                    "70b,16,2,1,4,1,64,32768,10.0,a2a,,\n"
                    "70b,16,2,1,4,1,64,32768,10.0,hierarchical,2,8\n"
                    "70b,16,2,1,4,1,64,32768,10.0,,,\n")
    a2a, hierarchical, ring = load_measurements(path)
    assert a2a.config.cp_kind.value == "a2a" and a2a.config.cp_a2a is None
    assert hierarchical.config.cp_kind.value == "a2a+p2p" and hierarchical.config.cp_a2a == 2
    assert hierarchical.config.dp_shard == 8 and ring.config.cp_kind is None
    bad = tmp_path / "bad.csv"
    bad.write_text("model,dp,tp,pp,cp,mbs,gbs,step_s,cp_kind\n70b,16,2,1,4,1,64,10.0,spiral\n")
    with pytest.raises(PlanError, match="cp_kind"):
        load_measurements(bad)


def test_an_exactly_determined_fit_is_reported_not_written(h100):
    from planner.calibrate import check_writable

    # one run (8b dp8, measured as a profile with HBM efficiency 0.3 predicts: 15 % slower than
    # h100-nvlink's 0.89 says) and --fit hbm: one factor, one run, zero residual degrees of
    # freedom — HBM efficiency moves until the run is reproduced exactly (0.89 → 0.3, a
    # memory-bound kernel at a third of what the profile's STREAM source measured), whatever
    # part of the difference is the model's own error; nothing in the data checks it
    one = synthetic([("8b", 8, 1, 1, 1, 64)], with_factors(h100, {"hbm": 0.3}))
    result = calibrate(one, h100, fit=("hbm",))
    hbm = factor(result, "hbm")
    assert hbm.status == "fitted" and hbm.before == 0.89
    assert hbm.after == pytest.approx(0.3, rel=1e-4)
    assert result.runs[0].error_before < -0.1  # h100-nvlink predicted it > 10 % short
    assert result.runs[0].error_after == pytest.approx(0.0, abs=1e-4)
    assert result.degrees_of_freedom == 0
    # the warning and the refusal say it in the same words (calibrate.exactly_determined)
    assert [w for w in result.warnings if w.startswith("exactly")] == [
        f"exactly determined: 1 run for 1 fitted factor (efficiency.hbm 0.89 → {hbm.after:g}) "
        "leaves no run to check it, so the model's own error goes into the fit unseen; -o "
        "writes it only with --force"]
    with pytest.raises(PlanError, match=r"not written: exactly determined: 1 run for 1 fitted "
                                        r"factor \(efficiency.hbm 0.89 → 0.3\d*\) leaves no "
                                        r"run to check it.* --force"):
        check_writable(result)
    # four runs, one factor fitted: three runs check it, and no such refusal
    four = calibrate(synthetic(LAYOUTS[:4], with_factors(h100, {"gemm.bf16": 0.5})), h100,
                     fit=("gemm",))
    assert four.degrees_of_freedom == 4 - 1 and not any("exactly" in w for w in four.warnings)
    check_writable(four)


def test_unmeasured_kernels_move_with_the_gemm_figure():
    # A100 has no [efficiency.attention] and no grouped_mm_16: its attention runs at the GEMM
    # figure, in the profile calibrate writes as in the fit. Runs 'measured' on a100 with the
    # GEMM figure at 0.45 (attention with it) are found exactly: 0.45, residual 0 — not a
    # compromise between GEMMs at the fitted figure and attention held at the starting 0.68
    # (long sequences, where attention is a large share, would show it most)
    a100 = load_hardware("a100-nvlink")
    truth = with_factors(a100, {"gemm.bf16": 0.45})
    runs = synthetic(IN_NODE[:4], truth, seq_len=16384)
    result = calibrate(runs, a100, fit=["gemm"])
    assert factor(result, "gemm.bf16").after == pytest.approx(0.45, rel=1e-4)
    assert result.rms_log_error_after < 1e-4
    # a measured figure stays: H100's cuDNN attention (0.53/0.46) is not the GEMM figure's
    h100 = load_hardware("h100-nvlink")
    truth = with_factors(h100, {"gemm.bf16": 0.45})
    result = calibrate(synthetic(IN_NODE[:4], truth, seq_len=16384), h100, fit=["gemm"])
    assert factor(result, "gemm.bf16").after == pytest.approx(0.45, rel=1e-4)
    assert result.profile.efficiency.attention.cudnn_forward == 0.53
