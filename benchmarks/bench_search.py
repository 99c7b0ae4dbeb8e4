"""Speed figures for `plan3d search` (targets from the search issue). Run on the 2-core CI-sized
machine: python benchmarks/bench_search.py

1. end to end, process start included: `plan3d search --model 70b --gpus 512 --hw h100-nvlink`
   against `python -c "import typer, rich, pydantic"` (target: ≤ 3×);
2. the largest default space, 405B on 16,384 GPUs with every dimension open (target: < 2 s);
3. the evaluation itself, candidates per second through plan_costs on arrays (target: ≥ 10⁶/s).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPEAT = 7


def wall(cmd: list[str]) -> float:
    times = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    plan3d = shutil.which("plan3d") or str(Path(sys.executable).parent / "plan3d")
    base = wall([sys.executable, "-c", "import typer, rich, pydantic"])
    with_numpy = wall([sys.executable, "-c", "import typer, rich, pydantic, numpy"])
    e2e = wall([plan3d, "search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink"])
    big = wall([plan3d, "search", "--model", "405b", "--gpus", "16384", "--hw", "h100-nvlink"])
    print(f"python -c 'import typer, rich, pydantic'          {base:6.3f} s")
    print(f"python -c 'import typer, rich, pydantic, numpy'   {with_numpy:6.3f} s")
    print(f"plan3d search 70b / 512 / h100-nvlink             {e2e:6.3f} s  = {e2e / base:.1f}× "
          f"the import baseline (target ≤ 3×)")
    print(f"plan3d search 405b / 16384 / h100-nvlink          {big:6.3f} s  (target < 2 s)")

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
    print(f"evaluate_space 405b / 16384 (all 48 choice groups): {n:,} candidates in "
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
