"""--adam-moments bf16: Megatron's precision-aware optimizer (--use-precision-aware-optimizer
--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, arguments.py l.3667-3684 @ d98e8a64dd), the
recipe of DeepSeek-V3's report §3.3.2 and Megatron's MoE best-practice scripts: Adam's m and v
kept in bf16, the fp32 master kept. Hand-derived bytes, the refusals, the emitted settings."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli import app
from planner.formulas import timing as T

runner = CliRunner()

# Llama-3.1-8B: h = 4096, L = 32, f = 14336, a = 32, k = 8, V = 128256 (a multiple of 128, so
# V' = V at t = 1). A layer: attention h·(h + 2·h·k/a + h) = 4096·10240 = 41,943,040, MLP
# 3·h·f = 176,160,768, two norms 8,192: 218,112,000; ×32 = 6,979,584,000; embedding and head
# 2·V·h = 1,050,673,152; final norm 4,096: Ψ = 8,030,261,248 on every GPU at tp = pp = 1.
PSI_8B = 8_030_261_248
PLAN_8B = ["explain", "--model", "llama-3.1-8b", "--gpus", "64", "--tp", "1", "--pp", "1",
           "--zero", "1", "--recompute", "full"]


def _explain(*extra: str) -> dict:
    r = runner.invoke(app, [*PLAN_8B, *extra, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_bf16_moments_take_8_bytes_a_parameter_not_12():
    fp32, bf16 = _explain(), _explain("--adam-moments", "bf16")
    # ZeRO-1 over d = 64: (4 + 2·4)·Ψ/64 = 12·8,030,261,248/64 = 1,505,673,984 B; with bf16
    # moments (4 + 2·2)·Ψ/64 = 8·Ψ/64 = 1,003,782,656 B
    assert fp32["memory"]["optimizer_bytes"] == 1_505_673_984 == 12 * PSI_8B / 64
    assert bf16["memory"]["optimizer_bytes"] == 1_003_782_656 == 8 * PSI_8B / 64
    # nothing else of the memory moves: the peak falls by the same 501,891,328 B
    assert (fp32["memory"]["weights_bytes"], fp32["memory"]["gradients_bytes"]) == (
        bf16["memory"]["weights_bytes"], bf16["memory"]["gradients_bytes"])
    assert bf16["config"]["adam_moments"] == "bf16" and "adam_moments" not in fp32["config"]


def test_the_optimizer_step_streams_the_moments_in_bf16():
    # Adam's step per parameter: g in (4, fp32 main_grad), master and m, v in and out, the
    # 16-bit weight out (2): 4 + 2·(4 + 4 + 4) + 2 = 30 B; with bf16 moments
    # 4 + 2·(4 + 2 + 2) + 2 = 22 B
    assert T.optimizer_step_bytes(1e9, 4, 2, 1) == 30e9
    assert T.optimizer_step_bytes(1e9, 4, 2, 1, 2) == 22e9
    fp32, bf16 = _explain(), _explain("--adam-moments", "bf16")
    assert bf16["time"]["optimizer_s"] == pytest.approx(fp32["time"]["optimizer_s"] * 22 / 30,
                                                        rel=1e-12)


def test_the_checkpoint_holds_the_moments_in_fp32_either_way():
    # the distributed checkpoint reads the precision-aware optimizer's states back unscaled in
    # fp32 (distrib_optimizer.py get_unscaled_state @ d98e8a64dd): 2 + 4 + 4 + 4 = 14 B/param,
    # 14·8,030,261,248 = 112,423,657,472 B
    for plan in (_explain(), _explain("--adam-moments", "bf16")):
        assert plan["goodput"]["checkpoint_bytes"] == 112_423_657_472 == 14 * PSI_8B


@pytest.mark.parametrize("extra,words", [
    (["--framework", "torchtitan"], "torchtitan keeps Adam's moments in fp32"),
    (["--framework", "deepspeed"], "deepspeed keeps Adam's moments in fp32"),
    (["--emit", "torchtitan"], "torchtitan keeps Adam's moments in fp32"),
    (["--zero", "3"], "only on its distributed optimizer: --zero 1 (got --zero 3)"),
    (["--offload-optimizer", "0.5"], "(HybridDeviceOptimizer) keeps Adam's moments in fp32"),
    (["--adam-moments", "fp16"], "--adam-moments must be fp32 or bf16, got 'fp16'"),
])
def test_refused_where_it_does_not_run_in_one_line(extra, words):
    for cmd in ("explain", "search"):
        argv = [cmd, "--model", "llama-3.1-8b", "--gpus", "64", "--adam-moments", "bf16", *extra]
        r = runner.invoke(app, argv)
        assert r.exit_code != 0 and isinstance(r.exception, SystemExit), r.output
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and words in lines[0], r.stderr


def test_a_plan_that_does_not_fit_is_not_told_zero_3():
    # the not-fit hint offers only what runs (api.runs_with): bf16 moments run at ZeRO-1 only
    argv = [a if a != "full" else "selective" for a in PLAN_8B]
    fp32 = runner.invoke(app, argv)
    bf16 = runner.invoke(app, [*argv, "--adam-moments", "bf16"])
    assert fp32.exit_code == bf16.exit_code == 1
    assert "--zero 3" in fp32.stderr and "--zero 3" not in bf16.stderr


def test_search_keeps_every_candidate_at_zero_1_without_offload():
    r = runner.invoke(app, ["search", "--model", "llama-3.1-8b", "--gpus", "64",
                            "--adam-moments", "bf16", "--json", "--top", "5"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    for plan, argv in zip(data["plans"], data["explain_args"]):
        c = plan["config"]
        assert (c["adam_moments"], c["zero_stage"], c["offload_optimizer"]) == ("bf16", 1, 0)
        assert argv[argv.index("--adam-moments") + 1] == "bf16"


EMIT_8B = ["explain", "--model", "llama-3.1-8b", "--gpus", "16", "--tp", "2", "--pp", "1",
           "--zero", "1", "--recompute", "full", "--adam-moments", "bf16"]


def test_emit_writes_the_precision_aware_optimizer():
    r = runner.invoke(app, [*EMIT_8B, "--emit", "megatron"])
    assert r.exit_code == 0, r.output
    words = r.stdout.replace("\\\n", " ").split()
    for flag in ("--exp-avg-dtype", "--exp-avg-sq-dtype"):
        assert words[words.index(flag) + 1] == "bf16"
    assert "--use-precision-aware-optimizer" in words and "--use-distributed-optimizer" in words
    r = runner.invoke(app, [*EMIT_8B, "--emit", "nemo"])
    assert r.exit_code == 0, r.output
    optimizer = yaml.safe_load(r.stdout)["optimizer"]
    assert optimizer["use_precision_aware_optimizer"] is True
    assert optimizer["exp_avg_dtype"] == optimizer["exp_avg_sq_dtype"] == "torch.bfloat16"


def test_the_default_emits_no_precision_aware_optimizer():
    argv = [a for a in EMIT_8B if a not in ("--adam-moments", "bf16")]
    r = runner.invoke(app, [*argv, "--emit", "megatron"])
    assert r.exit_code == 0, r.output
    assert "precision-aware" not in r.stdout and "exp-avg" not in r.stdout
