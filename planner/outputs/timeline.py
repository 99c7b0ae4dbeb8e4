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
* ZB-H1 / ZB-H2 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR 2024, §2 and Fig. 3):
  the backward split into B (input gradient) and W (weight gradient); stage k runs 1F1B's
  p − k − 1 warm-up forwards with its W k micro-batches late (ZB-H1), or 2(p − k − 1) warm-up
  forwards with its W 2k late (ZB-H2).
* ZB-V: PyTorch's ``ScheduleZBVZeroBubble`` (torch/distributed/pipelining/schedules.py), two
  chunks per GPU in a V (chunk 0 on stage k, chunk 1 on stage 2p − 1 − k).
* DualPipe and DualPipeV: the eight steps of ``step`` in deepseek-ai/DualPipe (dualpipe.py,
  dualpipev.py @ 3da1bbe), with its queue of deferred W and its overlapped F&B pairs, which
  start when both of their inputs have arrived.

``to_text_rows``, ``to_text_cells`` and ``to_svg`` draw the result; neither imports rich nor prints (render.py
colours the text cells).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from xml.sax.saxutils import escape

from ..errors import PlanError
from ..formulas.choices import Schedule

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
    whole: bool = True
    """For a "B" block: True when it is the whole backward; False when it computes the input
    gradient only and a "W" block (the weight gradient) follows later (Qi et al. 2024 §2)."""

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
    wgrad_s: float = 0.0
    """One stage's weight-gradient time for a whole micro-batch, for the schedules that split
    the backward (SPLIT_BACKWARD): B then takes bwd_s − wgrad_s, W wgrad_s. 0 for the others."""
    chunks_per_stage: int = 0
    """How many chunks make up one GPU's share of the layers: v for the interleaved schedule, 2
    for the V-shaped ones (ZB-V, DualPipeV), 1 otherwise — DualPipe's chunk 1 is a second whole
    stage (the reverse direction's), not a part of the first (0 is read as vpp)."""

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


SPLIT_BACKWARD = frozenset({Schedule.ZB_H1, Schedule.ZB_H2, Schedule.ZBV, Schedule.DUALPIPE,
                            Schedule.DUALPIPEV})
"""Schedules that split the backward into an input-gradient block "B" and a weight-gradient block
"W" (Qi et al. 2024 §2). In their orders "BW" is a whole backward (B then W at once), drawn as
one "B" block of the full backward's length."""

V_SHAPED = frozenset({Schedule.ZBV, Schedule.DUALPIPEV})
"""Two chunks per GPU in a V: chunk 0 is stage k, chunk 1 is stage 2p − 1 − k."""


def _order_zero_bubble(pp: int, m: int, stage: int, warmup: int, lag: int):
    """1F1B with the weight gradients deferred: ``warmup`` forwards, then forward, B and the W
    ``lag`` micro-batches behind, the remaining B each with its W, the remaining W last."""
    warmup = min(warmup, m)
    order = [("F", i, 0) for i in range(warmup)]
    done_w = 0
    for j in range(m):
        if warmup + j < m:
            order.append(("F", warmup + j, 0))
        order.append(("B", j, 0))
        if j >= lag:
            order.append(("W", done_w, 0))
            done_w += 1
    order += [("W", i, 0) for i in range(done_w, m)]
    return order


def _order_zb_h1(pp: int, m: int, stage: int) -> list[tuple[str, int, int]]:
    """ZB-H1 (Qi et al. 2024 §2.1, Fig. 3 top): stage k runs 1F1B's p − k − 1 warm-up forwards
    and defers its W by k micro-batches, so every stage holds p micro-batches at its peak."""
    return _order_zero_bubble(pp, m, stage, pp - stage - 1, stage)


def _order_zb_h2(pp: int, m: int, stage: int) -> list[tuple[str, int, int]]:
    """ZB-H2 (Qi et al. 2024 §2.2, Fig. 3 bottom): 2(p − k − 1) warm-up forwards and W deferred
    by 2k micro-batches: 2p − 1 micro-batches in flight on every stage."""
    return _order_zero_bubble(pp, m, stage, 2 * (pp - stage - 1), 2 * stage)


def _order_zbv(pp: int, m: int, rank: int) -> list[tuple[str, int, int]]:
    """ZB-V (Qi et al. 2024 arXiv v2 §6), as PyTorch builds it
    (torch/distributed/pipelining/schedules.py ``ScheduleZBVZeroBubble``): 2(p − k) − 1 chunk-0
    forwards; k pairs (chunk-1 forward, chunk-0 forward); p − k (chunk-1 F, B, W); then
    (chunk-0 F, B, W, chunk-1 F, B, W) until every forward ran; the cool-down runs k pairs of
    B (chunk 0, chunk 1), p − k (chunk-0 B, oldest chunk-0 W), then the remaining W. PyTorch
    plans for at least 2p − 1 micro-batches and drops those beyond m."""
    n = max(2 * pp - 1, m)
    order = []
    f = [0, 0]
    b = [0, 0]

    def forward(chunk):  # the chunk's next forward
        order.append(("F", f[chunk], chunk))
        f[chunk] += 1

    def backward(chunk, weight=True):  # the chunk's next backward, with its W unless deferred
        order.append(("B", b[chunk], chunk))
        if weight:
            order.append(("W", b[chunk], chunk))
        b[chunk] += 1

    for _ in range(2 * (pp - rank) - 1):
        forward(0)
    for _ in range(rank):
        forward(1)
        forward(0)
    for _ in range(pp - rank):
        forward(1)
        backward(1)
    while f[1] < f[0] or f[0] < n:
        if f[0] < n:
            forward(0)
        backward(0)
        forward(1)
        backward(1)
    w = list(b)
    for _ in range(rank):
        backward(0, weight=False)
        backward(1, weight=False)
    for _ in range(pp - rank):
        backward(0, weight=False)
        order.append(("W", w[0], 0))
        w[0] += 1
    order += [("W", i, 1) for i in range(w[1], b[1])]
    order += [("W", i, 0) for i in range(w[0], b[0])]
    return [op for op in order if op[1] < m]


class _DualOrder:
    """Builds one rank's order the way deepseek-ai/DualPipe's ``step`` issues its chunks: per
    phase, forwards and backwards take the next micro-batch in turn; a backward "with zero bubble"
    runs B now and queues its W, which ``weight`` pops oldest first (``WeightGradStore``)."""

    def __init__(self, chunk_of_phase, micro_of):
        self.chunk_of_phase, self.micro_of = chunk_of_phase, micro_of
        self.f, self.b, self.queue, self.order = [0, 0], [0, 0], [], []

    def forward(self, phase):
        chunk = self.chunk_of_phase[phase]
        self.order.append(("F", self.micro_of(chunk, self.f[phase]), chunk))
        self.f[phase] += 1

    def overlapped(self, f_phase, b_phase):
        """An F&B pair (``_forward_backward_chunk``): one forward and one whole backward run
        together, starting once both inputs have arrived; drawn as the forward, then the
        backward."""
        self.forward(f_phase)
        self.order[-1] = (*self.order[-1], "pair")
        self.backward(b_phase)

    def backward(self, phase, zero_bubble=False):
        chunk = self.chunk_of_phase[phase]
        micro = self.micro_of(chunk, self.b[phase])
        self.b[phase] += 1
        if zero_bubble:
            self.order.append(("B", micro, chunk))
            self.queue.append((micro, chunk))
        else:
            self.order.append(("BW", micro, chunk))

    def weight(self):
        if self.queue:
            micro, chunk = self.queue.pop(0)
            self.order.append(("W", micro, chunk))


def _dual_steps(o: _DualOrder, ranks: int, rank: int, chunks: int, middle: bool):
    """The eight steps of DualPipe's ``step`` (dualpipe.py) and DualPipeV's (dualpipev.py), for
    ``ranks`` ranks in one half (DualPipe: p/2, ``rank`` its half-rank; DualPipeV: p) and
    ``chunks`` micro-batches per phase. ``middle``: the rank that turns the micro-batches round,
    whose first main-step pair is not overlapped."""
    for _ in range(2 * (ranks - rank - 1)):  # step 1: nF0
        o.forward(0)
    for _ in range(rank + 1):  # step 2: nF0F1
        o.forward(0)
        o.forward(1)
    for _ in range(ranks - rank - 1):  # step 3: nB1W1F1, zero bubble
        o.backward(1, zero_bubble=True)
        o.weight()
        o.forward(1)
    for i in range(chunks - 2 * ranks + rank + 1):  # step 4: nF0B1F1B0 (two F&B pairs)
        if i == 0 and middle:
            o.forward(0)
            o.backward(1)
        else:
            o.overlapped(0, 1)
        o.overlapped(1, 0)
    for _ in range(ranks - rank - 1):  # step 5: nB1F1B0
        o.backward(1)
        o.overlapped(1, 0)
    zero_bubble = False  # step 6: nB1B0, the second half with zero bubble
    step_6 = rank + 1
    for i in range(step_6):
        if i == step_6 // 2 and rank % 2 == 1:
            zero_bubble = True
        o.backward(1, zero_bubble)
        if i == step_6 // 2 and rank % 2 == 0:
            zero_bubble = True
        o.backward(0, zero_bubble)
    for _ in range(ranks - rank - 1):  # step 7: nWB0, zero bubble
        o.weight()
        o.backward(0, zero_bubble=True)
    for _ in range(rank + 1):  # step 8: nW
        o.weight()


def _order_dualpipe(pp: int, m: int, rank: int) -> list[tuple[str, int, int]]:
    """DualPipe (DeepSeek-V3 report §3.2.1; deepseek-ai/DualPipe dualpipe.py ``step``): m/2
    micro-batches enter at rank 0 (chunk 0, micro-batches 0 … m/2 − 1) and m/2 at rank p − 1
    (chunk 1, micro-batches m/2 … m − 1). Ranks in the first half call the forward direction
    phase 0, those in the second half the reverse one; each runs the eight steps with its
    half-rank min(k, p − 1 − k)."""
    half = m // 2
    second = rank >= pp // 2
    o = _DualOrder((1, 0) if second else (0, 1), lambda chunk, i: chunk * half + i)
    _dual_steps(o, pp // 2, min(rank, pp - 1 - rank), half,
                rank in (pp // 2 - 1, pp // 2))
    return o.order


def _order_dualpipev(pp: int, m: int, rank: int) -> list[tuple[str, int, int]]:
    """DualPipeV (deepseek-ai/DualPipe dualpipev.py ``step``; PyTorch ``ScheduleDualPipeV``): the
    eight DualPipe steps on p ranks with m micro-batches through a V of 2p stages, chunk 0 going
    down (stage k) and chunk 1 coming back (stage 2p − 1 − k)."""
    o = _DualOrder((0, 1), lambda chunk, i: i)
    _dual_steps(o, pp, rank, m, rank == pp - 1)
    return o.order


def _route(schedule: Schedule, pp: int, vpp: int, micro: int, n_micro: int):
    """The (stage, chunk) a micro-batch's forward visits, in order (its backward goes back)."""
    if schedule in V_SHAPED:
        return [(k, 0) for k in range(pp)] + [(k, 1) for k in reversed(range(pp))]
    if schedule is Schedule.DUALPIPE:
        if micro < n_micro // 2:
            return [(k, 0) for k in range(pp)]
        return [(k, 1) for k in reversed(range(pp))]
    return [(s % pp, s // pp) for s in range(vpp * pp)]


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
    if schedule is Schedule.DUALPIPE and (pp % 2 or n_micro % 2 or n_micro < 2 * pp):
        raise PlanError(
            f"DualPipe needs an even pp and an even n_micro ≥ 2·pp (deepseek-ai/DualPipe "
            f"dualpipe.py); got pp={pp}, n_micro={n_micro}"
        )
    if schedule is Schedule.DUALPIPEV and n_micro < 2 * pp:
        raise PlanError(
            f"DualPipeV needs n_micro ≥ 2·pp (deepseek-ai/DualPipe dualpipev.py); got "
            f"pp={pp}, n_micro={n_micro}"
        )
    return schedule


def simulate(
    schedule: Schedule,
    pp: int,
    n_micro: int,
    vpp: int = 1,
    fwd_s: float = 1.0,
    bwd_s: float = 2.0,
    wgrad_s: float | None = None,
) -> Timeline:
    """Simulate one step of ``schedule`` on ``pp`` stages with ``n_micro`` micro-batches.

    ``fwd_s`` / ``bwd_s``: one stage's forward / backward time for one whole micro-batch; an
    interleaved chunk takes fwd_s/vpp and bwd_s/vpp. Each stage runs its blocks in the order of
    the schedule (GPipe: Huang et al. 2019; 1F1B: Narayanan et al. 2021 §2.2.1; interleaved:
    Narayanan et al. 2021 §2.2.2 as implemented in Megatron-LM, m a multiple of p); a block starts
    at max(its stage is free, its input is ready). Communication is instantaneous.

    The schedules that split the backward (SPLIT_BACKWARD: ZB-H1, ZB-H2, ZB-V, DualPipe,
    DualPipeV) run B in bwd_s − wgrad_s and W in wgrad_s (default bwd_s/2: the input- and
    weight-gradient GEMMs of a layer have the same FLOPs); the V-shaped ones split the stage into
    two chunks, each taking half of every time.

    >>> simulate(Schedule.ONE_F_ONE_B, 4, 8).makespan_s   # (m + p − 1)·(f + b)
    33.0
    """
    schedule = _check(schedule, pp, n_micro, vpp, fwd_s, bwd_s)
    if schedule in SPLIT_BACKWARD:
        return _simulate_split(schedule, pp, n_micro, fwd_s, bwd_s, wgrad_s)
    if schedule is Schedule.GPIPE:
        orders = [_order_gpipe(pp, n_micro, k) for k in range(pp)]
    elif schedule is Schedule.ONE_F_ONE_B:
        orders = [_order_1f1b(pp, n_micro, k) for k in range(pp)]
    else:
        orders = [_order_interleaved(pp, n_micro, vpp, k) for k in range(pp)]

    dur = {"F": fwd_s / vpp, "B": bwd_s / vpp}

    def needs(k, i):
        kind, micro, chunk = orders[k][i]
        dep = _dependency(kind, micro, chunk, k, pp, vpp)
        return [] if dep is None else [dep]

    def block(k, i, start):
        kind, micro, chunk = orders[k][i]
        return (kind, micro, chunk, k), Block(kind, micro, chunk, start, start + dur[kind])

    rows = _play(schedule, orders, needs, block)
    return _timeline(schedule, pp, n_micro, vpp, fwd_s, bwd_s, rows)


def _play(schedule: Schedule, orders, needs, block) -> list[list[Block]]:
    """The event rule every schedule shares: each stage k runs `orders[k]` in turn, its i-th
    block starting at max(the stage is free, every key `needs(k, i)` names has ended);
    `block(k, i, start)` gives the (key, Block) it ends. Returns the stages' rows."""
    ends: dict[tuple, float] = {}
    rows: list[list[Block]] = [[] for _ in orders]
    free = [0.0] * len(orders)
    nxt = [0] * len(orders)
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for k, order in enumerate(orders):
            while nxt[k] < len(order):
                deps = needs(k, nxt[k])
                if any(d not in ends for d in deps):
                    break
                key, b = block(k, nxt[k], max([free[k], *(ends[d] for d in deps)]))
                ends[key] = free[k] = b.end_s
                rows[k].append(b)
                nxt[k] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - the orders above never deadlock
            raise RuntimeError(f"pipeline schedule {schedule.value} deadlocked")
    return rows


def _timeline(schedule, pp, n_micro, vpp, fwd_s, bwd_s, rows, **more) -> Timeline:
    """The Timeline of simulated rows: makespan, each stage's busy time, the bubble."""
    makespan = max(row[-1].end_s for row in rows)
    busy = [sum(b.duration_s for b in row) for row in rows]
    return Timeline(schedule=schedule, pp=pp, n_micro=n_micro, vpp=vpp, fwd_s=fwd_s,
                    bwd_s=bwd_s, rows=rows, makespan_s=makespan, busy_s=busy,
                    bubble_fraction=1.0 - min(busy) / makespan, **more)


def _simulate_split(schedule, pp, n_micro, fwd_s, bwd_s, wgrad_s) -> Timeline:
    """simulate() for the schedules with B and W blocks: the same event rule, the dependencies
    read from each micro-batch's route (_route)."""
    wgrad_s = bwd_s / 2 if wgrad_s is None else wgrad_s
    if not (0 < wgrad_s < bwd_s and math.isfinite(wgrad_s)):
        raise PlanError(f"wgrad_s must lie between 0 and bwd_s = {bwd_s!r}, got {wgrad_s!r}")
    build = {Schedule.ZB_H1: _order_zb_h1, Schedule.ZB_H2: _order_zb_h2, Schedule.ZBV: _order_zbv,
             Schedule.DUALPIPE: _order_dualpipe, Schedule.DUALPIPEV: _order_dualpipev}[schedule]
    orders = [build(pp, n_micro, k) for k in range(pp)]
    share = 2 if schedule in V_SHAPED else 1  # a V's chunk is half the stage
    dur = {"F": fwd_s / share, "B": (bwd_s - wgrad_s) / share, "W": wgrad_s / share,
           "BW": bwd_s / share}
    routes = [_route(schedule, pp, 1, i, n_micro) for i in range(n_micro)]
    where = [{place: s for s, place in enumerate(route)} for route in routes]

    def dependency(kind, micro, chunk, rank):
        route, s = routes[micro], where[micro][(rank, chunk)]
        if kind == "F":
            return None if s == 0 else ("F", micro, *route[s - 1])
        if kind == "W":
            return ("B", micro, rank, chunk)
        if s == len(route) - 1:
            return ("F", micro, rank, chunk)
        return ("B", micro, *route[s + 1])

    def needs(k, i):
        kind, micro, chunk, *paired = orders[k][i]
        deps = [dependency(kind, micro, chunk, k)]
        if paired:  # an F&B pair starts when both of its inputs are there
            deps.append(dependency(*orders[k][i + 1], k))
        return [d for d in deps if d is not None]

    def block(k, i, start):
        kind, micro, chunk, *_ = orders[k][i]
        drawn = "B" if kind == "BW" else kind
        return ((drawn, micro, k, chunk),
                Block(drawn, micro, chunk, start, start + dur[kind], whole=kind != "B"))

    rows = _play(schedule, orders, needs, block)
    return _timeline(schedule, pp, n_micro, 1, fwd_s, bwd_s, rows, wgrad_s=wgrad_s,
                     chunks_per_stage=share)


def peak_in_flight(timeline: Timeline) -> list[float]:
    """Per stage, the most micro-batches whose forward has started and whose backward has not
    finished (with the backward split, whose W has not finished: W still reads the saved layer
    inputs), a chunk counting 1/v (1/2 in a V; DualPipe's chunk is a whole stage): the
    activations the stage holds at its peak. Compare
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
            elif block.kind == "W" or block.whole:
                held -= 1
        peaks.append(peak / (timeline.chunks_per_stage or timeline.vpp))
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


FILL_CHARS = {"F": "-", "B": "=", "W": "~", "head": "h"}


def to_text_cells(timeline: Timeline, width: int, head_s: float = 0.0) -> list[list[tuple[str, str]]]:
    """Per stage, ``width`` cells (character, kind) drawing the step to scale, readable without
    colour: each block covers the columns of its time span (at least one), starts with its kind
    and 1-based micro-batch number (``F3``, ``B12``; as much as fits) and is filled with ``-``
    (forward) or ``=`` (backward); idle time is ``IDLE_CHAR``. On the model's last stage (the
    last GPU's last chunk; GPU 0's second chunk in a V) the first ``head_s`` of each backward
    block (the LM head and loss, run once per micro-batch, which set the stage time) is drawn as
    ``h``, kind "head". Pure data for render.py."""
    if not isinstance(width, int) or width < 1:
        raise PlanError(f"width must be a positive integer, got {width!r}")
    scale = width / timeline.makespan_s if timeline.makespan_s > 0 else 0.0
    out = []
    last = len(timeline.rows) - 1
    # the model's last stage: the last GPU's last chunk, or in a V (ZB-V, DualPipeV) chunk 1 of
    # GPU 0 (stage 2p − 1)
    v_shape = timeline.schedule in (Schedule.ZBV, Schedule.DUALPIPEV)
    head_row, head_chunk = (0, 1) if v_shape else (last, timeline.vpp - 1)
    for k, row in enumerate(timeline.rows):
        cells = [(IDLE_CHAR, "idle")] * width
        for b in row:
            c0 = min(width - 1, int(round(b.start_s * scale)))
            c1 = max(c0 + 1, min(width, int(round(b.end_s * scale))))
            span = c1 - c0
            text = f"{b.kind}{b.label}"[:span]
            fill = [(FILL_CHARS[b.kind], b.kind)] * span
            if k == head_row and b.kind == "B" and b.chunk == head_chunk and head_s > 0:
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

_FILL = {"F": "#4c78a8", "B": "#f58518", "W": "#54a24b"}
_IDLE_FILL = "#eeeeee"
_SCHEDULE_NAME = {
    Schedule.GPIPE: "GPipe",
    Schedule.ONE_F_ONE_B: "1F1B",
    Schedule.INTERLEAVED: "interleaved 1F1B",
    Schedule.ZB_H1: "ZB-H1",
    Schedule.ZB_H2: "ZB-H2",
    Schedule.ZBV: "ZB-V",
    Schedule.DUALPIPE: "DualPipe",
    Schedule.DUALPIPEV: "DualPipeV",
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
    box = SimpleNamespace(left=left, top=top, row_h=row_h, gap=gap, plot_w=plot_w,
                          scale=plot_w / tl.makespan_s)  # px per second

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
        out += _svg_row(tl, k, row, box)
    out += _svg_axis(tl, axis_y, box)
    out += _svg_legend(tl, legend_y, left)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _svg_row(tl: Timeline, k: int, row, box) -> list[str]:
    """GPU k's row: its label, the idle background and its blocks."""
    left, row_h, scale = box.left, box.row_h, box.scale
    y = box.top + k * (row_h + box.gap)
    out = [
        f'<text x="{left - 8}" y="{y + row_h / 2 + 4:.1f}" text-anchor="end">GPU {k}</text>',
        f'<rect class="idle" x="{left}" y="{y}" width="{box.plot_w}" height="{row_h}" '
        f'fill="{_IDLE_FILL}"/>',
    ]
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
    return out


def _svg_axis(tl: Timeline, axis_y, box) -> list[str]:
    """The time axis in ms."""
    left, plot_w = box.left, box.plot_w
    span_ms = tl.makespan_s * 1e3
    step = _nice_step(span_ms)
    out = [f'<line x1="{left}" y1="{axis_y}" x2="{left + plot_w}" y2="{axis_y}" stroke="black"/>']
    n_ticks = int(math.floor(span_ms / step + 1e-9))
    for i in range(n_ticks + 1):
        t = i * step
        x = left + t / 1e3 * box.scale
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
    return out


def _svg_legend(tl: Timeline, legend_y, left) -> list[str]:
    """The legend and the caption with the bubble fraction."""
    out = []
    x = left
    legend = [("forward", _FILL["F"]), ("backward", _FILL["B"])]
    if tl.wgrad_s > 0:
        legend.append(("weight gradient", _FILL["W"]))
    for label, fill in (*legend, ("idle", _IDLE_FILL)):
        out.append(
            f'<rect class="legend" x="{x}" y="{legend_y}" width="14" height="14" fill="{fill}" '
            f'stroke="#999999"/>'
        )
        out.append(f'<text x="{x + 20}" y="{legend_y + 12}">{label}</text>')
        x += 110
    v_part = f", v = {tl.vpp}" if tl.schedule is Schedule.INTERLEAVED else ""
    caption = (
        f"{_SCHEDULE_NAME[tl.schedule]}: p = {tl.pp}, m = {tl.n_micro}{v_part}; "
        f"step {_fmt(tl.makespan_s * 1e3)} ms; bubble {tl.bubble_fraction:.1%}"
    )
    out.append(f'<text class="caption" x="{left}" y="{legend_y + 34}">{escape(caption)}</text>')
    return out
