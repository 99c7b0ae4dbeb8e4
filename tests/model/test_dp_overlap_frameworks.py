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
FLAT = profile_with(load_hardware("h100-nvlink"), {"sm_count": None})
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


def test_megatron_interleaved_gathers_start_together():
    # pp = 2, v = 2: align_param_gather (on with a virtual pipeline) starts every stage's
    # gathers at the step's start, so no later stage gathers in line; the first stage's buckets
    # as without interleaving (the per-chunk release is not modelled yet)
    r, n = run(dp=8, pp=2, vpp=2, n_micro=4, zero_stage=1)
    fwd, bwd = windows(n)
    buckets = math.ceil(n["stage_params"] / 40_000_000)
    rs, ag = n["dp_reduce_s"], n["dp_gather_s"]
    want = with_sigma(rs, shown(rs, bwd, buckets)) + with_sigma(ag, shown(ag, fwd, buckets))
    assert n["dp_tail_exposed_s"] == pytest.approx(want, rel=1e-12)


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
