"""fit: partial recompute in the search — for each candidate that fits with every layer
recomputed, the fewest layers of each stage to recompute for it to still fit (Megatron
--recompute-method block --recompute-num-layers r), so that the cheapest recompute that fits
competes on speed. Two extra costings of the fitting full-recompute candidates, not a new
dimension: the memory is linear in r (formulas.recompute.fewest_layers_to_recompute), so one
costing at r = 1 gives each candidate's slope, and one at r* its costs."""

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
