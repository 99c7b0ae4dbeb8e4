"""Low-precision (FP8 / FP4) training recipes: the bytes each keeps and the casts each runs.

A recipe quantises the inputs of the linear layers (weights and activations in the forward, output
gradients in the backward) into a narrow format with scales. What it keeps is a *copy* of a tensor
in one direction, rowwise (for the GEMM that reads rows) or columnwise (the transpose, for the
other GEMM), at

    bytes per element = data + scale / block          (formula: quantized_element_bytes)

where `block` is how many elements share one scale. Per-tensor recipes (delayed, current scaling)
keep one scale per tensor (block = the tensor: negligible). Per recipe, from Transformer Engine
(TE) @ d0067d0 and Megatron-Core @ d98e8a6:

    recipe     data  weight scale / block   activation scale / block   copies of a weight
    delayed    1     fp32 / tensor          fp32 / tensor              2 Hopper, 1 Blackwell
    current    1     fp32 / tensor          fp32 / tensor              2 Hopper, 1 Blackwell
    mxfp8      1     1 B (E8M0) / 32        1 B / 32                   2
    blockwise  1     4 B / 128×128          4 B / 1×128                2
    nvfp4      ½     1 B (E4M3) / 16        1 B / 16                   2

Sources: common/recipe/__init__.py (DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling,
Float8BlockScaling with w_block_scaling_dim = 2 and x_block_scaling_dim = 1, NVFP4BlockScaling);
pytorch/constants.py MXFP8_BLOCK_SCALING_SIZE = 32, NVFP4_BLOCK_SCALING_SIZE = 16;
tensor/mxfp8_tensor.py l.165-175 (uint8 scales); tensor/float8_blockwise_tensor.py
get_scale_shape (fp32 scales); csrc/quantizer.cpp l.361-375 and 678-689 (per-tensor copies).

"Copies of a weight": Hopper's FP8 GEMMs take only the TN layout, so a per-tensor-scaled tensor
used by both GEMMs is kept with its transpose; Blackwell (compute capability 10.x) runs non-TN
FP8 GEMMs and keeps the data once (`nvte_is_non_tn_fp8_gemm_supported`, TE
pytorch/utils.py l.658-663 and csrc/quantizer.cpp). Block-scaled recipes scale along one
direction, so the rowwise and the columnwise copies differ and both are kept on every GPU.
Scale padding (TE pads MXFP8 scales to [128, 4] tiles, blockwise to multiples of 4) is below
0.1 % for layers of ≥ 1024 columns and is left out.

What each recipe holds per linear layer:
- **weights**: Megatron-Core keeps the 16-bit weight and caches its quantised copies across the
  micro-batches of a step (TE `is_first_microbatch`, module/linear.py l.467-475); under
  `--fp8-param-gather` the quantised copy *is* the parameter and no 16-bit copy exists
  (Megatron-Core `fp8_param_gather`, `quantized_model_init`); under ZeRO-3/FSDP the copies exist
  only for the gathered layers (weight_copy_bytes with the gathered layer count).
- **saved activations**: TE saves a linear layer's input for the weight-gradient GEMM as its
  columnwise quantised copy only (module/linear.py l.599-617), so one copy at the activation
  block's bytes instead of 2 B.
- **delayed scaling**: an fp32 amax history of `amax_history_len` = 1024 steps (DelayedScaling
  default) for each quantised tensor: 3 forward (input, weight, output) and 2 backward (output
  gradient, input gradient) per linear layer, plus an fp32 scale and inverse scale each.

torchao's Float8Linear (torchtitan `model.converters = ["float8"]`) instead saves the 16-bit input
and weight and casts again in the backward (torchao/float8/float8_linear.py @ 36027d8,
`matmul_with_hp_or_float8_args.forward` saves `input_hp, weight_hp_t`): no cached copies and no
fp8 saved activations; with `enable_fsdp_float8_all_gather` FSDP2 gathers weights in fp8 (1 B).
"""

from __future__ import annotations

from dataclasses import dataclass

from .choices import QuantRecipe

FP32_BYTES = 4
AMAX_HISTORY_LEN = 1024  # TE DelayedScaling.amax_history_len default (common/recipe/__init__.py l.255)
DELAYED_TENSORS_PER_LINEAR = 5  # forward: input, weight, output; backward: grad_output, grad_input
LINEARS_PER_LAYER = 4  # QKV, projection, fc1, fc2 (a Transformer Engine layer's quantised GEMMs)


@dataclass(frozen=True)
class RecipeBytes:
    """Per-element storage of one recipe: data bytes, and (scale bytes, elements per scale) for
    weights and activations; per_tensor: the copies depend on the GPU's GEMM layouts; blackwell
    _only: runs only where the GPU has the format (compute capability ≥ 10)."""

    data: float
    weight_scale: float
    weight_block: float
    act_scale: float
    act_block: float
    per_tensor: bool
    blackwell_only: bool
    source: str


RECIPES = {
    QuantRecipe.DELAYED: RecipeBytes(1.0, 0.0, 1.0, 0.0, 1.0, True, False,
                                     "TE common/recipe/__init__.py DelayedScaling @ d0067d0"),
    QuantRecipe.CURRENT: RecipeBytes(1.0, 0.0, 1.0, 0.0, 1.0, True, False,
                                     "TE Float8CurrentScaling @ d0067d0"),
    QuantRecipe.MXFP8: RecipeBytes(1.0, 1.0, 32.0, 1.0, 32.0, False, True,
                                   "TE pytorch/constants.py MXFP8_BLOCK_SCALING_SIZE @ d0067d0"),
    QuantRecipe.BLOCKWISE: RecipeBytes(1.0, FP32_BYTES, 128.0 * 128.0, FP32_BYTES, 128.0, False,
                                       False, "TE Float8BlockScaling, float8_blockwise_tensor.py"
                                       " get_scale_shape @ d0067d0"),
    QuantRecipe.NVFP4: RecipeBytes(0.5, 1.0, 16.0, 1.0, 16.0, False, True,
                                   "TE NVFP4BlockScaling, constants.py NVFP4_BLOCK_SCALING_SIZE"
                                   " @ d0067d0"),
}


def quantized_element_bytes(data_bytes, scale_bytes, block_elements):
    """Bytes per element of one quantised copy: data + scale/block.

    MXFP8: 1 + 1/32 = 1.03125; blockwise weight 1 + 4/16384; blockwise activation 1 + 4/128 =
    1.03125; NVFP4: 0.5 + 1/16 = 0.5625; per-tensor FP8: 1 (block = the tensor)."""
    return data_bytes + scale_bytes / block_elements


def weight_copy_bytes_per_param(recipe: QuantRecipe, non_tn_gemm: bool):
    """Bytes per linear-layer parameter of the quantised copies a recipe keeps of a weight:
    copies × (data + scale/block), with 2 copies (rowwise and columnwise) except per-tensor FP8
    on a GPU with non-TN FP8 GEMMs (Blackwell: 1).  Hopper delayed/current: 2; Blackwell
    delayed/current: 1; MXFP8: 2.0625; blockwise: 2 + 8/16384; NVFP4: 1.125."""
    r = RECIPES[recipe]
    copies = 1 if (r.per_tensor and non_tn_gemm) else 2
    return copies * quantized_element_bytes(r.data, r.weight_scale, r.weight_block)


def saved_input_bytes_per_element(recipe: QuantRecipe):
    """Bytes per element of a linear layer's input as TE saves it for the weight gradient: its
    columnwise copy only (module/linear.py l.599-617 @ d0067d0).  1 for per-tensor FP8,
    1.03125 for MXFP8 and blockwise (1×128 fp32 scales), 0.5625 for NVFP4."""
    r = RECIPES[recipe]
    return quantized_element_bytes(r.data, r.act_scale, r.act_block)


def weight_cache_bytes(linear_params_per_layer, n_layers, bytes_per_param):
    """The quantised weight copies a GPU holds: n·(linear parameters of a layer on this GPU)·c.

    Megatron-Core caches every layer of its stage across micro-batches (n = the stage's layers);
    under ZeRO-3/FSDP a copy exists only while the layer is gathered (n = the gathered layers,
    e.g. 2), because the cast reads the gathered 16-bit weight, which is freed after use.
    Example: Llama 70B linear weights 855.6 M per layer at t = 1, delayed scaling on Hopper
    (c = 2): 80 layers hold 136.9 GB (127.5 GiB); 2 gathered layers 3.42 GB."""
    return n_layers * linear_params_per_layer * bytes_per_param


def primary_weight_bytes_per_param(weight_bytes, copy_bytes, param_gather):
    """Bytes per linear parameter of the weight as stored plus its cached copies:
    w + c without `--fp8-param-gather`; c with it (the quantised copy is the parameter and there
    is no 16-bit weight: Megatron-Core `--fp8-param-gather`, TE `quantized_model_init`).
    Hopper delayed: 2 + 2 = 4 B → 2 B."""
    return weight_bytes * (1 - param_gather) + copy_bytes


def amax_history_bytes(n_linear_layers, history_len=AMAX_HISTORY_LEN,
                       tensors_per_linear=DELAYED_TENSORS_PER_LINEAR):
    """Delayed scaling's fp32 state per GPU: per quantised tensor an amax history of `len` steps
    plus its scale and inverse scale, 4·(len + 2) bytes; 5 tensors per linear layer.
    Four linears per layer, 80 layers: 320·5·4·1026 = 6.57 MB (small, counted for honesty)."""
    return n_linear_layers * tensors_per_linear * FP32_BYTES * (history_len + 2)


def quantize_hbm_bytes(elements, source_bytes, copy_bytes, amax_passes):
    """HBM traffic of quantising `elements` 16-bit values into copies totalling `copy_bytes` per
    element: the source read once per amax pass and once by the cast, the copies written:

        elements · (source·(passes + 1) + copy)

    Current scaling reads the tensor once for its amax before casting (passes = 1); delayed
    scaling uses last step's amax and fuses the amax into the cast (passes = 0); the block
    recipes compute each block's amax in the cast kernel (0).  A memory-bound kernel: time is
    bytes / (HBM bandwidth × efficiency) (see quantize_time_s)."""
    return elements * (source_bytes * (amax_passes + 1) + copy_bytes)


def amax_passes(recipe: QuantRecipe):
    """Extra reads of the source a recipe's scale needs (quantize_hbm_bytes): 1 for current
    scaling (TE computes the amax in a separate kernel before the cast:
    common/recipe/current_scaling.cu), 0 otherwise."""
    return 1 if recipe is QuantRecipe.CURRENT else 0


def quantize_time_s(hbm_bytes, hbm_bytes_per_s, hbm_efficiency):
    """Seconds of the casts: bytes / (B·η)."""
    return hbm_bytes / (hbm_bytes_per_s * hbm_efficiency)


def layer_quantized_elements(seq_len, mbs, hidden, n_heads, n_kv_heads, head_dim, ffn, n_mlp,
                             tp, cp, sequence_parallel: bool):
    """Activation elements one layer quantises per micro-batch on one GPU, forward and backward:

    forward, the four linear inputs: QKV and fc1 inputs h/t_sp each (under sequence parallelism
        TE quantises the shard before the all-gather: distributed.py gather_along_first_dim with
        a quantizer @ d0067d0), projection input a·d_h/t, fc2 input f/t;
    backward, the four output gradients: QKV d_h(a + 2k)/t, projection h/t_sp, fc1
        (n_mlp − 1)·f/t, fc2 h/t_sp;

        sb·(4h/t_sp + (a·d_h + d_h(a + 2k) + n_mlp·f)/t)      (s over c)

    GPT at t = 1 (k = a, a·d_h = h, f = 4h, n_mlp = 2): sb·(4h + h + 3h + 8h) = 16sbh.
    The weights' casts are counted apart (once per step when cached, per micro-batch when
    gathered under ZeRO-3)."""
    s = seq_len / cp
    sp = tp if sequence_parallel else 1
    return s * mbs * (4 * hidden / sp + (n_heads * head_dim + head_dim * (n_heads + 2 * n_kv_heads)
                                         + n_mlp * ffn) / tp)


def saved_linear_inputs_delta_bytes(seq_len, mbs, hidden, n_heads, head_dim, ffn, tp, cp,
                                    sequence_parallel: bool, per_element, act_bytes=2):
    """How a fused (Transformer Engine) layer's saved bytes change under a recipe that saves
    linear inputs at `e` bytes per element (saved_input_bytes_per_element):

        sb·[(e − act)·(2h/t_sp + f/t) + e·a·d_h/t]          (s over c)

    The QKV and fc1 inputs (the norms' outputs, h/t_sp each: LayerNormLinear keeps the 16-bit
    norm input and the quantised norm output) and fc2's input (f/t: the activation function keeps
    its own input) are saved at e instead of act bytes.  The projection's input is the attention
    output, which flash attention keeps in 16-bit for its own backward, so the projection's
    quantised copy comes on top (+e·a·d_h/t).  Llama 3 8B (h = 4096, a·d_h = 4096, f = 14336),
    t = 1, per-tensor FP8 (e = 1), per token: −(2·4096 + 14336) + 4096 = −18,432 bytes.
    Source: TE module/linear.py l.599-617, layernorm_linear.py l.526-536 @ d0067d0; measured by
    tests/oracle/test_recompute_levels.py on Functions that save what those kernels save."""
    s = seq_len / cp
    sp = tp if sequence_parallel else 1
    return s * mbs * ((per_element - act_bytes) * (2 * hidden / sp + ffn / tp)
                      + per_element * n_heads * head_dim / tp)
