"""Speed of `plan3d explain` and of `--version` / `--help`, as ratios to a floor of the libraries
each really imports (targets from issue 14, item 11). Run on the 2-core CI-sized machine, from a
regular install (`pip install .`):
    python benchmarks/bench_explain.py

1. `explain` on a repeated shape (the formula text read back from the on-disk cache, no sympy)
   against `import typer, rich, pydantic, numpy` with one pydantic model built (target ≤ 1.5×);
2. `explain` on a shape not seen before (sympy renders the formulas) against the same floor plus
   `import sympy` (target ≤ 3×);
3. `plan3d --version` and `plan3d --help` against `import typer, rich, pydantic` (target: below
   it, i.e. a ratio < 1: neither imports rich, pydantic or numpy).
Each command gets its own empty cache folder for the miss and a warmed one for the hit. Run it
without PYTHONDONTWRITEBYTECODE (the commands would compile plan3d's modules at every start).
Measured on the 2-core machine (median of 9): hit 1.25× (0.69 s against 0.55 s), miss 1.57×
(1.81 s against 1.16 s), --version 0.77× and --help 0.78× (0.16 s against 0.21 s).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPEAT = 9

FLOOR = """
import typer, rich.console, rich.table, numpy, pydantic
class M(pydantic.BaseModel):
    x: int
M(x=1)
"""
FLOOR_SYMPY = FLOOR + "import sympy\n"
EXPLAIN = ["explain", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink", "--tp", "8",
           "--pp", "4", "--gbs", "1024"]


def wall(cmd: list[str], env: dict | None = None, before=None) -> tuple[float, float]:
    """(median, min) wall time of a command, process start included; `before` runs untimed
    before each repetition (to empty a cache)."""
    times = []
    for _ in range(REPEAT):
        if before is not None:
            before()
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=env)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main() -> None:
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("note: PYTHONDONTWRITEBYTECODE is set: plan3d's modules compile at every start, "
              "and the figures below include it", file=sys.stderr)
    plan3d = shutil.which("plan3d") or str(Path(sys.executable).parent / "plan3d")
    env_blas = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    cache = Path(tempfile.mkdtemp(prefix="plan3d-bench-"))
    env = {**os.environ, "PLAN3D_CACHE_DIR": str(cache)}

    def empty():
        shutil.rmtree(cache, ignore_errors=True)

    base = wall([sys.executable, "-c", "import typer, rich, pydantic"])
    floor = wall([sys.executable, "-c", FLOOR], env_blas)
    floor_sympy = wall([sys.executable, "-c", FLOOR_SYMPY], env_blas)
    miss = wall([plan3d, *EXPLAIN], env, before=empty)
    subprocess.run([plan3d, *EXPLAIN], env=env, stdout=subprocess.DEVNULL, check=True)
    hit = wall([plan3d, *EXPLAIN], env)
    version = wall([plan3d, "--version"])
    help_ = wall([plan3d, "--help"])
    shutil.rmtree(cache, ignore_errors=True)

    print(f"wall time, median (min) of {REPEAT}:")
    print(f"import typer, rich, pydantic                 {base[0]:6.3f} s ({base[1]:.3f})")
    print(f"floor: + numpy, one pydantic model           {floor[0]:6.3f} s ({floor[1]:.3f})")
    print(f"floor + sympy                                {floor_sympy[0]:6.3f} s "
          f"({floor_sympy[1]:.3f})")
    print(f"explain, repeated shape (cache hit)          {hit[0]:6.3f} s ({hit[1]:.3f}) = "
          f"{hit[0] / floor[0]:.2f}× the floor (target ≤ 1.5×)")
    print(f"explain, new shape (cache miss, sympy)       {miss[0]:6.3f} s ({miss[1]:.3f}) = "
          f"{miss[0] / floor_sympy[0]:.2f}× the floor with sympy (target ≤ 3×)")
    print(f"plan3d --version                             {version[0]:6.3f} s ({version[1]:.3f}) = "
          f"{version[0] / base[0]:.2f}× import typer, rich, pydantic (target < 1)")
    print(f"plan3d --help                                {help_[0]:6.3f} s ({help_[1]:.3f}) = "
          f"{help_[0] / base[0]:.2f}× import typer, rich, pydantic (target < 1)")


if __name__ == "__main__":
    main()
