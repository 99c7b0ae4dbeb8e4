"""Hand-derived checks of the overlap windows (timing.exposed_time_s as cost.py uses it) and the
fixed per-kernel launch cost (timing.kernel_overhead_s), on one formula and through plan_costs.

Every plan here is Llama-3.1-8B (L = 32, h = 4096, a = 32, k = 8, d_h = 128, f = 14336, SwiGLU,
Ψ = 8,030,261,248) on the h100-nvlink profile: bf16 peak 989.4 TFLOP/s at η = 0.63, NVLink
busbw 370 GB/s and 1 µs per ring step, network 46 GB/s and 5 µs, 8 GPUs per domain, 4 µs per
kernel. sm_count is removed (no wave quantisation) so that the matmul time is FLOPs / (peak·η).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp

from planner.calibrate import profile_with
from planner.catalog import load_hardware, load_model
from planner.formulas import collectives as K
from planner.formulas.timing import KERNELS_PER_LAYER_FORWARD, exposed_time_s, kernel_overhead_s
from planner.model.cost import Choices, numbers, plan_costs
from planner.schema import PlanConfig

MODEL = load_model("llama-3.1-8b")
H100 = load_hardware("h100-nvlink")
# no wave quantisation, and attention at the GEMM figure (no measured kernel: the arithmetic
# below prices every product at PEAK)
FLAT = profile_with(H100, {"sm_count": None, "efficiency.attention": {}})
PEAK = 989.4e12 * 0.63  # achieved bf16 FLOP/s = 623.322e12
FAST, NET = (370e9, 1e-6), (46e9, 5e-6)  # (busbw B/s, latency s per ring step)
SIGMA = 0.189  # comm.OVERLAP_COMPUTE_SLOWDOWN: hidden communication slows its window by 18.9 %
# A 16-rank group of stride 1 spans two 8-GPU nodes with 8 ranks in each: it leaves the node on
# 8 NICs, min(370, 8·46) = 368 GB/s, and a ring pass costs (16 − 2)·1 µs + (2 − 1)·5 µs = 19 µs
# (NCCL's ring latency: intra-node steps at NVLink's α, the inter-node one at the network's).
CROSS16 = (368e9, 19e-6)
NVLS = 480e9  # h100-nvlink's NVLS all-reduce busbw (inside the node)
L = 32
PSI = 8_030_261_248  # V = 128256 = 1002·128 is already padded for t = 1
ACT = 2 * 8192 * 4096  # one b·s·h 16-bit activation at s = 8192, b = 1: 67,108,864 B
ACTIVE = 4096 * 128 * (2 * 32 + 2 * 8) + 3 * 4096 * 14336  # 41,943,040 + 176,160,768 = 218,103,808
MM_FLOPS = 2 * 8192 * ACTIVE  # forward matmul FLOPs per layer at b = 1: 3,573,412,790,272
ATT_FLASH = 4 * 8192**2 * 32 * 128 / 2  # causal flash QKᵀ + PV: 549,755,813,888


def run(hw=FLAT, **config):
    """plan_costs of one 8B plan, and every named intermediate it noted."""
    cfg = PlanConfig(**{"dp": 1, "seq_len": 8192, "gbs": config.get("dp", 1) * config.get("n_micro", 1),
                        **config})
    seen = {}

    def note(name, value):
        seen[name] = value
        return value

    return plan_costs(numbers(MODEL, hw, cfg), Choices.of(cfg), note), seen


# ---- exposed_time_s on each backend ----------------------------------------------------------

@pytest.mark.parametrize("comm, window, want", [
    (0.3, 0.5, 0.0),  # shorter than the compute beside it: fully hidden
    (0.5, 0.5, 0.0),  # exactly as long: hidden
    (0.5, 0.2, 0.3),  # 0.5 − 0.2 shows
    (0.7, 0.0, 0.7),  # no window: all of it shows
])
def test_exposed_floats(comm, window, want):
    assert exposed_time_s(comm, window) == pytest.approx(want, abs=1e-15)


def test_exposed_arrays_elementwise():
    got = exposed_time_s(np.array([1.0, 2.0, 3.0, 4.0]), np.array([2.0, 2.0, 1.0, 0.0]))
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, [0.0, 0.0, 2.0, 4.0])  # max(0, [−1, 0, 2, 4])
    np.testing.assert_array_equal(exposed_time_s(np.array([1.0, 3.0]), 2.0), [0.0, 1.0])


def test_exposed_symbolic_is_max():
    a, b = sp.symbols("a b", positive=True)
    got = exposed_time_s(a, b)
    assert got == sp.Max(0, a - b)  # stays a Max: sympy cannot decide the sign of a − b
    assert got.subs({a: 3, b: 5}) == 0 and got.subs({a: 5, b: 3}) == 2
    assert exposed_time_s(a, 0) == a  # Max(0, a) of a positive symbol simplifies to a
    assert exposed_time_s(a, 2 * a) == 0  # a − 2a = −a < 0


# ---- kernel launch cost ----------------------------------------------------------------------

def test_kernel_overhead_hand():
    assert KERNELS_PER_LAYER_FORWARD == 12
    assert H100.efficiency.kernel_overhead_us == 4.0
    # 12 kernels × 4 µs = 48 µs, from the profile's 4 µs in base units
    cfg = PlanConfig(dp=1, gbs=1, seq_len=8192)
    kernel_s = numbers(MODEL, H100, cfg).kernel_s
    assert kernel_s == pytest.approx(4e-6, rel=1e-15)
    assert kernel_overhead_s(KERNELS_PER_LAYER_FORWARD, kernel_s) == pytest.approx(48e-6, rel=1e-12)
    assert kernel_overhead_s(0, kernel_s) == 0


@pytest.mark.parametrize("delta_us", [6.5, -4.0])  # 4 → 10.5 µs, and 4 → 0 µs
def test_kernel_overhead_difference_through_plan(delta_us):
    # tp = 2, full recompute, m = 2, dp = 1 (no DP traffic). Raising t_k by Δ adds per layer:
    # forward 12Δ, backward 2·12Δ (= 2 × the forward's non-attention time), recompute (full: the
    # forward again) 12Δ, in all 48Δ; the TP window is the matmul time, which t_k does not touch,
    # so the step grows by m·L·48Δ = 2·32·48·Δ.
    base = dict(tp=2, n_micro=2, recompute="full")
    r0, n0 = run(H100, **base)
    hw = profile_with(H100, {"efficiency.kernel_overhead_us": 4.0 + delta_us})
    r1, n1 = run(hw, **base)
    d = delta_us * 1e-6
    assert r1["forward_layer_s"] - r0["forward_layer_s"] == pytest.approx(12 * d, rel=1e-9)
    assert n1["backward_layer_s"] - n0["backward_layer_s"] == pytest.approx(24 * d, rel=1e-9)
    assert n1["recompute_layer_s"] - n0["recompute_layer_s"] == pytest.approx(12 * d, rel=1e-9)
    assert r1["tp_exposed_s"] == r0["tp_exposed_s"]
    assert r1["step_s"] - r0["step_s"] == pytest.approx(2 * 32 * 48 * d, rel=1e-9)


# ---- (a) TP backward all-reduces under the weight-gradient GEMMs ------------------------------

def test_tp_backward_hidden():
    # t = 8 inside the node, selective recompute (one forward pass), m = 4, no sequence
    # parallelism: per layer per direction 2 all-reduces of ACT, each priced by NCCL's tuner
    # (formulas/collectives.py): NVLS, 25 µs + ACT / (480e9 · 8/14) = 25 + 244.6677 µs, beats
    # the ring's 8.4 + 14·3.4 = 56 µs + ACT·(14/8)/370e9 = 317.4068 µs
    #   tp_dir = 2 · 269.6677 = 539.3355 µs
    # window: mm = 3,573,412,790,272 / 8 / 623.322e12 = 716.6065 µs > tp_dir: backward hidden
    # exposed = m·L·(1·tp_dir + 0) = 4·32·539.3355 µs = 69.0349 ms
    r, n = run(tp=8, n_micro=4, sequence_parallel=False)
    tp_dir = 2 * (25e-6 + ACT * 14 / 8 / NVLS)
    mm = MM_FLOPS / 8 / PEAK
    assert n["tp_layer_s"] == pytest.approx(tp_dir, rel=1e-12)
    assert n["matmul_s"] == pytest.approx(mm, rel=1e-12)
    assert tp_dir < mm
    assert r["tp_exposed_s"] == pytest.approx(4 * 32 * tp_dir, rel=1e-9)
    assert r["tp_exposed_s"] == pytest.approx(0.0690349, rel=1e-6)


def test_tp_backward_exposed_across_nodes_with_full_recompute():
    # t = 16 > 8 GPUs per domain: the TP ring crosses the network. Full recompute: 2 forward
    # passes; sequence parallelism: 2 all-gathers and 2 reduce-scatters of ACT per direction, on
    # 8 NICs (CROSS16: 368 GB/s). NCCL's tuner on 2 nodes (no PAT: 8 ranks a node; no NVLS
    # across nodes) weighs the ring with LL128 at min(0.92 · 368, 8 channels × 36.7) = 293.6 GB/s
    # (perChMaxRingLL128Bws, Hopper, two nodes; 8 NICs give 8 channels): 14 + 14 · 1.9 + 4.0 =
    # 44.6 µs + ACT·(15/16) / 293.6e9 = 214.29 µs — slower than Simple's 8.4 + 14·3.4 + 14 =
    # 70 µs + ACT·(15/16) / 368e9 = 170.9635 µs, which it takes
    #   tp_dir = 4 · (70 + 170.9635) = 963.8539 µs
    #   mm = 3,573,412,790,272 / 16 / 623.322e12 = 358.3033 µs  (the window hides only that much)
    #   per layer = 2·tp_dir + (tp_dir − mm) = 1,927.7078 + 605.5506 = 2,533.2584 µs
    #   exposed = m·L·per layer = 4·32·2,533.2584 µs = 0.3242571 s
    r, n = run(tp=16, n_micro=4, recompute="full")
    tp_dir = 4 * (70e-6 + ACT * 15 / 16 / CROSS16[0])
    mm = MM_FLOPS / 16 / PEAK
    assert n["tp_layer_s"] == pytest.approx(tp_dir, rel=1e-12)
    assert n["matmul_s"] == pytest.approx(mm, rel=1e-12)
    assert r["tp_inside"] == 0
    assert r["tp_exposed_s"] == pytest.approx(4 * 32 * (2 * tp_dir + tp_dir - mm), rel=1e-9)
    assert r["tp_exposed_s"] == pytest.approx(0.3242571, rel=1e-6)


# ---- (b) DP step traffic: the reduction under the last backward, the weight gather under the next
# step's first forward ---------------------------------------------------------------------------

# per ZeRO stage, the once-per-step collectives: (NCCL collective, bytes per parameter, the window
# that hides it). g = 4 (fp32 main grads), w = 2.
TAIL_PARTS = {
    0: [(K.Coll.ALL_REDUCE, 4, "backward")],  # all-reduce of the gradients g·Ψ
    1: [(K.Coll.REDUCE_SCATTER, 4, "backward"), (K.Coll.ALL_GATHER, 2, "forward")],
    2: [(K.Coll.ALL_GATHER, 2, "forward")],  # gradients reduced every micro-batch
}
# Megatron-Core's buckets: ⌈Ψ / max(4·10⁷, 10⁶·d)⌉ with overlap — d = 8 or 16 leave the 4·10⁷
# floor, ⌈8,030,261,248 / 40,000,000⌉ = ⌈200.76⌉ = 201 — and one (the whole buffer) without.
BUCKETS = {True: 201, False: 1}


def nccl_s(coll, nbytes, calls, dp, link):
    """calls × NCCL's pick for one bucket of nbytes·Ψ/calls bytes over d ranks (formulas/
    collectives.py, hand-checked in tests/cases): d = 8 is one node on NVLink (NVLS where it
    applies, 480 GB/s), d = 16 two nodes of 8 leaving on 8 NICs (8·46 GB/s per node), whose 8
    channels carry the tuner's caps (K.channel_caps: tree 8 × 41.4, ring LL128 8 × 36.7 GB/s)."""
    nodes = 1 if dp <= 8 else 2
    x = numbers(MODEL, FLAT, PlanConfig(dp=dp, seq_len=8192, gbs=dp))
    one = K.nccl_time_s(coll, nbytes * PSI / calls, dp, nodes, link[0],
                        [x.ll_max_one, x.ll_max_two][nodes - 1], 8 * 46e9, NVLS, 8,
                        x.net_overhead_us, nvls=True, sharp=False,
                        caps=K.channel_caps(nodes, 8, K.Gen.HOPPER))
    return calls * one


def pieces_exposed(comm, window, pieces):
    """formulas.overlap by hand: of n pieces one is exposed (the last bucket reduced after the
    backward, the first gather before the forward); the other n − 1 hide under W·(n − 1)/n."""
    return max(comm / pieces, comm - window * (pieces - 1) / pieces)


@pytest.mark.parametrize("zero", [0, 1, 2])
@pytest.mark.parametrize("dp, link", [(8, FAST), (16, CROSS16)])
def test_dp_tail_overlap_difference(zero, dp, link):
    # each part = buckets × NCCL's time for one bucket (nccl_s). Overlap on: 201 buckets, each
    # paying its own latency, launched as their gradients complete in the backward (the
    # reduction) or fetched ahead of the forward (the gather): the last bucket reduced (first
    # gathered) is exposed, the other 200 hide under 200/201 of the window (pieces_exposed).
    # Off: one call of the whole buffer after the backward (before the forward), nothing
    # hidden. Windows for t = 1, p = 1: backward L·(bwd + recompute) = 32·(14.80 + 0.88) ms
    # = 0.502 s, forward L·fwd. What hides slows the compute beside it by σ.
    on, n = run(dp=dp, zero_stage=zero, overlap_grad_reduce=True)
    off, n_off = run(dp=dp, zero_stage=zero, overlap_grad_reduce=False)
    windows = {"backward": L * (n["backward_layer_s"] + n["recompute_layer_s"]),
               "forward": L * n["forward_layer_s"]}
    parts = {o: [(nccl_s(coll, nbytes, BUCKETS[o], dp, link), windows[w])
                 for coll, nbytes, w in TAIL_PARTS[zero]] for o in (True, False)}
    tail = {o: sum(part for part, _ in parts[o]) for o in (True, False)}
    assert on["stage_params"] == PSI
    assert n["dp_tail_s"] == pytest.approx(tail[True], rel=1e-12)
    assert n_off["dp_tail_s"] == pytest.approx(tail[False], rel=1e-12)
    # 201 latencies cost more than one: the bucketed tail is the longer
    assert tail[True] > tail[False]
    # ZeRO-2's per-micro-batch reduce-scatter (g·Ψ, bucketed the same way) beside the
    # backward (Megatron-FSDP): in one bucket (off) all of it after the backward
    per_mb = {o: nccl_s(K.Coll.REDUCE_SCATTER, 4, BUCKETS[o], dp, link) if zero == 2 else 0
              for o in (True, False)}
    assert off["dp_exposed_s"] == pytest.approx(tail[False] + per_mb[False], rel=1e-12)
    assert all(part < window for part, window in parts[True])  # every part fits its window
    # so each shows one bucket's time: part/201
    shown = [pieces_exposed(part, window, 201) for part, window in parts[True]]
    assert shown == pytest.approx([part / 201 for part, _ in parts[True]], rel=1e-12)
    mb_shown = pieces_exposed(per_mb[True], windows["backward"], 201)
    exposed = sum(shown) + mb_shown
    hidden = tail[True] - sum(shown) + per_mb[True] - mb_shown
    assert on["dp_exposed_s"] == pytest.approx(exposed + SIGMA * hidden, rel=1e-9)
    assert n["dp_reduce_exposed_s"] == pytest.approx(shown[0] if zero <= 1 else 0, abs=1e-15)
    # nothing else in the step moves
    assert off["step_s"] - on["step_s"] == pytest.approx(
        off["dp_exposed_s"] - on["dp_exposed_s"], rel=1e-9)


# ---- (c) ZeRO-3 per-micro-batch gathers under the micro-batch's compute ----------------------

@pytest.mark.parametrize("dp, link", [(8, FAST), (16, CROSS16)])
def test_zero3_microbatch_overlap(dp, link):
    # per micro-batch: the forward's all-gather of w·Ψ beside the forward (L·fwd), the
    # backward's all-gather of w·Ψ and the reduce-scatter of g·Ψ beside the backward
    # (L·(bwd + recompute)), priced by NCCL (nccl_s), in Megatron-FSDP's calls: one coalesced
    # call per TransformerLayer and kind, L = 32 (its FSDP units; the bucket size splits only
    # what lies outside them: param_and_grad_buffer.py l.1860-1957 @ d98e8a64dd), overlapped
    # whatever --overlap-grad-reduce says (optim_grads_params turns both overlaps on:
    # megatron_fsdp.py l.328-333). No tail at ZeRO 3; each phase fits its window, so one
    # layer's call of each shows: exposed = m·Σ_phase (call/L + σ·hidden).
    r, n = run(dp=dp, n_micro=2, zero_stage=3)
    off, _ = run(dp=dp, n_micro=2, zero_stage=3, overlap_grad_reduce=False)
    fwd_w = L * n["forward_layer_s"]
    bwd_w = L * (n["backward_layer_s"] + n["recompute_layer_s"])
    assert n["dp_tail_s"] == 0
    ag = nccl_s(K.Coll.ALL_GATHER, 2, L, dp, link)
    bwd = ag + nccl_s(K.Coll.REDUCE_SCATTER, 4, L, dp, link)
    assert ag < fwd_w and bwd < bwd_w
    shown = (pieces_exposed(ag, fwd_w, L), pieces_exposed(bwd, bwd_w, L))
    assert shown == pytest.approx((ag / L, bwd / L), rel=1e-12)
    per_mb = sum(shown) + SIGMA * (ag + bwd - sum(shown))
    assert r["dp_exposed_s"] == pytest.approx(2 * per_mb, rel=1e-9)
    assert off["dp_exposed_s"] == pytest.approx(r["dp_exposed_s"], rel=1e-12)


# ---- (d) CP ring traffic under the attention products -----------------------------------------

@pytest.mark.parametrize("attention, att_flops, bwd_factor", [
    ("flash", ATT_FLASH, 2.5), ("classic", 2 * ATT_FLASH, 2.0)])
@pytest.mark.parametrize("fast_busbw, hidden", [(370.0, True), (5.0, False)])
def test_cp_ring_overlap(attention, att_flops, bwd_factor, fast_busbw, hidden):
    # c = 2, t = 1 (span 2, inside the node). Per layer: 3·(c−1) K/V chunks of
    # 2·2·b·(s/c)·k·d_h = 2·2·4096·8·128 B = 16,777,216 B: 50,331,648 B, each chunk one NCCL
    # send/recv on NVLink (Simple: 8.4 µs base + one 3.4 µs step, issue 22), 3 · 11.8 = 35.4 µs:
    #   370 GB/s: 136.03 + 35.4 = 171.43 µs;  5 GB/s: 10,066.33 + 35.4 = 10,101.73 µs
    # window (1 + backward factor)·att, att = FLOPs/c / PEAK:
    #   flash 549,755,813,888/2/623.322e12 = 440.99 µs → 3.5·att = 1,543.5 µs
    #   classic (the whole square, 2×) 881.98 µs → 3·att = 2,645.9 µs
    hw = profile_with(FLAT, {"fast.busbw_gb_per_s": fast_busbw})
    r, n = run(hw, cp=2, n_micro=2, attention=attention, sequence_parallel=False)
    cp_s = 3 * 2 * 2 * 4096 * 8 * 128 / (fast_busbw * 1e9) + 3 * (8.4e-6 + 3.4e-6)
    att = att_flops / 2 / PEAK
    assert n["attention_s"] == pytest.approx(att, rel=1e-12)
    window = (1 + bwd_factor) * att
    assert (cp_s < window) is hidden
    # the hidden part slows the attention beside it by σ
    assert r["cp_exposed_s"] == pytest.approx(
        2 * L * (max(0, cp_s - window) + SIGMA * min(cp_s, window)), rel=1e-9)


# ---- property: exposed is never negative, never more than the raw traffic time ----------------

GRID = list(itertools.product([1, 2, 16], [1, 2], [1, 4, 16], [0, 1, 2, 3], ["selective", "full"],
                              [True, False]))


def test_exposed_between_zero_and_raw():
    for tp, cp, dp, zero, recompute, overlap in GRID:
        m = 3
        r, _ = run(H100, tp=tp, cp=cp, dp=dp, n_micro=m, zero_stage=zero, recompute=recompute,
                   overlap_grad_reduce=overlap)
        case = (tp, cp, dp, zero, recompute, overlap)

        def raw(volume, inside, steps):
            bw, lat = FAST if inside else NET
            return volume / bw + steps * lat

        passes = 2 if recompute == "full" else 1
        raw_tp = raw(r["tp_bytes"], r["tp_inside"], m * L * (passes + 1) * 4 * (tp - 1))
        # a group that shares its link moves its bytes at its share of the bandwidth
        raw_cp = raw(r["cp_bytes"] / r["cp_share"], r["cp_inside"], m * L * 3 * (cp - 1))
        d = dp * cp
        # ring passes: per micro-batch ZeRO-2 1, ZeRO-3 3; per step ZeRO-0 2, ZeRO-1 1 + 1, ZeRO-2 1
        passes_dp = m * {0: 0, 1: 0, 2: 1, 3: 3}[zero] + {0: 2, 1: 2, 2: 1, 3: 0}[zero]
        raw_dp = raw(r["dp_bytes"] / r["dp_share"], r["dp_inside"], passes_dp * (d - 1))
        # every call NCCL runs pays its own latency: at most the ring Simple's, base 8.4 µs + 14 µs
        # (the network's, the largest per step) per step, 2(d − 1) steps at most; Megatron issues
        # each collective in ⌈Ψ_stage / max(4·10⁷, 10⁶·d)⌉ buckets with overlap, one without, the
        # per-micro-batch ones (ZeRO 2: 1, ZeRO 3: 3 collectives) m times
        buckets = K.megatron_buckets(r["stage_params"], d, overlap)
        calls = buckets * (m * {0: 0, 1: 0, 2: 1, 3: 3}[zero] + {0: 1, 1: 2, 2: 1, 3: 0}[zero])
        raw_dp = raw_dp + calls * (8.4 + 2 * (d - 1) * 14) * 1e-6
        tol = 1e-12
        # the forward all-reduces are never hidden: at least passes/(passes + 1) of the TP time shows
        # (inside the node; across it the group leaves on 8 NICs, faster than the flat NET bound)
        low = passes / (passes + 1) * raw_tp * (1 - tol) if tp <= 8 else 0
        assert low <= r["tp_exposed_s"] <= raw_tp * (1 + tol), case
        assert 0 <= r["cp_exposed_s"] <= raw_cp * (1 + tol), case
        # (with cp > 1 each DP collective shares the link with CP at its own share: bounded in
        # test_comm_links instead)
        assert 0 <= r["dp_exposed_s"] <= (raw_dp * (1 + tol) if cp == 1 else np.inf), case
        if zero <= 1 and not overlap and r["dp_inside"] and cp == 1:
            # inside the node, without overlap one call per collective (Megatron's single
            # bucket), and NCCL picks nothing slower than its ring Simple: the bytes at NVLink's
            # busbw plus, per call, the ring's base 8.4 µs and 3.4 µs per step (collectives.py
            # BASE/HW_LATENCY_US). ZeRO 0: one all-reduce of 2(d − 1) steps; ZeRO 1: a
            # reduce-scatter and an all-gather of d − 1 each — 2(d − 1) steps either way.
            calls = {0: 1, 1: 2}[zero]
            nccl_raw = r["dp_bytes"] / r["dp_share"] / FAST[0] + (
                calls * 8.4 + 2 * (d - 1) * 3.4) * 1e-6
            assert r["dp_exposed_s"] <= nccl_raw * (1 + tol), case
        total = r["tp_exposed_s"] + r["cp_exposed_s"] + r["pp_exposed_s"] + r["dp_exposed_s"]
        assert r["exposed_comm_s"] == pytest.approx(total, rel=1e-12), case
