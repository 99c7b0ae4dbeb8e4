"""formulas/overlap.py by hand, on each backend, and against a step-by-step simulation of the
stream it models (buckets launched as their gradients complete; gathers fetched ahead)."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.formulas.overlap import inline_gathers_s, pipelined_exposed_s


@pytest.mark.parametrize("comm, window, pieces, want", [
    # compute-bound: 10 buckets of 0.1 s each, 2 s of backward; bucket i ready at 0.2·i, done
    # 0.1 later, so only the last one (ready at 2.0) shows: max(1/10, 1 − 2·9/10) = 0.1
    (1.0, 2.0, 10, 0.1),
    # communication-bound: 10 buckets of 0.3 s, 1 s of backward; the first is ready at 0.1 and
    # the stream then runs 3 s without a gap: it ends at 3.1, 2.1 after the backward:
    # max(0.3, 3 − 1·9/10) = 2.1
    (3.0, 1.0, 10, 2.1),
    # one bucket (Megatron without --overlap-grad-reduce; later pipeline stages): all of it
    (0.5, 4.0, 1, 0.5),
    # no compute beside it: all of it, however many pieces
    (0.5, 0.0, 201, 0.5),
    # v = 4 pipeline chunks, each reduced after its last backward, p·b_c = 0.25 s apart
    # (window v·p·b_c = 1 s): max(0.8/4, 0.8 − 1·3/4) = max(0.2, 0.05) = 0.2
    (0.8, 1.0, 4, 0.2),
    # the same chunks with 1.2 s to move: max(0.3, 1.2 − 0.75) = 0.45
    (1.2, 1.0, 4, 0.45),
])
def test_pipelined_exposed_by_hand(comm, window, pieces, want):
    assert pipelined_exposed_s(comm, window, pieces) == pytest.approx(want, rel=1e-12)


def test_pipelined_exposed_limits_and_backends():
    # n → ∞ is the perfect overlap max(0, C − W): at n = 10⁹, 1 − 2 + 2/10⁹ < 10⁻⁹ = C/n
    assert pipelined_exposed_s(1.0, 2.0, 1e9) == pytest.approx(1e-9, rel=1e-6)
    assert pipelined_exposed_s(3.0, 1.0, 1e9) == pytest.approx(2.0, rel=1e-6)
    # numpy, element by element: the two rows of the first test
    got = pipelined_exposed_s(np.array([1.0, 3.0]), np.array([2.0, 1.0]), np.array([10, 10]))
    assert got == pytest.approx([0.1, 2.1], rel=1e-12)
    # sympy: the closed form, max(C/n, C − W·(n − 1)/n)
    c, w, n = sp.symbols("C W n", positive=True)
    expr = pipelined_exposed_s(c, w, n)
    assert float(expr.subs({c: 3.0, w: 1.0, n: 10})) == pytest.approx(2.1, rel=1e-12)
    assert sp.simplify(expr.subs(n, 1) - c) == 0


def test_inline_gathers_by_hand():
    # pp = 4: three later stages each gather 0.05 s whole before their first forward: 0.15 s
    assert inline_gathers_s(0.05, 4) == pytest.approx(0.15, rel=1e-12)
    assert inline_gathers_s(0.05, 1) == 0  # no later stage (or no overlap: one stage counted)


def simulated_reduce_s(comm, window, pieces):
    """One serial stream: piece i (of n) ready at i·W/n, each taking C/n; the time after W at
    which the last finishes."""
    done = 0.0
    for i in range(1, pieces + 1):
        done = max(done, i * window / pieces) + comm / pieces
    return done - window


def simulated_prefetch_s(comm, window, pieces, depth):
    """Gathers fetched `depth` pieces ahead on one serial stream, each C/n, before pieces of
    compute W/n each: the compute's total wait (the step's delay)."""
    stream, clock, finish = 0.0, 0.0, {}
    issued = 0
    for i in range(pieces):
        while issued < min(pieces, i + depth + 1):  # the piece about to run and `depth` ahead
            stream = max(stream, clock) + comm / pieces
            finish[issued] = stream
            issued += 1
        clock = max(clock, finish[i]) + window / pieces
    return clock - window


@settings(max_examples=200, deadline=None)
@given(st.floats(0.001, 10), st.floats(0.0, 10), st.integers(1, 60), st.integers(1, 4))
def test_closed_form_matches_the_stream(comm, window, pieces, depth):
    want = pipelined_exposed_s(comm, window, pieces)
    assert simulated_reduce_s(comm, window, pieces) == pytest.approx(want, rel=1e-9, abs=1e-12)
    # a prefetch one piece ahead, or several: the same for equal pieces
    assert simulated_prefetch_s(comm, window, pieces, depth) == pytest.approx(
        want, rel=1e-9, abs=1e-12)
