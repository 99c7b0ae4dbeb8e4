"""One MoE layer's composed terms (formulas/moe_step.py): hand-derived values and the limits each
choice must meet."""

from __future__ import annotations

import numpy as np
import pytest

from planner.formulas import moe as MO
from planner.formulas import moe_step as S
from planner.formulas.moe_layer import Dispatcher
from planner.formulas.moe_step import A2AOverlap

T, H, K = 4096, 7168, 8
NVL, NET = 450e9, 50e9  # bytes/s
LAT_F, LAT_N = 1e-6, 5e-6


def test_forced_balance_is_one():
    assert S.layer_load(0.72, 32, 128, T, K, 1) == 1.0
    assert S.layer_load(0.72, 32, 128, T, K, 0) > 1.2  # 1 + 0.72·√(32/128·5/7) + noise


def test_node_limit():
    assert S.node_limit(8, 8, 4) == 4  # DeepSeek-V3: EP64 over 8 nodes, 4 of 8 groups
    assert S.node_limit(16, 8, 4) == 8  # groups of two nodes each: 4 groups, 8 nodes
    assert S.node_limit(4, 8, 4) == 4  # two groups a node: at most all 4 nodes
    assert S.node_limit(4, 1, 1) == 4  # no groups: unlimited (M = N)
    assert S.ep_nodes(64, 8) == 8


def test_dispatch_inside_one_domain_is_nvlink_only():
    # EP8 in one node, DeepEP: no RDMA; NVLink copies 4096·G·7/8 with G = 8·(1 − (7/8)^8)
    # = 5.251129; bytes ·2·7168 over (153/160)·450e9, + 1 µs
    g = 8 * (1 - (7 / 8) ** 8)
    expect = 4096 * g * 7 / 8 * 2 * H / (153 / 160 * NVL) + LAT_F
    got = S.dispatch_time_s(Dispatcher.DEEPEP, T, K, H, 8, 8, 1, 1, NVL, NET, LAT_F, LAT_N)
    assert got == pytest.approx(expect)
    # the NCCL all-to-all in the same node: 4096·8·7/8 copies · 14,336 B over NVLink + 1 µs
    nccl = S.dispatch_time_s(Dispatcher.ALL_TO_ALL, T, K, H, 8, 8, 1, 1, NVL, NET, LAT_F, LAT_N)
    assert nccl == pytest.approx(4096 * 7 * 2 * H / NVL + LAT_F)


def test_deepep_beats_nccl_across_nodes():
    # EP64 over 8 nodes, node-limited to 4: DeepEP sends half NCCL's network copies
    # (test_moe_layer_terms) at 0.86 of the link; NCCL's network part: 32,256·56/63 copies
    deepep = S.dispatch_time_s(Dispatcher.DEEPEP, T, K, H, 64, 8, 1, 4, NVL, NET, LAT_F, LAT_N)
    nccl = S.dispatch_time_s(Dispatcher.ALL_TO_ALL, T, K, H, 64, 8, 1, 8, NVL, NET, LAT_F, LAT_N)
    assert deepep == pytest.approx(14_336 * 2 * H / (0.86 * NET) + LAT_N)
    assert nccl == pytest.approx(28_672 * 2 * H / NET + LAT_N)
    assert deepep / nccl == pytest.approx(0.5 / 0.86, rel=1e-3)


def test_allgather_dispatch():
    # tp·ep = 8 inside the node: 7·4096·7168·2 B over NVLink
    got = S.dispatch_time_s(Dispatcher.ALL_GATHER, T, K, H, 8, 8, 1, 1, NVL, NET, LAT_F, LAT_N)
    assert got == pytest.approx(7 * 4096 * 7168 * 2 / NVL + LAT_F)


def test_nccl_dispatch_is_the_existing_formula():
    load = 1.1
    sent = MO.all_to_all_bytes(T, K, H, 32, 2, load)
    assert S.dispatch_time_s(Dispatcher.ALL_TO_ALL, T, K, H, 32, 8, 1, 4, NVL, NET, LAT_F, LAT_N,
                             load) == MO.all_to_all_time_s(sent, 32, 8, NVL, NET, LAT_N)


def test_overlap_kinds():
    # 2 ms exchange, 3 ms window, m = 8, 20 of 132 SMs
    assert S.exposed_exchange_s(2e-3, 3e-3, A2AOverlap.NONE, 8, 20, 132) == 2e-3
    # merged: 7/8·2 ms hidden, 0.25 ms left, + 1.75 ms·20/112 = 0.3125 ms
    merged = S.exposed_exchange_s(2e-3, 3e-3, A2AOverlap.MERGED_1F1B, 8, 20, 132)
    assert merged == pytest.approx(0.25e-3 + 1.75e-3 * 20 / 112)
    dual = S.exposed_exchange_s(2e-3, 3e-3, A2AOverlap.DUALPIPE, 8, 20, 132)
    assert dual == pytest.approx(2e-3 * 20 / 112)
    # a short window hides only itself
    assert S.exposed_exchange_s(2e-3, 0.5e-3, A2AOverlap.DUALPIPE, 8, 0, 132) == pytest.approx(1.5e-3)


def test_kernels_and_bytes():
    assert S.layer_kernels(Dispatcher.ALL_TO_ALL, False) == 78
    assert S.layer_kernels(Dispatcher.DEEPEP, True) == 23
    # Transformer Engine's grouped GEMM launches one cuBLAS GEMM per local expert: Qwen3-30B-A3B
    # at ep 8 holds 128/8 = 16 experts, so fc1 and fc2 launch 16 each: 72 + 4 + 2·16 = 108
    assert S.layer_kernels(Dispatcher.ALL_TO_ALL, False, 16, 1) == 108
    # one grouped kernel (torch._grouped_mm) launches once whatever E_l: 72 + 4 + 2 = 78
    assert S.layer_kernels(Dispatcher.ALL_TO_ALL, False, 16, 0) == 78
    assert S.grouped_gemm_launches(np.array([1.0, 4.0, 32.0]), 1).tolist() == [1, 4, 32]
    b = S.memory_bound_bytes(T, K, H, 256, 4, Dispatcher.ALL_TO_ALL, 6, 1, 64, 1.0)
    assert b == 25_559_040 + 233_472 * 2 * H  # test_moe_layer_terms' two hand values


def test_arrays():
    ep = np.array([8.0, 16.0, 64.0])
    t = S.dispatch_time_s(Dispatcher.DEEPEP, T, K, H, ep, np.minimum(ep, 8), 1,
                          S.node_limit(S.ep_nodes(ep, np.minimum(ep, 8)), 8, 4), NVL, NET,
                          LAT_F, LAT_N)
    assert t.shape == (3,) and t[0] < t[1]


def test_shared_expert_overlap_by_hand():
    # 4 ms of exchange per layer and micro-batch, 2 forward and 2 backward; the shared experts'
    # forward 0.5 ms hides 0.5 of the forward's 2 ms, their backward (1 ms) 1 of the backward's:
    # 1.5 + 1 = 2.5 ms left
    assert S.shared_overlap_exposed_s(4e-3, 0.5e-3, 1) == pytest.approx(2.5e-3)
    # shared experts longer than the exchange hide all of it; without the overlap nothing
    assert S.shared_overlap_exposed_s(4e-3, 3e-3, 1) == 0
    assert S.shared_overlap_exposed_s(4e-3, 0.5e-3, 0) == pytest.approx(4e-3)
