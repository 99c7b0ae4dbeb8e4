"""NCCL's tuner model (planner/formulas/collectives.py): hand-derived cases for every algorithm
at small and large rank counts (tests/cases/collectives.toml, the arithmetic beside each), the
tuner's pick, and the same formulas on arrays and symbols."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from planner.formulas import collectives as K

CASES = tomllib.loads((Path(__file__).parents[1] / "cases" / "collectives.toml").read_text())
GB, US = 1e9, 1e-6
CLUSTER = dict(generation="hopper", cpu="intel", nvls_bw=480 * GB, sharp=True, nics_per_node=8)


def _coll(name):
    return next(c for c in K.Coll if c.value == name)


def _times(case):
    return K.candidate_times_s(_coll(case["coll"]), case["bytes"], case["n"], case["k"],
                               case["busbw_gb"] * GB,
                               net_busbw=case.get("net_busbw_gb", case["busbw_gb"]) * GB,
                               **CLUSTER)


@pytest.mark.parametrize("case", CASES["case"], ids=lambda c: f"{c['algo']}-{c['proto']}-{c['n']}")
def test_each_algorithm_and_protocol_by_hand(case):
    key = (K.Algo(case["algo"]), K.Proto[case["proto"]])
    assert _times(case)[key] / US == pytest.approx(case["expected_us"], rel=1e-6)


@pytest.mark.parametrize("case", CASES["pick"], ids=lambda c: f"{c['algo']}-{c['n']}")
def test_the_tuner_picks_the_fastest_enabled(case):
    cluster = {**CLUSTER, "sharp": case.get("sharp", False)}
    (algo, proto), t = K.nccl_choice(_coll(case["coll"]), case["bytes"], case["n"], case["k"],
                                     case["busbw_gb"] * GB, net_busbw=case["busbw_gb"] * GB,
                                     **cluster)
    assert (algo.value, proto.name) == (case["algo"], case["proto"])
    assert t <= min(_times(case).values()) if cluster["sharp"] else t == min(
        v for (a, _), v in _times(case).items()
        if a not in (K.Algo.COLLNET_DIRECT, K.Algo.COLLNET_CHAIN))


def test_send_recv_and_all_to_all_by_hand():
    for case in CASES["send_recv"]:
        t = K.send_recv_time_s(case["bytes"], case["busbw_gb"] * GB, case["inside"])
        assert t / US == pytest.approx(case["expected_us"], rel=1e-6)
    for case in CASES["all_to_all"]:
        t = K.all_to_all_time_s(case["bytes"], case["n"], case["busbw_gb"] * GB, case["inside"])
        assert t / US == pytest.approx(case["expected_us"], rel=1e-6)


def test_what_cannot_run_is_never_picked():
    # PAT needs one rank per node; NVLS-tree and CollNet need more than one node; NVLS one node
    one_node = K.candidate_times_s(K.Coll.ALL_REDUCE, 1e6, 8, 1, 370 * GB, net_busbw=46 * GB,
                                   **CLUSTER)
    for algo in (K.Algo.NVLS_TREE, K.Algo.COLLNET_DIRECT, K.Algo.COLLNET_CHAIN):
        assert one_node[(algo, K.Proto.SIMPLE)] == K.DISABLED_S
    gather = K.candidate_times_s(K.Coll.ALL_GATHER, 1e3, 16, 2, 368 * GB, **CLUSTER)
    assert gather[(K.Algo.PAT, K.Proto.SIMPLE)] == K.DISABLED_S  # 8 ranks per node
    assert (K.Algo.TREE, K.Proto.LL) not in gather  # the tree is all-reduce only
    plain = K.candidate_times_s(K.Coll.ALL_REDUCE, 1e6, 8, 1, 370 * GB)
    assert {a for a, _ in plain} == {K.Algo.RING, K.Algo.TREE}  # no NVLS, no SHARP given
    assert K.nccl_time_s(K.Coll.ALL_REDUCE, 1e6, 1, 1, 370 * GB) == 0  # one rank sends nothing


def test_a_thousand_small_collectives_cost_a_thousand_latencies():
    # 1 GB reduced in 1,000 buckets of 1 MB over 512 ranks on 64 nodes costs more than in one go
    # by about 999 latencies: ring LL's 6.6 + 448·1.0 + 63·2.7 (reduce-scatter, 624.7 µs) each
    one = K.nccl_time_s(K.Coll.REDUCE_SCATTER, 1e9, 512, 64, 368 * GB, **CLUSTER)
    many = K.many_collectives_s(1000, K.nccl_time_s(K.Coll.REDUCE_SCATTER, 1e6, 512, 64,
                                                    368 * GB, **CLUSTER))
    assert many - one > 999 * 624.7 * US * 0.7
    # and the latency grows with the ranks: linear for the ring, ~log for the tree
    ring = [K.ring_latency_s(K.Coll.ALL_REDUCE, K.Proto.SIMPLE, 8 * k, k) for k in (2, 4, 8, 16)]
    tree = [K.tree_latency_s(K.Proto.SIMPLE, 8 * k, k) for k in (2, 4, 8, 16)]
    assert np.all(np.diff(ring) > 0) and np.allclose(np.diff(tree), 2 * 14 * US)


def test_arrays_agree_with_floats_row_by_row():
    sizes = np.array([1e3, 1e5, 1e6, 3e7, 1e9, 4e9])
    ranks = np.array([8.0, 64, 512, 64, 1024, 16])
    nodes = np.array([1.0, 8, 64, 64, 128, 2])
    for coll in K.Coll:
        vec = K.nccl_time_s(coll, sizes, ranks, nodes, 368 * GB, net_busbw=368 * GB, **CLUSTER)
        one = [K.nccl_time_s(coll, float(b), float(n), float(k), 368 * GB, net_busbw=368 * GB,
                             **CLUSTER) for b, n, k in zip(sizes, ranks, nodes)]
        assert np.allclose(vec, one, rtol=1e-12)


def test_symbols_give_the_papers_ring_and_tree():
    m, k, B, W = sp.symbols("m k B W", positive=True)
    n = m + 2  # two ranks or more
    # one node: ring Simple all-reduce = 8.4 + 2(n − 1)·3.4 µs + B·2(n − 1)/(n·W)
    ring = K.ring_time_s(K.Coll.ALL_REDUCE, K.Proto.SIMPLE, B, n, 1, W, 141 * GB)
    want = (sp.Rational(84, 10) + 2 * (n - 1) * sp.Rational(34, 10)) * sp.Float(US) \
        + B * 2 * (n - 1) / (n * W)
    assert sp.simplify(ring - want).evalf(chop=True) == 0
    # tree latency: 2((n/k − 1)·4.0 + log2(k)·14) + 8.4, for k a power of two
    lat = K.tree_latency_s(K.Proto.SIMPLE, n, k)
    assert lat.subs({m: 62, k: 8}) == pytest.approx(148.4 * US)
