"""An honest ranking: plans whose step times differ by less than the model's own uncertainty are
ties, shown as such (`1=`), and ordered inside a tie by simplicity and by what the framework runs
by default; one row per layout (dp, tp, pp, cp), its ZeRO, recompute, micro-batch and virtual-stage
variants folded into the simplest of those within the band of its fastest.

The band is the model's stated uncertainty (planner.validation.model_uncertainty: the median
|error| of the step times it predicts for published runs on the profile's GPU). Works on the
search's candidate arrays (numpy), so the whole feasible set is considered."""

from __future__ import annotations

import numpy as np

LAYOUT_KEYS = ("dp", "tp", "pp", "cp")

# What a framework runs when not told otherwise; a plan that asks for less is preferred inside a
# tie. The NeMo / Megatron-Bridge recipes' defaults (distributed optimizer = ZeRO-1, selective
# recompute, sequence parallelism with tp > 1; see planner/reference/published_h100.json "about").
# planner.frameworks may pass its own.
DEFAULTS = {"zero": 1, "recompute": 1, "sp": True}  # recompute: index in Recompute (selective)


def preference(cols: dict, idx: np.ndarray, defaults: dict | None = None) -> np.ndarray:
    """A sort key per candidate (lower first) for ordering inside a tie: first simplicity — how
    many of pp, cp, vpp are in use, then vpp, cp, pp, tp themselves — then how many settings
    differ from the framework's defaults (ZeRO stage, recompute, sequence parallelism with
    tp > 1), then the micro-batch size (smaller is the usual choice)."""
    d = DEFAULTS if defaults is None else defaults
    c = {k: np.asarray(cols[k])[idx] for k in ("tp", "pp", "cp", "vpp", "zero", "recompute",
                                                "sp", "mbs")}
    extra = (c["pp"] > 1).astype(int) + (c["cp"] > 1) + (c["vpp"] > 1)
    off = ((c["zero"] != d["zero"]).astype(int) + (c["recompute"] != d["recompute"])
           + ((c["tp"] > 1) & (c["sp"].astype(bool) != d["sp"])))
    off = off + _cp_kind_off(cols, idx, c["cp"], d)  # cp-kind
    off = off + offloaded(cols, idx)  # offload: no framework offloads by default
    keys = (c["mbs"], off, c["tp"], c["pp"], c["cp"], c["vpp"], extra)  # lexsort: last primary
    rank = np.empty(len(idx), dtype=np.int64)
    rank[np.lexsort(keys)] = np.arange(len(idx))
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


def distinct_layouts(cols: dict, step: np.ndarray, order: np.ndarray, top: int, band: float,
                     defaults: dict | None = None) -> tuple[list[int], list[int]]:
    """The `top` fastest layouts (dp, tp, pp, cp) of `order` (candidate indices, fastest first),
    each as one candidate: the most preferred of its variants whose step is within `band` of the
    layout's fastest. Returns (chosen indices, variants folded into each)."""
    if order.size == 0:
        return [], []
    # one int64 per layout (each degree < 2¹⁶, four of them in 64 bits): a 1-D unique, several
    # times faster than np.unique over rows
    key = np.zeros(order.size, dtype=np.int64)
    for k in LAYOUT_KEYS:
        key = (key << 16) | np.asarray(cols[k])[order].astype(np.int64)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    groups = np.argsort(first, kind="stable")[:top]  # layouts in order of their fastest plan
    chosen, folded = [], []
    for g in groups:
        members = order[inverse == g]  # fastest first
        near = members[step[members] <= step[members[0]] * (1 + band)]
        pick = near[np.argmin(preference(cols, near, defaults))]
        chosen.append(int(pick))
        folded.append(int(members.size - 1))
    return chosen, folded


def tie_order(cols: dict, step: np.ndarray, chosen: list[int], band: float,
              defaults: dict | None = None) -> tuple[list[int], list[str]]:
    """The chosen plans in tie groups: a group is a plan and every later plan within `band` of its
    step; groups in step order, plans inside one by preference. Returns (order, rank labels):
    `3` alone, `1=` for each member of a tie starting at place 1."""
    idx = np.array(sorted(chosen, key=lambda i: step[i]), dtype=np.int64)
    out, labels, i = [], [], 0
    while i < idx.size:
        lead = step[idx[i]]
        j = i
        while j < idx.size and step[idx[j]] <= lead * (1 + band):
            j += 1
        group = idx[i:j]
        group = group[np.argsort(preference(cols, group, defaults), kind="stable")]
        tie = "=" if group.size > 1 else ""
        out += [int(k) for k in group]
        labels += [f"{i + 1}{tie}"] * group.size
        i = j
    return out, labels
