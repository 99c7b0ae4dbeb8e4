"""Costing the candidate space: the framework's rules as a mask, then plan_costs on numpy arrays in
chunks of CHUNK rows per choice group, keeping the columns the ranking reads."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from ..model.cost import Choices, layout_costs, zero_costs

# what the ranking, the diagnosis and the agreement tests read of each candidate
KEPT_COSTS = ("step_s", "total_bytes", "mfu", "tokens_per_s", "bubble_fraction", "dp_bytes",
              "tp_bytes", "pp_bytes", "cp_bytes")


CHUNK = 4096
"""Candidates per plan_costs call. float64 columns of this length stay in the CPU's cache between
the formulas' array operations: on the 2-core CI-sized machine, 10⁶ candidates (with their ZeRO
stages sharing the layout half) evaluate at ~3.6 M/s in chunks of 4,096, 3.3 M/s in chunks of
16,384 and 2.8 M/s in chunks of 2,048 (benchmarks/bench_search.py)."""


def costs_in_chunks(base: dict, columns: dict[str, np.ndarray], choices: Choices,
                    zeros=None, keys: tuple[str, ...] = KEPT_COSTS) -> list[dict[str, np.ndarray]]:
    """plan_costs over many candidates of one choice group, once per ZeRO stage in `zeros`
    (default: choices.zero_stage alone): `base` holds the numbers the candidates share, `columns`
    the float64 arrays they differ in; evaluated CHUNK rows at a time. The layout half of the
    model (cost.layout_costs) is evaluated once and shared by the stages."""
    zeros = [choices.zero_stage] if zeros is None else list(zeros)
    n = len(next(iter(columns.values())))
    parts: list[dict[str, list]] = [{k: [] for k in keys} for _ in zeros]
    for start in range(0, n, CHUNK):
        rows = min(CHUNK, n - start)
        x = SimpleNamespace(**base, **{k: v[start:start + rows] for k, v in columns.items()})
        layout = layout_costs(x, choices)
        for z, part in zip(zeros, parts):
            out = zero_costs(x, replace(choices, zero_stage=z), layout)
            for k in keys:
                v = out[k]
                part[k].append(v if np.ndim(v) else np.full(rows, float(v)))
    return [{k: np.concatenate(v) for k, v in part.items()} for part in parts]
