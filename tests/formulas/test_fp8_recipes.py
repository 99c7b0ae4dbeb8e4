"""Hand-derived bytes of each low-precision recipe (planner/formulas/quantization.py).

Each expected value is worked out in the comment beside it from the recipe's data bytes, scale
bytes and block size (Transformer Engine @ d0067d0; see the module docstring)."""

from __future__ import annotations

import pytest
import sympy as sp

from planner.formulas import quantization as Q
from planner.formulas.quantization import QuantRecipe as R


@pytest.mark.parametrize("recipe, hopper, blackwell", [
    (R.DELAYED, 2.0, 1.0),          # data + transpose (TN-only GEMMs) / data once (non-TN)
    (R.CURRENT, 2.0, 1.0),          # same storage as delayed
    (R.MXFP8, 2.0625, 2.0625),      # 2 · (1 + 1/32) = 2.0625, rowwise and columnwise always
    (R.BLOCKWISE, 2 + 8 / 16384, 2 + 8 / 16384),  # 2 · (1 + 4/(128·128))
    (R.NVFP4, 1.125, 1.125),        # 2 · (0.5 + 1/16) = 1.125
])
def test_weight_copy_bytes_per_param(recipe, hopper, blackwell):
    assert Q.weight_copy_bytes_per_param(recipe, non_tn_gemm=False) == pytest.approx(hopper)
    assert Q.weight_copy_bytes_per_param(recipe, non_tn_gemm=True) == pytest.approx(blackwell)


@pytest.mark.parametrize("recipe, per_element", [
    (R.DELAYED, 1.0),       # columnwise fp8 copy, per-tensor scale
    (R.CURRENT, 1.0),
    (R.MXFP8, 1.03125),     # 1 + 1/32
    (R.BLOCKWISE, 1.03125),  # 1 + 4/128 (1×128 fp32 scales)
    (R.NVFP4, 0.5625),      # 0.5 + 1/16
])
def test_saved_input_bytes_per_element(recipe, per_element):
    assert Q.saved_input_bytes_per_element(recipe) == pytest.approx(per_element)


def test_llama70b_weight_cache_whole_model_vs_gathered_layers():
    # Llama 3 70B linear weights per layer: QKV 8192·(8192 + 2·1024) = 83,886,080; proj 8192² =
    # 67,108,864; MLP 3·8192·28672 = 704,643,072; total 855,638,016.
    layer = 8192 * (8192 + 2 * 1024) + 8192 * 8192 + 3 * 8192 * 28672
    assert layer == 855_638_016
    # 80 layers × 855,638,016 × 2 B (Hopper delayed) = 136,902,082,560 B = 127.5 GiB: the
    # whole-model figure issue 21 reports for the 70B ZeRO-3 plan
    whole = Q.weight_cache_bytes(layer, 80, 2.0)
    assert whole == 136_902_082_560
    assert whole / 2**30 == pytest.approx(127.5, abs=0.01)
    # under ZeRO-3 only the 2 gathered layers carry copies: 2 × 855,638,016 × 2 = 3.42 GB
    assert Q.weight_cache_bytes(layer, 2, 2.0) == 3_422_552_064
    # GB200, MXFP8 (2.0625 B): 2 × 855,638,016 × 2.0625 = 3,529,506,816
    assert Q.weight_cache_bytes(layer, 2, Q.weight_copy_bytes_per_param(R.MXFP8, True)) \
        == 3_529_506_816


def test_param_gather_drops_the_16bit_copy():
    # Hopper delayed: bf16 2 B + copies 2 B = 4 B; with --fp8-param-gather the copy is the
    # parameter: 2 B
    assert Q.primary_weight_bytes_per_param(2, 2.0, 0) == 4
    assert Q.primary_weight_bytes_per_param(2, 2.0, 1) == 2
    # Blackwell MXFP8: 2 + 2.0625 = 4.0625 → 2.0625
    assert Q.primary_weight_bytes_per_param(2, 2.0625, 1) == 2.0625


def test_amax_history_bytes():
    # 80 layers × 4 linears = 320; 320 × 5 tensors × 4 B × (1024 + 2) = 6,566,400 B
    assert Q.amax_history_bytes(320) == 6_566_400


def test_quantize_traffic_current_scaling_reads_twice():
    # 1e6 elements, bf16 source, Hopper copy pair 2 B:
    # delayed: 1e6·(2·1 + 2) = 4e6 B; current: 1e6·(2·2 + 2) = 6e6 B (amax pass first)
    assert Q.quantize_hbm_bytes(1e6, 2, 2.0, Q.amax_passes(R.DELAYED)) == 4e6
    assert Q.quantize_hbm_bytes(1e6, 2, 2.0, Q.amax_passes(R.CURRENT)) == 6e6
    # at 3.35e12 B/s × 0.8: 6e6 / 2.68e12 = 2.2388 µs
    assert Q.quantize_time_s(6e6, 3.35e12, 0.8) == pytest.approx(6e6 / 2.68e12)


def test_layer_quantized_elements_gpt_symbolic():
    s, b, h = sp.symbols("s b h", positive=True)
    # GPT at t = 1: QKV/fc1 inputs 2h, proj input h, fc2 input 4h (forward 7h)... written out:
    # 4h (two inputs + two h-wide gradients) + h (proj input) + 3h (QKV grad) + 2·4h (fc1 grad
    # and fc2 input) = 16h per token
    got = Q.layer_quantized_elements(s, b, h, 1, 1, h, 4 * h, 2, 1, 1, False)
    assert sp.simplify(got - 16 * s * b * h) == 0
    # with t = 4 and sequence parallelism everything is divided by 4
    got_tp = Q.layer_quantized_elements(s, b, h, 1, 1, h, 4 * h, 2, 4, 1, True)
    assert sp.simplify(got_tp - 4 * s * b * h) == 0
