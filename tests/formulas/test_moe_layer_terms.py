"""The MoE layer's terms besides its GEMMs (formulas/moe_layer.py, formulas/moe_dispatch.py):
hand-derived values with the arithmetic beside them, limits that must hold, the DeepEP README's
own numbers read back, and the same formulas on arrays and symbols."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from planner.formulas import moe_dispatch as D
from planner.formulas import moe_layer as L
from planner.formulas.moe_layer import Balancing, Dispatcher

# DeepSeek-V3's MoE layer on one GPU: T = 4096 tokens (b = 1, s = 4096, t = 1), h = 7168,
# E = 256, k = 8; EP64 over 8 nodes of 8 GPUs, node-limited to M = 4 (report §2.1.2, §3.2.2)
T, H, E, K = 4096, 7168, 256, 8


# ---- router ----------------------------------------------------------------------------------

def test_router_bytes_by_hand():
    # bias balancing, unfused: 6 passes over 4·256 B a token + 8 (int64) + 4 (fp32) per choice
    # 4096·(4·256·6 + 12·8) = 4096·(6144 + 96) = 4096·6240 = 25,559,040
    passes = L.ROUTER_PASSES[(Balancing.AUX_FREE, False)]
    assert L.router_elementwise_bytes(T, E, K, passes) == 25_559_040
    # fused: 2 passes: 4096·(2048 + 96) = 8,781,824
    assert L.router_elementwise_bytes(T, E, K, L.ROUTER_PASSES[(Balancing.AUX_FREE, True)]) \
        == 8_781_824
    assert L.router_kernels(0) == 9 and L.router_kernels(1) == 3


def test_fused_router_moves_less_and_aux_loss_more():
    for fused in (False, True):
        assert L.ROUTER_PASSES[(Balancing.AUX_LOSS, fused)] > L.ROUTER_PASSES[(Balancing.AUX_FREE, fused)]
    for b in Balancing:
        assert L.ROUTER_PASSES[(b, True)] < L.ROUTER_PASSES[(b, False)]


# ---- permutation -----------------------------------------------------------------------------

def test_permutation_bytes_by_dispatcher():
    row = 2 * H  # 14,336 B a row in bf16
    r = T * K  # 32,768 rows reach a rank at λ = 1
    # all-to-all, 4 local experts: 3·T·k + T + 4·R = 98,304 + 4,096 + 131,072 = 233,472 rows
    assert L.permutation_bytes(T, K, H, 4, Dispatcher.ALL_TO_ALL) == 233_472 * row
    # one local expert: no chunk sort: 98,304 + 4,096 = 102,400 rows
    assert L.permutation_bytes(T, K, H, 1, Dispatcher.ALL_TO_ALL) == 102_400 * row
    # all-gather over tp·ep = 1·8: 3·R + 2·8·T = 98,304 + 65,536 = 163,840 rows
    assert L.permutation_bytes(T, K, H, 4, Dispatcher.ALL_GATHER, tp=1, ep=8) == 163_840 * row
    # DeepEP: 4·R = 131,072 rows
    assert L.permutation_bytes(T, K, H, 4, Dispatcher.DEEPEP) == 4 * r * row


def test_permutation_grows_with_load():
    lo = L.permutation_bytes(T, K, H, 4, Dispatcher.ALL_TO_ALL, load=1.0)
    hi = L.permutation_bytes(T, K, H, 4, Dispatcher.ALL_TO_ALL, load=1.2)
    # only the received side (4·R) grows: 4·0.2·32,768 = 26,214.4 rows more
    assert hi - lo == pytest.approx(26_214.4 * 2 * H)


def test_permutation_buffers_by_dispatcher():
    row = 2 * H
    # all-to-all: T·k sent + R received = 65,536 rows; all-gather: 8·T + R = 65,536 as well at
    # ep = 8 (8·4096 = 32,768 = T·k); DeepEP: R = 32,768 rows
    assert L.permutation_buffer_bytes(T, K, H, Dispatcher.ALL_TO_ALL) == 65_536 * row
    assert L.permutation_buffer_bytes(T, K, H, Dispatcher.ALL_GATHER, ep=8) == 65_536 * row
    assert L.permutation_buffer_bytes(T, K, H, Dispatcher.DEEPEP) == 32_768 * row


# ---- padding and capacity --------------------------------------------------------------------

def test_alignment_and_padding():
    assert L.grouped_gemm_align_rows(0) == 1  # bf16: no padding
    assert L.grouped_gemm_align_rows(1) == 16  # fp8 (fp8_utils.get_fp8_align_size)
    assert L.grouped_gemm_align_rows(1, 1) == 32  # mxfp8
    assert L.padded_rows(4, 16) == 30  # 4·15/2
    assert L.padded_rows(4, 1) == 0


def test_capacity_rows():
    # ⌈8·4096·8/64 · 1.25⌉ = ⌈4096·1.25⌉ = 5120; a capacity factor of 1 is the mean exactly
    assert L.capacity_rows(T, K, 8, 64, 1.25) == 5120
    assert L.capacity_rows(T, K, 8, 64, 1.0) == 4096
    assert L.capacity_rows(T, K, 8, 64, 1.0001) == 4097  # the ceiling


# ---- load imbalance --------------------------------------------------------------------------

def test_sampling_excess():
    # √(2·ln 8 · 8/m) = 0.1 for m = 2·ln 8·8/0.01 = 1600·ln 8
    assert L.sampling_excess(1600 * math.log(8), 8) == pytest.approx(0.1, rel=1e-12)
    assert L.sampling_excess(1e6, 1) == 0  # one bin holds everything: no excess
    # four times the copies halve it
    assert L.sampling_excess(4e6, 64) == pytest.approx(L.sampling_excess(1e6, 64) / 2)


def test_rank_skew_limits_and_value():
    v = 0.72
    assert L.rank_skew(v, 64, 64) == pytest.approx(v)  # one expert a rank: the expert's MaxVio
    assert L.rank_skew(v, 1, 64) == 0  # one rank holds every expert
    # DeepSeek-V3, loss-free: 0.04·√(64/256)·√(6/8) = 0.04·0.5·0.866025 = 0.0173205
    assert L.rank_skew(0.04, 64, 256) == pytest.approx(0.0173205, rel=1e-5)
    # more ranks over the same experts: a busier busiest rank
    assert L.rank_skew(v, 8, 64) < L.rank_skew(v, 16, 64) < L.rank_skew(v, 32, 64)


def test_rank_load_deepseek_v3():
    # N = 64·4096 = 262,144 tokens, N·k = 2,097,152 copies over 64 ranks:
    # √(2·ln 64·64/2,097,152) = √(2·4.158883·3.0518e-5) = 0.0159318; + 0.0173205 skew
    lam = L.rank_load(L.MAX_VIOLATION[Balancing.AUX_FREE], 64, E, 64 * T, K)
    assert lam == pytest.approx(1 + 0.0173205 + 0.0159318, rel=1e-5)
    # an auxiliary-loss router at the same shape: 1 + 0.72·0.433013 + 0.0159318 = 1.3277
    lam_aux = L.rank_load(L.MAX_VIOLATION[Balancing.AUX_LOSS], 64, E, 64 * T, K)
    assert lam_aux == pytest.approx(1 + 0.72 * 0.4330127 + 0.0159318, rel=1e-5)
    assert L.rank_load(0.72, 1, E, T, K) == 1  # no expert parallelism: no imbalance across ranks


def test_expert_load_small_batches_are_noisier():
    # Qwen3-30B-A3B (E = 128, k = 8) at ep = 8, T = 4096: N·k = 262,144 copies;
    # √(2·ln 128·128/262,144) = √(2·4.852030·4.8828e-4) = 0.0688354
    assert L.expert_load(0.0, 128, 8 * T, K) == pytest.approx(1.0688354, rel=1e-6)
    assert L.expert_load(0.0, 128, 8 * 512, K) > L.expert_load(0.0, 128, 8 * T, K)


# ---- shared experts --------------------------------------------------------------------------

def test_shared_expert_flops():
    # 2·4096·1·3·7168·2048 = 360,777,252,864
    assert L.shared_expert_flops(T, H, 2048, 1, 3) == 360_777_252_864


# ---- where the copies go ---------------------------------------------------------------------

def test_distinct_and_node_limited():
    # 8·(1 − (7/8)^8) = 8·(1 − 0.3436089) = 5.2511287
    assert D.distinct_reached(8, 8) == pytest.approx(5.2511287, rel=1e-7)
    assert D.distinct_reached(8, 1) == 1
    assert D.nodes_reached(8, 8, 4) == 4  # DeepSeek-V3: capped at M = 4
    assert D.nodes_reached(8, 8, 8) == pytest.approx(5.2511287, rel=1e-7)  # M = N: unlimited


def test_deepep_halves_the_network_copies_of_deepseek_v3():
    # NCCL: 4096·8·63/64 = 32,256 copies leave the GPU, (ep − g)/(ep − 1) = 56/63 of them on
    # the network: 28,672. DeepEP: 4096·4 nodes·7/8 = 14,336 — half.
    nccl = D.nccl_a2a_copies(T, K, 64)
    assert nccl == 32_256
    assert nccl * 56 / 63 == pytest.approx(28_672)
    assert D.deepep_rdma_copies(T, K, 8, 4) == 14_336
    # NVLink forwarding: G = 64·(1 − (63/64)^8) = 7.575908 GPUs, × 4096·7/8
    assert D.deepep_nvlink_copies(T, K, 64, 8) == pytest.approx(4096 * 7.575908 * 7 / 8, rel=1e-6)


def test_deepep_time_slower_link_governs():
    # 43 MB at 0.86·50 GB/s = 1 ms; 153 MB at (153/160)·160 GB/s = 1 ms; + 5 µs
    assert D.deepep_time_s(43e6, 153e6, 50e9, 160e9, 5e-6) == pytest.approx(1.005e-3)
    assert D.deepep_time_s(86e6, 153e6, 50e9, 160e9, 0) == pytest.approx(2e-3)


def test_allgather_dispatch_bytes():
    # 7·4096·7168·2 = 411,041,792 B gathered from the 7 other ranks of tp·ep = 8
    assert D.allgather_dispatch_bytes(T, H, 8, 2) == 411_041_792


# ---- overlap ---------------------------------------------------------------------------------

def test_overlap_terms():
    assert D.merged_pass_share(8) == 7 / 8  # no pipeline: W = 1 forward alone of m = 8
    assert D.merged_pass_share(1) == 0  # one micro-batch: nothing to pair with
    # interleaved p = 4, v = 8, m = 16, rank 0: W = 2·3 + 7·4 + 1 = 35 of the 16·8 = 128 chunk
    # forwards run alone (and 35 backwards): 93/128 merged, not (m − 1)/m = 15/16
    assert D.merged_pass_share(16, 8, 35) == 93 / 128
    assert D.merged_pass_share(4, 8, 35) == 0  # m = p: all 32 chunk forwards in the warm-up
    assert D.exposed_a2a_s(3.0, 2.0, 7 / 8) == pytest.approx(3 - 7 / 8 * 2)  # 1.25
    assert D.exposed_a2a_s(1.0, 5.0, 1.0) == 0  # DualPipe with a long enough window
    assert D.exposed_a2a_s(1.0, 5.0, 0.0) == 1.0
    assert D.sm_contention_s(1.0, 24, 132) == pytest.approx(24 / 108)


# ---- the same formulas on arrays and symbols -------------------------------------------------

def test_arrays_agree_with_floats():
    ep = np.array([1.0, 8.0, 64.0])
    lam = L.rank_load(0.04, ep, 256.0, ep * T, 8.0)
    assert lam == pytest.approx([L.rank_load(0.04, e, 256.0, e * T, 8.0) for e in (1, 8, 64)])
    perm = L.permutation_bytes(T, K, H, 256.0 / ep, Dispatcher.ALL_TO_ALL)
    assert perm[-1] == L.permutation_bytes(T, K, H, 4, Dispatcher.ALL_TO_ALL)


def test_symbols():
    v, n, ep, m = sp.symbols("v E ep m", positive=True)
    assert sp.simplify(L.rank_skew(v, 256, 256) - v) == 0  # one expert a rank: MaxVio itself
    assert sp.simplify(L.rank_skew(v, ep, 256) ** 2 - v ** 2 * ep * sp.log(ep) / (256 * sp.log(256))) == 0
    assert sp.simplify(D.exposed_a2a_s(m, m, 1)) == 0
    copies = sp.Symbol("c", positive=True)
    assert sp.simplify(L.sampling_excess(copies, ep) ** 2
                       - 2 * sp.log(ep) * ep / copies) == 0
