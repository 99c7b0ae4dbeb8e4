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


def partial_recompute_variants(base: dict, columns: dict[str, np.ndarray], out: dict,
                               choices: Choices, budget: float, keys: tuple[str, ...]):
    """The candidates (float64 `columns`, their full-recompute costs `out`) that fit and hold
    more than one layer per stage, recosted with the fewest layers recomputed that keeps them
    within `budget`: (row mask into `columns`, layers recomputed, their costs), or None when
    none gains (every candidate needs all its layers)."""
    layers = out["stage_layers"]
    rows = (out["total_bytes"] <= budget) & (layers > 1)
    if not rows.any():
        return None
    shared = {k: v for k, v in base.items() if k != "recompute_layers"}
    sub = {k: v[rows] for k, v in columns.items()}
    one = memory_in_chunks(shared, {**sub, "recompute_layers": np.ones(int(rows.sum()))},
                           choices)
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
