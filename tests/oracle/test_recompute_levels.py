"""Oracle: the recompute levels between none and full, and the low-precision recipes' saved
tensors, against a Megatron-Core layer whose kernels save what the fused kernels save
(tests/oracle/_levels.py on _fused.py's Functions).

Measured: live storages after the forward of a stack of L layers (the stack's input, the
parameters and the RoPE table excluded; the output stands in for the excluded input, so a
stack of L layers holds exactly what the formulas give per stage).  Tolerance 1 %, as for the
fused layer (tests/oracle/test_fused_layers.py): the formulas omit the fp32 norm statistics
(8 bytes per token per layer), per-tensor scales and scale padding.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from planner.formulas import activations as A  # noqa: E402
from planner.formulas import quantization as Q  # noqa: E402
from planner.formulas import recompute as RC  # noqa: E402

from ._levels import LevelLayer, Stack  # noqa: E402
from ._measure import LiveStorages  # noqa: E402
from ._torchtitan import default_dtype  # noqa: E402

pytestmark = pytest.mark.oracle

SHAPES = {  # hidden, heads, kv heads, ffn, seq, micro-batch
    "llama-small": (256, 8, 2, 704, 64, 2),
    "llama31-8b": (4096, 32, 8, 14336, 8192, 1),
}


def _live(shape, n_layers, modules=(), recipe=None, method=None, n=0, fake=False):
    h, a, k, f, s, b = SHAPES[shape]

    def run():
        with default_dtype(torch.bfloat16):
            layers = [LevelLayer(h, a, k, f, modules, recipe) for _ in range(n_layers)]
            x = torch.randn(s, b, h, requires_grad=True)
        stack = Stack(layers, method, n)
        freqs = torch.rand(s, h // a // 2, dtype=torch.float32).repeat(1, 2)
        with LiveStorages(exclude=[*stack.parameters(), x, freqs]) as tracker:
            y = stack(x, freqs)  # noqa: F841 (the graph lives while y does)
        return tracker.live_bytes()

    if not fake:
        return run()
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return run()


def _kept(shape, modules=(), recipe=None):
    """The formula's bytes per layer: Korthikanti's fused no-recompute set (flash, SwiGLU, no
    dropout), less what the recomputed modules drop, plus the recipe's change."""
    h, a, k, f, s, b = SHAPES[shape]
    e = 2 if recipe is None else Q.saved_input_bytes_per_element(Q.QuantRecipe(recipe))
    kept = A.layer_activation_bytes(s, b, h, a, k, h // a, f, 3, 0, 1, 1, False,
                                    A.Recompute.NONE, A.Attention.FLASH)
    if recipe is not None:
        kept += Q.saved_linear_inputs_delta_bytes(s, b, h, a, h // a, f, 1, 1, False, e)
    if "core_attn" in modules:
        out = 0 if recipe is None else 2 * s * b * h  # the 16-bit attention output (a·d_h = h)
        kept -= RC.core_attention_saving_bytes(
            A.score_activation_bytes(s, b, a, 0, A.Attention.FLASH), 1, out)
    if "mlp" in modules:
        kept -= RC.mlp_saving_bytes(s, b, h, f, 3, 1, 1, False, e)
    return kept


def _input(shape):
    h, a, k, f, s, b = SHAPES[shape]
    return RC.checkpoint_input_bytes(s, b, h, 1, 1, False, False, 0)


@pytest.mark.parametrize("modules", [(), ("core_attn",), ("mlp",), ("core_attn", "mlp")])
def test_recompute_modules(modules):
    assert _live("llama-small", 2, modules) == pytest.approx(2 * _kept("llama-small", modules),
                                                             rel=0.01)


def test_mlp_recompute_by_hand():
    # llama-small, per token (s·b = 128): the MLP checkpoint drops fc1's input (the norm output,
    # 2h = 512 B), SwiGLU's 2f input (2·2·704 = 2816 B), fc2's input (2f = 1408 B) and the
    # pre-MLP norm's fp32 rsigma (4 B, which the formula leaves out): 4740 B per token
    drop = _live("llama-small", 1) - _live("llama-small", 1, ("mlp",))
    assert drop == 4740 * 128


@pytest.mark.parametrize("method, n", [("block", 1), ("block", 3), ("uniform", 2), ("uniform", 4)])
def test_layer_methods(method, n):
    L, kept, inp = 4, _kept("llama-small"), _input("llama-small")
    want = (RC.partial_saved_bytes(L, n, inp, kept) if method == "block"
            else RC.grouped_saved_bytes(L, n, inp))
    assert _live("llama-small", L, method=method, n=n) == pytest.approx(want, rel=0.01)


@pytest.mark.parametrize("recipe", ["delayed", "current", "mxfp8", "blockwise", "nvfp4"])
def test_recipe_saved_tensors(recipe):
    assert _live("llama-small", 2, recipe=recipe) == pytest.approx(
        2 * _kept("llama-small", recipe=recipe), rel=0.01)


@pytest.mark.parametrize("recipe, modules", [("mxfp8", ("mlp",)), ("delayed", ("core_attn",))])
def test_recipe_with_module_recompute(recipe, modules):
    assert _live("llama-small", 2, modules, recipe) == pytest.approx(
        2 * _kept("llama-small", modules, recipe), rel=0.01)


def test_fp8_layer_by_hand():
    # one llama-small layer, per token, bf16: norm input 512 + ln out 512 (QKV) + q 512 + k, v
    # 2·128 + out 512 + lse 4·8 = 32 + norm input 512 + ln out 512 (fc1) + SwiGLU input 2816 +
    # fc2 input 1408 + rsigma 2·4 = 7592 B. Delayed FP8: both ln outs 256 each (−512), fc2 input
    # 704 (−704), projection copy +256: 7592 − 960 = 6632 B per token; 2 per-tensor fp32 scales
    # per quantised tensor are 4 × 4 B per layer.
    bf16 = _live("llama-small", 1)
    fp8 = _live("llama-small", 1, recipe="delayed")
    assert bf16 == 7592 * 128
    assert fp8 == 6632 * 128 + 4 * 4


@pytest.mark.parametrize("modules, recipe", [((), None), (("mlp",), None), ((), "mxfp8")])
def test_realistic_llama8b(modules, recipe):
    assert _live("llama31-8b", 1, modules, recipe, fake=True) == pytest.approx(
        _kept("llama31-8b", modules, recipe), rel=0.01)


def _peak_in_backward(shape, n_layers, method=None, n=0):
    """The largest live total of storages during the backward of a stack of L layers (after its
    forward), with the parameters frozen so that no weight gradient is counted: what the stage
    holds while its layers rerun and run their backward."""
    h, a, k, f, s, b = SHAPES[shape]
    with default_dtype(torch.bfloat16):
        layers = [LevelLayer(h, a, k, f) for _ in range(n_layers)]
        x = torch.randn(s, b, h, requires_grad=True)
    stack = Stack(layers, method, n)
    for p in stack.parameters():
        p.requires_grad_(False)
    freqs = torch.rand(s, h // a // 2, dtype=torch.float32).repeat(1, 2)
    grad = torch.ones(s, b, h, dtype=torch.bfloat16)
    with LiveStorages(exclude=[x, freqs, grad]) as tracker:
        y = stack(x, freqs)
        tracker.peak_bytes = 0
        y.backward(grad)
        del y
    return tracker.peak_bytes


@pytest.mark.parametrize("method, n", [("uniform", 1), ("uniform", 2), ("uniform", 4),
                                       ("block", 1), ("block", 2), ("block", 4)])
def test_rerun_peaks(method, n):
    """fit: the backward's peak under each layer method, less the no-recompute backward's peak
    (the gradients and the kernels' transients are the same in both, so they cancel), against
    the formulas' saved set plus what is alive while a unit reruns: a whole group's full sets
    under the uniform method (grouped_working_bytes), one layer's under full recompute, none
    under the block method with r < L (its recomputed layers rerun after the others freed
    theirs: partial_working_bytes). Tolerance: the fp32 norm statistics the formulas omit,
    2 norms × 4 B per token per layer of the stack."""
    L, kept, inp = 4, _kept("llama-small"), _input("llama-small")
    h, a, k, f, s, b = SHAPES["llama-small"]
    if method == "uniform":
        want = (RC.grouped_saved_bytes(RC.grouped_checkpoints(L, n) * n, n, inp)
                + RC.grouped_working_bytes(n, kept))
    else:
        want = RC.partial_saved_bytes(L, n, inp, kept) + RC.partial_working_bytes(L, n, kept)
    measured = (_peak_in_backward("llama-small", L, method, n)
                - _peak_in_backward("llama-small", L))
    assert measured == pytest.approx(want - L * kept, abs=2 * 4 * s * b * L)
