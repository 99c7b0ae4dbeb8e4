"""The expert exchange's bytes by link and pass, from the calls priced (model/moe.py
exchange_traffic, V_ep), and what of them runs beside the data-parallel collectives
(beside_dp_bytes): hand-derived values."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from planner.formulas import comm as C
from planner.formulas.moe_layer import Dispatcher
from planner.model import moe as MOE

T, H, K, E = 4096, 7168, 8, 128


def numbers(ep, etp=1, deepep=0):
    return SimpleNamespace(ep=ep, etp=etp, top_k=K, hidden=H, n_experts=E, act_bytes=2,
                           deepep=deepep, expert_groups=1, topk_groups=1)


def test_alltoall_bytes_are_the_calls_priced():
    # EP8 in one 8-GPU node, λ = 1, no recompute: every byte on NVLink.
    # tokens' all-to-all: 4096·8·7/8 = 28,672 copies · 7168·2 B = 411,041,792 B, 2 forward +
    # 2 backward; probabilities' all-to-all: 28,672·4 = 114,688 B, 1 + 1; counts' all-gather
    # over tp·ep = 8: 7 peers · 128·8 B = 7,168 B, forward only; etp = 1 moves nothing
    t = MOE.exchange_traffic(numbers(8), Dispatcher.ALL_TO_ALL, 8, T, 1.0, 1)
    assert t.fwd_net == 0 and t.bwd_net == 0
    assert t.fwd_nvl == 2 * 411_041_792 + 114_688 + 7_168
    assert t.bwd_nvl == 2 * 411_041_792 + 114_688
    # V_ep before counted the tokens' four all-to-alls alone: 1,644,167,168 B
    assert MOE.traffic_bytes(t) == 1_644_167_168 + 2 * 114_688 + 7_168
    # full recompute reruns the forward's calls (2 forward passes), in the backward pass: the
    # forward's bytes stay, the backward's gain the forward's
    again = MOE.exchange_traffic(numbers(8), Dispatcher.ALL_TO_ALL, 8, T, 1.0, 2)
    assert again.fwd_nvl == t.fwd_nvl and again.bwd_nvl == t.bwd_nvl + t.fwd_nvl


def test_alltoall_splits_nvlink_and_network_peers():
    # EP32 over 4 nodes of 8: of the 31 peers 7 on NVLink, 24 across the network
    t = MOE.exchange_traffic(numbers(32), Dispatcher.ALL_TO_ALL, 8, T, 1.0, 1)
    sent = 4096 * 8 * 31 / 32 * 7168 * 2  # one tokens' all-to-all
    probs = 4096 * 8 * 31 / 32 * 4
    counts = 31 * 128 * 8  # the tp·ep = 32 group leaves the node: all on the network
    assert t.bwd_nvl == pytest.approx((2 * sent + probs) * 7 / 31)
    assert t.bwd_net == pytest.approx((2 * sent + probs) * 24 / 31)
    assert t.fwd_net == pytest.approx((2 * sent + probs) * 24 / 31 + counts)


def test_deepep_bytes_are_its_slots():
    # EP8 in one node: each of the four calls forwards 4096·G·7/8 copies on NVLink, G =
    # 8·(1 − (7/8)^8): the dispatches' 14,416 B slots, the combines' 14,384 B
    g = 8 * (1 - (7 / 8) ** 8)
    copies = 4096 * g * 7 / 8
    t = MOE.exchange_traffic(numbers(8, deepep=1), Dispatcher.DEEPEP, 8, T, 1.0, 1)
    assert t.fwd_net == 0 and t.bwd_net == 0
    assert t.fwd_nvl == pytest.approx(copies * (14_416 + 14_384))
    assert t.bwd_nvl == pytest.approx(copies * (14_384 + 14_416))


def test_beside_dp_by_phase():
    # the stage's exchange per micro-batch: 3 GB forward, 2 GB backward on the network
    k = SimpleNamespace(ep_traffic=SimpleNamespace(fwd_nvl=1e9, fwd_net=3e9, bwd_nvl=0.5e9,
                                                   bwd_net=2e9))
    on, off = SimpleNamespace(overlap=1), SimpleNamespace(overlap=0)
    # the overlapped reduction runs beside the last backward's, the gather beside the first
    # forward's; without the overlap beside nothing; ZeRO-2/3's beside a whole micro-batch's
    assert MOE.beside_dp_bytes(on, k, C.When.STEP_REDUCE, 0) == 2e9
    assert MOE.beside_dp_bytes(on, k, C.When.STEP_GATHER, 0) == 3e9
    assert MOE.beside_dp_bytes(off, k, C.When.STEP_REDUCE, 0) == 0
    assert MOE.beside_dp_bytes(off, k, C.When.MICRO_BATCH, 0) == 5e9
    # a group inside the NVLink domain meets the NVLink part
    assert MOE.beside_dp_bytes(on, k, C.When.STEP_REDUCE, 1) == 0.5e9
    # the share the reduction then gets of its link (comm.link_share): 1 GB of its own beside
    # 2 GB of the exchange's, 1/3
    assert C.link_share(1e9, MOE.beside_dp_bytes(on, k, C.When.STEP_REDUCE, 0), 1) == \
        pytest.approx(1 / 3)


def test_flow_delay_by_hand():
    # a reduction of 0.2 s alone on its link, spread over a backward of 0.9 s of compute that
    # an exposed exchange of 0.1 s lengthens to 1.0 s: they meet for 0.1/1.0 of the
    # reduction's 0.2 s, at half rate each: the exchange waits 0.02 s
    assert C.flow_delay_s(0.2, 0.1, 0.9) == pytest.approx(0.02)
    # a reduction far longer than the window: the exchange at most doubles (waits 0.1 s)
    assert C.flow_delay_s(10.0, 0.1, 0.9) == pytest.approx(0.1)
    assert C.flow_delay_s(0.2, 0, 0.9) == 0


QWEN30B = dict(dp=16, tp=1, pp=1, ep=16, mbs=1, n_micro=4, gbs=64, seq_len=4096,
               sequence_parallel=False)


def qwen30b(**cfg):
    from planner.catalog import load_hardware, load_model
    from planner.model.estimate import estimate
    from planner.schema import PlanConfig

    return estimate(load_model("qwen3-30b-a3b"), load_hardware("h800-nvlink"),
                    PlanConfig(**QWEN30B, **cfg))


def test_a_hidden_exchange_takes_a_share_of_the_reduction_link():
    # Qwen3-30B-A3B on 16 H800, ep 16 and dp 16 over both nodes: both cross the network.
    # With Megatron's a2a overlap (merged 1F1B) part of the exchange runs under compute, in
    # the reduction's window: with --overlap-grad-reduce the reduction gets a share below 1;
    # without it the reduction runs after the backward, alone (share 1)
    shared = qwen30b(moe_a2a_overlap=True, overlap_grad_reduce=True).comm.dp_share
    alone = qwen30b(moe_a2a_overlap=True, overlap_grad_reduce=False).comm.dp_share
    assert alone == 1 and 0 < shared < 1
    # an exposed exchange lengthens the window by its own time: no share taken
    assert qwen30b(overlap_grad_reduce=True).comm.dp_share == 1


def test_an_exposed_exchange_is_delayed_by_the_reduction(monkeypatch):
    # the same plan without the a2a overlap: the reduction hidden beside the last backward
    # delays the exchange that backward waits for — by less than the reduction's own time, so
    # overlapping the reduction still beats running it after the backward
    with_dp = qwen30b(overlap_grad_reduce=True).time
    after = qwen30b(overlap_grad_reduce=False).time
    monkeypatch.setattr(MOE, "exposed_beside_s", lambda *a: (0, 0))
    without = qwen30b(overlap_grad_reduce=True).time
    assert without.dp_exposed_s < with_dp.dp_exposed_s < after.dp_exposed_s
