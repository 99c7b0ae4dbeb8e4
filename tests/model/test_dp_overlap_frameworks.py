"""Each framework's data-parallel overlap (issue 22), composed through plan_costs: which pieces
its collectives run in and beside which compute (frameworks/*: DPPhase), priced by
formulas/overlap.py. Llama-3.1-8B (L = 32, Ψ = 8,030,261,248) on h100-nvlink without wave
quantisation, as tests/model/test_overlap_hand.py; the collectives' own times come from the
plan's notes (their NCCL pricing is checked in test_overlap_hand and tests/cases)."""

from __future__ import annotations

import math

import pytest

from planner.calibrate import profile_with
from planner.catalog import load_hardware, load_model
from planner.model.cost import Choices, numbers, plan_costs
from planner.model.nccl import nccl_s
from planner.schema import PlanConfig

MODEL = load_model("llama-3.1-8b")
# no wave quantisation, attention at the GEMM figure (the hand arithmetic's single rate)
FLAT = profile_with(load_hardware("h100-nvlink"), {"sm_count": None, "efficiency.attention": {}})
SIGMA = 0.189  # comm.OVERLAP_COMPUTE_SLOWDOWN


def run(**config):
    cfg = PlanConfig(**{"seq_len": 8192, "gbs": config["dp"] * config.get("n_micro", 1),
                        **config})
    seen = {}

    def note(name, value):
        seen[name] = value
        return value

    return plan_costs(numbers(MODEL, FLAT, cfg), Choices.of(cfg), note), seen


def shown(comm, window, pieces):
    """max(C/n, C − W·(n − 1)/n): one piece exposed, the rest under (n − 1)/n of the window."""
    return max(comm / pieces, comm - window * (pieces - 1) / pieces)


def with_sigma(comm, exposed):
    return exposed + SIGMA * (comm - exposed)


def windows(n):
    """The stage's forward and backward of one micro-batch."""
    layers = n["stage_layers"]
    return (layers * n["forward_layer_s"],
            layers * (n["backward_layer_s"] + n["recompute_layer_s"]))


def test_megatron_pipeline_buckets_and_later_stages_gathering_whole():
    # pp = 2, v = 1, dp = 8, ZeRO-1, --overlap-grad-reduce/--overlap-param-gather. The first
    # stage's buckets: ⌈Ψ_stage/max(4·10⁷, 10⁶·8)⌉ = ⌈Ψ_stage/4·10⁷⌉; the reduction's last
    # bucket and the gather's first exposed; the second stage gathers its one bucket whole
    # before its first forward: + (2 − 1)·T_ag
    r, n = run(dp=8, pp=2, n_micro=4, zero_stage=1)
    fwd, bwd = windows(n)
    buckets = math.ceil(n["stage_params"] / 40_000_000)
    assert 40 < buckets < 120  # the 16 layers and the embedding or head of 8B: ~4·10⁹
    rs, ag = n["dp_reduce_s"], n["dp_gather_s"]
    assert n["dp_reduce_exposed_s"] == pytest.approx(shown(rs, bwd, buckets), rel=1e-12)
    assert n["dp_gather_exposed_s"] == pytest.approx(shown(ag, fwd, buckets), rel=1e-12)
    want = with_sigma(rs, shown(rs, bwd, buckets)) + with_sigma(ag, shown(ag, fwd, buckets)) + ag
    assert n["dp_tail_exposed_s"] == pytest.approx(want, rel=1e-12)
    # without overlap: one bucket after the backward, the gather in the optimizer step, whole
    _, n_off = run(dp=8, pp=2, n_micro=4, zero_stage=1, overlap_grad_reduce=False)
    assert n_off["dp_tail_exposed_s"] == pytest.approx(
        n_off["dp_reduce_s"] + n_off["dp_gather_s"], rel=1e-12)


def test_megatron_interleaved_chunks_are_the_pieces():
    # pp = 2, v = 2, m = 4, dp = 8, ZeRO-1 (issue 22): each chunk is its own DDP module and only
    # the first is cut into buckets, so the first stage issues ⌈(Ψ_stage/2)/4·10⁷⌉ + 1 calls
    # each way; the schedule releases chunk 1's reduction after its last backward and chunk 0's
    # after the stage's last, min(p, m) = 2 chunk-backwards = 2·T_bwd/2 apart: 2 pieces beside
    # W = 2·T_bwd, max(T_rs/2, T_rs − 2·T_bwd·(2 − 1)/2) = max(T_rs/2, T_rs − T_bwd). The
    # gather: chunk 0 whole before the first forward, chunk 1 beside chunk 0's 2 forwards:
    # max(T_ag/2, T_ag − T_fwd). align_param_gather starts every stage's at once: no stage
    # gathers in line
    r, n = run(dp=8, pp=2, vpp=2, schedule="interleaved", n_micro=4, zero_stage=1)
    fwd, bwd = windows(n)
    calls = math.ceil(n["stage_params"] / 2 / 40_000_000) + 1
    assert 25 < calls < 60  # the 16 layers and the embedding or head of 8B: ~4·10⁹ over 2 chunks
    ledger = {c.name: c.calls for c in n["collectives"]}
    assert ledger["DP reduce-scatter"] == ledger["DP all-gather"] == calls
    assert n["dp_reduce_pieces"] == n["dp_gather_pieces"] == 2
    rs, ag = n["dp_reduce_s"], n["dp_gather_s"]
    assert n["dp_reduce_exposed_s"] == pytest.approx(max(rs / 2, rs - bwd), rel=1e-12)
    assert n["dp_gather_exposed_s"] == pytest.approx(max(ag / 2, ag - fwd), rel=1e-12)
    want = (with_sigma(rs, max(rs / 2, rs - bwd)) + with_sigma(ag, max(ag / 2, ag - fwd)))
    assert n["dp_tail_exposed_s"] == pytest.approx(want, rel=1e-12)
    # without --overlap-grad-reduce: one bucket per chunk (2 calls), nothing hidden
    _, n_off = run(dp=8, pp=2, vpp=2, schedule="interleaved", n_micro=4, zero_stage=1,
                   overlap_grad_reduce=False)
    assert {c.name: c.calls for c in n_off["collectives"]}["DP reduce-scatter"] == 2
    assert n_off["dp_tail_exposed_s"] == pytest.approx(
        n_off["dp_reduce_s"] + n_off["dp_gather_s"], rel=1e-12)


def test_megatron_interleaved_window_is_p_chunk_backwards():
    # the same plan at pp = 4, v = 2, m = 8: the chunks' releases min(4, 8) = 4 chunk-backwards
    # = 4·T_bwd/2 apart, W = 4·T_bwd: max(T_rs/2, T_rs − 2·T_bwd)
    _, n = run(dp=8, pp=4, vpp=2, schedule="interleaved", n_micro=8, zero_stage=1)
    fwd, bwd = windows(n)
    rs, ag = n["dp_reduce_s"], n["dp_gather_s"]
    assert n["dp_reduce_exposed_s"] == pytest.approx(max(rs / 2, rs - 2 * bwd), rel=1e-12)
    assert n["dp_gather_exposed_s"] == pytest.approx(max(ag / 2, ag - 2 * fwd), rel=1e-12)
    assert n["dp_reduce_exposed_s"] == pytest.approx(rs / 2, rel=1e-12)  # compute-bound here
    # communication-bound: tp = 8 puts each DP rank on its own node (one NIC) and s = 512 makes
    # the compute short, pp = 2: T_rs ≈ 39 ms against T_bwd ≈ 3 ms, so T_rs − T_bwd is shown
    _, n = run(dp=8, tp=8, pp=2, vpp=2, schedule="interleaved", n_micro=4, zero_stage=1,
               seq_len=512)
    fwd, bwd = windows(n)
    rs, ag = n["dp_reduce_s"], n["dp_gather_s"]
    assert rs - bwd > rs / 2 and ag - fwd > ag / 2
    assert n["dp_reduce_exposed_s"] == pytest.approx(rs - bwd, rel=1e-12)
    assert n["dp_gather_exposed_s"] == pytest.approx(ag - fwd, rel=1e-12)


def test_deepspeed_gathers_in_its_step_and_reduces_after_its_pipeline():
    # p = 1, ZeRO-1: the reduction in reduce_bucket_size buckets (⌈Ψ/5·10⁸⌉ = ⌈16.06⌉ = 17),
    # the last exposed; the gather inside the optimizer step, whole
    r, n = run(dp=8, n_micro=2, zero_stage=1, framework="deepspeed", sequence_parallel=False,
               recompute="full")
    fwd, bwd = windows(n)
    rs, ag = n["dp_reduce_s"], n["dp_gather_s"]
    assert math.ceil(8_030_261_248 / 5e8) == 17
    assert n["dp_reduce_exposed_s"] == pytest.approx(shown(rs, bwd, 17), rel=1e-12)
    assert n["dp_gather_exposed_s"] == pytest.approx(ag, rel=1e-12)
    # the pipeline engine reduces after its schedule (ReduceGrads): nothing hidden
    _, n_pp = run(dp=8, pp=2, n_micro=4, zero_stage=1, framework="deepspeed",
                  sequence_parallel=False, recompute="full")
    assert n_pp["dp_tail_exposed_s"] == pytest.approx(
        n_pp["dp_reduce_s"] + n_pp["dp_gather_s"], rel=1e-12)


def test_torchtitan_overlaps_whatever_the_flag():
    # FSDP2 has no switch: its per-block prefetch and reduce-scatters overlap either way
    on, _ = run(dp=8, n_micro=2, zero_stage=3, framework="torchtitan")
    off, _ = run(dp=8, n_micro=2, zero_stage=3, framework="torchtitan", overlap_grad_reduce=False)
    assert on["step_s"] == off["step_s"]


def test_fsdp2_blocks_are_the_pieces():
    # ZeRO-3 under FSDP2, p = 1: per micro-batch the forward's 32 block gathers beside the
    # forward, the backward's 32 gathers and 32 reduce-scatters beside the backward; each phase
    # shows max(T/32, T − W·31/32) and σ of the rest, m = 2 times
    r, n = run(dp=8, n_micro=2, zero_stage=3, framework="torchtitan")
    fwd, bwd = windows(n)
    calls = {c.name: c for c in n["collectives"]}
    ag, rs = calls["DP all-gather"], calls["DP reduce-scatter"]
    assert (ag.calls, rs.calls) == (2 * 2 * 32, 2 * 32)  # m·(forward + backward)·L, m·L
    # a micro-batch's 32 gathers in one direction, its 32 reduce-scatters: 32 × one call
    one_ag = 32 * nccl_s(ag.coll, ag.buffer_bytes, ag.ranks, ag.link)
    one_rs = 32 * nccl_s(rs.coll, rs.buffer_bytes, rs.ranks, rs.link)
    per_mb = (with_sigma(one_ag, shown(one_ag, fwd, 32))
              + with_sigma(one_ag + one_rs, shown(one_ag + one_rs, bwd, 32)))
    assert n["zero_microbatch_exposed_s"] == pytest.approx(per_mb, rel=1e-9)
    assert r["dp_exposed_s"] == pytest.approx(2 * per_mb, rel=1e-9)


def test_explain_shows_the_exposed_parts_with_their_pieces():
    # 8B, pp = 2, dp = 8, ZeRO-1 under Megatron: explain names the pieces (n_rs, n_ag: the
    # buckets) and writes each exposed part in them, max(T/n, T − W·(n − 1)/n), and the later
    # stage's in-line gather (p − 1)·T_ag in the tail; its values are the cost path's
    from planner.model.explain import explain

    config = PlanConfig(dp=8, pp=2, n_micro=4, gbs=32, seq_len=8192, zero_stage=1,
                        sequence_parallel=False)
    plan = explain(MODEL, FLAT, config)
    terms = {t.key: t for t in plan.terms}
    _, n = run(dp=8, pp=2, n_micro=4, zero_stage=1)
    assert terms["dp_reduce_pieces"].value == math.ceil(n["stage_params"] / 40_000_000)
    assert "T_rs/n_rs" in terms["dp_reduce_exposed_s"].formula
    assert "T_ag/n_ag" in terms["dp_gather_exposed_s"].formula
    assert "T_ag·(p - 1)" in terms["dp_tail_exposed_s"].formula
    for key in ("dp_reduce_exposed_s", "dp_gather_exposed_s", "dp_tail_exposed_s"):
        assert terms[key].value == pytest.approx(n[key], rel=1e-9)


def test_explain_shows_the_chunks_of_an_interleaved_pipeline():
    # pp = 2, v = 2: explain's pieces are the chunks (n_rs = n_ag = v), the window p backwards
    # (forwards) of the stage, and the calls ⌈Ψ_gpu/(v·bucket)⌉ + v − 1 inside T_rs and T_ag
    from planner.model.explain import explain

    config = PlanConfig(dp=8, pp=2, vpp=2, schedule="interleaved", n_micro=4, gbs=32,
                        seq_len=8192, zero_stage=1, sequence_parallel=False)
    plan = explain(MODEL, FLAT, config)
    terms = {t.key: t for t in plan.terms}
    _, n = run(dp=8, pp=2, vpp=2, schedule="interleaved", n_micro=4, zero_stage=1)
    assert terms["dp_reduce_pieces"].formula == terms["dp_gather_pieces"].formula == "v"
    assert terms["dp_reduce_pieces"].value == 2
    assert "L_s·p·(T_bwd + T_rec)" in terms["dp_reduce_exposed_s"].formula
    assert "L_s·T_fwd·p" in terms["dp_gather_exposed_s"].formula
    assert "v + ceil(Ψ_gpu/(v·" in terms["dp_reduce_s"].formula
    for key in ("dp_reduce_s", "dp_reduce_exposed_s", "dp_gather_exposed_s",
                "dp_tail_exposed_s"):
        assert terms[key].value == pytest.approx(n[key], rel=1e-9)


def test_megatron_step_phases_by_hand():
    # frameworks.megatron.megatron_step_phases on plain numbers: T_fwd = 0.05 s, T_bwd = 0.1 s of
    # the stage per micro-batch, 40 buckets each way
    from types import SimpleNamespace

    from planner.formulas.overlap import pipelined_exposed_s
    from planner.frameworks.megatron import megatron_step_phases

    def w(p, v, m, overlap=1):
        return SimpleNamespace(fwd_s=0.05, bwd_s=0.1, p=p, v=v, m=m, overlap=overlap,
                               reduce_calls=40, gather_calls=40)

    # v = 1, p = 4: the buckets beside one micro-batch's backward; 3 later stages in line
    rs, ag = megatron_step_phases(w(4, 1, 8))
    assert (rs.pieces, rs.window_s, ag.pieces, ag.window_s, ag.inline_stages) == (
        40, 0.1, 40, 0.05, 4)
    # v = 3, p = 4, m = 8: 3 chunks, releases 4 chunk-backwards apart, W = 4·0.1 = 0.4 s, forward
    # 4·0.05 = 0.2 s, none in line. A 0.3 s reduction: max(0.1, 0.3 − 0.4·2/3 = 0.0333) = 0.1;
    # a 0.9 s one: max(0.3, 0.9 − 0.2667) = 0.6333
    rs, ag = megatron_step_phases(w(4, 3, 8))
    assert (rs.pieces, ag.pieces, ag.inline_stages) == (3, 3, 1)
    assert (rs.window_s, ag.window_s) == pytest.approx((0.4, 0.2), rel=1e-12)
    assert pipelined_exposed_s(0.3, rs.window_s, rs.pieces) == pytest.approx(0.1, rel=1e-12)
    assert pipelined_exposed_s(0.9, rs.window_s, rs.pieces) == pytest.approx(0.9 - 0.8 / 3,
                                                                             rel=1e-12)
    # m = 2 < p = 4: the schedule's groups hold m micro-batches, W = 2·0.1
    rs, _ = megatron_step_phases(w(4, 3, 2))
    assert rs.window_s == pytest.approx(0.2, rel=1e-12)
    # without --overlap-grad-reduce nothing is hidden
    rs, ag = megatron_step_phases(w(4, 3, 8, overlap=0))
    assert (rs.window_s, ag.window_s) == (0, 0)


def test_deepspeed_zero3_follows_its_prefetch_trace():
    # 8B, dp = 8, m = 2, ZeRO-3 under DeepSpeed (tests/cases/zero3.toml): per micro-batch the
    # forward's 218 coalesced gathers of Ψ = 8,030,261,248, the backward's 198 of Ψ_b = Ψ − 10⁹
    # (the forward's last L = 10⁹ stay gathered), ⌈Ψ/5·10⁸⌉ = 17 reduce-scatter buckets.
    # Forward: the first fetch, the embedding's 128,256·4,096 = 525,336,576 elements (> B),
    # exposed: Ψ/525,336,576 = 15.29 pieces beside the forward. Backward: gathers and buckets on
    # one stream beside the backward, the last bucket T_rs/17 exposed.
    r, n = run(dp=8, n_micro=2, zero_stage=3, framework="deepspeed", sequence_parallel=False,
               recompute="full")
    fwd, bwd = windows(n)
    psi = 8_030_261_248
    assert n["stage_params"] == psi
    calls = {c.name: c for c in n["collectives"]}
    ag_f, ag_b, rs = (calls["DP all-gather fwd"], calls["DP all-gather bwd"],
                      calls["DP reduce-scatter"])
    assert (ag_f.calls, ag_b.calls, rs.calls) == (2 * 218, 2 * 198, 2 * 17)
    assert ag_f.buffer_bytes == pytest.approx(2 * psi / 218, rel=1e-12)  # bf16 weights
    assert ag_b.buffer_bytes == pytest.approx(2 * (psi - 1e9) / 198, rel=1e-12)
    t_f = 218 * nccl_s(ag_f.coll, ag_f.buffer_bytes, ag_f.ranks, ag_f.link)
    t_b = 198 * nccl_s(ag_b.coll, ag_b.buffer_bytes, ag_b.ranks, ag_b.link)
    t_rs = 17 * nccl_s(rs.coll, rs.buffer_bytes, rs.ranks, rs.link)
    exposed_f = shown(t_f, fwd, psi / 525_336_576)
    exposed_b = max(t_rs / 17, t_b + t_rs - bwd * 16 / 17)
    per_mb = with_sigma(t_f, exposed_f) + with_sigma(t_b + t_rs, exposed_b)
    assert n["zero_microbatch_exposed_s"] == pytest.approx(per_mb, rel=1e-9)
    assert r["dp_exposed_s"] == pytest.approx(2 * per_mb, rel=1e-9)
    # the traffic counts the backward's gathers as issued: m·(d − 1)/d·(wΨ + wΨ_b + gΨ), 2 B each
    assert n["dp_bytes"] == pytest.approx(2 * 7 / 8 * 2 * (psi + (psi - 1e9) + psi), rel=1e-12)
    # compute-bound here: what shows is the embedding's gather and the last bucket
    assert exposed_f == pytest.approx(t_f * 525_336_576 / psi, rel=1e-12)
    assert exposed_b == pytest.approx(t_rs / 17, rel=1e-12)
