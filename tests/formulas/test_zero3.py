"""formulas/zero3.py (DeepSpeed ZeRO-3's prefetch trace) by hand (tests/cases/zero3.toml), on
sympy symbols, and frameworks/deepspeed.deepspeed_zero3_gathers, which composes it with the
emitted settings."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import sympy as sp

from planner.formulas import zero3 as Z3
from planner.formulas.overlap import exposed_piece_s, pipelined_exposed_s
from planner.frameworks import deepspeed as DS

CASES = tomllib.loads((Path(__file__).parents[1] / "cases" / "zero3.toml").read_text())
B, L, R = 5e7, 1e9, 1e9


@pytest.mark.parametrize("case", CASES["trace"], ids=lambda c: f"psi={c['params']:g}")
def test_trace_calls_by_hand(case):
    psi, modules, reuse = case["params"], case["modules"], case.get("reuse_distance", R)
    s = psi / modules
    back = Z3.backward_gathered_elements(psi, L, reuse)
    assert back == pytest.approx(case["backward_params"], rel=1e-12)
    forward = Z3.prefetch_gather_calls(psi, s, B, L)
    assert forward == case["forward_calls"]
    assert Z3.prefetch_gather_calls(psi + back, s, B, L) - forward == case["backward_calls"]
    if reuse != R:
        return
    # the framework's composition, at the constants it emits, gives the same
    (f_calls, f_params), (b_calls, b_params) = DS.deepspeed_zero3_gathers(psi, modules)
    assert (f_calls, b_calls) == (case["forward_calls"], case["backward_calls"])
    assert (f_params, b_params) == pytest.approx((psi, case["backward_params"]), rel=1e-12)


@pytest.mark.parametrize("case", CASES["first"], ids=lambda c: f"e={c['first_param']}")
def test_first_fetch_by_hand(case):
    assert Z3.first_fetch_elements(case["first_param"], B) == case["expected"]


def test_emitted_defaults_are_deepspeeds():
    # deepspeed/runtime/zero/config.py @ edaa72212: the defaults, and the values the model uses
    assert (DS.PREFETCH_BUCKET_ELEMENTS, DS.MAX_LIVE_PARAMETERS, DS.MAX_REUSE_DISTANCE,
            DS.PARAM_PERSISTENCE_THRESHOLD, DS.REDUCE_BUCKET_ELEMENTS) == (
        B, L, R, 1e5, 5e8)
    assert DS.zero_settings(3) == {
        "reduce_bucket_size": 500_000_000, "stage3_prefetch_bucket_size": 50_000_000,
        "stage3_param_persistence_threshold": 100_000,
        "stage3_max_live_parameters": 1_000_000_000, "stage3_max_reuse_distance": 1_000_000_000}
    assert DS.zero_settings(2) == {"reduce_bucket_size": 500_000_000,
                                   "allgather_bucket_size": 500_000_000}
    assert DS.zero_settings(0) == {}


def test_calls_grow_by_one_per_module_past_the_live_budget():
    # property: past L, each further module of s elements adds exactly one call; below L a
    # further bucket's worth adds one
    s = 3e7
    for e in (1.2e9, 2.5e9, 7.77e9):
        assert Z3.prefetch_gather_calls(e + s, s, B, L) - Z3.prefetch_gather_calls(
            e, s, B, L) == 1
    assert Z3.prefetch_gather_calls(3e8 + B, s, B, L) - Z3.prefetch_gather_calls(
        3e8, s, B, L) == 1
    assert Z3.prefetch_gather_calls(0, s, B, L) == 0


def test_symbolic_forms():
    psi, s, e = sp.symbols("Psi s e", positive=True)
    n = Z3.prefetch_gather_calls(psi, s, B, L)
    assert n.subs({psi: 8_030_261_248, s: 8_030_261_248 / 226}) == 218
    assert Z3.first_fetch_elements(e, B).subs(e, 525_336_576) == 525_336_576


@pytest.mark.parametrize("comm, window, piece, pieces, want", [
    # 17 reduce buckets of 0.01 s beside the backward with 0.3 s of prefetched gathers, 2 s of
    # backward: compute-bound, only the last bucket shows: max(0.01, 0.47 − 2·16/17) = 0.01
    (0.47, 2.0, 0.01, 17, 0.01),
    # communication-bound: 3 s on the stream beside 1 s: max(0.01, 3 − 16/17) = 2.0588235
    (3.0, 1.0, 0.01, 17, 3.0 - 16 / 17),
    # nothing on the stream: nothing exposed
    (0.0, 1.0, 0.0, 4, 0.0),
])
def test_exposed_piece_by_hand(comm, window, piece, pieces, want):
    assert exposed_piece_s(comm, window, piece, pieces) == pytest.approx(want, rel=1e-12)


def test_exposed_piece_is_pipelined_with_the_average_piece():
    for c, w, n in ((1.0, 2.0, 10), (3.0, 1.0, 10), (0.8, 1.0, 4)):
        assert exposed_piece_s(c, w, c / n, n) == pipelined_exposed_s(c, w, n)
