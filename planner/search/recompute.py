"""fit: partial recompute in the search — for each candidate that fits with every layer
recomputed, the fewest layers of each stage to recompute for it to still fit (Megatron
--recompute-method block --recompute-num-layers r), so that the cheapest recompute that fits
competes on speed. Two extra costings of the fitting full-recompute candidates, not a new
dimension: the memory is linear in r (formulas.recompute.fewest_layers_to_recompute), so one
costing at r = 1 gives each candidate's slope, and one at r* its costs.

DeepSpeed's partitioned checkpoints (activation_checkpointing.partition_activations) likewise:
for each full-recompute candidate without sequence parallelism that does not fit, one costing
with each checkpointed input split over its tp ranks (partitioned_checkpoint_variants); the
all-gather before each rerun is its price in time (model/activations.py)."""

from __future__ import annotations

import numpy as np

from ..formulas import recompute as RC
from ..model.cost import Choices
from .costing import costs_in_chunks, memory_in_chunks

NEEDED = ("total_bytes", "stage_layers")
"""What partial_recompute_variants reads of a candidate's full-recompute costs."""


def fitting_full_recompute(out: dict, budget: float) -> np.ndarray:
    """The candidates fewer layers recomputed may still fit (their full-recompute costs `out`):
    they fit within `budget` and hold more than one layer per stage."""
    return (out["total_bytes"] <= budget) & (out["stage_layers"] > 1)


def memory_at_one_layer(base: dict, columns: dict[str, np.ndarray], runs: dict, outs: dict,
                        choices: Choices, budget: float) -> dict:
    """partial_recompute_variants' first costing for every ZeRO stage of a choice group at once:
    each stage's memory at r = 1 on its fitting_full_recompute rows, {stage: array over those
    rows, in row order}. `columns` the group's candidates, `runs` {stage: mask of the rows it
    runs}, `outs` {stage: full-recompute costs of those rows}. The layout half is costed once on
    the rows any stage tries, and shared by the stages (costing.memory_in_chunks): the stages try
    mostly the same layouts (a ZeRO-1 candidate that fits fits with ZeRO-0's rows beside it)."""
    tried = {}
    for z, keep in runs.items():
        rows = np.zeros(len(keep), dtype=bool)
        rows[np.flatnonzero(keep)[fitting_full_recompute(outs[z], budget)]] = True
        if rows.any():
            tried[z] = rows
    if not tried:
        return {}
    union = np.logical_or.reduce(list(tried.values()))
    shared = {k: v for k, v in base.items() if k != "recompute_layers"}
    ones = memory_in_chunks(shared, {**{k: v[union] for k, v in columns.items()},
                                     "recompute_layers": np.ones(int(union.sum()))},
                            choices, list(tried))
    place = np.cumsum(union) - 1  # a row's place among the union's rows
    return {z: one[place[rows]] for (z, rows), one in zip(tried.items(), ones)}


def partial_recompute_variants(base: dict, columns: dict[str, np.ndarray], out: dict,
                               choices: Choices, budget: float, keys: tuple[str, ...],
                               one: np.ndarray | None = None):
    """The candidates (float64 `columns`, their full-recompute costs `out`) that fit and hold
    more than one layer per stage, recosted with the fewest layers recomputed that keeps them
    within `budget`: (row mask into `columns`, layers recomputed, their costs), or None when
    none gains (every candidate needs all its layers). `one`: their memory at r = 1 where the
    caller costed it already (memory_at_one_layer), in their row order."""
    layers = out["stage_layers"]
    rows = fitting_full_recompute(out, budget)
    if not rows.any():
        return None
    shared = {k: v for k, v in base.items() if k != "recompute_layers"}
    sub = {k: v[rows] for k, v in columns.items()}
    if one is None:
        one = memory_in_chunks(shared, {**sub, "recompute_layers": np.ones(int(rows.sum()))},
                               choices)[0]
    full = out["total_bytes"][rows]
    gain = (one - full) / (layers[rows] - 1)  # memory per layer not recomputed
    r = RC.fewest_layers_to_recompute(layers[rows], full, budget, np.maximum(gain, 1.0))
    fewer = r < layers[rows]
    if not fewer.any():
        return None
    idx = np.flatnonzero(rows)[fewer]
    costs = costs_in_chunks(shared, {**{k: v[fewer] for k, v in sub.items()},
                                     "recompute_layers": r[fewer]}, choices, keys=keys)[0]
    fits = costs["total_bytes"] <= budget
    if not fits.any():
        return None
    mask = np.zeros(len(layers), dtype=bool)
    mask[idx[fits]] = True
    return mask, r[fewer][fits], {k: v[fits] for k, v in costs.items()}


def partitioned_checkpoint_variants(base: dict, columns: dict[str, np.ndarray], out: dict,
                                    choices: Choices, budget: float, keys: tuple[str, ...]):
    """fit: the full-recompute candidates (float64 `columns`, their costs `out`, no sequence
    parallelism) that do not fit in `budget` and have tp > 1, recosted with their checkpoints
    split over the tp ranks (distribute = 1, formulas.recompute.checkpoint_input_bytes): (row
    mask into `columns`, their costs) of those that then fit, or None. A candidate that fits
    without it is not tried: the split only adds the all-gather before each rerun."""
    rows = (out["total_bytes"] > budget) & (columns["tp"] > 1)
    if not rows.any():
        return None
    shared = {k: v for k, v in base.items() if k != "distribute"}
    sub = {k: v[rows] for k, v in columns.items()}
    costs = costs_in_chunks(shared, {**sub, "distribute": np.ones(int(rows.sum()))}, choices,
                            keys=keys)[0]
    fits = costs["total_bytes"] <= budget
    if not fits.any():
        return None
    mask = np.zeros(len(rows), dtype=bool)
    mask[np.flatnonzero(rows)[fits]] = True
    return mask, {k: v[fits] for k, v in costs.items()}
