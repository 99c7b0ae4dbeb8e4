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
    ZB_H1 = "zb-h1"
    """Zero Bubble ZB-H1 (Qi et al. 2024 §2.1): backward split into input gradient (B) and weight
    gradient (W); W deferred into the tail bubble. 1F1B's memory: p micro-batches in flight."""
    ZB_H2 = "zb-h2"
    """Zero Bubble ZB-H2 (Qi et al. 2024 §2.2): 2(p − 1 − k) warm-up forwards on stage k, W
    deferred further; 2p − 1 micro-batches in flight on every stage."""
    ZBV = "zbv"
    """ZB-V (Qi et al. 2024, arXiv v2 §6; Qi et al. 2024b): two model chunks per GPU in a V
    (chunk 0 on stages 0…p−1, chunk 1 back on p−1…0); 1F1B's activation memory."""
    DUALPIPE = "dualpipe"
    """DualPipe (DeepSeek-V3 report §3.2.1): micro-batches fed from both ends; every GPU holds
    two stages' parameters (one per direction). pp even, m even and ≥ 2·pp."""
    DUALPIPEV = "dualpipev"
    """DualPipeV (deepseek-ai/DualPipe dualpipev.py; Sea AI Lab's "cut-in-half"): DualPipe folded
    into a V, two chunks per GPU, one copy of the parameters. m ≥ 2·pp."""


class ContextKind(str, Enum):
    """How context-parallel ranks exchange attention inputs (Megatron-LM ``--cp-comm-type``; see
    planner.formulas.context)."""

    RING = "p2p"
    """Ring attention: K/V chunks passed around the cp ranks, overlapped with the attention
    blocks (Liu et al. 2023; Megatron-LM/Transformer Engine "p2p"). plan3d's model until now."""
    ALL_TO_ALL = "a2a"
    """DeepSpeed-Ulysses (Jacobs et al. 2023): all-to-alls trade the sequence split for a head
    split around the attention core; the heads and KV heads per TP rank must divide by cp."""
    HIERARCHICAL = "a2a+p2p"
    """All-to-all inside groups of cp_a2a ranks, ring across the cp/cp_a2a groups (Megatron-LM
    ``--hierarchical-context-parallel-sizes``; Fang & Zhao 2024, USP)."""


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
    NVFP4 = "nvfp4"
    """4-bit E2M1 linear layers with per-16 E4M3 scales (Blackwell; formulas.quantization)."""


class QuantRecipe(str, Enum):
    """The low-precision training recipe of an fp8 or nvfp4 plan (Megatron `--fp8-recipe`,
    Transformer Engine recipes; what each keeps: formulas.quantization)."""

    DELAYED = "delayed"
    """Per-tensor FP8, scale from an amax history (TE DelayedScaling; Megatron's default)."""
    CURRENT = "current"
    """Per-tensor FP8, scale from the tensor's own amax (TE Float8CurrentScaling; Megatron
    `--fp8-recipe tensorwise`; torchao Float8 tensorwise, torchtitan's default)."""
    MXFP8 = "mxfp8"
    """FP8 with an E8M0 scale per 32 elements, rowwise and columnwise (Blackwell)."""
    BLOCKWISE = "blockwise"
    """FP8 with fp32 scales per 128×128 weight block and 1×128 activation block (DeepSeek-V3)."""
    NVFP4 = "nvfp4"
    """4-bit E2M1 with an E4M3 scale per 16 elements and an fp32 scale per tensor (Blackwell)."""


class RecomputeModule(str, Enum):
    """A submodule Megatron's selective recompute can checkpoint (`--recompute-modules`,
    transformer_config.py l.560-590 @ d98e8a6); what each drops: formulas.recompute."""

    CORE_ATTN = "core_attn"
    """The attention core (Korthikanti's selective recompute; Megatron's default)."""
    MLP = "mlp"
    """The dense MLP, from the pre-MLP norm's input."""
    LAYERNORM = "layernorm"
    """The two norms' outputs, discarded after use and recomputed."""
    MOE_ACT = "moe_act"
    """The (routed experts') activation function's output."""
    MLA_UP_PROJ = "mla_up_proj"
    """MLA's query and key/value up-projections with RoPE: Q, K, V and the normed latents."""
    SHARED_EXPERTS = "shared_experts"
    """A MoE layer's shared experts, from the MoE layer's input."""
    MOE = "moe"
    """The whole MoE layer (router, dispatch, experts, combine), from its input."""


class MlpKind(str, Enum):
    """The feed-forward block."""

    GELU = "gelu"
    """Two matrices, h→f→h, with a GELU between (GPT)."""
    SWIGLU = "swiglu"
    """Three matrices: gate and up h→f, SiLU(gate)·up, down f→h (Llama)."""


MLP_MATRICES = {MlpKind.GELU: 2, MlpKind.SWIGLU: 3}
