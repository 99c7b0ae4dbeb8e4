"""Typed, validated inputs: a model's shape, a hardware profile, a parallel plan.

Data files use human units in their key names (`hbm_gib`, `nvlink_busbw_gb_per_s`); the
properties here convert them once to base units (bytes, seconds, FLOP/s).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from .formulas import params as P
from .formulas.choices import (
    MLP_MATRICES,
    Attention,
    MlpKind,
    Precision,
    Recompute,
    Schedule,
    ZeroStage,
)
from .units import GB, GIB, TFLOPS, US


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


# --------------------------------------------------------------------------------------------
# Model


class ModelSpec(_Strict):
    """A decoder-only transformer's shape."""

    name: str
    description: str = ""
    source: str = Field("", description="Where the shape comes from (paper, model card, config).")
    n_layers: PositiveInt
    hidden: PositiveInt
    n_heads: PositiveInt
    n_kv_heads: PositiveInt | None = Field(None, description="GQA key/value heads; default n_heads.")
    head_dim: PositiveInt | None = Field(None, description="Default hidden / n_heads.")
    ffn: PositiveInt = Field(description="Feed-forward (intermediate) size; per expert for MoE.")
    vocab: PositiveInt
    seq_len: PositiveInt = Field(description="Default training sequence length.")
    max_positions: PositiveInt | None = Field(None, description="Learned position table size.")
    mlp: MlpKind = MlpKind.SWIGLU
    norm: Literal["layernorm", "rmsnorm"] = "rmsnorm"
    bias: bool = Field(False, description="Linear layers carry biases (GPT) or not (Llama).")
    position_embedding: Literal["learned", "rotary"] = "rotary"
    tied_embeddings: bool = False
    dropout: bool = Field(False, description="Dropout layers present (GPT-3 era) or not.")
    n_experts: PositiveInt = 1
    top_k: PositiveInt = 1

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        if self.n_kv_heads is not None and self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.head_dim is None and self.hidden % self.n_heads:
            raise ValueError(
                f"hidden ({self.hidden}) must be divisible by n_heads ({self.n_heads}), "
                "or head_dim must be given")
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k ({self.top_k}) cannot exceed n_experts ({self.n_experts})")
        return self

    # Derived numbers, each in one place.
    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden // self.n_heads

    @property
    def n_mlp_matrices(self) -> int:
        return MLP_MATRICES[self.mlp]

    @property
    def norm_width(self) -> int:
        return 2 if self.norm == "layernorm" else 1

    @property
    def learned_positions(self) -> int:
        return 1 if self.position_embedding == "learned" else 0

    @property
    def positions(self) -> int:
        return self.max_positions or self.seq_len

    @property
    def router_experts(self) -> int:
        return self.n_experts if self.n_experts > 1 else 0

    @property
    def n_params(self) -> float:
        """Total parameters Ψ (unpadded vocabulary)."""
        return P.model_params(
            self.n_layers, self.hidden, self.n_heads, self.kv_heads, self.dim_head, self.ffn,
            self.n_mlp_matrices, int(self.bias), self.norm_width, self.vocab, self.positions,
            self.learned_positions, int(self.tied_embeddings), self.n_experts, self.router_experts)


# --------------------------------------------------------------------------------------------
# Hardware


class PerPrecision(_Strict):
    bf16: PositiveFloat
    fp16: PositiveFloat
    fp8: PositiveFloat | None = None

    def of(self, precision: Precision) -> float | None:
        return getattr(self, precision.value)


class Link(_Strict):
    """One kind of link, per GPU."""

    gb_per_s: PositiveFloat = Field(description="Nominal per-GPU bandwidth, one direction (GB/s).")
    busbw_gb_per_s: PositiveFloat = Field(
        description="Achievable NCCL all-reduce bus bandwidth per GPU on this link (GB/s).")
    latency_us: PositiveFloat = Field(description="Per-step latency of a ring collective (µs).")
    nvls_busbw_gb_per_s: PositiveFloat | None = Field(
        None, description="NVLink SHARP (NVLS) all-reduce bus bandwidth per GPU inside the domain "
        "(GB/s); None where the switch has no NVLS or NCCL does not use it.")

    @property
    def busbw_bytes_per_s(self) -> float:
        return self.busbw_gb_per_s * GB

    @property
    def nvls_busbw_bytes_per_s(self) -> float | None:
        return None if self.nvls_busbw_gb_per_s is None else self.nvls_busbw_gb_per_s * GB

    @property
    def latency_s(self) -> float:
        return self.latency_us * US


class Efficiency(_Strict):
    """Achievable fractions of the peaks, each with its source in the profile file."""

    gemm: PerPrecision = Field(description="Fraction of dense peak training GEMMs reach.")
    hbm: float = Field(gt=0, le=1, description="Fraction of HBM bandwidth memory-bound kernels reach.")
    kernel_overhead_us: float = Field(
        4.0, ge=0, description="Fixed cost per kernel (launch + tail wave), µs; CUDA launch "
        "latency is ~3–5 µs without CUDA graphs (NVIDIA CUDA best-practices guide).")


class Runtime(_Strict):
    reserved_gib: float = Field(ge=0, description="CUDA context, workspaces, NCCL buffers (GiB).")
    fragmentation_fraction: float = Field(ge=0, lt=1,
                                          description="Allocator fragmentation, share of tensors.")


class Topology(_Strict):
    """How the nodes and NVLink domains connect to the network (the `network` link is one NIC).
    Every field has a default that keeps older profiles meaning what they meant: one NIC per GPU,
    8-GPU nodes (or the domain, if smaller), full bisection everywhere, no SHARP."""

    gpus_per_node: PositiveInt | None = Field(
        None, description="GPUs per node (compute tray); default min(gpus_per_domain, 8).")
    nics_per_node: PositiveInt | None = Field(
        None, description="Scale-out NICs per node (each at network.gb_per_s); default one per GPU.")
    rail_optimized: bool = Field(
        True, description="NIC i of every node on rail switch i (NVIDIA DGX SuperPOD RA); "
        "NCCL's PXN keeps every ring on its rail.")
    pod_gpus: PositiveInt | None = Field(
        None, description="GPUs within which the network has full bisection bandwidth; None: "
        "the whole cluster.")
    oversubscription: float = Field(
        1.0, ge=1, description="Oversubscription above a pod (7.0 for 1:7).")
    sharp: bool = Field(
        False, description="In-network reduction (InfiniBand SHARP via NCCL CollNet) available "
        "for all-reduces across the network.")
    domain_gpus_used: PositiveInt | None = Field(
        None, description="GPUs a job uses per NVLink domain on partly filled racks (e.g. 64 of "
        "72); default all of them.")


class HardwareProfile(_Strict):
    """A GPU and the cluster it sits in."""

    name: str
    description: str = ""
    gpu: str
    hbm_gib: PositiveFloat = Field(description="Memory a training process can use (GiB).")
    hbm_tb_per_s: PositiveFloat
    peak_tflops: PerPrecision = Field(description="Dense (no sparsity) peak per precision.")
    gpus_per_domain: PositiveInt = Field(description="GPUs that share the fast (NVLink) domain.")
    sm_count: PositiveInt | None = Field(
        None, description="Streaming multiprocessors (compute units) that GEMM tiles are spread "
        "over; None leaves wave quantisation out.")
    gemm_tile: tuple[PositiveInt, PositiveInt] = Field(
        (128, 128), description="Output tile of the training GEMMs (rows, cols).")
    fast: Link
    network: Link
    efficiency: Efficiency
    runtime: Runtime
    tdp_w: PositiveFloat | None = None
    topology: Topology = Topology()

    @model_validator(mode="after")
    def _topology_fits(self) -> HardwareProfile:
        used = self.topology.domain_gpus_used
        if used is not None and used > self.gpus_per_domain:
            raise ValueError(f"topology.domain_gpus_used ({used}) cannot exceed gpus_per_domain "
                             f"({self.gpus_per_domain})")
        return self

    @property
    def node_gpus(self) -> int:
        return self.topology.gpus_per_node or min(self.gpus_per_domain, 8)

    @property
    def nics_per_gpu(self) -> float:
        return (self.topology.nics_per_node or self.node_gpus) / self.node_gpus

    @property
    def domain_gpus_used(self) -> int:
        return self.topology.domain_gpus_used or self.gpus_per_domain

    @property
    def capacity_bytes(self) -> float:
        return self.hbm_gib * GIB

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tb_per_s * 1e12

    def peak_flops_per_s(self, precision: Precision) -> float | None:
        value = self.peak_tflops.of(precision)
        return None if value is None else value * TFLOPS

    def gemm_efficiency(self, precision: Precision) -> float | None:
        return self.efficiency.gemm.of(precision)


# --------------------------------------------------------------------------------------------
# Plan


class PlanConfig(_Strict):
    """One layout of a training step over the cluster. gbs = mbs · n_micro · dp."""

    dp: PositiveInt
    tp: PositiveInt = 1
    pp: PositiveInt = 1
    cp: PositiveInt = 1
    vpp: PositiveInt = 1
    mbs: PositiveInt = 1
    n_micro: PositiveInt = 1
    gbs: PositiveInt
    seq_len: PositiveInt
    zero_stage: ZeroStage = ZeroStage.OPTIMIZER
    recompute: Recompute = Recompute.SELECTIVE
    sequence_parallel: bool = True
    schedule: Schedule = Schedule.ONE_F_ONE_B
    precision: Precision = Precision.BF16
    grad_dtype: Literal["fp32", "bf16"] = "fp32"
    attention: Attention = Attention.FLASH
    overlap_grad_reduce: bool = True

    @property
    def n_gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def label(self, *, batch: bool = True, precision: bool = False) -> str:
        """The layout in one short line, as tables and reasons quote it:
        dp8 tp8 pp4 [cp2] [v2] mbs1 [gbs512 s8192] z1 selective [bf16] [sp]."""
        parts = [f"dp{self.dp}", f"tp{self.tp}", f"pp{self.pp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.vpp > 1:
            parts.append(f"v{self.vpp}")
        parts.append(f"mbs{self.mbs}")
        if batch:
            parts += [f"gbs{self.gbs}", f"s{self.seq_len}"]
        parts += [f"z{int(self.zero_stage)}", self.recompute.value]
        if precision:
            parts.append(self.precision.value)
        if self.sequence_parallel:
            parts.append("sp")
        return " ".join(parts)
