"""--emit on a plan that does not fit: nothing on stdout, the reason on stderr, exit 1; --force
writes the settings under a warning at their top (issue 20)."""

import json
import tomllib

import pytest
from typer.testing import CliRunner

from planner.cli import app

# Llama 3.1 70B on one node at tp 8: 70.6e9 parameters × 18 B (Megatron's 16-bit weights, fp32
# gradients, Adam) / 8 ≈ 159 GB of states alone per GPU, beyond an H100's 80 GB
TOO_BIG = ["explain", "--model", "70b", "--gpus", "8", "--tp", "8", "--pp", "1"]
FITS = ["explain", "--model", "70b", "--gpus", "64", "--tp", "8", "--pp", "4"]


def run(*args):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("fmt,extra", [("megatron", []), ("nemo", []),
                                       ("deepspeed", ["--framework", "deepspeed"]),
                                       ("torchtitan@0.2", ["--framework", "torchtitan"])])
def test_a_plan_that_does_not_fit_emits_nothing(fmt, extra):
    r = run(*TOO_BIG, *extra, "--emit", fmt)
    assert r.exit_code == 1
    assert r.stdout == ""
    assert "does not fit" in r.stderr and "--force" in r.stderr


def test_force_writes_the_settings_under_a_warning():
    r = run(*TOO_BIG, "--emit", "megatron", "--force")
    assert r.exit_code == 1  # still said: the plan does not fit
    first, *rest = r.stdout.splitlines()
    assert first.startswith("# plan3d WARNING") and "does not fit" in first
    assert "--tensor-model-parallel-size 8 \\" in rest[0]


def test_force_keeps_each_format_readable():
    toml = run(*TOO_BIG, "--framework", "torchtitan", "--emit", "torchtitan@0.2", "--force")
    assert tomllib.loads(toml.stdout)["parallelism"]["tensor_parallel_degree"] == 8
    ds = run(*TOO_BIG, "--framework", "deepspeed", "--emit", "deepspeed", "--force")
    doc = json.loads(ds.stdout)  # JSON has no comments: the warning is a leading key
    assert list(doc)[0] == "_comment" and "does not fit" in doc["_comment"]


def test_json_leaves_the_settings_out_unless_forced():
    r = run(*TOO_BIG, "--emit", "megatron", "--json")
    assert r.exit_code == 1 and "launch" not in json.loads(r.stdout)
    r = run(*TOO_BIG, "--emit", "megatron", "--json", "--force")
    assert "launch" in json.loads(r.stdout)


def test_a_plan_that_fits_writes_its_settings_without_a_warning():
    r = run(*FITS, "--emit", "megatron")
    assert r.exit_code == 0
    assert r.stdout.startswith("    --tensor-model-parallel-size 8")
