"""moe (issue 23): T_host, one MoE layer's forward run from an empty launch queue where the
framework's host waits for the token counts (formulas/host.py; Framework.moe_forward_sync):
which frameworks wait, that the layer's forward is then the slower of the GPU and the host (not
their sum), and that the backward and torchtitan's op-SAC recompute carry no wait."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.formulas import host as H
from planner.model.cost import Choices, numbers, plan_costs
from planner.schema import PlanConfig

H100 = load_hardware("h100-nvlink")
MODEL = load_model("qwen3-30b-a3b")


def config(**over) -> PlanConfig:
    base = dict(dp=8, ep=8, mbs=1, n_micro=4, gbs=32, seq_len=4096, zero_stage=1,
                recompute="none", sequence_parallel=False)
    return PlanConfig(**{**base, **over})


def terms(c: PlanConfig, host_op_s: float | None = None) -> dict:
    x = numbers(MODEL, H100, c)
    if host_op_s is not None:
        x.host_op_s = host_op_s
    kept: dict = {}

    def keep(key, value):
        kept[key] = value
        return value

    plan_costs(x, Choices.of(c), keep)
    return kept


def test_which_frameworks_wait():
    # Megatron waits in every MoE layer, ep = 1 too; torchtitan only with ep > 1
    assert terms(config())["moe_host_wait_s"] >= H.HOST_OP_S
    assert terms(config(ep=1))["moe_host_wait_s"] >= H.HOST_OP_S
    titan = dict(framework="torchtitan", zero_stage=3, grad_dtype="fp32")
    assert terms(config(**titan))["moe_host_wait_s"] >= H.HOST_OP_S
    assert terms(config(ep=1, **titan))["moe_host_wait_s"] == 0


def test_a_host_bound_forward_is_the_hosts_time_not_the_sum():
    # Megatron's Qwen3-30B-A3B layer at ep 8 launches 12 + 72 router + 4 + 2·16 expert GEMMs =
    # 120 kernels (moe_step.layer_kernels: one cuBLAS GEMM per local expert, 128/8 = 16). At
    # t_h = 1 ms the host takes 120 ms, far beyond the GPU's few ms: T_fwd = 120·t_h exactly
    slow = terms(config(), host_op_s=1e-3)
    assert slow["forward_layer_s"] == pytest.approx(120 * 1e-3, rel=1e-12)
    # at the sourced t_h the GPU's time is the longer: the wait adds the first launch alone
    fast = terms(config())
    assert fast["moe_host_wait_s"] == pytest.approx(H.HOST_OP_S, rel=1e-12)
    assert fast["forward_layer_s"] - fast["moe_host_wait_s"] == pytest.approx(
        slow["forward_layer_s"] - slow["moe_host_wait_s"], rel=1e-12)


@pytest.mark.parametrize("over", [dict(), dict(framework="torchtitan", zero_stage=3,
                                                 grad_dtype="fp32", recompute="selective")])
def test_the_backward_and_op_sac_recompute_do_not_wait(over):
    fast, slow = terms(config(**over)), terms(config(**over), host_op_s=1e-3)
    assert slow["forward_layer_s"] > 10 * fast["forward_layer_s"]
    for key in ("backward_layer_s", "recompute_layer_s"):
        assert slow[key] == pytest.approx(fast[key], rel=1e-12), key


def test_full_recompute_reruns_the_wait():
    fast, slow = (terms(config(recompute="full"), host_op_s=t) for t in (None, 1e-3))
    moved = slow["moe_host_wait_s"] - fast["moe_host_wait_s"]
    assert moved > 0
    assert slow["recompute_layer_s"] - fast["recompute_layer_s"] == pytest.approx(moved, rel=1e-9)
