"""fit: Megatron's uniform recompute method with groups of N > 1 layers (`--recompute-group N`;
megatron/core/recompute.py checkpointed_forward, uniform branch @ d98e8a64dd: each chunk of N
layers is one checkpoint, which keeps the chunk's input and reruns the whole chunk before its
backward), hand-derived."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.errors import PlanError
from planner.frameworks.emit import emit
from planner.model.estimate import estimate
from planner.model.explain import recorded_costs
from planner.schema import PlanConfig

MiB = 2**20
H100 = load_hardware("h100-nvlink")
M70 = load_model("70b")
BASE = dict(dp=2, tp=8, pp=4, mbs=1, n_micro=8, gbs=16, seq_len=8192, zero_stage=1,
            recompute="full", sequence_parallel=True)


def noted(**kw):
    return recorded_costs(M70, H100, PlanConfig(**{**BASE, **kw}))[1]


def test_groups_keep_one_input_each():
    # 80 layers over pp 4: 20 a stage. A layer's input under SP: 2 B · 8192 · 8192 / 8 = 16 MiB.
    # Groups of 4: ⌈20/4⌉ = 5 inputs, 80 MiB a stage, 4 MiB a layer on average
    assert float(noted(recompute_group=4)["layer_activation_bytes"]) == 4 * MiB
    # groups of 3: ⌈20/3⌉ = 7 inputs (the last group 2 layers), 112 MiB, 5.6 MiB a layer
    assert float(noted(recompute_group=3)["layer_activation_bytes"]) == pytest.approx(
        112 * MiB / 20)
    # groups of 1 are full recompute
    assert float(noted(recompute_group=1)["layer_activation_bytes"]) == 16 * MiB


def test_the_rerun_holds_a_whole_group_and_the_time_is_full_recomputes():
    kept = float(noted(recompute="none")["layer_activation_bytes"])  # a layer's whole set
    one, four = noted(), noted(recompute_group=4)
    grad, loss = float(one["backward_gradient_bytes"]), float(one["loss_bytes"])
    # 1F1B, p = 4, m = 8: the first stage holds 4 micro-batches, the last 1 and the loss.
    # Groups of 1: first 4·20·16 MiB + (kept + grad) = 1280 MiB + 268.25 + 240 = 1788.25 MiB,
    # the last 1·20·16 + loss + kept + grad = 320 + 788 + 508.25 = 1616.25: the first holds more
    assert float(one["activations_bytes"]) == 4 * 20 * 16 * MiB + kept + grad
    # groups of 4: first 4·5·16 + 4·kept + grad = 320 + 1073 + 240 = 1633 MiB, last
    # 1·5·16 + loss + 4·kept + grad = 80 + 788 + 1313 = 2181 MiB: now the last holds more
    assert float(four["activations_bytes"]) == 1 * 5 * 16 * MiB + loss + 4 * kept + grad
    # every layer reruns either way: the same compute; the step differs only by the data-
    # parallel traffic of the stage now the most loaded (the last, 0.1 µs here)
    four_s = estimate(M70, H100, PlanConfig(**BASE, recompute_group=4)).time
    one_s = estimate(M70, H100, PlanConfig(**BASE)).time
    assert four_s.compute_s == one_s.compute_s
    assert four_s.step_s == pytest.approx(one_s.step_s, rel=1e-6)


def test_megatron_writes_the_uniform_method_and_others_refuse_it():
    c = PlanConfig(**BASE, recompute_group=4)
    text = emit("megatron", c, M70).text
    for flag in ("--recompute-granularity full", "--recompute-method uniform",
                 "--recompute-num-layers 4"):
        assert flag in text
    assert "recompute_num_layers: 4" in emit("nemo", c, M70).text
    with pytest.raises(PlanError, match="recompute-group"):
        estimate(M70, H100, PlanConfig(**{**BASE, "framework": "torchtitan", "zero_stage": 3},
                                       recompute_group=4))
    with pytest.raises(ValueError):
        PlanConfig(**BASE, recompute_group=4, recompute_layers=2)


def test_groups_are_counted_per_virtual_chunk():
    # interleaved, vpp 2: each stage's 20 layers are two chunks of 10, and Megatron groups each
    # chunk's layers apart (megatron/core/recompute.py: len(self.layers) of the chunk's block).
    # Groups of 4: 2·⌈10/4⌉ = 6 inputs (not ⌈20/4⌉ = 5), 6·16 MiB over 20 layers = 4.8 MiB;
    # groups of 3: 2·⌈10/3⌉ = 8 (not 7), 6.4 MiB
    chunks = dict(schedule="interleaved", vpp=2)
    assert float(noted(recompute_group=4, **chunks)["layer_activation_bytes"]) == pytest.approx(
        6 * 16 * MiB / 20)
    assert float(noted(recompute_group=3, **chunks)["layer_activation_bytes"]) == pytest.approx(
        8 * 16 * MiB / 20)
    # a group never spans chunks: groups of 16 rerun at most a chunk's 10 layers at once
    kept = float(noted(recompute="none", **chunks)["layer_activation_bytes"])
    big, ten = noted(recompute_group=16, **chunks), noted(recompute_group=10, **chunks)
    assert float(big["activations_bytes"]) == pytest.approx(float(ten["activations_bytes"]))
    assert float(ten["backward_gradient_bytes"]) > 0 and kept > 0
