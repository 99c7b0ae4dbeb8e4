"""moe: what FSDP2 holds of the routed experts beside their sharded states (issue 23; found by
this session's review: torchtitan plans without expert parallelism were called 79 % of memory
with 45·10⁹ gathered expert parameters left out). torchtitan's apply_fsdp shards `moe.experts`
over the edp mesh with the block's reshard_after_forward, so ZeRO-2 (never reshard) keeps them
gathered, and under pipeline parallelism the stage's experts and their gradients stay whole
until the last micro-batch, as the dense parameters do (states.held_buffers)."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.model.cost import Choices, layout_costs, numbers
from planner.model.states import held_buffers
from planner.schema import PlanConfig

PSI_E = 3_623_878_656  # any expert count: the test reads the difference it makes


def _held(pp, zero, edp):
    m, h = load_model("qwen3-30b-a3b"), load_hardware("h100-nvlink")
    cfg = PlanConfig(dp=16 // pp, tp=1, pp=pp, ep=8, mbs=1, n_micro=8 * pp, gbs=128,
                     seq_len=4096, zero_stage=zero, recompute="selective",
                     framework="torchtitan", sequence_parallel=False)
    x, c = numbers(m, h, cfg), Choices.of(cfg)
    k = layout_costs(x, c)
    return float(held_buffers(x, c, k, 1e9, 1, PSI_E, edp))


@pytest.mark.parametrize("pp, zero, per_param", [
    (1, 2, 2),      # ZeRO-2 keeps the bf16 experts gathered: 2 B each
    (2, 2, 2 + 4),  # and under pp their fp32 gradients whole too (pp_unsharded 4 B)
    (2, 3, 2 + 4),  # ZeRO-3 under pp: weights (2 B) and gradients (4 B) whole
    (1, 3, 0),      # ZeRO-3 on one stage reshards them: only the layers computed are gathered
])
def test_sharded_experts_are_held_like_the_dense_parameters(pp, zero, per_param):
    # sharded over edp = 2 against unsharded (edp = 1: nothing to gather)
    assert _held(pp, zero, 2) - _held(pp, zero, 1) == pytest.approx(per_param * PSI_E)
