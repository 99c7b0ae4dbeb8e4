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
the same user time. It changes no number: only how the memory is mapped.

glibc's malloc is told to keep the memory a search frees for its next arrays (keep_freed_memory)
rather than hand it back to the kernel and fault it in again, page by page, for the next one.
It changes no number either: only where the arrays are allocated."""

from __future__ import annotations

import gc
import os

MMAP_THRESHOLD_BYTES = 32 * 2**20
"""Blocks up to this size come from malloc's heap, not a mapping of their own: glibc's ceiling
for M_MMAP_THRESHOLD on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB), above a column of the
DeepSeek-V3 search's 1.5 M candidates (12 MB)."""

TRIM_THRESHOLD_BYTES = 2**30
"""Free memory at the top of the heap up to this much is kept, not returned to the kernel."""


def keep_freed_memory() -> None:
    """Have glibc's malloc keep freed memory for the next allocations (mallopt M_MMAP_THRESHOLD
    and M_TRIM_THRESHOLD, both set: either alone turns off glibc's own adjustment of the other).
    By default a freed block above the threshold (128 KiB, raised to the largest freed, at most
    32 MiB) is unmapped, and the heap trimmed above twice that, so the search's columns and
    the grid's arrays, allocated and freed by the thousand, are faulted in afresh each time.
    Measured on the 2-core machine (4 Dec 2026, load 3-5, search() in one process, 3 runs
    each): the DeepSeek-V3 search on 16,384 GB200 2.04-2.20 s -> 1.80-1.91 s of CPU time. A
    no-op where the C library has no mallopt (macOS, musl)."""
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # TypeError: Windows has no CDLL(None)
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    mallopt(m_mmap_threshold, MMAP_THRESHOLD_BYTES)
    mallopt(m_trim_threshold, TRIM_THRESHOLD_BYTES)


def main() -> None:
    gc.disable()
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")  # before numpy is first imported
    keep_freed_memory()
    try:
        from .cli import main as cli_main

        cli_main()
    finally:
        gc.freeze()
