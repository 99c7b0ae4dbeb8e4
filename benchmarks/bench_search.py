"""Speed figures for `plan3d search` and start-up (targets from issues 11 and 14). Run on the 2-core
CI-sized machine, from a regular install (`pip install .`; an editable install under
PYTHONDONTWRITEBYTECODE compiles planner's modules again at every start):
    python benchmarks/bench_search.py [--repeat N]

1. end to end, process start included, as ratios:
   - `plan3d search --model 70b --gpus 512 --hw h100-nvlink` against the floor: a plain Python
     importing exactly the modules outside planner that this search imports (read from
     `python -X importtime`: typer and its pydantic adapters, rich's console and table, numpy,
     pydantic, tomllib, …) and doing nothing else (target: ≤ 1.2×); also against the same floor
     run as plan3d runs (collector off, frozen before exit: planner/entry.py), for honesty;
   - `plan3d --version` and `plan3d --help` against `python -c "import typer, rich, pydantic"`
     (target: below it, < 1×);
2. the largest default space, 405B on 16,384 GPUs with every dimension open (target: < 2 s), and
   every other `search` the README shows, DeepSeek-V3 on 16,384 GB200 among them (target: < 1 s
   each, issue 19);
3. the evaluation itself, candidates per second through plan_costs on arrays (target: ≥ 10⁶/s).
The machine's load average is printed with the figures: on a shared 2-core machine it moves the
absolute times by ±50 % and more.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

SEARCH = ["search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink"]
README_SEARCHES = {  # the other searches README.md shows (target < 1 s each)
    "405b / 16384 --train-tokens 15T --price 2.5": [
        "search", "--model", "405b", "--gpus", "16384", "--hw", "h100-nvlink", "--train-tokens",
        "15T", "--price", "2.5"],
    "70b / 512 --sort gpus --target-step-s 20": [*SEARCH, "--sort", "gpus", "--target-step-s",
                                                  "20"],
    "deepseek-v3 / 16384 / gb200-nvl72": [
        "search", "--model", "deepseek-v3", "--gpus", "16384", "--hw", "gb200-nvl72"],
}
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
       "OPENBLAS_NUM_THREADS": "1", "PYDANTIC_DISABLE_PLUGINS": "__all__"}
"""The commands' environment. Without PYTHONDONTWRITEBYTECODE (set in some shells, as in this
project's sessions): with it, a source tree or editable install has no bytecode to load, and
every run compiles planner's ~100 modules again (≈ 0.1 s of CPU, more than the search itself
costs beyond the floor) — a regular install (`pip install .`) has its bytecode."""


def imported_libraries(plan3d: str) -> list[str]:
    """The modules outside planner that `plan3d search ...` imports, in the order it imports
    them (-X importtime lists each on completion)."""
    run = subprocess.run([sys.executable, "-X", "importtime", plan3d, *SEARCH], env=ENV,
                         capture_output=True, text=True, check=True)
    names = []
    for line in run.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name and name != "imported package" and name.split(".")[0] != "planner" \
                    and name not in names:
                names.append(name)
    return names


def floor_script(names: list[str], like_plan3d: bool) -> str:
    head = ("import gc, atexit\ngc.disable()\natexit.register(gc.freeze)\n" if like_plan3d
            else "")
    body = (f"import importlib\nfor name in {names!r}:\n    try:\n"
            "        importlib.import_module(name)\n    except Exception:\n        pass\n")
    return head + body


CPU: dict[str, float] = {}  # each command's median CPU time (user + system), process start included


def walls(cmds: dict[str, list[str]], repeat: int) -> dict[str, tuple[float, float]]:
    """(median, min) wall time of each command, process start included; the commands take turns,
    so that a slow spell of a shared machine falls on all of them alike. Each one's median CPU
    time goes to CPU: on a loaded machine it says what the command costs, the wall time what a
    user waits."""
    times: dict[str, list[float]] = {name: [] for name in cmds}
    cpu: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(repeat):
        for name, cmd in cmds.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=ENV)
            times[name].append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    CPU.update({name: statistics.median(c) for name, c in cpu.items()})
    return {name: (statistics.median(t), min(t)) for name, t in times.items()}


LOAD_AT_START = " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=11)
    repeat = parser.parse_args().repeat
    plan3d = shutil.which("plan3d") or str(Path(sys.executable).parent / "plan3d")
    names = imported_libraries(plan3d)
    w = walls({
        "base": [sys.executable, "-c", "import typer, rich, pydantic"],
        "floor": [sys.executable, "-c", floor_script(names, like_plan3d=False)],
        "floor_gc": [sys.executable, "-c", floor_script(names, like_plan3d=True)],
        "e2e": [plan3d, *SEARCH],
        "version": [plan3d, "--version"],
        "help": [plan3d, "--help"],
        "big": [plan3d, "search", "--model", "405b", "--gpus", "16384", "--hw", "h100-nvlink"],
        **{name: [plan3d, *args] for name, args in README_SEARCHES.items()},
    }, repeat)
    base, floor, floor_gc = w["base"][0], w["floor"][0], w["floor_gc"][0]

    def line(label: str, key: str, tail: str = "") -> None:
        print(f"{label:<42} {w[key][0]:6.3f} s ({w[key][1]:.3f}; CPU {CPU[key]:.3f}){tail}")

    print(f"wall time, median (min; median CPU time, user + system) of {repeat}; the ratios are of "
          f"medians (of minima); load "
          f"average at the start {LOAD_AT_START}, at the end "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}:")
    line("import typer, rich, pydantic (baseline)", "base")
    line(f"floor: the {len(names)} modules the search imports", "floor",
         f" = {floor / base:.1f}×")
    line("the same floor, collector off as in plan3d", "floor_gc")
    line("plan3d search 70b / 512 / h100-nvlink", "e2e")
    print(f"    = {w['e2e'][0] / floor:.2f}× ({w['e2e'][1] / w['floor'][1]:.2f}×) the floor "
          f"(target ≤ 1.2×), {w['e2e'][0] / floor_gc:.2f}× "
          f"({w['e2e'][1] / w['floor_gc'][1]:.2f}×) the collector-off floor; in CPU time "
          f"{CPU['e2e'] / CPU['floor']:.2f}× the floor")
    for key in ("version", "help"):
        line(f"plan3d --{key}", key, f" = {w[key][0] / base:.2f}× "
             f"({w[key][1] / w['base'][1]:.2f}×) the baseline")
    line("plan3d search 405b / 16384 / h100-nvlink", "big", " (target < 2 s)")
    for name in README_SEARCHES:
        line(f"plan3d search {name}", name, " (target < 1 s)")

    from planner.catalog import load_hardware, load_model
    from planner.search.evaluate import evaluate_space
    from planner.search.request import PlanRequest

    model, hw = load_model("405b"), load_hardware("h100-nvlink")
    req = PlanRequest(gpus=16384, mbs=[1, 2, 4, 8, 16])
    evaluate_space(model, hw, req)  # warm
    times, n = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        cols, _ = evaluate_space(model, hw, req)
        times.append(time.perf_counter() - t0)
        n = len(cols["tp"])
    t = statistics.median(times)
    print(f"evaluate_space 405b / 16384 (48 choice groups, 12 array passes):\n    {n:,} "
          f"candidates in {t * 1e3:.1f} ms")

    # the evaluation itself: one (recompute, sp, schedule) group with its four ZeRO stages, a
    # million candidates, as the search evaluates a group (planner.search.costing.costs_in_chunks)
    import numpy as np

    from planner.formulas.choices import ZeroStage
    from planner.model.cost import Choices, numbers
    from planner.schema import PlanConfig
    from planner.search.costing import costs_in_chunks

    cfg = PlanConfig(dp=64, tp=8, pp=16, vpp=1, mbs=1, n_micro=16, gbs=1024, seq_len=8192)
    base = vars(numbers(model, hw, cfg)).copy()
    rng = np.random.default_rng(0)
    zeros = list(ZeroStage)
    size = 1_000_000
    layouts = size // len(zeros)
    cols = {key: rng.choice(choices, layouts).astype(np.float64)
            for key, choices in (("tp", [1, 2, 4, 8]), ("pp", [1, 2, 4, 8, 16]), ("cp", [1, 2]),
                                 ("mbs", [1, 2, 4]))}
    cols["dp"] = 16384 / (cols["tp"] * cols["pp"] * cols["cp"])
    cols["n_micro"] = base["gbs"] / (cols["dp"] * cols["mbs"])
    for key in cols:
        base.pop(key, None)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        costs_in_chunks(base, cols, Choices.of(cfg), zeros)
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    print(f"plan_costs on {size:,} candidates ({layouts:,} layouts × {len(zeros)} ZeRO stages, in "
          f"chunks):\n    {t * 1e3:.0f} ms = {size / t / 1e6:.2f} M candidates/s (target ≥ 1 M/s)")


if __name__ == "__main__":
    main()
