"""Where a plan's ranks sit: the rank order that decides which GPUs each parallel group spans.

Structural, not a formula: the order is a discrete choice (a framework's convention), and the
strides it yields are products of the plan's degrees, so they run on floats, arrays and symbols
alike. cost.group_links reads the strides from here and hands them to planner.formulas.comm."""

from __future__ import annotations

MEGATRON_RANK_ORDER = ("tp", "cp", "dp", "pp")
"""Megatron-Core's rank order, fastest-varying first (megatron/core/parallel_state.py
RankGenerator, order "tp-cp-ep-dp-pp"): consecutive global ranks differ first in their TP rank.
The one place the order is set; a framework that orders its mesh otherwise passes its own."""


def group_stride(degrees: dict, dims: tuple, order=MEGATRON_RANK_ORDER):
    """Distance between consecutive ranks of a group over `dims` (adjacent in `order`): the
    product of the degrees that vary faster. With tp-cp-dp-pp: TP 1, CP t, DP·CP t, PP t·c·d."""
    first = min(order.index(d) for d in dims)
    if sorted(order.index(d) for d in dims) != list(range(first, first + len(dims))):
        raise ValueError(f"{dims} are not adjacent in the rank order {order}")
    stride = 1
    for name in order[:first]:
        stride = stride * degrees[name]
    return stride
