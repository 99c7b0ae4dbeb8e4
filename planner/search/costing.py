"""Costing the candidate space: the framework's rules as a mask, then plan_costs on numpy arrays in
chunks of CHUNK rows per choice group, keeping the columns the ranking reads."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from ..model.cost import Choices, layout_costs, memory_layout_costs, zero_costs
from ..model.states import stage_memory
from .grid import Grid, grid_blocks, grid_of, model_columns

# what the ranking, the diagnosis and the agreement tests read of each candidate
KEPT_COSTS = ("step_s", "total_bytes", "mfu", "tokens_per_s", "bubble_fraction", "dp_bytes",
              "tp_bytes", "pp_bytes", "cp_bytes")
RANKED_COSTS = ("step_s", "total_bytes", "mfu")
"""What search() reads of each candidate (the ranking, the options weighed, --sort mfu): the
search keeps these alone; the plans it shows are estimated again in full."""


CHUNK = 16384
"""Candidates per plan_costs call. Measured on the 2-core CI-sized machine (4 Dec 2026, CPU time,
the machine shared, load ≈ 7): 10⁶ dense candidates (with their ZeRO stages sharing the layout
half) evaluate at 2.0 M/s in chunks of 16,384 against 1.7 M/s in chunks of 4,096, and the
DeepSeek-V3 search on 16,384 GB200 (its NCCL pricing makes more, smaller array operations per
chunk) spends ~15 % less in chunks of 16,384 (benchmarks/bench_search.py)."""

GRID_CHUNK = 65536
"""Cells of the grid (planner/search/grid.py) per evaluation: whole layouts, this many cells."""


def costs_in_chunks(base: dict, columns: dict[str, np.ndarray], choices: Choices,
                    zeros=None, keys: tuple[str, ...] = KEPT_COSTS) -> list[dict[str, np.ndarray]]:
    """plan_costs over many candidates of one choice group, once per ZeRO stage in `zeros`
    (default: choices.zero_stage alone): `base` holds the numbers the candidates share, `columns`
    the float64 arrays they differ in; evaluated CHUNK rows at a time. The layout half of the
    model (cost.layout_costs) is evaluated once and shared by the stages. Asked for total_bytes
    alone, the memory alone is costed (memory_in_chunks: the same numbers, without the time)."""
    if tuple(keys) == ("total_bytes",):
        return [{"total_bytes": m} for m in memory_in_chunks(base, columns, choices, zeros)]
    zeros = [choices.zero_stage] if zeros is None else list(zeros)
    grid = grid_of(columns)  # moe: once per layout what depends on the layout alone
    if grid is not None:
        return _grid_costs(base, grid, choices, zeros, keys)
    columns = model_columns(columns)
    n = len(next(iter(columns.values())))
    # each chunk's costs written into the stage's columns (no list of chunks to concatenate)
    parts = [{k: np.empty(n) for k in keys} for _ in zeros]
    for start in range(0, n, CHUNK):
        rows = min(CHUNK, n - start)
        x = SimpleNamespace(**base, **{k: v[start:start + rows] for k, v in columns.items()})
        layout = layout_costs(x, choices)
        for z, part in zip(zeros, parts):
            out = zero_costs(x, replace(choices, zero_stage=z), layout)
            for k in keys:
                part[k][start:start + rows] = out[k]  # a scalar fills the chunk's rows
    return parts


def _grid_costs(base: dict, grid: Grid, choices: Choices, zeros: list,
                keys: tuple[str, ...]) -> list[dict[str, np.ndarray]]:
    """costs_in_chunks on the grid (planner/search/grid.py): the model on GRID_CHUNK cells at a
    time (whole layouts, grid_blocks), each candidate's costs read from its cell."""
    cells = [{k: np.empty(grid.shape) for k in keys} for _ in zeros]
    for start, stop, x in grid_blocks(base, grid, GRID_CHUNK):
        layout = layout_costs(x, choices)
        for z, part in zip(zeros, cells):
            out = zero_costs(x, replace(choices, zero_stage=z), layout)
            for k in keys:
                part[k][start:stop] = out[k]  # broadcast over the crossed axes
    return [{k: v.reshape(-1)[grid.cell] for k, v in part.items()} for part in cells]


def costs_by_stage(base: dict, columns: dict[str, np.ndarray], choices: Choices,
                   runs: dict, keys: tuple[str, ...] = KEPT_COSTS) -> dict:
    """costs_in_chunks for a choice group whose ZeRO stages run on different rows (`runs`:
    {stage: row mask}, the framework's rules): each stage costed only on the rows where it runs,
    {stage: {key: array over those rows, in row order}}; the rows that run the same stages are
    costed together so that they still share the layout half. (Megatron runs no ZeRO-2/3 with
    the interleaved schedule: costing every stage on every row spent half the search on rows
    thrown away.) A row's costs do not depend on which rows share its chunk: the formulas work
    element by element."""
    zeros = list(runs)
    n = len(next(iter(columns.values())))
    pattern = np.zeros(n, dtype=np.int64)
    for bit, z in enumerate(zeros):
        pattern |= np.asarray(runs[z], dtype=np.int64) << bit
    # the patterns present, in increasing order (a bincount: np.unique would import numpy.ma,
    # ≈ 0.03 s of a search's start-up, to ask whether the array is masked)
    found = [int(p) for p in np.flatnonzero(np.bincount(pattern)) if p]
    if found == [(1 << len(zeros)) - 1]:  # every stage on every row
        return dict(zip(zeros, costs_in_chunks(base, columns, choices, zeros, keys)))
    out = {z: {k: np.empty(int(np.count_nonzero(runs[z]))) for k in keys} for z in zeros}
    place = {z: np.cumsum(runs[z]) - 1 for z in zeros}  # a row's place among its stage's rows
    for p in found:
        stages = [z for bit, z in enumerate(zeros) if p >> bit & 1]
        rows = np.flatnonzero(pattern == p)
        parts = costs_in_chunks(base, {k: v[rows] for k, v in columns.items()},
                                replace(choices, zero_stage=stages[0]), stages, keys)
        for z, part in zip(stages, parts):
            at = place[z][rows]
            for k in keys:
                out[z][k][at] = part[k]
    return out


def memory_in_chunks(base: dict, columns: dict[str, np.ndarray], choices: Choices,
                     zeros=None) -> list[np.ndarray]:
    """Each candidate's total_bytes alone, once per ZeRO stage in `zeros` (default:
    choices.zero_stage alone): the part of the layout half the memory reads
    (cost.memory_layout_costs) once, shared by the stages, and each stage's most loaded stage
    memory (model.states.stage_memory, the first concern of cost.zero_costs, which reads nothing
    of the data-parallel traffic or the step), in chunks as costs_in_chunks; the same numbers as
    costs_in_chunks(…, keys=("total_bytes",)) without the time half or the collectives. A
    stage is costed on every row given, run or not (the caller keeps its own rows): numpy's
    divide/invalid/overflow warnings are off, as on the grid (grid_blocks)."""
    zeros = [choices.zero_stage] if zeros is None else list(zeros)
    grid = grid_of(columns)  # moe: once per layout what depends on the layout alone
    if grid is not None:
        return _grid_memory(base, grid, choices, zeros)
    columns = model_columns(columns)
    n = len(next(iter(columns.values())))
    parts = [np.empty(n) for _ in zeros]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for start in range(0, n, CHUNK):
            rows = min(CHUNK, n - start)
            x = SimpleNamespace(**base, **{k: v[start:start + rows] for k, v in columns.items()})
            layout = memory_layout_costs(x, choices)
            for z, part in zip(zeros, parts):  # a scalar fills the chunk's rows
                part[start:start + rows] = stage_memory(x, replace(choices, zero_stage=z),
                                                        layout).total_bytes
    return parts


def _grid_memory(base: dict, grid: Grid, choices: Choices, zeros: list) -> list[np.ndarray]:
    """memory_in_chunks on the grid, as _grid_costs."""
    cells = [np.empty(grid.shape) for _ in zeros]
    for start, stop, x in grid_blocks(base, grid, GRID_CHUNK):
        layout = memory_layout_costs(x, choices)
        for z, part in zip(zeros, cells):
            part[start:stop] = stage_memory(x, replace(choices, zero_stage=z),
                                            layout).total_bytes
    return [part.reshape(-1)[grid.cell] for part in cells]
