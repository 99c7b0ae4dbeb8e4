"""Megatron's merged 1F1B (--overlap-moe-expert-parallel-comm) in the interleaved schedule: the
warm-up chunk forwards each rank runs alone (formulas.pipeline.warmup_chunk_forwards) against the
event simulation's order, the share of chunk passes merged (moe_dispatch.merged_pass_share) by
hand and as a symbolic identity, and the one layer more a merged pass holds in flight
(pipeline.merged_in_flight)."""

from __future__ import annotations

import itertools

import pytest
import sympy as sp

from planner.formulas import moe_dispatch as D
from planner.formulas import pipeline as PL
from planner.formulas.choices import Schedule
from planner.outputs.timeline import simulate


def test_warmup_chunk_forwards_by_hand():
    # schedules.py l. 964–970 @ d98e8a64dd: (p − r − 1)·2 + (v − 1)·p, + 1 under the overlap
    assert PL.warmup_chunk_forwards(0, 4, 8) == 6 + 28  # 34
    assert PL.warmup_chunk_forwards(0, 4, 8, extra=1) == 35
    assert PL.warmup_chunk_forwards(3, 4, 8, extra=1) == 0 + 28 + 1  # the last rank: 29
    # no pipeline (p = v = 1): the first forward alone (combined_1f1b_schedule_for_no_pipelining)
    assert PL.warmup_chunk_forwards(0, 1, 1, extra=1) == 1


@pytest.mark.parametrize("pp,vpp,m", [(2, 2, 4), (4, 2, 8), (4, 3, 8), (4, 8, 16), (8, 2, 16)])
def test_warmup_is_the_simulated_schedules(pp, vpp, m):
    """The forwards each rank of the simulated interleaved schedule (planner.outputs.timeline,
    written from Megatron's order on its own) runs before its first backward: the warm-up's and
    the first steady-state forward (whose backward-partner follows it)."""
    rows = simulate(Schedule.INTERLEAVED, pp, m, vpp).rows
    for rank, row in enumerate(rows):
        kinds = [b.kind for b in sorted(row, key=lambda b: b.start_s)]
        assert kinds.index("B") == min(PL.warmup_chunk_forwards(rank, pp, vpp) + 1, m * vpp)


def test_exposed_share_is_rank_zeros_passes_alone_symbolically():
    # m = p·(u + 2) (the interleaved schedule's m is a multiple of p; from 2p on some pass
    # merges), v = w + 1: rank 0 runs 2(p − 1) + (v − 1)·p + 1 = p·(v + 1) − 1 of its m·v chunk
    # forwards alone, so that share of the exchange stays exposed
    u, w = sp.symbols("u w", nonnegative=True, integer=True)
    p = sp.symbols("p", positive=True, integer=True)
    v, m = w + 1, p * (u + 2)
    share = D.merged_pass_share(sp.expand(m), v, sp.expand(PL.warmup_chunk_forwards(0, p, v, 1)))
    assert sp.simplify(1 - share - (p * (v + 1) - 1) / (m * v)) == 0
    # no pipeline: (m − 1)/m, as before
    n = sp.symbols("m", positive=True, integer=True)
    assert sp.simplify(D.merged_pass_share(n, 1, PL.warmup_chunk_forwards(0, 1, 1, 1))
                       - (n - 1) / n) == 0


def test_more_warmup_hides_less():
    for pp, vpp, m in itertools.product((2, 4, 8), (2, 4, 8), (8, 16, 64)):
        shares = [D.merged_pass_share(m, vpp, PL.warmup_chunk_forwards(r, pp, vpp, 1))
                  for r in range(pp)]
        assert shares == sorted(shares)  # rank 0 hides the least
        assert all(0 <= s < (m - 1) / m for s in shares)  # less than the old (m − 1)/m


def test_merged_in_flight_by_hand():
    # p = 4, v = 8, L_s = 16: rank 0 holds p + (p − 1)/v = 4.375 stages, + 1/16 of a layer
    assert PL.merged_in_flight(4.375, 16, 16, 1) == 4.4375
    assert PL.merged_in_flight(4.375, 16, 16, 0) == 4.375  # no overlap: as it was
    # one micro-batch (no pipeline): its forward and backward run alone, nothing merges
    assert PL.merged_in_flight(1, 61, 1, 1) == 1
