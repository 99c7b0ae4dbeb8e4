"""One MoE layer's composed terms (formulas/moe_step.py): hand-derived values and the limits each
choice must meet."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

from planner.formulas import moe_dispatch as D
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


def test_deepep_token_slots():
    # DeepEP's slot per token copy (internode.cu get_num_bytes_per_token), rounded up to 16 B:
    # BF16 dispatch: 7168·2 + 8 (SourceMeta) + 4·8 (indices) + 4·8 (probabilities) = 14,408
    # → 16·⌈900.5⌉ = 14,416
    assert D.deepep_token_bytes(H, K, 2, 0, 1) == 14_416
    # FP8 dispatch: 7168 + 8 + 4·7168/128 = 224 (scales) + 64 = 7,464 → 16·⌈466.5⌉ = 7,472
    assert D.deepep_token_bytes(H, K, 1, 1, 1) == 7_472
    # combine (BF16, the probabilities' gradient with it): 14,336 + 8 + 32 = 14,376 → 14,384
    assert D.deepep_token_bytes(H, K, 2, 0, 0) == 14_384


def test_deepep_sync_latency():
    # 8 nodes, a fresh layout (notify_dispatch): 3 barriers + 1 count put on the network at
    # 5 µs, 3 NVLink barriers at 1 µs: 20 + 3 = 23 µs; on a cached layout 2·5 + 2·1 = 12 µs
    assert D.deepep_sync_latency_s(8, False, LAT_N, LAT_F) == pytest.approx(23e-6)
    assert D.deepep_sync_latency_s(8, True, LAT_N, LAT_F) == pytest.approx(12e-6)
    # one node: the NVLink barriers alone, 3 and 2 µs
    assert D.deepep_sync_latency_s(1, False, LAT_N, LAT_F) == pytest.approx(3e-6)
    assert D.deepep_sync_latency_s(1, True, LAT_N, LAT_F) == pytest.approx(2e-6)


def test_dispatch_inside_one_domain_is_nvlink_only():
    # EP8 in one node: no RDMA; NVLink copies 4096·G·7/8 with G = 8·(1 − (7/8)^8) = 5.251129,
    # each a 14,416 B slot, over (153/160)·450e9; + 1 µs first hop + 3 µs of NVLink barriers
    g = 8 * (1 - (7 / 8) ** 8)
    rdma, nvl = S.deepep_call_bytes(T, K, H, 8, 8, 1)
    assert rdma == 0 and nvl == pytest.approx(4096 * g * 7 / 8 * 14_416)
    got = S.deepep_call_time_s(rdma, nvl, 1, False, NET, NVL, LAT_F, LAT_N)
    assert got == pytest.approx(nvl / (153 / 160 * NVL) + 4 * LAT_F)


def test_deepep_across_nodes():
    # EP64 over 8 nodes, node-limited to 4: 14,336 RDMA copies (test_moe_layer_terms) of the
    # combine's 14,384 B slot over 0.86·50e9 govern (NVLink: 4096·7.5759·7/8 copies over
    # 0.956·450e9 is 3× faster); + 5 µs first hop + 12 µs of a cached layout's barriers
    rdma, nvl = S.deepep_call_bytes(T, K, H, 64, 8, 4, dispatch=0)
    assert rdma == 14_336 * 14_384
    got = S.deepep_call_time_s(rdma, nvl, 8, True, NET, NVL, LAT_F, LAT_N)
    assert got == pytest.approx(14_336 * 14_384 / (0.86 * NET) + 5e-6 + 12e-6)


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
    nodes = S.ep_nodes(ep, np.minimum(ep, 8))
    rdma, nvl = S.deepep_call_bytes(T, K, H, ep, np.minimum(ep, 8), S.node_limit(nodes, 8, 4))
    t = S.deepep_call_time_s(rdma, nvl, nodes, False, NET, NVL, LAT_F, LAT_N)
    assert t.shape == (3,) and t[0] < t[1]


def test_shared_expert_overlap_by_hand():
    # 4 ms of exchange per layer and micro-batch, 2 forward and 2 backward; the shared experts'
    # forward 0.5 ms hides 0.5 of the forward's 2 ms, their backward (1 ms) 1 of the backward's:
    # 1.5 + 1 = 2.5 ms left
    assert S.shared_overlap_exposed_s(4e-3, 0.5e-3, 1) == pytest.approx(2.5e-3)
    # shared experts longer than the exchange hide all of it; without the overlap nothing
    assert S.shared_overlap_exposed_s(4e-3, 3e-3, 1) == 0
    assert S.shared_overlap_exposed_s(4e-3, 0.5e-3, 0) == pytest.approx(4e-3)


def test_shared_expert_overlap_under_the_flex_dispatcher_by_hand():
    # DeepEP's flex dispatcher runs fc1 beside the dispatch and fc2 after the combine: of the
    # forward's 2 ms the dispatch's 1 ms hides under fc1, 2/3 of the 0.5 ms forward (SwiGLU's
    # gate and up): 1 − 0.3333 = 0.6667 ms left, the combine's 1 ms all; the backward as the
    # alltoall's, 2 − 1 = 1 ms: 2.6667 ms; DeepEP's 24 of 132 SMs while 1.3333 ms hide:
    # 1.3333·24/108 = 0.2963 ms more, 2.9630 ms in all (the alltoall dispatcher: 2.5 ms)
    assert S.shared_overlap_exposed_s(4e-3, 0.5e-3, 1, 1, 2 / 3, 24, 132) == pytest.approx(
        2.962963e-3, rel=1e-6)
    # without the overlap nothing hides; flex = 0 is the alltoall dispatcher's form
    assert S.shared_overlap_exposed_s(4e-3, 0.5e-3, 0, 1, 2 / 3, 24, 132) == pytest.approx(4e-3)
    e, f, phi = sympy.symbols("E S_f phi", positive=True)
    assert (S.shared_overlap_exposed_s(e, f, 1, 0, phi, 24, 132)
            - S.shared_overlap_exposed_s(e, f, 1)) == 0
