"""The candidates of a MoE search as a grid: one axis per distinct layout, one per distinct expert
degrees (ep, etp), one per distinct dispatcher and overlap (deepep, a2a_overlap) — the columns
the space crossed in with every layout (space.CROSSED). The model is evaluated once on the
grid with numpy broadcasting: a layout's columns are (M, 1, 1) arrays, the expert columns
(1, E, 1), the dispatcher's (1, 1, D), so what depends on the layout alone (the data-parallel
collectives of the dense weights, their memory, the layer's attention, …) is computed once per
layout and what depends on the experts once per (layout, ep, etp), every formula as written.
Each candidate then reads its cell. The numbers are those of the flat evaluation, bit for bit:
numpy computes each cell with the same operations on the same values (the formulas work element
by element). The cells no candidate holds (a combination the rules remove) are computed and
not read.

The space builds the id columns (space.LAYOUT_ID, space.CROSSED) as it crosses the columns in,
so that no search of distinct rows is needed: numbering the ids present is one pass. A column
that is neither a layout's (space.LAYOUT_COLUMNS) nor a crossed one (the recompute's layers a
candidate gets, its offload) is taken as part of the layout: each distinct value of it a row of
its own on the first axis."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from .space import CROSSED, LAYOUT_COLUMNS, LAYOUT_ID

MIN_CELLS_PER_LAYOUT = 2
"""Below this many crossed cells per layout (a dense model: one) the flat evaluation is used."""


@dataclass(frozen=True)
class Grid:
    """The candidates' columns on the grid's axes, and where each candidate sits in it."""

    layouts: dict  # name → (M,) array, a layout's value (and the extra per-row columns)
    crossed: dict  # name → (1, E, 1) or (1, 1, D) array
    cell: np.ndarray  # each candidate's cell in the grid, raveled (C order)
    shape: tuple  # (M, E, D)

    def columns(self, start: int, stop: int) -> dict:
        """The columns of layouts start..stop as arrays that broadcast to (stop − start, E, D)."""
        return {**{k: v[start:stop, None, None] for k, v in self.layouts.items()},
                **self.crossed}


def model_columns(columns: dict) -> dict:
    """The columns the model reads: all but the space's id columns (named with a leading _)."""
    return {k: v for k, v in columns.items() if not k.startswith("_")}


def grid_blocks(base: dict, grid: Grid, cells_per_block: int):
    """The grid's layouts in blocks of about `cells_per_block` cells: (start, stop, numbers the
    model reads), the block's columns broadcasting over the crossed axes. Runs with numpy's
    divide/invalid/overflow warnings off: the cells no candidate holds may divide by zero or
    overflow (a candidate's own cell computes as in the flat evaluation)."""
    step = max(1, cells_per_block // (grid.shape[1] * grid.shape[2]))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for start in range(0, grid.shape[0], step):
            stop = start + step
            yield start, stop, SimpleNamespace(**base, **grid.columns(start, stop))


def numbered(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's place among the distinct ids present (in increasing order of id), and one row
    of each: (codes, rows). One pass where the ids are dense (the space's are); a sort else."""
    ids = np.asarray(ids).astype(np.int64, copy=False)
    top = int(ids.max()) + 1 if len(ids) else 0
    if top > 4 * len(ids) + 4096:
        _, rows, codes = np.unique(ids, return_index=True, return_inverse=True)
        return codes.reshape(-1), rows
    present = np.zeros(top, dtype=bool)
    present[ids] = True
    codes = (np.cumsum(present) - 1)[ids]
    rows = np.empty(int(present.sum()), dtype=np.int64)
    rows[codes] = np.arange(len(ids))  # any row of an id: its columns are the same
    return codes, rows


def _layout_ids(columns: dict, extra: list[str]) -> np.ndarray:
    """The space's layout id, refined by the values of the `extra` columns (each candidate's
    own: recompute layers, offload) so that one id holds equal values of every column."""
    ids = np.asarray(columns[LAYOUT_ID]).astype(np.int64, copy=False)
    for k in extra:
        values, codes = np.unique(columns[k], return_inverse=True)
        ids = numbered(ids)[0] * len(values) + codes.reshape(-1)
    return ids


def grid_of(columns: dict) -> Grid | None:
    """The grid of `columns` (the space's columns of some candidates, with its id columns), or
    None where there is none (no id columns) or it would not pay (fewer than
    MIN_CELLS_PER_LAYOUT crossed cells per layout: a dense model)."""
    if LAYOUT_ID not in columns or any(k not in columns for k in CROSSED):
        return None
    codes, crossed, sizes = [], {}, []
    for axis, (id_name, names) in enumerate(CROSSED.items()):
        c, rows = numbered(columns[id_name])
        codes.append(c)
        sizes.append(len(rows))
        shape = [1, 1, 1]
        shape[axis + 1] = len(rows)
        crossed.update({k: columns[k][rows].reshape(shape) for k in names if k in columns})
    if sizes[0] * sizes[1] < MIN_CELLS_PER_LAYOUT:
        return None
    plain = set(LAYOUT_COLUMNS) | {k for names in CROSSED.values() for k in names}
    extra = [k for k in model_columns(columns) if k not in plain]
    layout, rows = numbered(_layout_ids(columns, extra))
    layouts = {k: v[rows] for k, v in model_columns(columns).items() if k not in crossed}
    shape = (len(rows), *sizes)
    cell = (layout * sizes[0] + codes[0]) * sizes[1] + codes[1]
    return Grid(layouts=layouts, crossed=crossed, cell=cell, shape=shape)
