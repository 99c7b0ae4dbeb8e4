"""The fused Megatron-Core layer of _fused.py with the finer recompute levels and the low-precision
recipes, for the oracle (no Megatron or Transformer Engine code copied).

- Per-module recompute (`--recompute-modules`): "core_attn" checkpoints the attention kernel (as
  _fused's selective), "mlp" checkpoints the MLP from the pre-MLP norm's input (Transformer
  Engine fuses that norm into fc1, so it is inside the MLP module), as Megatron's
  `tensor_parallel.checkpoint(self.mlp, ...)` does.
- Layer levels: a stack of layers with the first r fully checkpointed (block method) or the
  layers checkpointed in groups of g (uniform method), as transformer_block.py
  `_checkpointed_forward` does.
- Recipes: where TE saves a linear layer's input for the weight gradient, these Functions save
  the recipe's columnwise copy instead — data in the recipe's element type (float8_e4m3fn; FP4
  packed two to a uint8) and its scales (uint8 E8M0 per 32 for MXFP8, fp32 per 128 for
  blockwise, uint8 E4M3 per 16 plus an fp32 per-tensor scale for NVFP4, one fp32 per tensor for
  delayed/current) — TE module/linear.py l.599-617 and layernorm_linear.py l.526-536 @ d0067d0:
  LayerNormLinear keeps its 16-bit input and the quantised norm output; Linear keeps only the
  quantised input.  The attention kernel still keeps its 16-bit output (flash attention's
  backward needs it), so the projection's quantised input is a second copy of it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ._fused import BiasDropoutAdd, FlashAttention, FusedLayer, FusedRoPE, SwiGLU, _norm

# recipe → (data dtype and elements per stored element, scale dtype, elements per scale)
RECIPE_STORAGE = {
    "delayed": (torch.float8_e4m3fn, 1, torch.float32, None),
    "current": (torch.float8_e4m3fn, 1, torch.float32, None),
    "mxfp8": (torch.float8_e4m3fn, 1, torch.uint8, 32),
    "blockwise": (torch.float8_e4m3fn, 1, torch.float32, 128),
    "nvfp4": (torch.uint8, 2, torch.uint8, 16),
}


def quantized_copy(x, recipe):
    """The columnwise copy a recipe saves of x: its data and scales (values are not the point:
    the backward below only needs shapes)."""
    dtype, per_item, scale_dtype, block = RECIPE_STORAGE[recipe]
    flat = x.detach().reshape(-1, x.shape[-1]).t()  # columnwise: the transpose
    data = torch.empty(flat.shape[0], flat.shape[1] // per_item, dtype=dtype)
    n_scales = 1 if block is None else flat.numel() // block
    scales = [torch.empty(n_scales, dtype=scale_dtype)]
    if recipe == "nvfp4":
        scales.append(torch.empty(1, dtype=torch.float32))  # the per-tensor fp32 scale
    return (data, *scales)


class QLinear(torch.autograd.Function):
    """TE Linear under a recipe: saves the quantised input only."""

    @staticmethod
    def forward(ctx, x, weight, recipe):
        ctx.shape, ctx.dtype = x.shape, x.dtype
        ctx.save_for_backward(*quantized_copy(x, recipe), weight)
        return F.linear(x, weight)

    @staticmethod
    def backward(ctx, grad):
        weight = ctx.saved_tensors[-1]
        return grad @ weight, None, None  # the weight gradient is not what this oracle measures


class QLayerNormLinear(torch.autograd.Function):
    """TE LayerNormLinear under a recipe: saves the 16-bit input, the quantised norm output and
    the norm statistics."""

    @staticmethod
    def forward(ctx, x, w_norm, b_norm, weight, rms, recipe):
        ln_out, stats = _norm(x, w_norm, b_norm, rms)
        ctx.save_for_backward(x, *quantized_copy(ln_out, recipe), *stats, weight)
        return F.linear(ln_out, weight)

    @staticmethod
    def backward(ctx, grad):
        weight = ctx.saved_tensors[-1]
        return grad @ weight, None, None, None, None, None


class LevelLayer(FusedLayer):
    """FusedLayer with `modules` (a set of "core_attn", "mlp") recomputed and an optional recipe.
    Llama kind only (no biases, no dropout), as the recipes' linear layers take no bias here."""

    def __init__(self, hidden, n_heads, n_kv_heads, ffn, modules=(), recipe=None):
        super().__init__("llama", hidden, n_heads, n_kv_heads, ffn, "none", dropout=0.0)
        self.modules_rc, self.recipe = set(modules), recipe

    def _qkv(self, x):
        if self.recipe:
            return QLayerNormLinear.apply(x, self.n1_w, None, self.qkv_w, True, self.recipe)
        from ._fused import LayerNormLinear
        return LayerNormLinear.apply(x, self.n1_w, None, self.qkv_w, None, True)

    def _linear(self, x, w):
        if self.recipe:
            return QLinear.apply(x, w, self.recipe)
        from ._fused import Linear
        return Linear.apply(x, w, None)

    def _mlp(self, h):
        if self.recipe:
            fc1 = QLayerNormLinear.apply(h, self.n2_w, None, self.fc1_w, True, self.recipe)
        else:
            from ._fused import LayerNormLinear
            fc1 = LayerNormLinear.apply(h, self.n2_w, None, self.fc1_w, None, True)
        return self._linear(SwiGLU.apply(fc1), self.fc2_w)

    def _layer(self, x, freqs):
        s, b, _ = x.shape
        qkv = self._qkv(x)
        q, k, v = qkv.split([self.a * self.d, self.k * self.d, self.k * self.d], -1)
        q = FusedRoPE.apply(q.reshape(s, b, self.a, self.d), freqs)
        k = FusedRoPE.apply(k.reshape(s, b, self.k, self.d), freqs)
        v = v.contiguous().view(s, b, self.k, self.d)
        if "core_attn" in self.modules_rc:
            out = checkpoint(FlashAttention.apply, q, k, v, use_reentrant=True)
        else:
            out = FlashAttention.apply(q, k, v)
        h = BiasDropoutAdd.apply(self._linear(out.view(s, b, -1), self.proj_w), None, x, 0.0)
        if "mlp" in self.modules_rc:
            mlp = checkpoint(self._mlp, h, use_reentrant=True)
        else:
            mlp = self._mlp(h)
        return BiasDropoutAdd.apply(mlp, None, h, 0.0)


class Stack(nn.Module):
    """L layers, recomputed by Megatron's layer methods: "block" checkpoints the first n layers
    one by one, "uniform" checkpoints groups of n layers as one unit, None none."""

    def __init__(self, layers, method=None, n=0):
        super().__init__()
        self.layers, self.method, self.n = nn.ModuleList(layers), method, n

    def _run(self, start, stop, x, freqs):
        for layer in self.layers[start:stop]:
            x = layer(x, freqs)
        return x

    def forward(self, x, freqs):
        L = len(self.layers)
        if self.method == "uniform":
            for start in range(0, L, self.n):
                x = checkpoint(self._run, start, start + self.n, x, freqs, use_reentrant=True)
            return x
        if self.method == "block":
            for i in range(self.n):
                x = checkpoint(self._run, i, i + 1, x, freqs, use_reentrant=True)
            return self._run(self.n, L, x, freqs)
        return self._run(0, L, x, freqs)

