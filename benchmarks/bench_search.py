"""Speed figures for `plan3d search` (targets from the search issue). Run on the 2-core CI-sized
machine, from a regular install (`pip install .`; an editable install under
PYTHONDONTWRITEBYTECODE compiles planner's modules again at every start):
    python benchmarks/bench_search.py

1. end to end, process start included: `plan3d search --model 70b --gpus 512 --hw h100-nvlink`
   against `python -c "import typer, rich, pydantic"` (target: ≤ 3×);
2. the largest default space, 405B on 16,384 GPUs with every dimension open (target: < 2 s);
3. the evaluation itself, candidates per second through plan_costs on arrays (target: ≥ 10⁶/s).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPEAT = 11

# What a search cannot avoid loading: the libraries it uses, really imported (pydantic 2 and rich
# import lazily, so the baseline loads little of them), and one pydantic model built.
FLOOR = """
import typer, rich.console, rich.table, numpy, pydantic
class M(pydantic.BaseModel):
    x: int
M(x=1)
"""


def walls(cmds: dict[str, list[str]]) -> dict[str, tuple[float, float]]:
    """(median, min) wall time of each command, process start included; the commands take turns,
    so that a slow spell of a shared machine falls on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in cmds}
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    for _ in range(REPEAT):
        for name, cmd in cmds.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=env if name == "floor" else None)
            times[name].append(time.perf_counter() - t0)
    return {name: (statistics.median(t), min(t)) for name, t in times.items()}


def main() -> None:
    plan3d = shutil.which("plan3d") or str(Path(sys.executable).parent / "plan3d")
    w = walls({
        "base": [sys.executable, "-c", "import typer, rich, pydantic"],
        "floor": [sys.executable, "-c", FLOOR],
        "e2e": [plan3d, "search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink"],
        "big": [plan3d, "search", "--model", "405b", "--gpus", "16384", "--hw", "h100-nvlink"],
    })
    base = w["base"][0]
    print(f"wall time, median (min) of {REPEAT}:")
    print(f"python -c 'import typer, rich, pydantic'        {base:6.3f} s ({w['base'][1]:.3f})")
    print(f"floor: + rich.console, numpy, one model built     {w['floor'][0]:6.3f} s "
          f"({w['floor'][1]:.3f}) = {w['floor'][0] / base:.1f}× the baseline")
    print(f"plan3d search 70b / 512 / h100-nvlink             {w['e2e'][0]:6.3f} s "
          f"({w['e2e'][1]:.3f}) = {w['e2e'][0] / base:.1f}× the baseline (target ≤ 3×), "
          f"{w['e2e'][0] - w['floor'][0]:.3f} s over the floor")
    print(f"plan3d search 405b / 16384 / h100-nvlink          {w['big'][0]:6.3f} s "
          f"({w['big'][1]:.3f})  (target < 2 s)")

    from planner.catalog import load_hardware, load_model
    from planner.request import PlanRequest
    from planner.search import evaluate_space

    model, hw = load_model("405b"), load_hardware("h100-nvlink")
    req = PlanRequest(gpus=16384, mbs=[1, 2, 4, 8, 16])
    evaluate_space(model, hw, req)  # warm
    times, n = [], 0
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        cols, _ = evaluate_space(model, hw, req)
        times.append(time.perf_counter() - t0)
        n = len(cols["tp"])
    t = statistics.median(times)
    print(f"evaluate_space 405b / 16384 (48 choice groups, 12 array passes): {n:,} candidates in "
          f"{t * 1e3:.1f} ms")

    # the evaluation itself: one (recompute, sp, schedule) group with its four ZeRO stages, a
    # million candidates, as the search evaluates a group (planner.search.costs_in_chunks)
    import numpy as np

    from planner.cost import Choices, numbers
    from planner.formulas.choices import ZeroStage
    from planner.schema import PlanConfig
    from planner.search import costs_in_chunks

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
          f"cache-sized chunks): {t * 1e3:.0f} ms = {size / t / 1e6:.2f} M candidates/s "
          f"(target ≥ 1 M/s)")


if __name__ == "__main__":
    main()
