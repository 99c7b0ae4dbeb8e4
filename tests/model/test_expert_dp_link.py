"""A MoE plan's expert shards reduce (and, under ZeRO-3, gather) over the expert-data-parallel
group, whose ranks sit ep·etp apart: with ep·etp filling a node, one rank a node, and the group
leaves it on that rank's NIC alone. The network's busy time (the step's floor, T_net,busy)
counts that traffic at that group's bandwidth, not the dense dp group's (which spreads over
the node's NICs)."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.model.explain import explain
from planner.schema import PlanConfig

# Megatron-MoE-ModelZoo's Megatron-FSDP layout (published_moe.json): Qwen3-235B on 256 H100,
# tp2 ep8 dp128, ZeRO-3: edp = 128·2/8 = 32 ranks, one a node, 32 nodes
CONFIG = PlanConfig(dp=128, tp=2, pp=1, mbs=4, n_micro=4, gbs=2048, seq_len=4096,
                    sequence_parallel=True, zero_stage=3, grad_dtype="bf16", recompute="full",
                    ep=8, etp=1, moe_dispatcher="deepep", moe_forced_balance=True)


def test_the_expert_shards_traffic_bounds_the_network_time():
    plan = explain(load_model("qwen3-235b-a22b"), load_hardware("h100-nvlink"), CONFIG)
    # every EP-DP call is a ring all-gather or reduce-scatter over 32 ranks on 32 nodes: each
    # GPU sends (n − 1)/n of its message a call, all of it through its one NIC at 46 GB/s
    calls = [c for c in plan.comm.collectives if c.name.startswith("EP-DP")]
    assert {(c.ranks, c.nodes) for c in calls} == {(32, 32)}
    sent = sum(c.calls_per_step * c.message_bytes * 31 / 32 for c in calls)
    # 1,128 calls of 603,979,776 B (752 gathers, 376 reduce-scatters) · 31/32 = 659.9 GB a step
    assert sent == pytest.approx(1128 * 603_979_776 * 31 / 32, rel=1e-12)
    # 14.35 s at one NIC's 46 GB/s; it was counted at the dp group's bandwidth (4.1 s in all)
    assert plan.comm.network_busy_s >= sent / 46e9 * (1 - 1e-9)
    assert plan.time.step_s >= plan.comm.network_busy_s
