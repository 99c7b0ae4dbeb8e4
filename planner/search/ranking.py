"""The recommendation rule: which plan is row 1, and how the rest of the table is ordered.

Row 1 is the fastest plan that fits with the memory margin (`DEFAULT_HEADROOM`, `--headroom`):
plans are ordered by one total order — first whether a plan fits outside the margin, then its
step time, then (only among plans of exactly equal step time) the simpler layout and the
framework's defaults. A plan that fits only inside the margin is marked and never ranked first.
Plans whose step times lie within the tie band of a row (`TIE_BAND`: the accuracy plan3d states
for its step times, a fixed figure) are marked as tied with it and listed after it in step order.

Why one total order: it makes the choice stable. Adding a plan changes row 1 only if the new plan
is better on both counts the rule weighs (it fits with the margin and its step is shorter);
removing any plan other than row 1 never changes it; and `--headroom` moves row 1 only when row 1
itself falls inside the new margin or a faster plan leaves it. (A rule that took the simplest plan
within the band of the fastest, as plan3d did before, flips whenever a plan near the memory limit
appears or vanishes, since it moves the band.) tests/search/test_recommendation.py checks these
properties on random sets of plans.

Works on the search's candidate arrays (numpy), so the whole feasible set is considered; one row
per layout (dp, tp, pp, cp), the layout's other variants (ZeRO stage, recompute, micro-batch size,
virtual stages, offload) folded into its first under the same order."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LAYOUT_KEYS = ("dp", "tp", "pp", "cp")

# The memory margin a plan must leave free to be recommended, as a fraction of capacity. What a
# training job needs beyond plan3d's estimate, on an 80 GiB GPU:
# - the estimate's own error: on the 18 measured torchtitan peaks it runs -9.0 % ... +6.7 %
#   (tests/test_measured_memory.py), so a plan estimated at 55 GiB can reserve 60 GiB (~6 % of
#   capacity);
# - NCCL buffers beyond the one communicator the profiles' 2 GiB runtime reserve counts: each
#   further process group holds its own, 544-688 MiB on A100 NVLink (NVIDIA/nccl#964), ~1.6 GB
#   for one communicator and ~6 GB for three or more (NVIDIA/nccl#864); linear in the channels
#   and flat beyond two nodes (NVIDIA/nccl#986, the maintainer). A layout with dp, tp, pp and cp
#   groups opens three more than one: ~2-3 GiB, ~3 % of capacity;
# - checkpoints: torch.distributed.checkpoint's async save stages the state in host memory, so a
#   checkpoint adds little on the device — nothing is added for it.
# Together ~9-10 % of capacity; plan3d keeps 10 % free. `--headroom` sets another margin.
DEFAULT_HEADROOM = 0.10

# What a framework runs when not told otherwise; among plans of exactly the same step time the one
# that asks for less comes first. The NeMo / Megatron-Bridge recipes' defaults (distributed
# optimizer = ZeRO-1, selective recompute, sequence parallelism with tp > 1; see
# planner/reference/published_h100.json "about"). planner.frameworks may pass its own.
DEFAULTS = {"zero": 1, "recompute": 1, "sp": True}  # recompute: index in Recompute (selective)

# The tie band: plans whose step times differ by less than this fraction of the faster one tie
# (`1=`). It is the accuracy plan3d states for its step times, not the error it measures at this
# version: `plan3d validate`'s median |error| on the published runs must stay within 5 % on every
# GPU that has them (A100 4.1 %, H100 4.95 % now — inside it by 0.05 points since Megatron's
# per-chunk overlap under the interleaved schedule; tests/outputs/test_ux.py asserts it, so a model
# change that breaks the statement fails there and the statement is revisited, not silently
# widened). When the band was the measured median itself it moved 4.9 → 5.3 → 4.6 → 4.2 % in one
# session as the model was refined, relabelling ties each time; a stated bound keeps a tie a tie
# across versions. One band for every GPU: on a GPU without published runs nothing narrower is
# known.
TIE_BAND = 0.05
TIE_BAND_SOURCE = ("the accuracy plan3d states for its step times: plan3d validate's median "
                   "|error| on published runs within 5% on every GPU that has them")

# Step times equal to a nanosecond are one step time (the search computes them in float64 along
# several paths, so they can differ in the last bits); a total order on the rounded value.
STEP_RESOLUTION_S = 1e-9
MARGIN_MARK = "m"  # a plan that fits only inside the memory margin
TIE_MARK = "="  # a plan within the tie band of the row its group starts with
SHOWN_IN_MARGIN = 2  # margin-only plans faster than row 1 that the table still shows


def preference_keys(cols: dict, idx: np.ndarray, defaults: dict | None = None) -> tuple:
    """The keys that order plans of equal step time (np.lexsort order: the last is primary):
    first simplicity — how many of pp, cp, vpp are in use, then vpp, cp, pp, tp themselves — then
    how many settings differ from the framework's defaults (ZeRO stage, recompute, sequence
    parallelism with tp > 1, the context-parallel kind, offload), then the micro-batch size."""
    d = DEFAULTS if defaults is None else defaults
    c = {k: np.asarray(cols[k])[idx] for k in ("tp", "pp", "cp", "vpp", "zero", "recompute",
                                                "sp", "mbs")}
    extra = (c["pp"] > 1).astype(int) + (c["cp"] > 1) + (c["vpp"] > 1)
    off = ((c["zero"] != d["zero"]).astype(int) + (c["recompute"] != d["recompute"])
           + ((c["tp"] > 1) & (c["sp"].astype(bool) != d["sp"])))
    off = off + _cp_kind_off(cols, idx, c["cp"], d) + offloaded(cols, idx)
    return (c["mbs"], off, c["tp"], c["pp"], c["cp"], c["vpp"], extra)


def preference(cols: dict, idx: np.ndarray, defaults: dict | None = None) -> np.ndarray:
    """Each candidate's place (0 first) by preference_keys alone."""
    rank = np.empty(len(idx), dtype=np.int64)
    rank[np.lexsort(preference_keys(cols, idx, defaults))] = np.arange(len(idx))
    return rank


def _cp_kind_off(cols: dict, idx: np.ndarray, cp: np.ndarray, d: dict) -> np.ndarray:
    """cp-kind: 1 where a candidate with cp > 1 runs another context-parallel kind than the
    framework's default (`d["cp_kind"]`: the ring, c_a = 1; all-to-all, c_a = cp), else 0."""
    if "cp_a2a" not in cols or "cp_kind" not in d:
        return np.zeros(len(idx), dtype=int)
    c_a = np.asarray(cols["cp_a2a"])[idx]
    default = np.ones_like(c_a) if d["cp_kind"].value == "p2p" else cp
    return ((c_a != default) & (cp > 1)).astype(int)


def offloaded(cols: dict, idx: np.ndarray) -> np.ndarray:
    """offload: 1 for the candidates that offload to host memory (search columns off_opt,
    off_params, off_act; 0 where the search tried no offload)."""
    if "off_opt" not in cols:
        return np.zeros(len(idx), dtype=int)
    return ((np.asarray(cols["off_opt"])[idx] > 0) | (np.asarray(cols["off_params"])[idx] > 0)
            | (np.asarray(cols["off_act"])[idx] > 0)).astype(int)


def check_headroom(headroom: float) -> None:
    """--headroom is a fraction of capacity in [0, 1)."""
    from ..errors import PlanError

    if not 0 <= headroom < 1:  # false for nan
        raise PlanError(f"--headroom is the fraction of memory a recommended plan leaves free, in "
                        f"[0, 1) (default {DEFAULT_HEADROOM:g}), got {headroom:g}")


def in_margin(total_bytes: np.ndarray, capacity_bytes: float, headroom: float) -> np.ndarray:
    """True where a plan fits only inside the margin: above (1 − headroom)·capacity."""
    return np.asarray(total_bytes) > capacity_bytes * (1 - headroom)


def rule_order(cols: dict, step: np.ndarray, margin: np.ndarray, idx: np.ndarray,
               defaults: dict | None = None) -> np.ndarray:
    """`idx` (candidate indices) in the rule's total order: plans outside the margin first, then
    by step time (to STEP_RESOLUTION_S), then by preference_keys. `margin` and `step` are indexed
    by candidate."""
    idx = np.asarray(idx, dtype=np.int64)
    if idx.size == 0:
        return idx
    ticks = np.round(np.asarray(step)[idx] / STEP_RESOLUTION_S)
    keys = (*preference_keys(cols, idx, defaults), ticks, np.asarray(margin)[idx])
    return idx[np.lexsort(keys)]


@dataclass(frozen=True)
class Ranking:
    """The table's rows: candidate indices in order, each row's label (`1`, `1=` tied with the
    row its group starts with, `m` fits only inside the margin), how many variants of its layout
    each row folds in, and whether any plan fits with the margin."""

    rows: list[int]
    labels: list[str]
    folded: list[int]
    any_safe: bool
    ties: int = 0  # how many layouts tie with row 1, shown or not (--top 1 shows none of them)


def layouts_in_order(cols: dict, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first candidate of each layout (dp, tp, pp, cp) in `order` (already in the rule's
    order), in that order, and how many candidates each layout has."""
    # one int64 per layout (each degree < 2¹⁶, four of them in 64 bits): a 1-D unique, several
    # times faster than np.unique over rows
    key = np.zeros(order.size, dtype=np.int64)
    for k in LAYOUT_KEYS:
        key = (key << 16) | np.asarray(cols[k])[order].astype(np.int64)
    _, first, counts = np.unique(key, return_index=True, return_counts=True)
    by_place = np.argsort(first, kind="stable")
    return order[first[by_place]], counts[by_place]


def layout_firsts(cols: dict, step: np.ndarray, margin: np.ndarray, fits: np.ndarray,
                  defaults: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """What layouts_in_order(cols, rule_order(...fits...)) gives — each layout's first candidate
    by the rule, the layouts in the rule's order, and how many candidates each has — without
    computing the preference keys of the whole space or sorting it: each candidate's layout is
    numbered densely in (dp, tp, pp, cp) order, the best (margin, step) of each layout found by
    one pass (np.minimum.at), and the preference keys read only for the candidates that tie for
    their layout's first place."""
    if fits.size == 0:
        return fits, fits
    layout = _dense_layouts(cols, fits)  # 0 … n − 1 in (dp, tp, pp, cp) order
    ticks = np.round(step[fits] / STEP_RESOLUTION_S)  # < 2⁵⁵ for steps < 3·10⁷ s
    if not ticks.max() < 2**55:  # absurd inputs (a step of years) or NaN: the ticks' ranks, which
        ticks = np.unique(ticks, return_inverse=True)[1]  # keep their order and fit in 55 bits
    primary = (margin[fits].astype(np.int64) << 55) | ticks.astype(np.int64)
    best = np.full(int(layout.max()) + 1, np.iinfo(np.int64).max)
    np.minimum.at(best, layout, primary)
    tied = primary == best[layout]  # the candidates sharing their layout's best (margin, step)
    counts = np.bincount(layout)
    seen = counts > 0
    group = (np.cumsum(seen) - 1)[layout[tied]]  # which layout each tied candidate belongs to
    cand = fits[tied]  # in the order of fits, as a stable sort by layout and step leaves them
    pick = np.lexsort((*preference_keys(cols, cand, defaults), group))
    first_of = np.r_[True, group[pick][1:] != group[pick][:-1]]
    firsts = cand[pick][first_of]  # one per layout, in layout order
    # the layouts in the rule's order (equal in every key: by candidate index, as rule_order)
    order = rule_order(cols, step, margin, np.sort(firsts), defaults)
    return order, _counts_in_order(firsts, counts[seen], order)


def _dense_layouts(cols: dict, rows: np.ndarray) -> np.ndarray:
    """Each row's layout (dp, tp, pp, cp) as a dense number that sorts as the layouts do (by dp,
    then tp, pp, cp): each degree replaced by its rank among the degrees present (a bincount, no
    sort: degrees are small whole numbers)."""
    layout = np.zeros(rows.size, dtype=np.int64)
    for k in LAYOUT_KEYS:
        v = np.asarray(cols[k])[rows].astype(np.int64)
        seen = np.bincount(v) > 0
        layout = layout * int(seen.sum()) + (np.cumsum(seen) - 1)[v]
    return layout


def _counts_in_order(firsts: np.ndarray, counts: np.ndarray, order: np.ndarray) -> np.ndarray:
    """counts (aligned with firsts) rearranged to follow order (a permutation of firsts)."""
    where = {int(f): int(c) for f, c in zip(firsts, counts)}
    return np.array([where[int(i)] for i in order], dtype=np.int64)


def tie_labels(step: np.ndarray, rows: list[int], band: float, start: int = 1) -> list[str]:
    """Labels of rows already in step order: a group starts at a row and holds every later row
    whose step is within `band` of it; the first row of a group is labelled by its place, the
    others by the same place and TIE_MARK ("1", "1=", "1=", "4", ...)."""
    labels: list[str] = []
    lead = None
    for place, i in enumerate(rows, start):
        if lead is not None and step[i] <= step[rows[lead - start]] * (1 + band):
            labels.append(f"{lead}{TIE_MARK}")
        else:
            lead = place
            labels.append(f"{place}")
    return labels


def rank(cols: dict, step: np.ndarray, total_bytes: np.ndarray, capacity_bytes: float,
         fits: np.ndarray, band: float, headroom: float, top: int,
         defaults: dict | None = None) -> Ranking:
    """The table: the `top` first layouts in the rule's order (row 1 the recommendation), then up
    to SHOWN_IN_MARGIN plans faster than row 1 that fit only inside the margin, marked (the
    fastest of each layout: see faster_in_margin). Where no plan fits with the margin, the rows
    are the plans that fit at all, each marked."""
    step = np.asarray(step, dtype=float)
    margin = in_margin(total_bytes, capacity_bytes, headroom)
    fits = np.asarray(fits, dtype=np.int64)
    firsts, counts = layout_firsts(cols, step, margin, fits, defaults)
    safe_rows = firsts[~margin[firsts]]
    if safe_rows.size == 0:
        rows = [int(i) for i in firsts[:top]]
        labels = [f"{lab}{MARGIN_MARK}" for lab in tie_labels(step, rows, band)]
        return Ranking(rows, labels, [int(c) - 1 for c in counts[:top]], any_safe=False,
                       ties=_ties_with_first(step, firsts, band))
    rows = [int(i) for i in safe_rows[:top]]
    labels = tie_labels(step, rows, band)
    folded_of = dict(zip((int(i) for i in firsts), (int(c) - 1 for c in counts)))
    faster, faster_counts = faster_in_margin(cols, step, margin, fits, step[rows[0]], defaults)
    # a margin row whose layout has a row above folds nothing more (that row counts its variants)
    shown = {_layout(cols, i) for i in rows}
    folded = [folded_of[i] for i in rows] + [
        0 if _layout(cols, i) in shown else folded_of.get(i, int(c) - 1)
        for i, c in zip(faster, faster_counts)]
    return Ranking(rows + faster, labels + [MARGIN_MARK] * len(faster), folded, any_safe=True,
                   ties=_ties_with_first(step, safe_rows, band))


def faster_in_margin(cols: dict, step: np.ndarray, margin: np.ndarray, fits: np.ndarray,
                     than_s: float, defaults: dict | None = None) -> tuple[list[int], list[int]]:
    """The plans the table shows marked MARGIN_MARK: among the plans that fit only inside the
    margin and step faster than row 1 (`than_s`), the fastest of each layout (dp, tp, pp, cp) —
    a layout whose plan with the margin is ranked may be faster at another ZeRO stage, recompute
    or micro-batch size inside it — fastest first, at most SHOWN_IN_MARGIN; and how many such
    plans each layout has."""
    inside = fits[margin[fits] & (step[fits] < than_s)]
    if inside.size == 0:
        return [], []
    firsts, counts = layout_firsts(cols, step, margin, inside, defaults)
    return ([int(i) for i in firsts[:SHOWN_IN_MARGIN]],
            [int(c) for c in counts[:SHOWN_IN_MARGIN]])


def _layout(cols: dict, i: int) -> tuple[int, ...]:
    return tuple(int(np.asarray(cols[k])[i]) for k in LAYOUT_KEYS)


def _ties_with_first(step: np.ndarray, rows: np.ndarray, band: float) -> int:
    """How many of `rows` (in step order) after the first lie within `band` of its step: row 1's
    tie group, as tie_labels marks it, counted over every layout and not only those shown."""
    return int(np.count_nonzero(step[rows[1:]] <= step[rows[0]] * (1 + band)))
