"""moe: the expert all-to-all has its own fields in a plan's --json (Time.ep_exposed_s,
Comm.ep_bytes, Comm.ep_link), so the five groups' exposed times add up to exposed_comm_s."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.model.estimate import estimate
from planner.schema import PlanConfig

H100 = load_hardware("h100-nvlink")


def _plan(model: str, **kw):
    return estimate(load_model(model), H100, PlanConfig(**kw))


def test_moe_plan_exposed_parts_add_up_with_the_all_to_all():
    # DeepSeek-V3, ep 64 over 8-GPU NVLink domains: the exchange crosses the network
    p = _plan("deepseek-v3", dp=32, tp=4, pp=4, vpp=5, ep=64, mbs=1, n_micro=32, gbs=1024,
              seq_len=4096, zero_stage=1, sequence_parallel=True, schedule="interleaved")
    t = p.time
    assert t.ep_exposed_s > 0 and p.comm.ep_bytes > 0
    assert p.comm.ep_link == "network"
    assert t.exposed_comm_s == pytest.approx(
        t.tp_exposed_s + t.cp_exposed_s + t.pp_exposed_s + t.dp_exposed_s + t.ep_exposed_s,
        rel=1e-12)


def test_expert_parallelism_inside_a_node_is_on_nvlink():
    p = _plan("qwen3-30b-a3b", dp=8, tp=1, pp=1, ep=8, mbs=1, n_micro=1, gbs=8, seq_len=4096,
              zero_stage=1, sequence_parallel=False)
    assert p.comm.ep_link == "nvlink" and p.comm.ep_bytes > 0


def test_a_dense_plan_has_no_all_to_all():
    p = _plan("llama-3.1-8b", dp=8, mbs=1, n_micro=1, gbs=8, seq_len=4096, zero_stage=1, sequence_parallel=False)
    assert (p.time.ep_exposed_s, p.comm.ep_bytes, p.comm.ep_link) == (0.0, 0.0, "none")
