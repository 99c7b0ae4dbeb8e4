"""Oracle from the framework's own code: megatron-core 0.16's TransformerLayer, local (non-TE)
GPT spec, on a one-rank gloo group on the CPU (skipped unless megatron-core is installed:
`pip install "megatron-core==0.16.*"`, which needs only torch, numpy and packaging).

The local spec is Korthikanti's setting (unfused attention scores, LayerNorm, GELU, biases) and
measures the count of `layer_activation_bytes(..., Attention.CLASSIC)` to the byte, except two
things the formula leaves out: the softmax runs in fp32 (`attention_softmax_in_fp32=True`, the
TransformerConfig default) and keeps that fp32 copy besides the 16-bit probabilities the
value-bmm saves (+4·a·s²·b), and the LayerNorm statistics (mu, rstd: 2·2·4 = 16 bytes a token).
Dropout is off: on the CPU PyTorch's dropout keeps a 16-bit noise tensor where CUDA's fused
kernel keeps a 1-byte mask, so only the no-dropout layer is CUDA-faithful here.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from planner.formulas import activations as A  # noqa: E402

from ._measure import saved_bytes  # noqa: E402

pytestmark = pytest.mark.oracle


def test_local_gpt_layer(megatron_one_rank):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    h, a, s, b = 256, 8, 64, 2
    config = TransformerConfig(num_layers=1, hidden_size=h, num_attention_heads=a, use_cpu_initialization=True,
                               bf16=True, params_dtype=torch.bfloat16, hidden_dropout=0.0,
                               attention_dropout=0.0, add_bias_linear=True)
    assert config.attention_softmax_in_fp32
    layer = build_module(get_gpt_layer_local_spec(), config=config, layer_number=1)
    mask = torch.triu(torch.ones(s, s), 1).bool()[None, None]
    x = torch.randn(s, b, h, dtype=torch.bfloat16, requires_grad=True)
    _, packed = saved_bytes(lambda x: layer(x, attention_mask=mask), x, exclude=[*layer.parameters(), mask])
    # Per token (s·b = 128): x, LN1 out, QKV (one 3h buffer), context, h, LN2 out: 2·(1+1+3+1+1+1)·256
    # = 4096; fc1 out and GELU out 2·2·1024 = 4096; fp32 softmax 4·a·s = 2048; 16-bit
    # probabilities 2·a·s = 1024; mu and rstd of both norms 16  ->  11280.
    assert packed == 11280 * s * b
    formula = A.layer_activation_bytes(s, b, h, a, a, h // a, 4 * h, 2, 0, 1, 1, False, A.Recompute.NONE,
                                       A.Attention.CLASSIC)
    fp32_softmax = 4 * a * s * s * b
    norm_statistics = 16 * s * b
    assert packed == formula + fp32_softmax + norm_statistics
