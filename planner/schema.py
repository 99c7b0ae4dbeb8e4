"""Typed, validated inputs: a model's shape, a hardware profile, a parallel plan.

Data files use human units in their key names (`hbm_gib`, `nvlink_busbw_gb_per_s`); the
properties here convert them once to base units (bytes, seconds, FLOP/s).
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_serializer,
    model_validator,
)

from .formulas import params as P
from .formulas import reliability as REL
from .formulas.choices import (
    MLP_MATRICES,
    Attention,
    ContextKind,
    MlpKind,
    Precision,
    QuantRecipe,
    Recompute,
    RecomputeModule,
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
    n_experts: PositiveInt = Field(1, description="Routed experts per MoE layer (1: dense).")
    top_k: PositiveInt = Field(1, description="Routed experts each token is sent to.")
    # ---- mixture of experts (defaults: a dense model, or Mixtral's shape) --------------------
    moe_ffn: PositiveInt | None = Field(
        None, description="Intermediate size of one routed expert; default ffn (Mixtral). "
        "DeepSeek/Qwen-MoE: moe_intermediate_size, while ffn is the dense layers' width.")
    n_shared_experts: NonNegativeInt = Field(
        0, description="Shared experts every token passes through (DeepSeek, Qwen2-MoE).")
    shared_ffn: PositiveInt | None = Field(
        None, description="Intermediate size of one shared expert; default moe_ffn.")
    first_k_dense: NonNegativeInt = Field(
        0, description="Leading layers that keep a dense MLP (DeepSeek first_k_dense_replace).")
    moe_layer_freq: PositiveInt = Field(
        1, description="Every n-th layer (after first_k_dense) is MoE: layer i is MoE when "
        "i ≥ first_k_dense and i mod n = moe_layer_phase (DeepSeek moe_layer_freq, Qwen-MoE "
        "decoder_sparse_step).")
    moe_layer_phase: NonNegativeInt = Field(
        0, description="Which layer of each moe_layer_freq is MoE, below moe_layer_freq: 0 "
        "(layers 0, n, 2n, …: DeepSeek's i mod n = 0, Megatron's integer --moe-layer-freq) or "
        "n − 1 (layers n − 1, 2n − 1, …: Qwen-MoE's (i + 1) mod decoder_sparse_step = 0).")
    router: Literal["softmax", "sigmoid"] = Field(
        "softmax", description="Router score function (DeepSeek-V3: sigmoid).")
    n_expert_groups: PositiveInt | None = Field(
        None, description="Group-limited routing: the experts in this many groups (DeepSeek "
        "n_group); a token picks its experts within topk_groups of them.")
    topk_groups: PositiveInt | None = Field(
        None, description="Groups a token's experts may come from (DeepSeek topk_group).")
    balancing: Literal["aux_loss", "aux_free"] = Field(
        "aux_loss", description="How the router balances the experts: an auxiliary loss "
        "(Switch, Mixtral, Qwen) or a per-expert score bias (DeepSeek-V3 §2.1.2, HF topk_method "
        "noaux_tc); sets the busiest rank's load (formulas.moe_layer.MAX_VIOLATION).")
    # ---- multi-head latent attention (DeepSeek-V2 §2.1); kv_lora_rank set = MLA --------------
    q_lora_rank: PositiveInt | None = Field(
        None, description="MLA query compression rank d_c'; None: queries projected from h.")
    kv_lora_rank: PositiveInt | None = Field(
        None, description="MLA key/value compression rank d_c; setting it makes attention MLA.")
    qk_nope_head_dim: PositiveInt | None = Field(
        None, description="MLA per-head query/key width without rotary (d_h^nope).")
    qk_rope_head_dim: PositiveInt | None = Field(
        None, description="MLA per-head decoupled rotary width d_h^R (key part shared by heads).")
    v_head_dim: PositiveInt | None = Field(None, description="MLA per-head value width.")
    # ---- architecture details the cost model does not need but a launch does (issue 20) -----
    # Each is what a framework must be told to build the same model; the Hugging Face names are
    # in planner/catalog.py (model_from_hf_config), the framework flags in planner/frameworks/.
    rope_theta: PositiveFloat | None = Field(
        None, description="Rotary base θ (HF rope_theta); None: the framework's default 10,000.")
    rope_scaling: Literal["llama3", "yarn"] | None = Field(
        None, description="Rotary scaling kind (HF rope_scaling.rope_type / type).")
    rope_factor: PositiveFloat | None = Field(None, description="Rotary scaling factor.")
    rope_original_max_positions: PositiveInt | None = Field(
        None, description="Context length the rotary scaling extends from "
        "(original_max_position_embeddings).")
    rope_low_freq_factor: PositiveFloat | None = Field(None, description="llama3 scaling.")
    rope_high_freq_factor: PositiveFloat | None = Field(None, description="llama3 scaling.")
    rope_beta_fast: PositiveFloat | None = Field(None, description="YaRN β_fast.")
    rope_beta_slow: PositiveFloat | None = Field(None, description="YaRN β_slow.")
    rope_mscale: float | None = Field(None, description="YaRN mscale (DeepSeek).")
    rope_mscale_all_dim: float | None = Field(None, description="YaRN mscale_all_dim.")
    norm_eps: PositiveFloat = Field(1e-5, description="Norm epsilon (rms_norm_eps).")
    qk_norm: bool = Field(False, description="RMSNorm on each head's query and key (Qwen3).")
    qkv_bias: bool = Field(False, description="Biases on the q, k, v projections only (Qwen2); "
                           "`bias` is every linear layer's.")
    norm_topk_prob: bool = Field(
        True, description="The top-k router probabilities renormalised to sum to 1 "
        "(HF norm_topk_prob; Mixtral's softmax over the top-k logits is the same).")
    routed_scaling_factor: PositiveFloat = Field(
        1.0, description="Routed experts' output scale (DeepSeek-V3 2.5).")
    mtp_layers: NonNegativeInt = Field(
        0, description="Multi-token-prediction modules (DeepSeek-V3 num_nextn_predict_layers), "
        "on the last pipeline stage (formulas/moe_mtp.py); not in the parameter count (671B "
        "for DeepSeek-V3, as its report counts).")
    unmodelled: tuple[str, ...] = Field(
        (), description="Hugging Face config fields plan3d does not model, as name=value, "
        "passed through by name to the launch notes.")

    @model_validator(mode="before")
    @classmethod
    def _expert_bias_is_balancing(cls, data):
        """moe: `router_expert_bias` (older model files) is aux-loss-free balancing itself — the
        per-expert score bias of DeepSeek-V3 §2.1.2 — so it reads as balancing = aux_free; a
        file that says both must say the same."""
        if not isinstance(data, dict) or "router_expert_bias" not in data:
            return data
        data = dict(data)
        bias = bool(data.pop("router_expert_bias"))
        said = data.get("balancing")
        if said is not None and (said == "aux_free") != bias:
            raise ValueError(f"router_expert_bias = {str(bias).lower()} contradicts balancing = "
                             f"{said} (the expert bias is aux-loss-free balancing)")
        if bias:
            data["balancing"] = "aux_free"
        return data

    @property
    def router_expert_bias(self) -> bool:
        """Aux-loss-free balancing's per-expert bias on the scores, for top-k selection only
        (DeepSeek-V3 §2.1.2, HF topk_method noaux_tc; Megatron --moe-router-enable-expert-bias):
        the model's balancing is aux_free."""
        return self.balancing == "aux_free"

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
        if self.first_k_dense >= self.n_layers and self.n_experts > 1:
            raise ValueError(f"first_k_dense ({self.first_k_dense}) leaves no MoE layer of "
                             f"{self.n_layers}; set n_experts = 1 for a dense model")
        if self.moe_layer_phase >= self.moe_layer_freq:
            raise ValueError(f"moe_layer_phase ({self.moe_layer_phase}) must be below "
                             f"moe_layer_freq ({self.moe_layer_freq})")
        if self.is_moe and not self.n_moe_layers:
            raise ValueError(f"first_k_dense, moe_layer_freq and moe_layer_phase leave no MoE "
                             f"layer of {self.n_layers}; set n_experts = 1 for a dense model")
        if (self.n_expert_groups is None) != (self.topk_groups is None):
            raise ValueError("group-limited routing needs both n_expert_groups and topk_groups")
        if self.n_expert_groups is not None and (
                self.n_experts % self.n_expert_groups or self.topk_groups > self.n_expert_groups):
            raise ValueError(f"n_expert_groups ({self.n_expert_groups}) must divide n_experts "
                             f"({self.n_experts}) and be at least topk_groups "
                             f"({self.topk_groups})")
        if self.rope_scaling is not None and self.rope_factor is None:
            raise ValueError(f"rope_scaling {self.rope_scaling} needs rope_factor")
        if self.rope_scaling is None and self.rope_factor is not None:
            raise ValueError("rope_factor needs rope_scaling (llama3 or yarn)")
        mla = [self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim]
        if self.kv_lora_rank is not None and None in mla:
            raise ValueError("an MLA model (kv_lora_rank set) needs qk_nope_head_dim, "
                             "qk_rope_head_dim and v_head_dim")
        if self.kv_lora_rank is None and (self.q_lora_rank is not None
                                          or any(v is not None for v in mla)):
            raise ValueError("q_lora_rank and the MLA head dims need kv_lora_rank (MLA)")
        return self

    # Derived numbers, each in one place.
    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def dim_head(self) -> int:
        """d_h; under MLA the query/key head width d_n + d_r (the value width is v_head_dim)."""
        if self.kv_lora_rank is not None:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
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
        return P.transformer_params(self.n_layers - self.n_moe_layers, self.n_moe_layers,
                                    self.dense_layer_params, self.moe_layer_params, self.vocab,
                                    self.hidden, self.positions, self.learned_positions,
                                    int(self.tied_embeddings), self.norm_width)

    # ---- mixture of experts and MLA ----------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.n_experts > 1

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def expert_ffn(self) -> int:
        """One routed expert's intermediate size f_e."""
        return self.moe_ffn or self.ffn

    @property
    def shared_expert_ffn(self) -> int:
        """One shared expert's intermediate size f_s."""
        return self.shared_ffn or self.expert_ffn

    @property
    def n_moe_layers(self) -> int:
        """Layers with a routed MLP (formulas.moe.moe_layers_in_span over all layers); 0 for a
        dense model."""
        from .formulas.moe import moe_layers_in_span

        return int(moe_layers_in_span(0, self.n_layers, self.first_k_dense, self.moe_layer_freq,
                                      int(self.is_moe), self.moe_layer_phase))

    @property
    def moe_layer_indices(self) -> tuple[int, ...]:
        """The MoE layers' 0-based indices: i ≥ first_k_dense with i mod f = moe_layer_phase."""
        return tuple(i for i in range(self.first_k_dense, self.n_layers)
                     if self.is_moe and i % self.moe_layer_freq == self.moe_layer_phase)

    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width: d_nope + d_rope under MLA, d_h otherwise."""
        return self.dim_head

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim if self.is_mla else self.dim_head

    @property
    def attention_params_split(self) -> tuple[int, int]:
        """(split over t, replicated over t) parameters of one attention block, biases and (MLA)
        the latent norms included; the layer's two norms are not."""
        if self.is_mla:
            has_q = int(self.q_lora_rank is not None)
            q_rank = self.q_lora_rank or 0
            return (P.mla_sharded_params(self.hidden, self.n_heads, q_rank, self.kv_lora_rank,
                                         self.qk_nope_head_dim, self.qk_rope_head_dim,
                                         self.v_head_dim, has_q),
                    P.mla_replicated_params(self.hidden, q_rank, self.kv_lora_rank,
                                            self.qk_rope_head_dim, has_q))
        return (P.attention_weight_params(self.hidden, self.n_heads, self.kv_heads, self.dim_head)
                + int(self.bias) * self.dim_head * (self.n_heads + 2 * self.kv_heads),
                int(self.bias) * self.hidden)

    @property
    def attention_params(self) -> int:
        return sum(self.attention_params_split)

    @property
    def dense_layer_params(self) -> int:
        """One layer with a dense MLP of width ffn."""
        return P.dense_layer_params(self.attention_params, self.hidden, self.ffn,
                                    self.n_mlp_matrices, int(self.bias), self.norm_width)

    @property
    def moe_layer_params(self) -> int:
        """One MoE layer: attention, E routed + n_s shared experts, router, norms."""
        return P.moe_layer_params(self.attention_params, self.hidden, self.expert_ffn,
                                  self.n_mlp_matrices, int(self.bias), self.norm_width,
                                  self.n_experts, self.router_experts, self.n_shared_experts,
                                  self.shared_expert_ffn)

    @property
    def n_active_params(self) -> float:
        """Parameters one token meets: dense layers whole, MoE layers with top-k routed experts
        (plus the shared ones and the router); embedding and LM head both counted."""
        active_moe = P.moe_layer_params(self.attention_params, self.hidden, self.expert_ffn,
                                        self.n_mlp_matrices, int(self.bias), self.norm_width,
                                        self.top_k, self.router_experts, self.n_shared_experts,
                                        self.shared_expert_ffn)
        return P.transformer_params(self.n_layers - self.n_moe_layers, self.n_moe_layers,
                                    self.dense_layer_params, active_moe, self.vocab, self.hidden,
                                    self.positions, self.learned_positions,
                                    int(self.tied_embeddings), self.norm_width)


# --------------------------------------------------------------------------------------------
# Hardware


LOW_PRECISION = (Precision.FP8, Precision.NVFP4)


class PerPrecision(_Strict):
    bf16: PositiveFloat
    fp16: PositiveFloat
    fp8: PositiveFloat | None = None
    fp4: PositiveFloat | None = None  # the GPUs with FP4 tensor cores (Blackwell): nvfp4 plans

    def of(self, precision: Precision) -> float | None:
        return getattr(self, "fp4" if precision is Precision.NVFP4 else precision.value)


class Link(_Strict):
    """One kind of link, per GPU."""

    gb_per_s: PositiveFloat = Field(description="Nominal per-GPU bandwidth, one direction (GB/s).")
    busbw_gb_per_s: PositiveFloat = Field(
        description="Achievable NCCL all-reduce bus bandwidth per GPU on this link (GB/s).")
    latency_us: PositiveFloat = Field(description="Per-step latency of a ring collective (µs).")
    nvls_busbw_gb_per_s: PositiveFloat | None = Field(
        None, description="NVLink SHARP (NVLS) all-reduce bus bandwidth per GPU inside the domain "
        "(GB/s); None where the switch has no NVLS or NCCL does not use it.")
    alltoall_busbw_gb_per_s: PositiveFloat | None = Field(
        None, description="NCCL all-to-all bus bandwidth per GPU inside the domain at large "
        "messages (GB/s), W∞ of formulas.collectives.alltoall_busbw; None: the ring's "
        "busbw_gb_per_s at every size. The fast link's only.")
    alltoall_ramp_us: PositiveFloat | None = Field(
        None, description="The all-to-all's ramp time τ (µs): its bus bandwidth is half W∞ at a "
        "buffer of W∞·τ per rank (formulas.collectives.alltoall_busbw); set with "
        "alltoall_busbw_gb_per_s.")

    @model_validator(mode="after")
    def _busbw_within_line_rate(self) -> Link:
        # an all-reduce's bus bandwidth is normalised so that a perfect ring reaches the link's
        # own rate and never more (NCCL's nccl-tests PERFORMANCE.md: busBw = algBw·2(n−1)/n);
        # only in-switch reduction (NVLS, its own field) goes beyond it
        if self.busbw_gb_per_s > self.gb_per_s:
            raise ValueError(f"busbw_gb_per_s ({self.busbw_gb_per_s:g}) is above the link's own "
                             f"rate gb_per_s ({self.gb_per_s:g}): an all-reduce's bus bandwidth "
                             "cannot exceed the link it runs on")
        if (self.alltoall_busbw_gb_per_s is None) != (self.alltoall_ramp_us is None):
            raise ValueError("alltoall_busbw_gb_per_s and alltoall_ramp_us go together: the "
                             "all-to-all's measured curve needs both (or neither: the ring's "
                             "busbw_gb_per_s at every size)")
        if (self.alltoall_busbw_gb_per_s or 0) > self.gb_per_s:
            raise ValueError(f"alltoall_busbw_gb_per_s ({self.alltoall_busbw_gb_per_s:g}) is above "
                             f"the link's own rate gb_per_s ({self.gb_per_s:g})")
        return self

    @property
    def busbw_bytes_per_s(self) -> float:
        return self.busbw_gb_per_s * GB

    @property
    def nvls_busbw_bytes_per_s(self) -> float | None:
        return None if self.nvls_busbw_gb_per_s is None else self.nvls_busbw_gb_per_s * GB

    @property
    def alltoall_share(self) -> float:
        """The all-to-all's W∞ over the ring's bus bandwidth (1 where unmeasured), so that a
        calibrated ring figure carries the all-to-all with it."""
        return (self.alltoall_busbw_gb_per_s or self.busbw_gb_per_s) / self.busbw_gb_per_s

    @property
    def alltoall_ramp_s(self) -> float:
        """The all-to-all's ramp time τ in seconds (0 where unmeasured: no ramp)."""
        return (self.alltoall_ramp_us or 0.0) * US

    @property
    def latency_s(self) -> float:
        return self.latency_us * US


ATTENTION_KERNELS = ("cudnn", "fa2", "flex")
"""The flash-attention kernel families a profile may measure (AttentionEfficiency's
<kernel>_forward / <kernel>_backward) and a framework runs (Framework.attention_kernel)."""


class AttentionEfficiency(_Strict):
    """Fractions of the 16-bit dense peak a flash-attention kernel family reaches on the GPU,
    forward and backward, measured (causal, head dim 128), each kernel's two together; None:
    the 16-bit GEMM figure. Megatron runs cudnn (Transformer Engine's fused attention),
    torchtitan flex, DeepSpeed (Megatron-DeepSpeed) fa2."""

    cudnn_forward: float | None = Field(None, gt=0, le=1, description="cuDNN's fused attention "
                                        "(Transformer Engine's default on Hopper and later), forward.")
    cudnn_backward: float | None = Field(None, gt=0, le=1, description="The same, backward.")
    fa2_forward: float | None = Field(None, gt=0, le=1, description="FlashAttention-2 "
                                      "(Megatron-DeepSpeed's --use-flash-attn-v2), forward.")
    fa2_backward: float | None = Field(None, gt=0, le=1, description="The same, backward.")
    flex_forward: float | None = Field(None, gt=0, le=1, description="PyTorch FlexAttention's "
                                       "Triton kernel (torchtitan's default), forward.")
    flex_backward: float | None = Field(None, gt=0, le=1, description="The same, backward.")

    @model_validator(mode="after")
    def _both_directions(self) -> AttentionEfficiency:
        # a backward left at the GEMM figure beside a measured forward would price the slower
        # direction faster than the faster one
        for kernel in ATTENTION_KERNELS:
            forward, backward = getattr(self, f"{kernel}_forward"), getattr(self, f"{kernel}_backward")
            if (forward is None) != (backward is None):
                given, missing = (("forward", "backward") if backward is None
                                  else ("backward", "forward"))
                raise ValueError(f"{kernel}_{given} is given without {kernel}_{missing}: give a "
                                 "kernel's forward and backward figures together, or neither")
        return self


class Efficiency(_Strict):
    """Achievable fractions of the peaks, each with its source in the profile file."""

    gemm: PerPrecision = Field(description="Fraction of dense peak training GEMMs reach.")
    hbm: float = Field(gt=0, le=1, description="Fraction of HBM bandwidth memory-bound kernels reach.")
    kernel_overhead_us: float = Field(
        4.0, ge=0, description="Fixed cost per kernel (launch + tail wave), µs; CUDA launch "
        "latency is ~3–5 µs without CUDA graphs (NVIDIA CUDA best-practices guide).")
    grouped_mm_16: float | None = Field(
        None, gt=0, le=1, description="Fraction of the 16-bit dense peak PyTorch's grouped GEMM "
        "(torch._grouped_mm, the routed experts' kernel of the frameworks that run one grouped "
        "kernel: torchtitan, DeepSpeed AutoEP) reaches at MoE shapes, measured; None: the "
        "16-bit GEMM figure.")
    attention: AttentionEfficiency = Field(
        default_factory=AttentionEfficiency, description="Flash-attention kernels' measured "
        "shares of the 16-bit peak, forward and backward, per kernel family (Megatron cudnn, "
        "torchtitan flex, DeepSpeed fa2).")


class Runtime(_Strict):
    reserved_gib: float = Field(ge=0, description="CUDA context outside the allocator (GiB); NCCL "
                                "buffers and workspaces are counted per plan.")
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


class Host(_Strict):
    """The host each GPU sits in, as one GPU sees it (offload to host memory): its share of the
    host's memory, its host↔GPU link, and its share of the host's DRAM bandwidth (what a CPU Adam
    step, memory-bound, runs at). Each number's source is beside it in the profile file."""

    memory_gib: PositiveFloat = Field(
        description="Host memory per GPU a training process can use for offload (GiB).")
    link_gb_per_s: PositiveFloat = Field(
        description="Achievable host↔GPU copy bandwidth per GPU, one direction (GB/s): PCIe or "
        "NVLink-C2C.")
    dram_gb_per_s: PositiveFloat = Field(
        description="Achievable host DRAM bandwidth, this GPU's share of the host's (GB/s).")
    nic_shares_link: bool = Field(
        True, description="The GPU's NICs reach its memory over the same host link (GPUDirect "
        "RDMA through the GPU's PCIe switch), so network traffic and host copies share it "
        "(false where host copies have a link of their own, e.g. NVLink-C2C).")

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * GIB

    @property
    def link_bytes_per_s(self) -> float:
        return self.link_gb_per_s * GB

    @property
    def dram_bytes_per_s(self) -> float:
        return self.dram_gb_per_s * GB


class Storage(_Strict):
    """Where checkpoints go: each GPU's share of the shared file system's bandwidth when every GPU
    of the job writes (or reads) its shard at once — the storage's aggregate over the GPUs it is
    sized for. Each number's source is beside it in the profile file."""

    write_gb_per_s_per_gpu: PositiveFloat = Field(
        description="Checkpoint write bandwidth per GPU, all GPUs writing at once (GB/s): the "
        "storage's aggregate write bandwidth over the GPUs it serves.")
    read_gb_per_s_per_gpu: PositiveFloat | None = Field(
        None, description="Checkpoint read bandwidth per GPU on a restart (GB/s); None: the "
        "write figure.")

    @property
    def write_bytes_per_s(self) -> float:
        return self.write_gb_per_s_per_gpu * GB

    @property
    def read_bytes_per_s(self) -> float:
        return (self.read_gb_per_s_per_gpu or self.write_gb_per_s_per_gpu) * GB


DEFAULT_STORAGE = Storage(write_gb_per_s_per_gpu=REL.STORAGE_WRITE_GB_PER_S_PER_GPU)
"""A profile without a [storage] section: Llama 3's Tectonic figure per GPU
(formulas/reliability.py)."""


class Reliability(_Strict):
    """How often the cluster interrupts a job and how long a restart takes (goodput,
    formulas/reliability.py); the defaults are the published figures there."""

    failures_per_gpu_hour: PositiveFloat = Field(
        REL.FAILURES_PER_GPU_HOUR, le=1, description="Unexpected job interruptions per GPU-hour "
        "(default: Llama 3's 419 in 54 days on 16,384 GPUs, Dubey et al. 2024 §3.3.4).")
    restart_s: float = Field(
        REL.RESTART_S, ge=0, le=86400, description="Seconds from an interruption to training "
        "again, before the checkpoint is read back (reschedule, rendezvous, NCCL set-up).")


MAX_HBM_GIB = 2048
"""The most memory per GPU a profile may claim: 7× the largest HBM shipped (288 GB: NVIDIA B300,
AMD MI355X), so that a unit slip (MiB for GiB: 79,600) is refused, not planned with."""


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
    host: Host | None = Field(
        None, description="Host memory, link and DRAM per GPU (offload); None: offload is not "
        "planned on this profile.")
    storage: Storage | None = Field(
        None, description="Checkpoint storage bandwidth per GPU (goodput); None: Llama 3's "
        "figure (formulas.reliability.STORAGE_WRITE_GB_PER_S_PER_GPU).")
    reliability: Reliability = Reliability()

    @model_validator(mode="after")
    def _topology_fits(self) -> HardwareProfile:
        if self.hbm_gib > MAX_HBM_GIB:
            raise ValueError(f"hbm_gib = {self.hbm_gib:,g} GiB per GPU is not a GPU's memory (the "
                             f"largest shipped holds 288 GB; plan3d accepts up to {MAX_HBM_GIB:,} "
                             "GiB): a unit slip? hbm_gib is GiB per GPU")
        if self.network.alltoall_busbw_gb_per_s is not None:
            raise ValueError("network.alltoall_busbw_gb_per_s: the all-to-all's measured curve is "
                             "the NVLink domain's; set it under [fast]")
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

    @property
    def checkpoint_storage(self) -> Storage:
        return self.storage or DEFAULT_STORAGE


# --------------------------------------------------------------------------------------------
# Plan


def adam_moments_problem(moments: str, framework: str, zero: int | None = 1,
                         offload_optimizer: float | None = 0) -> str | None:
    """Why Adam's moments cannot be kept in `moments` under the framework, ZeRO stage and
    optimizer offload (None: they can). bf16 is Megatron's precision-aware optimizer: it runs
    "only ... with distributed optimizer" (core/optimizer/__init__.py l.1057 @ d98e8a64dd), and
    the HybridDeviceOptimizer that --offload-optimizer runs is built without exp_avg_dtype
    (l.534), its torch AdamW moments fp32; torchtitan and DeepSpeed have no such setting."""
    if moments == "fp32":
        return None
    if framework != "megatron":
        return (f"--adam-moments {moments} is Megatron's precision-aware optimizer "
                f"(--exp-avg-dtype/--exp-avg-sq-dtype); {framework} keeps Adam's moments in "
                "fp32: plan with --framework megatron, or leave --adam-moments out")
    if zero is not None and zero != 1:
        return (f"--adam-moments {moments}: Megatron's precision-aware optimizer runs only on "
                f"its distributed optimizer: --zero 1 (got --zero {zero})")
    if offload_optimizer:
        return (f"--adam-moments {moments}: Megatron's optimizer offload (HybridDeviceOptimizer) "
                "keeps Adam's moments in fp32: leave out --offload-optimizer or --adam-moments")
    return None


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
    fp8_recipe: QuantRecipe | None = Field(
        None, description="fp8 plans: the scaling recipe (None: the framework's default, "
        "Megatron delayed, torchtitan current/tensorwise); nvfp4 plans run the nvfp4 recipe.")
    fp8_param_gather: bool = Field(
        False, description="The quantised weights are the parameters (no 16-bit copy) and are "
        "gathered quantised (Megatron --fp8-param-gather; torchtitan's "
        "enable_fsdp_float8_all_gather).")
    compile_loss: bool = Field(
        False, description="torchtitan: the loss is compiled (compile.components has 'loss'), "
        "its peak the 16-bit logits and their 16-bit gradient instead of eager PyTorch's three "
        "fp32 vocabulary-wide tensors (--compile-loss; torchtitan only).")
    torchtitan_flex_ac: bool = Field(
        False, description="torchtitan before v0.2.1 on its flex-attention flavours (DeepSeek-V3 "
        "16B/236B/671B, model not compiled): selective recompute as full AC on the attention "
        "and op SAC on the MoE (_apply_op_sac_to_transformer_block_with_flex @ 99fee810b); "
        "False: the whole block in op SAC, as 0.2.2 and 0.3.0 (--torchtitan-flex-ac; torchtitan "
        "only).")
    recompute_layers: NonNegativeInt = Field(
        0, description="With full recompute: only this many layers of each pipeline stage are "
        "recomputed, the rest keep every activation (Megatron --recompute-method block "
        "--recompute-num-layers N); 0: all of them.")
    recompute_group: PositiveInt = Field(
        1, description="With full recompute: layers checkpointed together as one unit, only the "
        "unit's input kept and the whole unit rerun at its backward (Megatron --recompute-method "
        "uniform --recompute-num-layers N); 1: every layer its own unit.")
    distribute_saved_activations: bool = Field(
        False, description="With full recompute and no sequence parallelism: each checkpointed "
        "layer input split over the tp ranks (Megatron --distribute-saved-activations; DeepSpeed "
        "activation_checkpointing.partition_activations).")
    contiguous_checkpoints: bool = Field(
        False, description="DeepSpeed activation_checkpointing.contiguous_memory_optimization: "
        "the partitioned checkpoints copied into buffers allocated ahead for number_checkpoints "
        "= ⌈L/g⌉ of them (needs distribute_saved_activations).")
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        None, description="With selective recompute: the submodules checkpointed (Megatron "
        "--recompute-modules; None: the framework's default, the attention core).")
    grad_dtype: Literal["fp32", "bf16"] = "fp32"
    adam_moments: Literal["fp32", "bf16"] = Field(
        "fp32", description="Adam's first and second moments' dtype: bf16 is Megatron's "
        "precision-aware optimizer (--use-precision-aware-optimizer --exp-avg-dtype bf16 "
        "--exp-avg-sq-dtype bf16), on its distributed optimizer (ZeRO-1) without optimizer "
        "offload; Megatron only.")
    attention: Attention = Attention.FLASH
    overlap_grad_reduce: bool = True
    framework: Literal["megatron", "torchtitan", "deepspeed"] = Field(
        "megatron", description="The training framework the plan is costed for and runs under "
        "(planner/frameworks/).")
    # ---- expert parallelism (MoE models; the defaults leave a dense model's plan as it was) ----
    ep: PositiveInt = Field(1, description="Expert parallel: the routed experts split ep ways.")
    etp: PositiveInt = Field(1, description="Expert tensor parallel: each expert's matrices split "
                             "etp ways (Megatron's --expert-tensor-parallel-size).")
    moe_imbalance: float | None = Field(
        None, ge=1, le=64, description="Busiest expert-parallel rank's routed tokens over the "
        "mean; None: from the model's balancing and the batch (formulas.moe_layer.rank_load).")
    moe_forced_balance: bool = Field(
        False, description="Routing forced to balance (Megatron --moe-router-force-load-"
        "balancing, a benchmark setting): every rank gets the mean, λ = 1.")
    moe_dispatcher: Literal["alltoall", "allgather", "deepep"] | None = Field(
        None, description="How tokens reach their experts: NCCL all-to-all, all-gather, or "
        "DeepEP's node-limited kernels (Megatron --moe-token-dispatcher-type flex with the "
        "deepep or hybridep backend); None: the framework's default (all-to-all).")
    moe_capacity_factor: float | None = Field(
        None, gt=0, le=64, description="Token dropping at this capacity factor: an expert takes at "
        "most this multiple of its mean tokens, which bounds the imbalance (None: dropless).")
    moe_shared_expert_overlap: bool = Field(
        False, description="Shared experts computed beside the dispatch and combine (Megatron "
        "--moe-shared-expert-overlap; the alltoall or deepep dispatcher).")
    moe_permute_fusion: bool = Field(
        True, description="Megatron's fused token permutation and un-permutation (Transformer "
        "Engine's kernels, --moe-permute-fusion, written by --emit); False: Megatron-Core's "
        "un-fused path, whose un-permutation scatter-adds atomically "
        "(formulas.moe_layer.atomic_scatter_excess_s). Other frameworks have no such switch.")
    mtp: bool = Field(
        True, description="Train the model's multi-token-prediction modules (Megatron "
        "--mtp-num-layers); False: without them, as a run that leaves them out.")
    moe_a2a_overlap: bool = Field(
        False, description="All-to-all overlapped with another micro-batch's compute "
        "(DeepSeek-V3 DualPipe §3.2.1; Megatron --overlap-moe-expert-parallel-comm).")
    dp_shard: PositiveInt | None = Field(
        None, description="Hybrid sharding (HSDP): ZeRO shards over dp_shard·cp ranks and "
        "replicates dp/dp_shard times, the gradients reduce-scattered in the shard group and "
        "all-reduced across the replicas (None: the whole dp·cp group shards).")
    # ---- offload to host memory (the defaults offload nothing: every plan as it was) ----------
    offload_optimizer: float = Field(
        0.0, ge=0, le=1, description="Fraction of the optimizer states (fp32 master, Adam m, v) "
        "kept in host memory and stepped by the CPU (Megatron --optimizer-offload-fraction; "
        "DeepSpeed offload_optimizer, ratio under ZeRO-3).")
    offload_params: bool = Field(
        False, description="The sharded parameters, gradients and optimizer states live in host "
        "memory, the optimizer steps on the CPU (FSDP2 CPUOffloadPolicy; DeepSpeed ZeRO-3 "
        "offload_param); needs offload_optimizer = 1.")
    offload_activations: NonNegativeInt = Field(
        0, description="Layers per GPU whose saved activations are copied to host memory in the "
        "forward and back before their backward (Megatron --cpu-offloading-num-layers).")

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        """Every field, less adam_moments at its default (fp32): a plan's dump (`--json`'s
        config) says it only where the plan keeps Adam's moments in bf16, so plans written before
        the field read the same."""
        data = handler(self)
        if self.adam_moments == "fp32" and isinstance(data, dict):
            data.pop("adam_moments", None)
        return data

    @model_validator(mode="after")
    def _recipe_consistent(self) -> PlanConfig:
        if self.fp8_recipe is not None and self.precision is not Precision.FP8:
            raise ValueError(f"fp8_recipe {self.fp8_recipe.value} needs precision fp8, "
                             f"got {self.precision.value}")
        if self.fp8_param_gather and self.precision not in LOW_PRECISION:
            raise ValueError("fp8_param_gather needs precision fp8 or nvfp4")
        problem = adam_moments_problem(self.adam_moments, self.framework,
                                       int(self.zero_stage), self.offload_optimizer)
        if problem:
            raise ValueError(problem)
        if self.recompute_layers and self.recompute is not Recompute.FULL:
            raise ValueError(f"recompute_layers needs recompute full, got {self.recompute.value}")
        if self.recompute_group > 1 and (self.recompute is not Recompute.FULL
                                         or self.recompute_layers):
            raise ValueError("recompute_group needs recompute full over every layer (Megatron's "
                             "uniform method; recompute_layers is the block method)")
        if self.distribute_saved_activations and (self.recompute is not Recompute.FULL
                                                  or self.sequence_parallel):
            raise ValueError("distribute_saved_activations needs recompute full without "
                             "sequence parallelism (transformer_config.py l.1934 @ d98e8a6)")
        if self.contiguous_checkpoints and not self.distribute_saved_activations:
            raise ValueError("contiguous_checkpoints needs distribute_saved_activations "
                             "(DeepSpeed: contiguous_memory_optimization only with "
                             "partition_activations, checkpointing.py configure @ edaa722)")
        if self.recompute_modules is not None and self.recompute is not Recompute.SELECTIVE:
            raise ValueError(f"recompute_modules needs recompute selective, got "
                             f"{self.recompute.value}")
        return self

    @model_validator(mode="after")
    def _compile_loss_torchtitan(self) -> PlanConfig:
        # Megatron's and DeepSpeed's plans have no switch that compiles the loss alone
        if self.compile_loss and self.framework != "torchtitan":
            raise ValueError(f"compile_loss is torchtitan's compile.components ['loss']; "
                             f"{self.framework} has no such setting (plan it with --framework "
                             "torchtitan, or leave --compile-loss out)")
        return self

    @model_validator(mode="after")
    def _offload_consistent(self) -> PlanConfig:
        if self.offload_params and self.offload_optimizer != 1:
            raise ValueError(f"offload_params moves the optimizer states to the host too: "
                             f"offload_optimizer must be 1, got {self.offload_optimizer:g}")
        return self

    @model_validator(mode="after")
    def _shared_overlap_dispatcher(self) -> PlanConfig:
        # Megatron-Core: "moe_shared_expert_overlap only works with alltoall or flex token
        # dispatcher" (transformer_config.py __post_init__ l.1820-1826 @ d98e8a64dd; flex is
        # plan3d's deepep)
        if self.moe_shared_expert_overlap and self.moe_dispatcher == "allgather":
            raise ValueError("moe_shared_expert_overlap runs with the alltoall or deepep "
                             "dispatcher, not allgather")
        return self

    @property
    def recompute_label(self) -> str:
        """full, full4 (4 layers a stage recomputed), selective, selective[core_attn+mlp], none;
        full+dist where the checkpoints are split over the tp ranks (fit)."""
        if self.distribute_saved_activations:
            return self._recompute_level() + "+dist"
        return self._recompute_level()

    def _recompute_level(self) -> str:
        if self.recompute_layers:
            return f"full{self.recompute_layers}"
        if self.recompute_group > 1:
            return f"full/{self.recompute_group}"
        if self.recompute_modules is not None:
            return f"selective[{'+'.join(m.value for m in self.recompute_modules)}]"
        return self.recompute.value

    @property
    def offload(self) -> bool:
        """Whether the plan offloads anything to host memory."""
        return self.offload_optimizer > 0 or self.offload_params or self.offload_activations > 0

    @property
    def offload_label(self) -> list[str]:
        """`offp` (parameters, gradients and optimizer on the host), `off0.5` (half the optimizer
        states), `offa4` (4 layers' activations); nothing without offload."""
        parts = []
        if self.offload_params:
            parts.append("offp")
        elif self.offload_optimizer > 0:
            parts.append(f"off{self.offload_optimizer:g}")
        if self.offload_activations:
            parts.append(f"offa{self.offload_activations}")
        return parts

    # ---- context-parallel kind (cp-kind; None keeps the framework's own: planner.frameworks) --
    cp_kind: ContextKind | None = Field(
        None, description="How the cp ranks exchange attention inputs: p2p (ring), a2a "
        "(all-to-all, Ulysses) or a2a+p2p (hierarchical); None: the framework's default "
        "(Megatron, torchtitan: ring; DeepSpeed: all-to-all). Also accepts ring, all-to-all, "
        "ulysses, hierarchical.")
    cp_a2a: PositiveInt | None = Field(
        None, description="Hierarchical kind: the all-to-all group, consecutive ranks inside each "
        "cp group (Megatron's first --hierarchical-context-parallel-sizes value); the ring runs "
        "over cp/cp_a2a of them. A divisor of cp between 2 and cp/2.")

    @field_validator("cp_kind", mode="before")
    @classmethod
    def _cp_kind_name(cls, value):
        """The kind by any of its names (ring, all-to-all, ulysses, hierarchical, or Megatron's
        --cp-comm-type value)."""
        plain = isinstance(value, str) and not isinstance(value, ContextKind)
        return context_kind_named(value) if plain else value

    @model_validator(mode="after")
    def _cp_kind_fits(self) -> PlanConfig:
        problem = cp_kind_problem(self.cp_kind, self.cp, self.cp_a2a)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def cp_kind_label(self) -> str:
        """The kind after cp in a label: `a2a` (all-to-all), `h2` (hierarchical, all-to-all
        over 2), nothing for the ring or the framework's default (cp_kind None) or cp = 1."""
        if self.cp == 1 or self.cp_kind in (None, ContextKind.RING):
            return ""
        return "a2a" if self.cp_kind is ContextKind.ALL_TO_ALL else f"h{self.cp_a2a}"

    @property
    def dp_replicate(self) -> int:
        """Hybrid sharding's replicas: dp/dp_shard (1 when the whole dp·cp group shards)."""
        return self.dp // (self.dp_shard or self.dp)

    @property
    def hybrid_label(self) -> list[str]:
        """`hsdp8` when the plan shards over 8 of its dp ranks (dp_shard < dp), else nothing."""
        return [f"hsdp{self.dp_shard}"] if self.dp_shard and self.dp_shard < self.dp else []

    @property
    def moe_load_factor(self) -> float | None:
        """The imbalance the plan fixes (None: the cost model derives it, capped there by the
        capacity factor when tokens drop)."""
        if self.moe_forced_balance:
            return 1.0
        if self.moe_imbalance is None or self.moe_capacity_factor is None:
            return self.moe_imbalance
        return min(self.moe_imbalance, self.moe_capacity_factor)

    @property
    def edp(self) -> int:
        """Expert data parallel: dp·cp·tp / (ep·etp) (Megatron-Core parallel folding)."""
        return self.dp * self.cp * self.tp // (self.ep * self.etp)

    @property
    def n_gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def short_label(self, *, dp: bool = True) -> str:
        """The layout in a few characters, as tables show it: dp64 tp4 pp2 [cp2] [v8] [ep8 etp2]
        [zbv] [mbs2] z2 [sel|full] [nosp] — the schedule when not 1F1B/interleaved, mbs when not
        1, recompute when not none, nosp when tp > 1 without sequence parallelism; without dp
        (the rest of the GPUs) when dp=False."""
        parts = ([f"dp{self.dp}"] if dp else []) + self.hybrid_label + [f"tp{self.tp}",
                                                                       f"pp{self.pp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}{self.cp_kind_label}")
        if self.vpp > 1:
            parts.append(f"v{self.vpp}")
        if self.ep > 1 or self.etp > 1:
            parts.append(f"ep{self.ep}" + (f" etp{self.etp}" if self.etp > 1 else "")
                         + (" deepep" if self.moe_dispatcher == "deepep" else "")
                         + (" ovl" if self.moe_a2a_overlap else ""))
        if self.pp > 1 and self.schedule not in (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED):
            parts.append(self.schedule.value)
        if self.mbs != 1:
            parts.append(f"mbs{self.mbs}")
        parts.append(f"z{int(self.zero_stage)}")
        short = {"selective": "sel", "full": "full", "none": ""}[self.recompute.value]
        if self.recompute_layers:  # fit: full4 = 4 layers of each stage recomputed
            short = f"full{self.recompute_layers}"
        if self.recompute_group > 1:  # fit: full/4 = groups of 4 layers checkpointed together
            short = f"full/{self.recompute_group}"
        if self.recompute_modules is not None:  # fit: sel+mlp = core_attn and mlp checkpointed
            short = "sel" + "".join(f"+{m.value}" for m in self.recompute_modules
                                    if m is not RecomputeModule.CORE_ATTN)
            if RecomputeModule.CORE_ATTN not in self.recompute_modules:  # the long spelling
                short = self._recompute_level()  # selective[layernorm+mla_up_proj]
        if short and self.distribute_saved_activations:  # fit: full+dist, split over tp
            short += "+dist"
        if short:
            parts.append(short)
        if self.fp8_recipe is not None or self.fp8_param_gather:  # fit
            parts.append((self.fp8_recipe.value if self.fp8_recipe else "fp8")
                         + ("-pg" if self.fp8_param_gather else ""))
        if self.tp > 1 and not self.sequence_parallel:
            parts.append("nosp")
        parts += self.offload_label  # offload
        return " ".join(parts)

    def label(self, *, batch: bool = True, precision: bool = False) -> str:
        """The layout in one short line, as tables and reasons quote it:
        dp8 tp8 pp4 [cp2] [v2] [zbv] mbs1 [gbs512 s8192] z1 selective [bf16] [sp]."""
        parts = [f"dp{self.dp}", *self.hybrid_label, f"tp{self.tp}", f"pp{self.pp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}{self.cp_kind_label}")
        if self.vpp > 1:
            parts.append(f"v{self.vpp}")
        if self.pp > 1 and self.schedule not in (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED):
            parts.append(self.schedule.value)
        if self.ep > 1 or self.etp > 1:
            parts.append(f"ep{self.ep}" + (f" etp{self.etp}" if self.etp > 1 else "")
                         + (" deepep" if self.moe_dispatcher == "deepep" else "")
                         + (" ovl" if self.moe_a2a_overlap else ""))
        parts.append(f"mbs{self.mbs}")
        if batch:
            parts += [f"gbs{self.gbs}", f"s{self.seq_len}"]
        parts += [f"z{int(self.zero_stage)}", self.recompute_label]
        if precision:
            parts.append(self.precision.value + (f"-{self.fp8_recipe.value}" if self.fp8_recipe
                                                 else "") + ("-pg" if self.fp8_param_gather
                                                             else ""))
        if self.sequence_parallel:
            parts.append("sp")
        parts += self.offload_label  # offload
        return " ".join(parts)


# --------------------------------------------------------------------------------------------
# Context-parallel kinds (cp-kind)

CP_KIND_NAMES = {
    "ring": ContextKind.RING, "p2p": ContextKind.RING,
    "a2a": ContextKind.ALL_TO_ALL, "all-to-all": ContextKind.ALL_TO_ALL,
    "alltoall": ContextKind.ALL_TO_ALL, "ulysses": ContextKind.ALL_TO_ALL,
    "hierarchical": ContextKind.HIERARCHICAL, "a2a+p2p": ContextKind.HIERARCHICAL,
}
"""Every name a context-parallel kind goes by: plan3d's (ring, all-to-all, hierarchical), the
paper's (Ulysses) and Megatron's --cp-comm-type values (p2p, a2a, a2a+p2p)."""


def context_kind_named(name: str) -> ContextKind:
    """The kind called `name` (CP_KIND_NAMES); a ValueError naming the choices otherwise."""
    key = str(name).strip().lower()
    if key not in CP_KIND_NAMES:
        raise ValueError(f"unknown context-parallel kind {name!r}: give ring, a2a or hierarchical")
    return CP_KIND_NAMES[key]


def cp_kind_problem(kind: ContextKind | None, cp: int, cp_a2a: int | None) -> str:
    """What is wrong with a kind, cp and all-to-all group together, in one line ('' if
    nothing): the group belongs to the hierarchical kind alone; that kind needs it, a divisor of
    cp strictly between 1 and cp (Megatron asserts prod(--hierarchical-context-parallel-sizes)
    = cp: megatron/training/arguments.py @ d98e8a64dd l.580-585); 1 is the ring and cp the plain
    all-to-all, which have kinds of their own."""
    if cp_a2a is not None and kind is not ContextKind.HIERARCHICAL:
        return (f"cp_a2a {cp_a2a} is the all-to-all group of the hierarchical kind; give "
                "cp_kind hierarchical, or leave cp_a2a out")
    if kind is not ContextKind.HIERARCHICAL or (cp == 1 and cp_a2a is None):
        return ""
    if cp_a2a is None and not [d for d in range(2, cp) if cp % d == 0]:
        return (f"the hierarchical kind needs an all-to-all group (cp_a2a) strictly between 1 "
                f"and cp, and cp = {cp} has none: use the ring or a2a kind")
    if cp_a2a is None:
        return (f"the hierarchical kind needs cp_a2a, its all-to-all group: a divisor of cp = "
                f"{cp} between 2 and {cp // 2}")
    if cp % cp_a2a or not 1 < cp_a2a < cp:
        inner = [d for d in range(2, cp) if cp % d == 0]
        hint = (f"one of {', '.join(map(str, inner))}" if inner else
                "none exists: use the ring or a2a kind")
        return (f"cp_a2a {cp_a2a} must divide cp = {cp} and lie strictly between 1 (the ring) "
                f"and cp (plain all-to-all): {hint}")
    return ""
