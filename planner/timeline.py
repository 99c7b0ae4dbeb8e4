"""Event-level simulation of one training step's pipeline schedule, and two pictures of it.

``simulate`` runs every stage's blocks of work (forward "F" / backward "B" of one micro-batch, of
one model chunk for the interleaved schedule) in the order the schedule prescribes, each block
starting as soon as its input is ready and its stage is free. Communication takes no time.
Sources for the per-stage orders:

* GPipe: all forwards, then all backwards (Huang et al. 2019, "GPipe", Fig. 2; drawn in
  micro-batch order as in Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
  on GPU Clusters Using Megatron-LM", Fig. 3).
* 1F1B / PipeDream-Flush: stage k runs min(p − k − 1, m) warm-up forwards, then alternates one
  forward and one backward, then drains the remaining backwards (Narayanan et al. 2021 §2.2.1,
  Fig. 4 top; Megatron-LM ``forward_backward_pipelining_without_interleaving``).
* Interleaved 1F1B: Megatron-LM ``forward_backward_pipelining_with_interleaving`` (Narayanan et
  al. 2021 §2.2.2, Fig. 4 bottom) with the default micro-batch group of p: micro-batches go
  through each model chunk in groups of p; stage k runs 2(p − k − 1) + (v − 1)·p warm-up
  chunk-forwards (all of them when that reaches v·m), then one chunk-forward and one
  chunk-backward in turn, backwards visiting the chunks in reverse order. Like Megatron (which
  raises for a remainder 0 < m mod p < p), this module requires m to be a multiple of p.

``to_text_rows``, ``to_text_cells`` and ``to_svg`` draw the result; neither imports rich nor prints (render.py
colours the text cells).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from xml.sax.saxutils import escape

from .errors import PlanError
from .formulas.choices import Schedule

__all__ = [
    "Block",
    "Timeline",
    "simulate",
    "peak_in_flight",
    "to_text_rows",
    "to_text_cells",
    "to_svg",
    "IDLE_CHAR",
]

IDLE_CHAR = "·"


@dataclass(frozen=True)
class Block:
    """One stage's forward ("F") or backward ("B") of one micro-batch (0-based ``micro``) through
    one model chunk (``chunk``, 0-based; always 0 unless interleaved), from ``start_s`` to
    ``end_s``. The chunk ``chunk`` of stage k holds virtual stage ``chunk · p + k``."""

    kind: str
    micro: int
    chunk: int
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        """end_s − start_s."""
        return self.end_s - self.start_s

    @property
    def label(self) -> str:
        """The micro-batch number as drawn, 1-based like the figures of Narayanan et al. 2021."""
        return str(self.micro + 1)


@dataclass(frozen=True)
class Timeline:
    """The simulated step: ``rows[k]`` is stage k's blocks in time order.

    ``bubble_fraction`` is the idle share of the step on the stage with the least work,
    1 − min_k busy_s[k] / makespan_s. Every stage does the same work, m·(fwd_s + bwd_s), so it is
    also each stage's idle share; for GPipe, 1F1B and interleaved 1F1B with m a multiple of p it
    equals planner.formulas.pipeline.bubble_fraction = (p − 1)/(v·m + p − 1)."""

    schedule: Schedule
    pp: int
    n_micro: int
    vpp: int
    fwd_s: float
    bwd_s: float
    rows: list[list[Block]]
    makespan_s: float
    busy_s: list[float]
    bubble_fraction: float

    @property
    def idle_s(self) -> list[float]:
        """Per stage: makespan_s − busy_s."""
        return [self.makespan_s - b for b in self.busy_s]


# --------------------------------------------------------------------------------------------
# Per-stage orders of work: lists of (kind, micro, chunk)


def _order_gpipe(pp: int, m: int, stage: int) -> list[tuple[str, int, int]]:
    """GPipe (Huang et al. 2019): every forward, then every backward."""
    return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]


def _order_1f1b(pp: int, m: int, stage: int) -> list[tuple[str, int, int]]:
    """PipeDream-Flush / 1F1B (Narayanan et al. 2021 §2.2.1): min(p − k − 1, m) warm-up
    forwards, then forward W + j followed by backward j, then the cool-down backwards."""
    warmup = min(pp - stage - 1, m)
    order = [("F", i, 0) for i in range(warmup)]
    for j in range(m - warmup):
        order += [("F", warmup + j, 0), ("B", j, 0)]
    order += [("B", j, 0) for j in range(m - warmup, m)]
    return order


def _interleaved_table(pp: int, m: int, vpp: int) -> list[tuple[int, int]]:
    """Megatron-LM's schedule table: virtual micro-batch id → (micro-batch, forward chunk).
    Groups of p micro-batches pass through chunk 0, then chunk 1, … (group size = p, the default
    ``microbatch_group_size_per_vp_stage``)."""
    table = []
    for first in range(0, m, pp):
        group = range(first, min(first + pp, m))
        table += [(i, c) for c in range(vpp) for i in group]
    return table


def _order_interleaved(pp: int, m: int, vpp: int, stage: int) -> list[tuple[str, int, int]]:
    """Interleaved 1F1B (Narayanan et al. 2021 §2.2.2; Megatron-LM
    ``forward_backward_pipelining_with_interleaving``): 2(p − k − 1) + (v − 1)·p warm-up
    chunk-forwards (all v·m if that is not fewer), then chunk-forward W + j and chunk-backward j
    in turn; the j-th chunk-backward is the table's j-th entry with the chunk reversed."""
    table = _interleaved_table(pp, m, vpp)
    total = m * vpp
    warmup = min(2 * (pp - stage - 1) + (vpp - 1) * pp, total)

    def fwd(j):
        i, c = table[j]
        return ("F", i, c)

    def bwd(j):
        i, c = table[j]
        return ("B", i, vpp - 1 - c)

    order = [fwd(j) for j in range(warmup)]
    for j in range(total - warmup):
        order += [fwd(warmup + j), bwd(j)]
    order += [bwd(j) for j in range(total - warmup, total)]
    return order


def _dependency(kind, micro, chunk, stage, pp, vpp):
    """The block whose end a block waits for, as (kind, micro, chunk, stage), or None.

    Virtual stage s = chunk·p + stage. F on s waits for F on s − 1; B on s waits for B on s + 1;
    B on the last virtual stage waits for that stage's F of the same micro-batch."""
    s = chunk * pp + stage
    last = vpp * pp - 1
    if kind == "F":
        if s == 0:
            return None
        return ("F", micro, (s - 1) // pp, (s - 1) % pp)
    if s == last:
        return ("F", micro, chunk, stage)
    return ("B", micro, (s + 1) // pp, (s + 1) % pp)


def _check(schedule: Schedule, pp: int, n_micro: int, vpp: int, fwd_s: float, bwd_s: float):
    for name, value in (("pp", pp), ("n_micro", n_micro), ("vpp", vpp)):
        if not isinstance(value, int) or value < 1:
            raise PlanError(f"{name} must be a positive integer, got {value!r}")
    if not (fwd_s > 0 and bwd_s > 0 and math.isfinite(fwd_s) and math.isfinite(bwd_s)):
        raise PlanError(f"fwd_s and bwd_s must be positive, got {fwd_s!r} and {bwd_s!r}")
    schedule = Schedule(schedule)
    if schedule is Schedule.INTERLEAVED:
        if n_micro % pp:
            raise PlanError(
                f"the interleaved schedule needs n_micro to be a multiple of pp "
                f"(Megatron-LM's micro-batch groups of pp); got n_micro={n_micro}, pp={pp}"
            )
    elif vpp != 1:
        raise PlanError(
            f"vpp={vpp} needs schedule 'interleaved'; '{schedule.value}' runs one chunk per stage"
        )
    return schedule


def simulate(
    schedule: Schedule,
    pp: int,
    n_micro: int,
    vpp: int = 1,
    fwd_s: float = 1.0,
    bwd_s: float = 2.0,
) -> Timeline:
    """Simulate one step of ``schedule`` on ``pp`` stages with ``n_micro`` micro-batches.

    ``fwd_s`` / ``bwd_s``: one stage's forward / backward time for one whole micro-batch; an
    interleaved chunk takes fwd_s/vpp and bwd_s/vpp. Each stage runs its blocks in the order of
    the schedule (GPipe: Huang et al. 2019; 1F1B: Narayanan et al. 2021 §2.2.1; interleaved:
    Narayanan et al. 2021 §2.2.2 as implemented in Megatron-LM, m a multiple of p); a block starts
    at max(its stage is free, its input is ready). Communication is instantaneous.

    >>> simulate(Schedule.ONE_F_ONE_B, 4, 8).makespan_s   # (m + p − 1)·(f + b)
    33.0
    """
    schedule = _check(schedule, pp, n_micro, vpp, fwd_s, bwd_s)
    if schedule is Schedule.GPIPE:
        orders = [_order_gpipe(pp, n_micro, k) for k in range(pp)]
    elif schedule is Schedule.ONE_F_ONE_B:
        orders = [_order_1f1b(pp, n_micro, k) for k in range(pp)]
    else:
        orders = [_order_interleaved(pp, n_micro, vpp, k) for k in range(pp)]

    dur = {"F": fwd_s / vpp, "B": bwd_s / vpp}
    ends: dict[tuple[str, int, int, int], float] = {}
    rows: list[list[Block]] = [[] for _ in range(pp)]
    free = [0.0] * pp
    nxt = [0] * pp
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for k in range(pp):
            while nxt[k] < len(orders[k]):
                kind, micro, chunk = orders[k][nxt[k]]
                dep = _dependency(kind, micro, chunk, k, pp, vpp)
                if dep is not None and dep not in ends:
                    break
                start = max(free[k], ends[dep] if dep is not None else 0.0)
                end = start + dur[kind]
                ends[(kind, micro, chunk, k)] = end
                rows[k].append(Block(kind, micro, chunk, start, end))
                free[k] = end
                nxt[k] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - the orders above never deadlock
            raise RuntimeError(f"pipeline schedule {schedule.value} deadlocked")

    makespan = max(free)
    busy = [sum(b.duration_s for b in row) for row in rows]
    return Timeline(
        schedule=schedule, pp=pp, n_micro=n_micro, vpp=vpp, fwd_s=fwd_s, bwd_s=bwd_s,
        rows=rows, makespan_s=makespan, busy_s=busy,
        bubble_fraction=1.0 - min(busy) / makespan,
    )


def peak_in_flight(timeline: Timeline) -> list[float]:
    """Per stage, the most micro-batches whose forward has started and whose backward has not
    finished, a chunk counting 1/v: the activations the stage holds at its peak. Compare
    planner.formulas.pipeline.in_flight_first_stage / in_flight_last_stage (GPipe m; 1F1B
    min(p, m) first, 1 last — Narayanan et al. 2021 §2.2.1; interleaved p + (p − 1)/v first,
    ((v − 1)·p + 1)/v last — Korthikanti et al. 2022 §4.2.3)."""
    peaks = []
    for row in timeline.rows:
        held = peak = 0
        for block in row:
            if block.kind == "F":
                held += 1
                peak = max(peak, held)
            else:
                held -= 1
        peaks.append(peak / timeline.vpp)
    return peaks


# --------------------------------------------------------------------------------------------
# Text


def to_text_rows(timeline: Timeline, width: int) -> list[list[tuple[str, str]]]:
    """Per stage, ``width`` cells (character, kind) spanning the step to scale: column c shows
    what runs at the middle of [c, c + 1)·makespan/width — kind "F" or "B" with the last digit
    of the 1-based micro-batch number, or kind "idle" with ``IDLE_CHAR``. Pure data for
    render.py to colour."""
    if not isinstance(width, int) or width < 1:
        raise PlanError(f"width must be a positive integer, got {width!r}")
    out = []
    for row in timeline.rows:
        cells = []
        j = 0
        for c in range(width):
            t = (c + 0.5) * timeline.makespan_s / width
            while j < len(row) and row[j].end_s <= t:
                j += 1
            if j < len(row) and row[j].start_s <= t:
                cells.append((row[j].label[-1], row[j].kind))
            else:
                cells.append((IDLE_CHAR, "idle"))
        out.append(cells)
    return out


FILL_CHARS = {"F": "-", "B": "=", "head": "h"}


def to_text_cells(timeline: Timeline, width: int, head_s: float = 0.0) -> list[list[tuple[str, str]]]:
    """Per stage, ``width`` cells (character, kind) drawing the step to scale, readable without
    colour: each block covers the columns of its time span (at least one), starts with its kind
    and 1-based micro-batch number (``F3``, ``B12``; as much as fits) and is filled with ``-``
    (forward) or ``=`` (backward); idle time is ``IDLE_CHAR``. On the last stage the first
    ``head_s`` of each backward block of its last chunk (the LM head and loss, which the last
    stage alone runs, once per micro-batch, and which sets the stage time) is drawn as ``h``,
    kind "head". Pure data for render.py."""
    if not isinstance(width, int) or width < 1:
        raise PlanError(f"width must be a positive integer, got {width!r}")
    scale = width / timeline.makespan_s if timeline.makespan_s > 0 else 0.0
    out = []
    last = len(timeline.rows) - 1
    for k, row in enumerate(timeline.rows):
        cells = [(IDLE_CHAR, "idle")] * width
        for b in row:
            c0 = min(width - 1, int(round(b.start_s * scale)))
            c1 = max(c0 + 1, min(width, int(round(b.end_s * scale))))
            span = c1 - c0
            text = f"{b.kind}{b.label}"[:span]
            fill = [(FILL_CHARS[b.kind], b.kind)] * span
            if k == last and b.kind == "B" and b.chunk == timeline.vpp - 1 and head_s > 0:
                n_head = min(span - 1, int(round(head_s * scale)))
                fill[:n_head] = [(FILL_CHARS["head"], "head")] * n_head
                start = n_head
            else:
                start = 0
            room = span - start
            for i, ch in enumerate(text[:room]):
                fill[start + i] = (ch, b.kind)
            cells[c0:c1] = fill
        out.append(cells)
    return out


# --------------------------------------------------------------------------------------------
# SVG

_FILL = {"F": "#4c78a8", "B": "#f58518"}
_IDLE_FILL = "#eeeeee"
_SCHEDULE_NAME = {
    Schedule.GPIPE: "GPipe",
    Schedule.ONE_F_ONE_B: "1F1B",
    Schedule.INTERLEAVED: "interleaved 1F1B",
}


def _nice_step(span: float, target: int = 8) -> float:
    """A 1, 2 or 5 × 10^k step giving about ``target`` ticks over ``span``."""
    raw = span / target
    power = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 5, 10):
        if mult * power >= raw:
            return mult * power
    return 10 * power  # pragma: no cover


def _fmt(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def to_svg(timeline: Timeline, title: str = "") -> str:
    """A standalone SVG picture of the step: one row per stage, one ``<rect class="block F|B">``
    per block (forward and backward in two colours, later interleaved chunks lighter, the
    1-based micro-batch number written where it fits), idle time as the grey row behind, a time
    axis in ms, a legend and a caption with the bubble fraction. Standard library only."""
    tl = timeline
    left, right, top, row_h, gap = 80, 20, 40 if title else 20, 26, 6
    shortest = min(tl.fwd_s, tl.bwd_s) / tl.vpp
    plot_w = round(max(600.0, min(1400.0, 18 * tl.makespan_s / shortest)))
    plot_h = tl.pp * (row_h + gap) - gap
    axis_y = top + plot_h + 8
    legend_y = axis_y + 40
    height = legend_y + 50
    width = left + plot_w + right
    scale = plot_w / tl.makespan_s  # px per second

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect class="background" x="0" y="0" width="{width}" height="{height}" fill="white"/>',
    ]
    if title:
        out.append(
            f'<text class="title" x="{left}" y="22" font-size="15" font-weight="bold">'
            f"{escape(title)}</text>"
        )
    for k, row in enumerate(tl.rows):
        y = top + k * (row_h + gap)
        out.append(
            f'<text x="{left - 8}" y="{y + row_h / 2 + 4:.1f}" text-anchor="end">GPU {k}</text>'
        )
        out.append(
            f'<rect class="idle" x="{left}" y="{y}" width="{plot_w}" height="{row_h}" '
            f'fill="{_IDLE_FILL}"/>'
        )
        for b in row:
            x = left + b.start_s * scale
            w = b.duration_s * scale
            opacity = 1.0 - 0.45 * b.chunk / (tl.vpp - 1) if tl.vpp > 1 else 1.0
            tip = (
                f"{b.kind} micro-batch {b.label}"
                + (f" chunk {b.chunk}" if tl.vpp > 1 else "")
                + f" on GPU {k}: {_fmt(b.start_s * 1e3)}–{_fmt(b.end_s * 1e3)} ms"
            )
            out.append(
                f'<rect class="block {b.kind}" data-micro="{b.micro}" data-chunk="{b.chunk}" '
                f'x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h}" fill="{_FILL[b.kind]}" '
                f'fill-opacity="{opacity:.2f}" stroke="white" stroke-width="1">'
                f"<title>{escape(tip)}</title></rect>"
            )
            text = f"{b.kind}{b.label}"  # the same labels as the text picture
            if w >= 7 * len(text) + 4:
                out.append(
                    f'<text x="{x + w / 2:.2f}" y="{y + row_h / 2 + 4:.1f}" text-anchor="middle" '
                    f'fill="white" pointer-events="none">{text}</text>'
                )

    # Time axis in ms.
    span_ms = tl.makespan_s * 1e3
    step = _nice_step(span_ms)
    out.append(
        f'<line x1="{left}" y1="{axis_y}" x2="{left + plot_w}" y2="{axis_y}" stroke="black"/>'
    )
    n_ticks = int(math.floor(span_ms / step + 1e-9))
    for i in range(n_ticks + 1):
        t = i * step
        x = left + t / 1e3 * scale
        out.append(
            f'<line class="tick" x1="{x:.2f}" y1="{axis_y}" x2="{x:.2f}" y2="{axis_y + 5}" '
            f'stroke="black"/>'
        )
        out.append(
            f'<text x="{x:.2f}" y="{axis_y + 18}" text-anchor="middle">{_fmt(t)}</text>'
        )
    out.append(
        f'<text x="{left + plot_w}" y="{axis_y + 32}" text-anchor="end">time (ms)</text>'
    )

    # Legend.
    x = left
    for label, fill in (("forward", _FILL["F"]), ("backward", _FILL["B"]), ("idle", _IDLE_FILL)):
        out.append(
            f'<rect class="legend" x="{x}" y="{legend_y}" width="14" height="14" fill="{fill}" '
            f'stroke="#999999"/>'
        )
        out.append(f'<text x="{x + 20}" y="{legend_y + 12}">{label}</text>')
        x += 110

    # Caption.
    v_part = f", v = {tl.vpp}" if tl.schedule is Schedule.INTERLEAVED else ""
    caption = (
        f"{_SCHEDULE_NAME[tl.schedule]}: p = {tl.pp}, m = {tl.n_micro}{v_part}; "
        f"step {_fmt(tl.makespan_s * 1e3)} ms; bubble {tl.bubble_fraction:.1%}"
    )
    out.append(f'<text class="caption" x="{left}" y="{legend_y + 34}">{escape(caption)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
