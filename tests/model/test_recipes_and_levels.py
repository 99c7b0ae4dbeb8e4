"""The low-precision recipes and the finer recompute levels, through the cost model
(planner/model/): hand-derived bytes where a recipe or level changes them, identities where it
must not."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.errors import PlanError
from planner.model.cost import Choices, layout_costs, plan_costs
from planner.model.estimate import estimate
from planner.model.numbers import numbers
from planner.model.states import quantized_weight_bytes
from planner.schema import PlanConfig

GIB = 2**30
GB200 = load_hardware("gb200-nvl72")
H100 = load_hardware("h100-nvlink")
M70 = load_model("70b")
LAYER_LINEAR = 855_638_016  # Llama 3 70B: 8192·(8192 + 2·1024) + 8192² + 3·8192·28672
AMAX = 80 * 4 * 5 * 4 * 1026  # delayed scaling: 80 layers × 4 linears × 5 tensors × 4 B × 1026


def _costs(hw, **kw):
    config = PlanConfig(**kw)
    x = numbers(M70, hw, config)
    return x, Choices.of(config), plan_costs(x, Choices.of(config))


ISSUE = dict(dp=64, tp=1, pp=1, mbs=2, n_micro=1, gbs=128, seq_len=8192, zero_stage=3,
             recompute="full", precision="fp8", sequence_parallel=False)


def test_70b_fp8_zero3_on_64_gb200_holds_copies_per_gathered_layer():
    # issue 21's plan: Megatron, delayed scaling on Blackwell (non-TN FP8 GEMMs: one 1-byte copy
    # per weight) under ZeRO-3 keeps the copies of the 2 gathered layers only:
    # 2 × 855,638,016 × 1 B + AMAX = 1,711,276,032 + 6,566,400 B (it counted 80 layers × 2 B =
    # 127.5 GiB before)
    config = PlanConfig(**ISSUE)
    x = numbers(M70, GB200, config)
    c = Choices.of(config)
    k = layout_costs(x, c)
    assert quantized_weight_bytes(x, c, k, 1) == 2 * LAYER_LINEAR * 1 + AMAX
    plan = estimate(M70, GB200, config)
    assert plan.memory.fits
    assert plan.memory.total_bytes / GIB < 70
    # under ZeRO-1 every layer of the stage is cached: 80 × 855,638,016 × 1 B + AMAX
    z1 = PlanConfig(**{**ISSUE, "zero_stage": 1})
    x1 = numbers(M70, GB200, z1)
    k1 = layout_costs(x1, Choices.of(z1))
    assert quantized_weight_bytes(x1, Choices.of(z1), k1, 1) == 80 * LAYER_LINEAR + AMAX


@pytest.mark.parametrize("recipe, per_param", [("delayed", 2.0), ("current", 2.0),
                                               ("blockwise", 2 + 8 / 16384)])
def test_hopper_copies_by_recipe(recipe, per_param):
    # Hopper keeps data and transpose (2 copies): ZeRO-1, tp 8, 80 layers on one stage:
    # 80 × 855,638,016/8 × c (+ AMAX for delayed)
    kw = dict(ISSUE, tp=8, dp=8, mbs=1, n_micro=16, zero_stage=1, fp8_recipe=recipe)
    config = PlanConfig(**kw)
    x = numbers(M70, H100, config)
    k = layout_costs(x, Choices.of(config))
    want = 80 * LAYER_LINEAR / 8 * per_param + (AMAX if recipe == "delayed" else 0)
    assert quantized_weight_bytes(x, Choices.of(config), k, 1) == pytest.approx(want, rel=1e-12)


def test_param_gather_drops_the_copies_and_the_16bit_weights():
    # --fp8-param-gather under ZeRO-1 on Hopper: no cached copies, and the linear weights stored
    # at 2 B (data + transpose) instead of 2 B bf16 + 2 B copies: 80 × 855,638,016/8 × 2 fewer
    kw = dict(ISSUE, tp=8, dp=8, mbs=1, n_micro=16, zero_stage=1)
    _, _, plain = _costs(H100, **kw)
    _, _, pg = _costs(H100, **kw, fp8_param_gather=True)
    saved = 80 * LAYER_LINEAR / 8 * 2
    assert float(plain["allocated_bytes"] - pg["allocated_bytes"]) == pytest.approx(saved, rel=1e-9)


def test_partial_recompute_is_the_mean_of_full_and_none_layers():
    # r of L_s layers recomputed: A_layer = (r·A_full + (L_s − r)·A_none)/L_s (tp 8, pp 4:
    # 20 layers a stage), and the step grows with r
    base = dict(dp=16, tp=8, pp=4, mbs=1, n_micro=64, gbs=1024, seq_len=8192, zero_stage=1,
                sequence_parallel=True)
    _, _, none = _costs(H100, **base, recompute="none")
    _, _, full = _costs(H100, **base, recompute="full")
    steps = []
    for r in (1, 5, 19):
        _, _, part = _costs(H100, **base, recompute="full", recompute_layers=r)
        want = (r * full["layer_activation_bytes"] + (20 - r) * none["layer_activation_bytes"]) / 20
        assert float(part["layer_activation_bytes"]) == pytest.approx(float(want), rel=1e-12)
        steps.append(float(part["step_s"]))
    assert steps == sorted(steps) and steps[-1] < float(full["step_s"])
    # r beyond the stage's layers is every layer: full recompute
    _, _, over = _costs(H100, **base, recompute="full", recompute_layers=99)
    assert float(over["total_bytes"]) == float(full["total_bytes"])


def test_recompute_modules_default_is_korthikanti_selective_and_mlp_drops_more():
    base = dict(dp=16, tp=8, pp=4, mbs=1, n_micro=64, gbs=1024, seq_len=8192, zero_stage=1,
                sequence_parallel=True, recompute="selective")
    _, _, sel = _costs(H100, **base)
    _, _, core = _costs(H100, **base, recompute_modules=("core_attn",))
    assert float(core["total_bytes"]) == float(sel["total_bytes"])
    _, _, mlp = _costs(H100, **base, recompute_modules=("core_attn", "mlp"))
    # the MLP checkpoint drops fc1's input h/t_sp, SwiGLU's 2f/t and fc2's f/t at 2 B:
    # 8192·(2·8192/8 + (2·2 + 2)·28672/8) = 8192·(2048 + 21504) = 192,937,984 B per layer
    drop = float(sel["layer_activation_bytes"] - mlp["layer_activation_bytes"])
    assert drop == 8192 * (2048 + 21504)
    assert float(mlp["step_s"]) > float(sel["step_s"])


def test_nvfp4_runs_at_the_fp4_peak_on_blackwell_only():
    fp8 = estimate(M70, GB200, PlanConfig(**ISSUE))
    fp4 = estimate(M70, GB200, PlanConfig(**{**ISSUE, "precision": "nvfp4"}))
    assert fp4.time.step_s < fp8.time.step_s
    with pytest.raises(PlanError, match="Blackwell"):
        estimate(M70, H100, PlanConfig(**{**ISSUE, "precision": "fp8", "fp8_recipe": "mxfp8",
                                         "tp": 8, "dp": 8, "mbs": 1, "n_micro": 16}))


def test_distributed_checkpoints_split_the_layer_input_over_tp():
    # full recompute, tp 8, no sequence parallelism: each layer keeps its input, 2·s·b·h =
    # 2·8192·8192 = 134,217,728 B; --distribute-saved-activations splits it 8 ways: 16,777,216 B
    base = dict(dp=16, tp=8, pp=4, mbs=1, n_micro=64, gbs=1024, seq_len=8192, zero_stage=1,
                sequence_parallel=False, recompute="full")
    _, _, whole = _costs(H100, **base)
    _, _, split = _costs(H100, **base, distribute_saved_activations=True)
    assert float(whole["layer_activation_bytes"]) == 2 * 8192 * 8192
    assert float(split["layer_activation_bytes"]) == 2 * 8192 * 8192 / 8
    # DeepSpeed partitions them only when asked (partition_activations follows the flag; off by
    # default, as DeepSpeed's own default)
    ds = {**base, "framework": "deepspeed", "pp": 1, "dp": 64, "n_micro": 16}
    _, _, ds_whole = _costs(H100, **ds)
    _, _, ds_split = _costs(H100, **ds, distribute_saved_activations=True)
    assert float(ds_whole["layer_activation_bytes"]) == 2 * 8192 * 8192
    assert float(ds_split["layer_activation_bytes"]) == 2 * 8192 * 8192 / 8
