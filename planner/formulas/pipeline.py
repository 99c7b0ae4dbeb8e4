"""Pipeline schedules: the bubble and the micro-batches each stage holds in flight.

p pipeline stages, m micro-batches per step (per data-parallel rank), v model chunks per GPU
(virtual stages) for the interleaved schedule.
"""

from __future__ import annotations

from . import _ops
from .choices import Schedule


def bubble_fraction(pp, n_micro, vpp=1):
    """Idle share of the step: (p − 1) / (v·m + p − 1).

    GPipe and 1F1B (v = 1): the pipeline fills and drains once per step, p − 1 slots of one
    micro-batch's time out of m + p − 1 (Huang et al. 2019; Narayanan et al. 2021 §2.2.1, whose
    bubble *time over ideal time* is (p − 1)/m). Interleaved: each slot is 1/v as long
    (Narayanan 2021 §2.2.2: (p − 1)/(v·m) over ideal time). At p = 4, m = 12: 3/15 = 1/5."""
    return (pp - 1) / (vpp * n_micro + pp - 1)


def pipeline_slots(pp, n_micro, vpp=1):
    """The step's length in units of one stage's time for one whole micro-batch:
    m + (p − 1)/v  (so that bubble_fraction = ((p − 1)/v) / slots)."""
    return n_micro + (pp - 1) / vpp


def in_flight_first_stage(pp, n_micro, vpp, schedule: Schedule):
    """Micro-batches whose activations the first stage holds at its peak, in units of a whole
    stage's layers.

    GPipe: m (all forwards before any backward).
    1F1B: min(p, m) (p − 1 warm-up forwards, then one more before the first backward).
    Interleaved: min(p + (p − 1)/v, m): Megatron's first rank runs 2(p − 1) + (v − 1)·p warm-up
    chunk-forwards plus one, each 1/v of the stage — Korthikanti 2022's factor (1 + (p−1)/(p·v))·p."""
    if schedule is Schedule.GPIPE:
        return n_micro
    if schedule is Schedule.ONE_F_ONE_B:
        return _ops.minimum(pp, n_micro)
    return _ops.minimum(pp + (pp - 1) / vpp, n_micro)


def in_flight_last_stage(pp, n_micro, vpp, schedule: Schedule):
    """The last stage's peak: GPipe m; 1F1B one (it runs each backward right after its forward);
    interleaved ((v − 1)·p + 1)/v (its warm-up is (v − 1)·p chunk-forwards)."""
    if schedule is Schedule.GPIPE:
        return n_micro
    if schedule is Schedule.ONE_F_ONE_B:
        return _ops.minimum(1, n_micro)
    return _ops.minimum(((vpp - 1) * pp + 1) / vpp, n_micro)
