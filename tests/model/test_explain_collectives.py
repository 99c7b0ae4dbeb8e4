"""explain's collectives (issue 22): each collective of the step with the algorithm and protocol
NCCL's tuner picks for one call, the call's latency and transfer, the calls per step and the
message — the same numbers the cost path charged (model/nccl.py Call, priced)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from planner.catalog import load_hardware, load_model
from planner.cli import app
from planner.formulas import collectives as K
from planner.model.explain import explain
from planner.schema import PlanConfig

H100 = load_hardware("h100-nvlink")
LLAMA70 = load_model("70b")
US = 1e-6


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAN3D_CACHE_DIR", str(tmp_path / "cache"))


def _plan(**kw):
    kw = {"dp": 16, "tp": 8, "pp": 4, "mbs": 1, "gbs": 1024, "seq_len": 8192, **kw}
    config = PlanConfig(n_micro=kw["gbs"] // (kw["mbs"] * kw["dp"]), **kw)
    plan = explain(LLAMA70, H100, config)
    return plan, {t.key: t.value for t in plan.terms}, {c.name: c for c in plan.comm.collectives}


def test_megatron_dp_collectives_by_hand():
    plan, terms, calls = _plan(zero_stage=1)
    rs, ag = calls["DP reduce-scatter"], calls["DP all-gather"]
    # dp16 tp8 pp4: each DP group has one rank per node (tp = 8 fills the node), 16 nodes. The
    # tuner's ring Simple reduce-scatter: base 8.4 µs + (n − 1) = 15 steps, all across the
    # network at the tree's 14 µs (one rank per node) = 8.4 + 15·14 = 218.4 µs. PAT (one rank
    # per node) has less latency, 8 + ⌊log₂16⌋·14/3.5 + 2.8·16 = 68.8 µs, but runs at 0.75·W:
    # slower at these ~160 MB buckets
    assert (rs.algorithm, rs.protocol) == ("ring", "Simple")
    assert rs.latency_s == pytest.approx(218.4 * US)
    assert ag.latency_s == pytest.approx(218.4 * US)
    # Megatron's buckets: ⌈Ψ_gpu / max(4·10⁷, 10⁶·16)⌉ = ⌈Ψ_gpu / 4·10⁷⌉, each call one bucket
    psi = plan.memory.params_per_gpu
    buckets = K.megatron_buckets(psi, 16, 1)
    assert rs.calls_per_step == ag.calls_per_step == buckets
    # a bucket's reduce-scatter buffer: its gradients, 4 bytes each (Megatron's fp32 main
    # grads) → 4·Ψ/buckets; the all-gather's, its bf16 weights → 2·Ψ/buckets
    assert rs.message_bytes == pytest.approx(4 * psi / buckets, rel=1e-9)
    assert ag.message_bytes == pytest.approx(2 * psi / buckets, rel=1e-9)
    # the transfer: B / (W · n/(n − 1)), W = 46 GB/s of one NIC (the group's own)
    assert rs.transfer_s == pytest.approx(rs.message_bytes * 15 / 16 / 46e9, rel=0.01)
    # the cost path charged exactly calls × (latency + transfer)
    assert rs.step_s == pytest.approx(terms["dp_reduce_s"], rel=1e-12)
    assert ag.step_s == pytest.approx(terms["dp_gather_s"], rel=1e-12)


def test_zero3_gathers_forward_and_backward_every_micro_batch():
    _, terms, calls = _plan(zero_stage=3, framework="torchtitan", pp=1, dp=64)
    ag, rs = calls["DP all-gather"], calls["DP reduce-scatter"]
    # FSDP2: one all-gather per block forward, again backward; one reduce-scatter per block;
    # every micro-batch: 80 layers × 2 × m, m = 1024/(64·1) = 16 → 2,560 and 1,280 calls
    assert ag.calls_per_step == 80 * 2 * 16 and rs.calls_per_step == 80 * 16
    assert ag.ranks == rs.ranks == 64


def test_explain_names_each_call_within_80_columns():
    r = CliRunner().invoke(app, ["explain", "--model", "70b", "--gpus", "512", "--hw",
                                 "h100-nvlink", "--tp", "8", "--pp", "4", "--mbs", "1", "--gbs",
                                 "1024", "--section", "comm"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert all(len(line) <= 80 for line in r.output.splitlines())
    assert r.output.index("Step") < r.output.index("Collectives per step")  # the answer first
    row = next(line for line in r.output.splitlines() if "DP reduce-scatter" in line)
    assert "ring/Simple" in row and "218.4 µs" in row and "57" in row


def test_tensor_parallel_collectives_by_hand():
    # dp16 tp8 pp4, mbs 1, s = 8192, h = 8192, bf16: each TP call's buffer b·s·h·2 =
    # 134,217,728 B on one node's NVLink (W = 370 GB/s ring, NVLS all-reduce 480 GB/s)
    _, terms, calls = _plan(zero_stage=1)
    ag, rs = calls["TP all-gather"], calls["TP reduce-scatter"]
    assert ag.message_bytes == rs.message_bytes == 134_217_728
    # ring Simple: 8.4 + 7·3.4 = 32.2 µs; B·(7/8)/370e9 = 317.4 µs. NVLS's all-gather runs at
    # 480/2·7/8 = 210 GB/s: 25 + 639.2 µs, slower
    assert (ag.algorithm, ag.protocol) == ("ring", "Simple")
    assert ag.latency_s == pytest.approx(32.2 * US)
    assert ag.transfer_s == pytest.approx(134_217_728 * 7 / 8 / 370e9)
    # 2 of each per layer, direction and pass: 2 · 20 layers · 64 micro-batches · 2 = 5,120
    assert ag.calls_per_step == rs.calls_per_step == 5120
    # the layer's one-direction term is two of each
    assert terms["tp_layer_s"] == pytest.approx(2 * (ag.latency_s + ag.transfer_s
                                                     + rs.latency_s + rs.transfer_s))
    # without sequence parallelism, all-reduces: NVLS, 25 µs + B / (480e9 · 8/14) = 489.3 µs,
    # beats the ring's 8.4 + 14·3.4 = 56 µs + B·(14/8)/370e9 = 634.8 µs
    _, _, plain = _plan(zero_stage=1, sequence_parallel=False)
    ar = plain["TP all-reduce"]
    assert (ar.algorithm, ar.protocol) == ("nvls", "Simple")
    assert ar.latency_s == pytest.approx(25 * US)
    assert ar.transfer_s == pytest.approx(134_217_728 * 14 / 8 / 480e9)


def test_pipeline_sends_by_hand():
    # dp16 tp8 pp4, mbs 1, s = 8192, h = 8192, bf16, 64 micro-batches: the stage boundary, split
    # over t under sequence parallelism, is b·s·h·2/t = 16,777,216 B; adjacent stages sit
    # tp·dp = 128 GPUs apart, across the network at one NIC's 46 GB/s (PP's share 100 %).
    # NCCL runs it as Simple (above 16 KiB): 8.4 µs base + one network step 14 µs = 22.4 µs,
    # and 16,777,216 / 46e9 = 364.72 µs
    plan, terms, calls = _plan(zero_stage=1)
    pp = calls["PP send/recv"]
    assert (pp.algorithm, pp.protocol) == ("p2p", "Simple")
    assert pp.message_bytes == 16_777_216
    assert pp.latency_s == pytest.approx(22.4 * US)
    assert pp.transfer_s == pytest.approx(16_777_216 / 46e9)
    # 2·(v·p − 1)/p = 2·3/4 = 1.5 messages per micro-batch on a GPU (each boundary crossed
    # forward and back, averaged over the 4 stages): 64 · 1.5 = 96 a step
    assert pp.calls_per_step == 96
    # the cost path charges the same per micro-batch: 1.5 · (22.4 + 364.72) µs = 580.68 µs
    assert terms["pp_exposed_s"] == pytest.approx(64 * 1.5 * (22.4e-6 + 16_777_216 / 46e9))
    # a message of 16 KiB or less goes as LL: 6.6 + 2.7 µs, at half the bandwidth
    latency, transfer = K.send_recv_parts_s(16_384, 46e9, 0)
    assert latency == pytest.approx(9.3 * US) and transfer == pytest.approx(16_384 / 23e9)


def test_context_parallel_calls_by_hand():
    # Llama 3.1 8B (L = 32, a = 32, k = 8, d_h = 128), s = 65,536, b = 1, t = 1, cp = 8 as
    # a2a+p2p with c_a = 4, dp = 8, 16 sequences a step: m = 2. The whole cp group sits in one
    # 8-GPU node (stride 1), nothing else on its NVLink: the ring at 370 GB/s, the all-to-all at
    # its measured rate for its size.
    config = PlanConfig(dp=8, tp=1, pp=1, cp=8, mbs=1, gbs=16, n_micro=2, seq_len=65536,
                        zero_stage=1, sequence_parallel=False, cp_kind="a2a+p2p", cp_a2a=4)
    plan = explain(load_model("8b"), H100, config)
    calls = {c.name: c for c in plan.comm.collectives}
    terms = {t.key: t.value for t in plan.terms}
    ring, a2a = calls["CP ring send/recv"], calls["CP all-to-all"]
    # the ring over cp/c_a = 2 groups: a K/V chunk 2·2·b·(s/c)·k·d_h = 4·8,192·8·128 =
    # 33,554,432 B per step, 3·(2 − 1) = 3 steps per layer and micro-batch: 3·32·2 = 192 calls,
    # each one NVLink send/recv, 8.4 + 3.4 = 11.8 µs + 33,554,432 / 370e9 = 90.687 µs
    assert ring.message_bytes == 33_554_432 and ring.calls_per_step == 192
    assert ring.latency_s == pytest.approx(11.8 * US)
    assert ring.transfer_s == pytest.approx(33_554_432 / 370e9)
    # the all-to-all over c_a = 4: Q, K, V and output, ε·b·(s/c)·d_h·(2a + 2k) = 2·8,192·128·80
    # = 167,772,160 B a rank, of which 2·(3/4) go out per layer (both directions): 251,658,240 B
    # in 8 calls of 31,457,280 B; each call 8.4 µs + ⌈3/8⌉ = 1 round of 3.4 µs = 11.8 µs
    assert a2a.message_bytes == 31_457_280 and a2a.calls_per_step == 8 * 32 * 2
    assert a2a.latency_s == pytest.approx(11.8 * US)
    # at the all-to-all's measured rate for nccl-tests' buffer S = 4/3·31,457,280 = 41,943,040 B
    # (K.alltoall_busbw, h100-nvlink.toml): 355/(1 + (3,656,500/S)^0.47) = 355/(1 + 0.087177^0.47)
    # = 355/1.31765 = 269.42 GB/s
    assert a2a.transfer_s == pytest.approx(31_457_280 / 269.42e9, rel=1e-4)
    # the cost path's per-layer all-to-all term is the same eight calls: 934.07 + 94.4 µs
    assert terms["cp_a2a_layer_s"] == pytest.approx(251_658_240 / 269.42e9 + 8 * 11.8 * US,
                                                    rel=1e-4)
    # with c_a = 16 an all-to-all would go out in ⌈15/8⌉ = 2 rounds: 8.4 + 2·3.4 = 15.2 µs
    assert K.all_to_all_latency_s(16, 1) == pytest.approx(15.2 * US)
