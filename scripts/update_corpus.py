"""The saved corpus of `--json` outputs: run a fixed list of commands in-process and write what
each prints under tests/data/corpus/ (one JSON file per command, named by its key).

    PYTHONPATH=. python scripts/update_corpus.py          # rewrite every file
    PYTHONPATH=. python scripts/update_corpus.py --check  # compare, write nothing; exit 1 if any differ

tests/cli/test_corpus.py re-runs each command and asserts the output equals the saved file
exactly (parsed JSON, floats compared with ==). A change that moves numbers on purpose runs this
script in the same commit and says in the message which numbers moved and why."""

from __future__ import annotations

import json
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "corpus"

_E70 = ["--model", "70b", "--gpus", "512", "--hw", "h100-nvlink"]
_S = ["--json", "--top", "5"]

# key → argv. Each prints JSON on stdout, except a failure (no plan fits), whose one stderr line
# is saved instead: the diagnosis carries numbers too.
COMMANDS: dict[str, list[str]] = {
    # search: dense, each framework, sorts, schedules, CP kinds, offload, HSDP, MoE
    "search-70b-h100": ["search", *_E70, *_S],
    "search-8b-a100": ["search", "--model", "8b", "--gpus", "64", "--hw", "a100-nvlink", *_S],
    "search-405b-sort-memory": ["search", "--model", "405b", "--gpus", "2048", "--sort",
                                "memory", *_S],
    "search-70b-sort-mfu-fp8": ["search", *_E70, "--sort", "mfu", "--precision", "fp8", *_S],
    "search-70b-sort-gpus": ["search", *_E70, "--sort", "gpus", "--target-step-s", "20", *_S],
    "search-70b-interleaved": ["search", *_E70, "--schedule", "interleaved", "--vpp", "2,4",
                               *_S],
    "search-70b-zbv": ["search", *_E70, "--schedule", "zbv", "--framework",
                       "torchtitan", *_S],
    "search-70b-torchtitan": ["search", *_E70, "--framework", "torchtitan", *_S],
    "search-70b-deepspeed": ["search", *_E70, "--framework", "deepspeed", *_S],
    "search-70b-cp-kinds": ["search", *_E70, "--seq-len", "65536", "--cp", "2,4,8",
                            "--cp-kind", "auto", *_S],
    "search-70b-hsdp": ["search", *_E70, "--framework", "torchtitan", "--zero", "3",
                        "--dp-shard", "auto", *_S],
    "search-70b-offload-auto": ["search", "--model", "70b", "--gpus", "16", "--hw",
                                "a100-nvlink", "--offload", "auto", *_S],
    "search-70b-budget": ["search", *_E70, "--train-tokens", "15T", "--price", "2.5",
                          *_S],
    "search-deepseek-v3": ["search", "--model", "deepseek-v3", "--gpus", "2048", *_S],
    "search-qwen3-30b": ["search", "--model", "qwen3-30b-a3b", "--gpus", "64", *_S],
    "search-mixtral-8x7b": ["search", "--model", "mixtral-8x7b", "--gpus", "64", "--hw",
                            "a100-nvlink", *_S],
    "search-70b-no-fit": ["search", "--model", "405b", "--gpus", "8", "--json"],
    # the recommendation rule (issue 19): another memory margin; a row read back by explain
    "search-70b-headroom": ["search", *_E70, "--headroom", "0.3", *_S],
    "explain-70b-plan": ["explain", *_E70, "--plan", "dp128 tp2 pp1 cp2 z3 sel", "--gbs", "512",
                         "--json"],
    # search --emit: the launch settings of each format in the JSON
    "search-70b-emit-megatron": ["search", *_E70, "--emit", "megatron", *_S],
    "search-70b-emit-nemo": ["search", *_E70, "--emit", "nemo", *_S],
    "search-70b-emit-torchtitan": ["search", *_E70, "--emit", "torchtitan", *_S],
    "search-70b-emit-deepspeed": ["search", *_E70, "--emit", "deepspeed", *_S],
    "search-mixtral-emit-megatron": ["search", "--model", "mixtral-8x7b", "--gpus", "64",
                                     "--emit", "megatron", *_S],
    # explain (sympy: a handful only)
    # fit: a recipe per gathered layer under ZeRO-3 on GB200, partial and per-module recompute
    "explain-70b-fp8-zero3-gb200": ["explain", "--model", "70b", "--gpus", "64", "--hw",
                                    "gb200-nvl72", "--dp", "64", "--mbs", "2", "--gbs", "128",
                                    "--zero", "3", "--recompute", "full", "--precision", "fp8",
                                    "--json"],
    "explain-70b-recompute-layers-mxfp8": ["explain", "--model", "70b", "--gpus", "64", "--hw",
                                           "b200-nvlink", "--tp", "8", "--pp", "2", "--gbs", "64",
                                           "--recompute", "full", "--recompute-layers", "7",
                                           "--precision", "fp8", "--fp8-recipe", "mxfp8",
                                           "--json"],
    "search-70b-recompute-modules": ["search", *_E70, "--recompute", "selective",
                                     "--recompute-modules", "core_attn,mlp", *_S],
    "explain-70b": ["explain", *_E70, "--tp", "8", "--pp", "4", "--mbs", "1", "--gbs", "1024",
                    "--zero", "1", "--sp", "--json"],
    "explain-70b-interleaved-emit": ["explain", *_E70, "--tp", "8", "--pp", "8", "--vpp", "5",
                                     "--schedule", "interleaved", "--gbs", "1024",
                                     "--train-tokens", "1T", "--emit", "megatron", "--json"],
    "explain-70b-offload-torchtitan": ["explain", "--model", "70b", "--gpus", "64", "--tp", "8",
                                       "--framework", "torchtitan", "--offload-params",
                                       "--cp", "2", "--seq-len", "16384", "--json"],
    # moe (issue 23): DeepEP dispatch with Megatron's 1F1B a2a overlap, derived λ
    "explain-qwen3-235b-deepep-overlap": ["explain", "--model", "qwen3-235b-a22b", "--gpus",
                                          "256", "--tp", "2", "--pp", "8", "--vpp", "4",
                                          "--ep", "32", "--mbs", "1", "--gbs", "2048",
                                          "--schedule", "interleaved", "--moe-dispatcher",
                                          "deepep", "--moe-a2a-overlap", "--grad-dtype",
                                          "bf16", "--json"],
    "explain-deepseek-v3": ["explain", "--model", "deepseek-v3", "--gpus", "2048", "--tp", "1",
                            "--pp", "16", "--ep", "64", "--recompute", "full", "--json"],
    "explain-8b-hierarchical-cp": ["explain", "--model", "8b", "--gpus", "64", "--cp", "8",
                                   "--tp", "2", "--cp-kind", "hierarchical", "--cp-a2a", "4",
                                   "--seq-len", "65536", "--recompute", "full", "--json"],
    "explain-8b-deepspeed-a2a": ["explain", "--model", "8b", "--gpus", "64", "--framework",
                                 "deepspeed", "--cp", "4", "--seq-len", "32768", "--json"],
    # the other commands
    "compare-70b": ["compare", "--model", "70b", "--hw", "h100-nvlink,a100-nvlink", "--gpus",
                    "256,512", "--train-tokens", "1T", "--json"],
    "validate-a100": ["validate", "--hw", "a100-nvlink", "--json"],
    "validate-h100": ["validate", "--hw", "h100-nvlink", "--json"],
    "models": ["models", "--json"],
    "hardware": ["hardware", "--json"],
}


def run(argv: list[str]) -> tuple[int, object, str]:
    """One command in-process: (exit code, its parsed JSON stdout or None, its stderr)."""
    from typer.testing import CliRunner

    from planner.cli import app

    r = CliRunner().invoke(app, argv)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise RuntimeError(f"{argv}: {r.exception!r}") from r.exception
    if r.exit_code == 0 or r.stdout.strip():
        return r.exit_code, json.loads(r.stdout), r.stderr
    if r.exit_code != 1:
        raise RuntimeError(f"{argv}: exit {r.exit_code}: {r.stderr.strip()}")
    return r.exit_code, None, r.stderr


def record(key: str) -> dict:
    code, out, err = run(COMMANDS[key])
    return {"argv": COMMANDS[key], "exit_code": code, "output": out, "stderr": err}


def path_of(key: str) -> Path:
    return CORPUS / f"{key}.json"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    differ = []
    CORPUS.mkdir(parents=True, exist_ok=True)
    for key in COMMANDS:
        rec = record(key)
        if check:
            if not path_of(key).exists() or json.loads(path_of(key).read_text()) != rec:
                differ.append(key)
            continue
        path_of(key).write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    if not check:
        for stale in set(p.stem for p in CORPUS.glob("*.json")) - set(COMMANDS):
            path_of(stale).unlink()
    for key in differ:
        print(f"differs: {key}", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.path.insert(0, str(CORPUS.parent.parent.parent))
    sys.exit(main(sys.argv[1:]))
