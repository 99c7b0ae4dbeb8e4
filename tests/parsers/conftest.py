"""Helpers for the parser suite: plan3d driven through its command line, its output parsed back.

No framework import here (each test module skips without its framework)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "tests" / "data" / "hf"


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/parsers/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.parsers)


@pytest.fixture
def fake_world():
    """torch's fake process-group backend at a given world size, rank 0."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from torch.testing._internal.distributed.fake_pg import FakeStore

    def init(world: int, rank: int = 0):
        if dist.is_initialized():
            ps.destroy_model_parallel()
            dist.destroy_process_group()
        dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())

    yield init
    if dist.is_initialized():
        ps.destroy_model_parallel()
        dist.destroy_process_group()


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner", *argv], capture_output=True,
                          text=True, cwd=ROOT, env=_env())


def _env() -> dict:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "200"
    return env


@cache
def plan_json(args: str) -> dict:
    """`plan3d explain ARGS --json`, parsed."""
    out = _run(["explain", *shlex.split(args), "--json"])
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@cache
def emitted(args: str, fmt: str, *extra: str) -> str:
    """What `plan3d explain ARGS --emit FMT [EXTRA]` writes on stdout (the settings alone)."""
    out = _run(["explain", *shlex.split(args), "--emit", fmt, *extra])
    assert out.returncode == 0, out.stderr
    return out.stdout


def cli(*argv: str) -> subprocess.CompletedProcess:
    """Any plan3d command line, for the tests of refusals."""
    return _run(list(argv))


def flag_values(text: str) -> dict[str, list[str]]:
    """Megatron-style arguments (one `--flag [values]` per line, shell continuations) as
    {flag: [values]} (a switch has no values)."""
    tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    out: dict[str, list[str]] = {}
    flag = None
    for tok in tokens:
        if tok.startswith("--"):
            flag = tok
            assert flag not in out, f"{flag} given twice"
            out[flag] = []
        else:
            assert flag is not None, f"value {tok!r} before any flag"
            out[flag].append(tok)
    return out


def hf_config(model: str) -> dict | None:
    """The Hugging Face config.json test copy of a preset, where the repository holds one."""
    folders = {"deepseek-v3": "DeepSeek-V3", "qwen3-30b-a3b": "Qwen3-30B-A3B",
               "qwen3-235b-a22b": "Qwen3-235B-A22B", "mixtral-8x22b": "Mixtral-8x22B-v0.1",
               "gpt-oss-120b": "gpt-oss-120b", "llama-3.1-70b": "Llama-3.1-70B"}
    folder = folders.get(model)
    if folder is None:
        return None
    return json.loads((HF / folder / "config.json").read_text())


def model_of(args: str) -> str:
    """The --model value of a matrix row."""
    words = shlex.split(args)
    return words[words.index("--model") + 1]


@cache
def launch_json(args: str, fmt: str) -> dict:
    """The `launch` object of `plan3d explain ARGS --emit FMT --json` (text, notes, ...)."""
    out = _run(["explain", *shlex.split(args), "--emit", fmt, "--json"])
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["launch"]


def stub_te_optimizer(mp) -> None:
    """megatron-core's OptimizerConfig checks, for the precision-aware optimizer, that Transformer
    Engine is ≥ 2.1 and that its FusedAdam takes master_weight_dtype, exp_avg_dtype,
    exp_avg_sq_dtype and use_decoupled_grad (optimizer_config.py __post_init__ @ 0.16.1);
    Transformer Engine does not install without CUDA, so both answer yes here: a FusedAdam with
    that signature (TE ≥ 2.1's, transformer_engine/pytorch/optimizers/fused_adam.py)."""
    import sys
    import types

    import megatron.core.optimizer.optimizer_config as optimizer_config

    class FusedAdam:  # the signature the check reads, nothing else
        def __init__(self, params, master_weight_dtype=None, exp_avg_dtype=None,
                     exp_avg_sq_dtype=None, use_decoupled_grad=False):
            pass

    mp.setattr(optimizer_config, "is_te_min_version", lambda *a, **k: True)
    names = ("transformer_engine", "transformer_engine.pytorch",
             "transformer_engine.pytorch.optimizers")
    for name in names:
        mp.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules[names[-1]].FusedAdam = FusedAdam


OVERLAP_PLAN = dict(dp=64, tp=1, pp=8, vpp=2, ep=64, mbs=1, n_micro=16, gbs=1024,
                    seq_len=4096, zero_stage=1, recompute="selective", sequence_parallel=False,
                    schedule="interleaved", moe_a2a_overlap=True)
"""DeepSeek-V3 with the all-to-all overlap where Megatron-Core runs it (ep > 1, virtual stages
at pp > 1, no full recompute, the alltoall dispatcher) on 512 GPUs."""


def overlap_case(model, **fields):
    """The overlapped DeepSeek-V3 plan with `fields`: plan3d's refusal (None when it runs
    it) and the emitted flags (emit does not check the rules)."""
    from planner.catalog import load_hardware
    from planner.errors import PlanError
    from planner.frameworks.emit import emit
    from planner.model.estimate import check_config
    from planner.schema import PlanConfig

    config = PlanConfig(**{**OVERLAP_PLAN, **fields})
    try:
        check_config(model, load_hardware("h100-nvlink"), config)
        refusal = None
    except PlanError as err:
        refusal = str(err)
    return refusal, flag_values(emit("megatron", config, model).text)
