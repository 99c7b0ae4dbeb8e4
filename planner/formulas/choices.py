"""The discrete choices of a plan. Each picks which expression a formula builds; none is a number
that flows through the arithmetic."""

from __future__ import annotations

from enum import Enum, IntEnum


class ZeroStage(IntEnum):
    """How much of the model state is sharded over the data-parallel group (Rajbhandari 2020)."""

    NONE = 0
    """Plain data parallelism: every rank holds weights, gradients and optimizer state."""
    OPTIMIZER = 1
    """ZeRO-1 / Megatron's distributed optimizer: optimizer state sharded."""
    GRADIENTS = 2
    """ZeRO-2: optimizer state and gradients sharded."""
    PARAMETERS = 3
    """ZeRO-3 / FSDP: weights too, gathered layer by layer when used."""


class Recompute(str, Enum):
    """Activation recomputation (Korthikanti et al. 2022 §5)."""

    NONE = "none"
    """Store every activation the backward pass needs."""
    SELECTIVE = "selective"
    """Recompute the attention core (softmax, dropout, scores·V); store the rest."""
    FULL = "full"
    """Store only each layer's input; rerun the layer's forward pass in the backward pass."""


class Schedule(str, Enum):
    """Pipeline schedule."""

    GPIPE = "gpipe"
    """All forwards, then all backwards (Huang et al. 2019): M micro-batches in flight."""
    ONE_F_ONE_B = "1f1b"
    """PipeDream-Flush / 1F1B (Narayanan et al. 2021): at most P micro-batches in flight."""
    INTERLEAVED = "interleaved"
    """Interleaved 1F1B with v model chunks per GPU (Narayanan et al. 2021 §2.2.2)."""


class Attention(str, Enum):
    """How the attention core is computed."""

    FLASH = "flash"
    """Fused kernel (FlashAttention): no s×s score matrix is stored; causal blocks are skipped."""
    CLASSIC = "classic"
    """Score matrix materialised, as in Megatron-LM 2021–22 (Korthikanti et al. 2022 Table 2)."""


class Precision(str, Enum):
    """The precision the matrix multiplications run in."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"


class MlpKind(str, Enum):
    """The feed-forward block."""

    GELU = "gelu"
    """Two matrices, h→f→h, with a GELU between (GPT)."""
    SWIGLU = "swiglu"
    """Three matrices: gate and up h→f, SiLU(gate)·up, down f→h (Llama)."""


MLP_MATRICES = {MlpKind.GELU: 2, MlpKind.SWIGLU: 3}
