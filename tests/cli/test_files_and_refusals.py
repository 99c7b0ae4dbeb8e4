"""What the commands write and refuse to write: calibrate's refusals and --force, the umask's
permissions, and compare --chart failing before it computes when matplotlib is missing."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.catalog import load_hardware
from planner.cli import app

runner = CliRunner()
DATA = Path(__file__).parents[1] / "data" / "calibrate"


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_calibrate_writes_0644_and_refuses_what_it_cannot_tell(tmp_path, umask_022):
    out = tmp_path / "fitted.toml"
    r = runner.invoke(app, ["calibrate", str(DATA / "runs.csv"), "--hw", "h100-nvlink", "--fit",
                            "gemm", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert load_hardware(str(out)).name == "h100-nvlink-calibrated"
    # --fit hbm on these four runs: HBM moves little of their steps, so the fitted value
    # (~0.34) is uncertain by more than itself (1σ ×5): nothing written without --force
    other = tmp_path / "vague.toml"
    args = ["calibrate", str(DATA / "runs.csv"), "--hw", "h100-nvlink", "--fit", "hbm", "-o",
            str(other)]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and not other.exists()
    assert len(r.stderr.strip().splitlines()) == 1
    assert "not written: efficiency.hbm = " in r.stderr and "uncertain by more than its value" \
        in r.stderr and "--force" in r.stderr
    r = runner.invoke(app, [*args, "--force"])
    assert r.exit_code == 0, r.output
    assert other.exists() and stat.S_IMODE(other.stat().st_mode) == 0o644


@pytest.mark.parametrize("step_s, fit, refusal, forced", [
    # one 8b dp8 run at 3.42 s, 12 % slower than h100-nvlink predicts (3.05 s), --fit hbm: HBM
    # efficiency 0.89 → 0.34544 reproduces it exactly (zero residual degrees of freedom, nothing
    # checks it)
    ("3.42", "hbm", "exactly determined: 1 run for 1 fitted factor (efficiency.hbm 0.89 → "
     "0.34544) leaves no run to check it, so the model's own error goes into the fit unseen",
     ("hbm", 0.34544)),
    # the same run at 0.5 s, a sixth of the model's 3.05 s, --fit gemm: no GEMM efficiency ≤ 1
    # explains it, the fit stops on the bound 1.0 ("at-bound")
    ("0.5", "gemm", "efficiency.gemm.bf16 ran into its bound (1): no physical value explains "
     "the runs", ("gemm", 1.0)),
])
def test_calibrate_refuses_a_fit_the_runs_cannot_check(tmp_path, umask_022, step_s, fit, refusal,
                                                       forced):
    # exit 2, one line on stderr, nothing written; --force writes it, 0644
    one = tmp_path / "one.csv"
    one.write_text(f"id,model,dp,tp,pp,mbs,gbs,seq_len,step_s\nrun,8b,8,1,1,1,64,4096,{step_s}\n")
    out = tmp_path / "fitted.toml"
    args = ["calibrate", str(one), "--hw", "h100-nvlink", "--fit", fit, "-o", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and not out.exists()
    assert r.stderr.strip().splitlines() == [
        f"plan3d: error: not written: {refusal} — add runs with other layouts, or give --force "
        "to write it anyway"]
    r = runner.invoke(app, [*args, "--force"])
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    efficiency = load_hardware(str(out)).efficiency
    key, value = forced
    assert (efficiency.hbm if key == "hbm" else efficiency.gemm.bf16) == value


def test_compare_chart_without_matplotlib_fails_before_computing(monkeypatch, tmp_path):
    import planner.api

    def never(*args, **kwargs):
        raise AssertionError("compare ran before checking for matplotlib")

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(planner.api, "compare_request", never)
    out = tmp_path / "c.svg"
    r = runner.invoke(app, ["compare", "--model", "8b", "--hw", "h100-nvlink", "--gpus", "8",
                            "--train-tokens", "1T", "--chart", str(out)])
    assert r.exit_code == 2 and not out.exists()
    assert r.stderr.strip() == ("plan3d: error: --chart draws with matplotlib, which is not "
                                "installed: pip install 'plan3d[chart]'")
