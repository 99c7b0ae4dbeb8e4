"""The `plan3d` console script: the command line (planner.cli) with the garbage collector off.

A run of plan3d lasts well under a second for most commands and allocates its long-lived objects
at start-up: typer's commands, pydantic's schemas, numpy's and rich's modules. CPython's cyclic
collector would scan them again and again as they are created and once more when the interpreter
exits, for nothing: the command's own work (numpy arrays, pydantic results, sympy trees) makes
next to no reference cycles. So the collector is switched off for the run, and the objects are
frozen (`gc.freeze`) before exit so that the interpreter's final collection skips them.
benchmarks/bench_search.py measures what it saves. Importing planner.cli (tests, scripts) leaves
the collector alone: only this entry point changes it.

numpy is told not to ask the kernel for transparent huge pages for its large arrays
(NUMPY_MADVISE_HUGEPAGE=0, numpy's documented switch, read when numpy is imported; a value the
user set is kept): a search keeps a few hundred MB of fresh columns, and where the kernel
compacts memory to find huge pages on demand (THP `defrag` = madvise, as on the 2-core machine)
those first touches stall. Measured on the 2-core machine (4 Dec 2026, load ≈ 9, 4 runs each):
the DeepSeek-V3 search on 16,384 GB200 spends ≈0.2 s less system time without the advice, and
the same user time. It changes no number: only how the memory is mapped."""

from __future__ import annotations

import gc
import os


def main() -> None:
    gc.disable()
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")  # before numpy is first imported
    try:
        from .cli import main as cli_main

        cli_main()
    finally:
        gc.freeze()
