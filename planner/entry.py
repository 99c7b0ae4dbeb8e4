"""The `plan3d` console script: the command line (planner.cli) with the garbage collector off.

A run of plan3d lasts well under a second for most commands and allocates its long-lived objects
at start-up: typer's commands, pydantic's schemas, numpy's and rich's modules. CPython's cyclic
collector would scan them again and again as they are created and once more when the interpreter
exits, for nothing: the command's own work (numpy arrays, pydantic results, sympy trees) makes
next to no reference cycles. So the collector is switched off for the run, and the objects are
frozen (`gc.freeze`) before exit so that the interpreter's final collection skips them.
benchmarks/bench_search.py measures what it saves. Importing planner.cli (tests, scripts) leaves
the collector alone: only this entry point changes it."""

from __future__ import annotations

import gc


def main() -> None:
    gc.disable()
    try:
        from .cli import main as cli_main

        cli_main()
    finally:
        gc.freeze()
