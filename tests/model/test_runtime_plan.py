"""What a plan's process holds beside its tensors (planner/model/runtime.py), hand-derived from
NCCL's constants @ 5067397c, PyTorch's and Transformer Engine's workspace sizes and the sourced
CUDA context (planner/formulas/runtime.py)."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.model.cost import Choices, numbers, plan_costs
from planner.model.explain import explain
from planner.schema import PlanConfig

MiB = 2**20
H100 = load_hardware("h100-nvlink")
A100 = load_hardware("a100-nvlink")


def costs(hw, **kw):
    base = dict(dp=1, tp=1, pp=1, mbs=1, n_micro=1, gbs=1, seq_len=4096, zero_stage=1,
                recompute="full", sequence_parallel=False)
    base.update(kw)
    model = base.pop("model", "70b")
    config = PlanConfig(**base)
    seen = {}

    def note(name, value):  # every named intermediate, as explain records them
        seen[name] = value
        return value

    plan_costs(numbers(load_model(model), hw, config), Choices.of(config), note)
    return seen


def test_one_gpu_holds_no_nccl_buffers():
    r = costs(H100, model="8b")
    assert float(r["nccl_bytes"]) == 0
    # PyTorch: 2 threads × (32 MiB cuBLAS on sm90 + 1 MiB cuBLASLt) = 66 MiB; Megatron's
    # Transformer Engine workspace: 32 MiB + 1 KiB
    assert float(r["workspace_bytes"]) == 66 * MiB + 32 * MiB + 1024


def test_megatron_70b_on_512_h100():
    # tp 8 · pp 4 · dp 16, ZeRO-1 (distributed optimizer), untied: ring communicators TP, DP and
    # the world (no model-parallel group with the distributed optimizer, no embedding group
    # untied): 3 × 32 channels × 10 MiB = 960 MiB; NVLS on the TP group, 8 GPUs of a node:
    # 8 heads × 16 channels × 2 × 128 KiB × 8 = 256 MiB (the DP group has one rank per node:
    # none); pipeline neighbours, 2, across nodes: 2 × 4 channels × 128 KiB × 8 = 8 MiB
    r = costs(H100, tp=8, pp=4, dp=16, n_micro=32, gbs=512, sequence_parallel=True)
    assert float(r["nccl_bytes"]) == (960 + 256 + 8) * MiB


def test_megatron_without_the_distributed_optimizer_adds_the_model_parallel_group():
    one = costs(H100, tp=8, pp=4, dp=16, n_micro=32, gbs=512, sequence_parallel=True)
    zero = costs(H100, tp=8, pp=4, dp=16, n_micro=32, gbs=512, sequence_parallel=True,
                 zero_stage=0)
    # the model-parallel group t·p = 32 ranks: one more ring communicator, 320 MiB
    assert float(zero["nccl_bytes"]) - float(one["nccl_bytes"]) == 320 * MiB


def test_a100_has_no_nvls_and_other_workspaces():
    # A100: no NVLS; PyTorch's non-sm90 cuBLAS workspace 4096 KiB·2 + 16 KiB·8 = 8,519,680 B
    # plus 1 MiB cuBLASLt, two threads; TE's pre-Hopper 4 MiB.  tp 8 · dp 2: TP, DP, world
    r = costs(A100, tp=8, dp=2, gbs=2, sequence_parallel=True)
    assert float(r["nccl_bytes"]) == 3 * 320 * MiB
    assert float(r["workspace_bytes"]) == 2 * (8_519_680 + MiB) + 4 * MiB


def test_torchtitan_fsdp_over_64_h100():
    # FSDP over 64 ranks (8 nodes): the shard group and the world, 2 × 320 MiB; NVLS on the shard
    # group's 8 GPUs per node, 256 MiB; no Transformer Engine workspace
    r = costs(H100, model="8b", dp=64, gbs=64, zero_stage=3, framework="torchtitan")
    assert float(r["nccl_bytes"]) == (640 + 256) * MiB
    assert float(r["workspace_bytes"]) == 66 * MiB


def test_the_terms_grow_with_the_groups():
    # adding a context-parallel group of 2 adds one ring communicator (and NVLS heads: cp's two
    # ranks share a node), never less
    a = costs(H100, tp=4, dp=4, gbs=4, sequence_parallel=True)
    b = costs(H100, tp=4, dp=4, cp=2, gbs=4, sequence_parallel=True)
    assert float(b["nccl_bytes"]) - float(a["nccl_bytes"]) >= 320 * MiB


def test_explain_shows_the_runtime_terms():
    plan = explain(load_model("70b"), H100, PlanConfig(
        dp=16, tp=8, pp=4, mbs=1, n_micro=32, gbs=512, seq_len=4096, zero_stage=1,
        recompute="full", sequence_parallel=True))
    terms = {t.symbol: t for t in plan.terms}
    assert "B_conn" in terms["M_nccl"].formula and "n_ch" in terms["M_nccl"].formula
    assert terms["M_nccl"].value == pytest.approx((960 + 256 + 8) * MiB)
    assert "M_ctx" in terms["M_rt"].formula and "M_ws" in terms["M_rt"].formula
