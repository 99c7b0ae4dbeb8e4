"""NCCL's tuner on the search's arrays where a candidate runs on no row of them (PAT with no
group one rank per node, NVLS across nodes, NVLS-tree and CollNet on one node) or no row has
more than one rank: the candidate is not priced (_ops.all_off), and every row's value is still
the one the tuner gives that row alone, on floats, exactly (==, not approx)."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from planner.formulas import _ops
from planner.formulas import collectives as K

GB = 1e9
NICS = 8.0


def test_all_off_is_an_array_of_zeros_alone():
    assert _ops.all_off(np.zeros(3)) and _ops.all_off(np.zeros((2, 1, 4)))
    assert not _ops.all_off(np.array([0.0, 1.0, 0.0]))
    # a number or a symbol is never skipped: select computes both sides there as before
    assert not _ops.all_off(0.0) and not _ops.all_off(0)
    assert not _ops.all_off(sp.Symbol("i"))


def _rows(coll, nbytes, ranks, nodes, busbw_gb, nvls):
    """nccl_time_s on arrays, and on each row's floats."""
    ranks, nodes = np.asarray(ranks, dtype=float), np.asarray(nodes, dtype=float)
    busbw = np.full(len(ranks), busbw_gb * GB) * np.linspace(0.5, 1, len(ranks))  # shares
    ll_max = K.ll_max_busbw(K.Gen.HOPPER, nodes)
    nvls_bw = 480 * GB * busbw / busbw.max()
    arrays = K.nccl_time_s(coll, nbytes, ranks, nodes, busbw, ll_max, busbw, nvls_bw, NICS,
                           nvls=nvls)
    floats = [K.nccl_time_s(coll, nbytes, float(r), float(k), float(b), float(m), float(b),
                            float(v), NICS, nvls=nvls)
              for r, k, b, m, v in zip(ranks, nodes, busbw, ll_max, nvls_bw)]
    return np.broadcast_to(arrays, ranks.shape), floats


@pytest.mark.parametrize("coll", [K.Coll.ALL_GATHER, K.Coll.REDUCE_SCATTER, K.Coll.ALL_REDUCE])
@pytest.mark.parametrize("nvls", [False, True])
def test_rows_where_a_candidate_cannot_run_are_the_floats_exactly(coll, nvls):
    # 8 ranks a node on 1-16 nodes: PAT (one rank per node) runs on no row, NVLS on the first
    # (one node) only, NVLS-tree and CollNet on the others
    arrays, floats = _rows(coll, 64e6, [8, 16, 32, 128], [1, 2, 4, 16], 370.0, nvls)
    assert arrays.tolist() == floats
    # every group on one node: no multi-node candidate runs
    arrays, floats = _rows(coll, 1e6, [2, 4, 8], [1, 1, 1], 370.0, nvls)
    assert arrays.tolist() == floats
    # one rank per node on every row: PAT runs everywhere, NVLS nowhere
    arrays, floats = _rows(coll, 1e3, [2, 4, 8], [2, 4, 8], 46.0, nvls)
    assert arrays.tolist() == floats


def test_one_rank_on_every_row_prices_nothing():
    arrays, floats = _rows(K.Coll.ALL_GATHER, 1e6, [1, 1, 1], [1, 1, 1], 370.0, False)
    assert arrays.tolist() == floats == [0.0, 0.0, 0.0]
    arrays, floats = _rows(K.Coll.ALL_GATHER, 1e6, [1, 8, 1], [1, 1, 1], 370.0, False)
    assert arrays.tolist() == floats and floats[0] == floats[2] == 0.0 < floats[1]
    # PAT is (DISABLED_S, 0) on arrays where no row is one rank per node, as on each row
    assert K.candidate_parts_s(K.Coll.ALL_GATHER, K.Algo.PAT, K.Proto.SIMPLE, 1e6,
                               np.array([8.0, 16.0]), np.array([1.0, 2.0]), np.array([1e11] * 2),
                               1e10, 1e10, 1e11, NICS) == (K.DISABLED_S, 0)
