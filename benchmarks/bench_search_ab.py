"""Two versions of plan3d, alternating: each README search (and the default) run end to end, process
start included, once with each source tree on PYTHONPATH in turn, so that a shared machine's load
falls on both alike; the median (min) CPU time, user + system, of each:
    python benchmarks/bench_search_ab.py BEFORE_TREE AFTER_TREE [--repeat N]
(each tree a checkout of the repository; `git archive <commit> | tar -x -C DIR` makes one).
With --instructions, each run once under valgrind's cachegrind instead: the instructions it
executes, end to end — the same from run to run (±0.02 %) whatever the machine's load, where
the CPU times of a 2-core machine shared with other work move ±10 % (about 50× slower)."""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys

from bench_search import ENV, README_SEARCHES, SEARCH

CASES = {"70b / 512 / h100-nvlink (the default)": SEARCH, **README_SEARCHES}


def cpu_s(tree: str, args: list[str]) -> float:
    """CPU time, user + system, of `python -m planner ARGS` with `tree` on PYTHONPATH. Run from
    "/": `python -m` puts its working directory first on sys.path, so from a checkout's root the
    checkout's own planner would be imported, whatever PYTHONPATH says."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "planner", *args], check=True, cwd="/",
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**ENV, "PYTHONPATH": tree, "NUMPY_MADVISE_HUGEPAGE": "0"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def instructions(tree: str, args: list[str]) -> int:
    """Instructions executed by `python -m planner ARGS` with `tree` on PYTHONPATH (cachegrind's
    I refs, no cache simulation)."""
    run = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                          "--cachegrind-out-file=/dev/null", sys.executable, "-m", "planner",
                          *args], check=True, capture_output=True, text=True, cwd="/",
                         env={**ENV, "PYTHONPATH": tree, "NUMPY_MADVISE_HUGEPAGE": "0"})
    return int(re.search(r"I\s+refs:\s+([\d,]+)", run.stderr).group(1).replace(",", ""))


def compare_instructions(before: str, after: str) -> None:
    """Each case's instructions, before → after (one run each: they repeat to ±0.02 %)."""
    for tree in (before, after):  # warm: bytecode written
        cpu_s(tree, SEARCH)
    print("instructions executed end to end (valgrind cachegrind, I refs), before → after:")
    for name, args in CASES.items():
        b, f = instructions(before, args), instructions(after, args)
        print(f"  {name:<52} {b / 1e9:.3f} → {f / 1e9:.3f} G  ({f / b - 1:+.1%})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--instructions", action="store_true")
    a = parser.parse_args()
    if a.instructions:
        return compare_instructions(a.before, a.after)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    times = {name: {"before": [], "after": []} for name in CASES}
    for name, args in CASES.items():
        for tree in (a.before, a.after):  # warm: bytecode written, files cached
            cpu_s(tree, args)
        for _ in range(a.repeat):
            for label, tree in (("before", a.before), ("after", a.after)):
                times[name][label].append(cpu_s(tree, args))
    print(f"CPU time (user + system), median (min) of {a.repeat}, alternating; load average "
          f"{load} at the start, {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end:")
    for name, t in times.items():
        b, f = (statistics.median(t[k]) for k in ("before", "after"))
        print(f"  {name:<52} {b:.3f} ({min(t['before']):.3f}) → {f:.3f} "
              f"({min(t['after']):.3f}) s  ({f / b - 1:+.0%})")


if __name__ == "__main__":
    main()
