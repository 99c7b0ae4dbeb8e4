"""The cost model's inputs: a plan's numbers `x` (model, hardware, layout, dtypes; floats for one
plan, float64 arrays for the search, sympy symbols for explain) and its discrete choices `c`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from types import SimpleNamespace

import numpy as np

from ..formulas import _ops
from ..formulas import collectives as K
from ..formulas import comm as C
from ..formulas import flops as F
from ..formulas import host as HOST
from ..formulas import moe_layer as ML
from ..formulas import params as P
from ..formulas import quantization as Q
from ..formulas import recompute as RC
from ..formulas import reliability as R
from ..formulas import runtime as RT
from ..formulas import timing as T
from ..formulas.choices import (
    Attention,
    ContextKind,
    Precision,
    QuantRecipe,
    Recompute,
    RecomputeModule,
    Schedule,
    ZeroStage,
)
from ..formulas.moe_layer import Dispatcher
from ..frameworks import FRAMEWORKS
from ..frameworks.base import Framework
from ..schema import HardwareProfile, ModelSpec, PlanConfig
from . import moe as MOE
from .nccl import Cluster, generation_of

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
ACT_BYTES = 2  # 16-bit activations (fp8 GEMMs still keep most saved tensors in 16-bit)
WEIGHT_BYTES = 2  # 16-bit weights; under fp8, Transformer Engine keeps them in 16-bit and casts


@dataclass(frozen=True)
class Choices:
    """The discrete half of a plan: each picks which expressions are built."""

    zero_stage: ZeroStage
    recompute: Recompute
    schedule: Schedule
    sequence_parallel: bool
    attention: Attention
    framework: Framework = FRAMEWORKS["megatron"]
    cp_kind: ContextKind | None = None  # cp-kind: None is the framework's default kind
    # offload: whether the plan offloads anything to host memory (then the offload expressions
    # are built; otherwise none), and whether the parameters live there
    offload: bool = False
    offload_params: bool = False
    # fit: selective recompute's checkpointed submodules (None: the attention core alone)
    recompute_modules: tuple[RecomputeModule, ...] | None = None
    moe_dispatcher: Dispatcher = MOE.DEFAULT_DISPATCHER  # moe: how tokens reach their experts
    moe_permute_fusion: bool = True  # moe: Megatron's fused token (un)permutation kernels
    compile_loss: bool = False  # fit: torchtitan's torch.compile of the loss alone
    torchtitan_flex_ac: bool = False  # torchtitan < v0.2.1: attention full AC, MoE op SAC
    adam_moments: str = "fp32"  # Adam's m and v dtype (Megatron's precision-aware optimizer)

    @classmethod
    def of(cls, config: PlanConfig) -> Choices:
        own = ("framework", "moe_dispatcher")
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls) if f.name not in own},
                   framework=FRAMEWORKS[config.framework],
                   moe_dispatcher=MOE.dispatcher_of(config.moe_dispatcher))


def model_states(c: Choices, g_bytes):
    """The plan's ModelStates from its framework: the ZeRO stage, the gradient bytes, and Adam's
    moments in bf16 where the plan asks (Megatron's --exp-avg-dtype/--exp-avg-sq-dtype; the
    other frameworks are refused it, schema.PlanConfig)."""
    states, moments = c.framework.memory.states, c.adam_moments
    if moments == "fp32":
        return states(c.zero_stage, g_bytes)
    return states(c.zero_stage, g_bytes, moment_bytes=BYTES[moments])


def model_numbers(model: ModelSpec, seq_len: int | None = None) -> dict:
    """A model's numbers under the names plan_costs reads. A learned position table holds
    max(positions, seq_len) rows: the job runs sequences of seq_len (Megatron's emitted
    --max-position-embeddings is that maximum)."""
    positions = model.positions if seq_len is None else max(model.positions, seq_len)
    return dict(
        n_layers=model.n_layers, hidden=model.hidden, n_heads=model.n_heads,
        n_kv_heads=model.kv_heads, head_dim=model.dim_head, ffn=model.ffn, vocab=model.vocab,
        n_mlp=model.n_mlp_matrices, bias=int(model.bias), norm_width=model.norm_width,
        learned_positions=model.learned_positions, positions=positions,
        tied=int(model.tied_embeddings), dropout=int(model.dropout),
        rotary=1 - model.learned_positions, n_experts=model.n_experts, top_k=model.top_k,
        router_experts=model.router_experts,
        **op_sac_numbers(model),  # torchtitan's per-op selective AC: the matmuls it reruns
        **moe_numbers(model),  # moe: MoE/MLA numbers, neutral for a dense model
    )


def block_matmul_calls(model: ModelSpec) -> tuple[list, list, list]:
    """A block's matmul weights (h × out, per token) in the order its forward calls them, as
    torchtitan's modules do (llama3/model/model.py, deepseek_v3/model/model.py @ 99fee810b):
    attention — wq, wk, wv, wo; MLA: wq (or wq_a, wq_b), wkv_a, wkv_b, wo —; a dense MLP's
    w1, w3, w2 (w1, w2 ungated); the shared experts' one MLP of width n_s·f_s likewise.
    Returns (attention, MLP, shared experts)."""
    h, a = model.hidden, model.n_heads
    if model.is_mla:
        d_qk = model.qk_nope_head_dim + model.qk_rope_head_dim
        q = ([h * model.q_lora_rank, model.q_lora_rank * a * d_qk]
             if model.q_lora_rank is not None else [h * a * d_qk])
        r_kv = model.kv_lora_rank
        attention = q + [h * (r_kv + model.qk_rope_head_dim),
                         r_kv * a * (model.qk_nope_head_dim + model.v_head_dim),
                         a * model.v_head_dim * h]
    else:
        d, k = model.dim_head, model.kv_heads
        attention = [h * a * d, h * k * d, h * k * d, a * d * h]
    n = model.n_mlp_matrices
    shared = (P.shared_expert_params(h, model.shared_expert_ffn, n, model.n_shared_experts) / n
              if model.n_shared_experts else 0)
    return attention, [h * model.ffn] * n, [shared] * n if shared else []


def op_sac_numbers(model: ModelSpec) -> dict:
    """The matmul weights a dense and a MoE layer rerun under torchtitan's per-op selective AC
    (formulas.recompute.op_sac_recomputed_weights): the block's mms in call order, a MoE
    layer's router gate forced and its k routed experts' grouped GEMMs, the whole block one
    region (torchtitan >= v0.2.1). The `_flex` pair is torchtitan before v0.2.1 on its
    DeepSeek-V3 (MLA) flavours, whose flex attention wrapped the blocks apart: the attention in
    full AC (every attention weight rerun) and the MLP or MoE in op SAC, counted from its own
    first mm (formulas.recompute.op_sac_regions); for other models the same as the default."""
    attention, mlp, shared = block_matmul_calls(model)
    gate = P.router_params(model.hidden, model.router_experts)
    grouped = model.top_k * model.n_mlp_matrices * model.hidden * model.expert_ffn
    out = {}
    for suffix, flex in (("", False), ("_flex", True)):
        full = sum(attention) if model.is_mla and flex else 0
        counted = [] if model.is_mla and flex else attention
        moe = full + RC.op_sac_recomputed_weights(counted + shared, gate, grouped)
        out["sac_dense_matmul" + suffix] = full + RC.op_sac_recomputed_weights(counted + mlp)
        out["sac_moe_matmul" + suffix] = moe if model.is_moe else 0
    return out


def moe_numbers(model: ModelSpec) -> dict:
    """A MoE or MLA model's numbers (moe helper). `moe_mla` = 1 sends plan_costs down the MoE/MLA
    expressions; for a dense multi-head model every term built from these is multiplied by 0 or
    selected away, so its numbers do not change."""
    attn_sharded, attn_replicated = model.attention_params_split
    h, n, bias, nw = model.hidden, model.n_mlp_matrices, int(model.bias), model.norm_width
    shared = P.shared_expert_params(h, model.shared_expert_ffn, n, model.n_shared_experts)
    mla = model.is_mla
    attn_matmul = (F.mla_matmul_weights(h, model.n_heads, model.q_lora_rank or 0,
                                        model.kv_lora_rank, model.qk_nope_head_dim,
                                        model.qk_rope_head_dim, model.v_head_dim,
                                        int(model.q_lora_rank is not None))
                   if mla else P.attention_weight_params(h, model.n_heads, model.kv_heads,
                                                         model.dim_head))
    return dict(
        moe_mla=int(model.is_moe or mla), moe=int(model.is_moe), mla=int(mla),
        total_params=model.n_params, n_moe_layers=model.n_moe_layers,
        first_k_dense=model.first_k_dense, moe_freq=model.moe_layer_freq,
        moe_phase=model.moe_layer_phase,
        # per layer, what TP splits and what it replicates (norms, row biases, MLA down-projections,
        # the router); a MoE layer's routed experts apart, split ep·etp ways
        dense_sharded=attn_sharded + n * h * model.ffn + bias * (n - 1) * model.ffn,
        dense_replicated=attn_replicated + bias * h + P.norm_params(h, nw),
        moe_sharded=attn_sharded + shared,
        moe_replicated=attn_replicated + P.router_params(h, model.router_experts)
        + P.norm_params(h, nw),
        expert_layer=model.n_experts * P.expert_params(h, model.expert_ffn, n, bias),
        expert_ffn=model.expert_ffn, n_shared=model.n_shared_experts,
        shared_ffn=model.shared_expert_ffn,
        # weights a token meets (FLOPs): attention, the dense MLP, one expert, the shared experts
        attn_matmul=attn_matmul, dense_matmul=n * h * model.ffn,
        expert_matmul=n * h * model.expert_ffn, shared_matmul=shared,
        # the MLP GEMMs beside the experts that the non-expert wave quantisation weighs
        ne_ffn=model.n_shared_experts * model.shared_expert_ffn if model.n_shared_experts
        else model.ffn,
        mtp=model.mtp_layers,  # multi-token prediction modules (formulas/moe_mtp.py)
        q_rank=model.q_lora_rank or 0, kv_rank=model.kv_lora_rank or 0,
        rope_dim=model.qk_rope_head_dim or 0, v_dim=model.value_head_dim,
        **MOE.model_numbers(model),  # the balancing's skew, group-limited routing
    )


def attention_precision(precision: Precision) -> Precision:
    """The precision attention and the LM head run in: 16-bit even in an fp8 or nvfp4 plan
    (Transformer Engine casts only the linear layers)."""
    return Precision.BF16 if precision in (Precision.FP8, Precision.NVFP4) else precision


def effective_recipe(framework: Framework, precision: Precision,
                     fp8_recipe: QuantRecipe | None) -> QuantRecipe | None:
    """The recipe a plan runs: nvfp4 for an nvfp4 plan, the asked one or the framework's default
    for an fp8 plan, none otherwise."""
    if precision is Precision.NVFP4:
        return QuantRecipe.NVFP4
    if precision is Precision.FP8:
        return fp8_recipe or framework.memory.default_fp8_recipe
    return None


def precision_numbers(framework: Framework, hw: HardwareProfile, precision: Precision,
                      fp8_recipe: QuantRecipe | None = None, param_gather: bool = False) -> dict:
    """fit: what the plan's low-precision recipe keeps, as numbers (formulas.quantization):
    fp8 = 1 for an fp8/nvfp4 plan; w_copy, bytes per linear parameter of the quantised weight
    copies (2 on Hopper, 1 on Blackwell for per-tensor FP8, whose GEMMs there take non-TN
    layouts — the GPUs with FP4 tensor cores); e_saved, bytes per element of a saved linear
    input; amax = 1 for delayed scaling's history; quant_passes, the extra reads a cast needs;
    param_gather, 1 with --fp8-param-gather."""
    recipe = effective_recipe(framework, precision, fp8_recipe)
    if recipe is None:
        return dict(fp8=0, w_copy=0.0, e_saved=float(ACT_BYTES), amax=0, quant_passes=0,
                    param_gather=0, moe_align=1)
    non_tn = hw.peak_tflops.fp4 is not None
    # moe: the rows each expert's grouped-GEMM input is padded to a multiple of (16; 32 for
    # MXFP8 and NVFP4: formulas.moe_layer.grouped_gemm_align_rows)
    align = ML.grouped_gemm_align_rows(1, int(recipe in (QuantRecipe.MXFP8, QuantRecipe.NVFP4)))
    return dict(fp8=1, moe_align=align, w_copy=Q.weight_copy_bytes_per_param(recipe, non_tn),
                e_saved=Q.saved_input_bytes_per_element(recipe),
                amax=int(recipe is QuantRecipe.DELAYED), quant_passes=Q.amax_passes(recipe),
                param_gather=int(param_gather))


def hardware_numbers(hw: HardwareProfile, precision: Precision) -> dict:
    """A profile's numbers in base units, for one precision (attention and the LM head at
    attention_precision's)."""
    sixteen = attention_precision(precision)
    return dict(
        peak_flops=hw.peak_flops_per_s(precision), gemm_eff=hw.gemm_efficiency(precision),
        peak_flops_16=hw.peak_flops_per_s(sixteen), gemm_eff_16=hw.gemm_efficiency(sixteen),
        # moe: torch._grouped_mm in 16 bits, where the profile has measured it
        grouped_mm_eff_16=hw.efficiency.grouped_mm_16 or hw.gemm_efficiency(sixteen),
        hbm_bw=hw.hbm_bytes_per_s, hbm_eff=hw.efficiency.hbm,
        fast_bw=hw.fast.busbw_bytes_per_s, fast_lat=hw.fast.latency_s,
        # moe, cp: NCCL all-to-all's measured curve in the domain, W∞ as a share of fast_bw
        # (1 and 0 where unmeasured: the ring's figure at every size; K.alltoall_busbw)
        a2a_share=hw.fast.alltoall_share, a2a_ramp_s=hw.fast.alltoall_ramp_s,
        net_bw=hw.network.busbw_bytes_per_s, net_lat=hw.network.latency_s,
        # moe: the links' nominal one-way rates, which DeepEP's measured efficiency is taken of
        fast_link_bw=hw.fast.gb_per_s * 1e9, net_link_bw=hw.network.gb_per_s * 1e9,
        kernel_s=hw.efficiency.kernel_overhead_us * 1e-6,
        # moe: the host's seconds per eager kernel launch, where a framework waits (formulas.host)
        host_op_s=HOST.HOST_OP_S,
        # moe: PyTorch's atomic scatter-add, Megatron's un-fused un-permutation (formulas.moe_layer)
        scatter_bw=ML.SCATTER_ADD_BYTES_PER_S,
        n_sm=hw.sm_count or 0, tile_rows=hw.gemm_tile[0], tile_cols=hw.gemm_tile[1],
        frag=hw.runtime.fragmentation_fraction,
        capacity=hw.capacity_bytes,
        **topology_numbers(hw),
        **host_numbers(hw),  # offload
        **runtime_numbers(hw),  # what the process holds beside its tensors
        **reliability_numbers(hw),  # goodput
    )


def runtime_numbers(hw: HardwareProfile) -> dict:
    """What a training process holds beside its tensors, per GPU, from the profile's GPU
    (formulas.runtime, with each constant's source): the CUDA context (the profile's
    runtime.reserved_gib), PyTorch's GEMM workspaces (two threads' cuBLAS + cuBLASLt), one
    Transformer Engine workspace, one NCCL connection's FIFOs and the ring channels, NVLS's bytes
    per head (0 where the switch has no NVLS), and point-to-point FIFOs per NVLink peer (32
    channels) and per network peer (NCCL's channels for the GPU's NICs; Grace-Blackwell doubles
    the network chunk: init.cc computeBuffSizes)."""
    name = hw.gpu.upper()
    gen = generation_of(hw)
    amd = "AMD" in name
    if amd:  # ROCm: gfx942 (MI300X, MI325X), gfx950 (MI355X)
        cublas, cublaslt = RT.TORCH_HIPBLAS_GFX94_BYTES, RT.TORCH_HIPBLASLT_BYTES
    else:
        cublas = RT.TORCH_CUBLAS_SM90_BYTES if gen is K.Gen.HOPPER else RT.TORCH_CUBLAS_OTHER_BYTES
        cublaslt = RT.TORCH_CUBLASLT_BYTES
    modern = gen is not K.Gen.AMPERE  # compute capability ≥ 9 (AMD: taken as Hopper's)
    nvls_channels = RT.NVLS_CHANNELS["blackwell" if gen is K.Gen.BLACKWELL else "hopper"]
    net_ratio = 2 if gen is K.Gen.BLACKWELL and ("GB200" in name or "GB300" in name) else 1
    net_channels = float(RT.p2p_channels_per_net_peer(hw.nics_per_gpu,
                                                      hw.network.gb_per_s / hw.nics_per_gpu))
    return dict(
        ctx=hw.runtime.reserved_gib * 2**30,
        ws_torch=RT.torch_blas_workspace_bytes(cublas, cublaslt),
        ws_te=RT.CUBLAS_WORKSPACE_BYTES if modern else RT.TE_WORKSPACE_PRE_HOPPER_BYTES,
        nccl_conn=RT.nccl_connection_bytes(), nccl_ch=RT.RING_CHANNELS,
        nvls_head=(RT.nvls_bytes(1, nvls_channels)
                   if hw.fast.nvls_busbw_bytes_per_s is not None else 0),
        p2p_nvl=RT.nccl_p2p_bytes(1, RT.RING_CHANNELS, RT.P2P_NVL_CHUNK),
        p2p_net=RT.nccl_p2p_bytes(1, net_channels, net_ratio * RT.P2P_NET_CHUNK),
    )


def reliability_numbers(hw: HardwareProfile) -> dict:
    """goodput: the cluster's interruption rate (per GPU-hour), the restart time, and each
    GPU's share of the checkpoint storage's write and read bandwidth (schema.Storage, Reliability),
    in base units."""
    storage = hw.checkpoint_storage
    return dict(fail_rate=hw.reliability.failures_per_gpu_hour,
                restart=hw.reliability.restart_s, ckpt_write_bw=storage.write_bytes_per_s,
                ckpt_read_bw=storage.read_bytes_per_s)


def host_numbers(hw: HardwareProfile) -> dict:
    """offload: the host's memory per GPU, its host link and DRAM bandwidth (schema.Host), in base
    units; zeros for a profile without a [host] section (no plan offloads there:
    estimate.check_config refuses it)."""
    host = hw.host
    if host is None:
        return dict(host_capacity=0.0, host_bw=0.0, dram_bw=0.0, nic_on_host_link=0.0)
    return dict(host_capacity=host.memory_bytes, host_bw=host.link_bytes_per_s,
                dram_bw=host.dram_bytes_per_s, nic_on_host_link=float(host.nic_shares_link))


NO_POD = 2.0**40
"""A pod size no job reaches: full bisection bandwidth everywhere."""


def topology_numbers(hw: HardwareProfile) -> dict:
    """The profile's network topology in base units (schema.Topology): the GPUs a job uses per
    NVLink domain, NICs per GPU, the full-bisection pod and the oversubscription above it, SHARP,
    NVLS (its all-reduce bandwidth; the ring figure where the switch has none), the slowdown
    of compute that runs beside a collective, and the spread of the GPUs' speeds (stragglers)."""
    nvls = hw.fast.nvls_busbw_bytes_per_s
    return dict(
        domain=hw.domain_gpus_used, nics_per_gpu=hw.nics_per_gpu,
        pod=hw.topology.pod_gpus or NO_POD, oversub=hw.topology.oversubscription,
        sharp=int(hw.topology.sharp), nvls_bw=hw.fast.busbw_bytes_per_s if nvls is None else nvls,
        overlap_slow=C.OVERLAP_COMPUTE_SLOWDOWN, speed_cv=R.GPU_SPEED_CV,
        **nccl_numbers(hw),
    )


def nccl_numbers(hw: HardwareProfile) -> dict:
    """What NCCL's tuner needs of the cluster (formulas/collectives.py, model/nccl.py): the LL
    protocol's ceiling on 1, 2 and more nodes, the network overhead per step, NICs per node,
    whether the switch has NVLS, and one send/recv's latency (the network's bandwidth per node
    is net_bw × NICs per node, built where it is used, model/nccl.py tuner_link, so that
    calibration reaches it)."""
    cluster = Cluster.of(hw)
    return dict(
        ll_max_one=float(K.ll_max_busbw(cluster.generation, 1, cluster.cpu)),
        ll_max_two=float(K.ll_max_busbw(cluster.generation, 2, cluster.cpu)),
        ll_max_many=float(K.ll_max_busbw(cluster.generation, 3, cluster.cpu)),
        net_overhead_us=K.NET_OVERHEAD_US[cluster.cpu.value], nics_per_node=cluster.nics_per_node,
        nvls=int(cluster.nvls_bw is not None),
        # one send/recv's latency (K.send_recv_latency_s), Simple and LL, on NVLink and across
        # the network: named numbers, so that explain shows them as constants
        sr_base=K.send_recv_base_s(), sr_step_nvl=K.send_recv_step_s(1),
        sr_step_net=K.send_recv_step_s(0),
        sr_ll_nvl=K.send_recv_latency_s(K.Proto.LL, 1),
        sr_ll_net=K.send_recv_latency_s(K.Proto.LL, 0),
        # the tuner's per-channel ceilings at 1, 2 and more nodes, and whether the search's
        # channel doubling follows the Hopper-and-later rule (K.search_channels, K.channel_caps)
        **channel_ceilings(cluster.generation))


def channel_ceilings(generation: K.Gen) -> dict:
    """NCCL's per-channel bandwidth ceilings for the profile's GPU generation (tree, tree LL128,
    ring LL128; K.PER_CHANNEL_MAX_GB) at one node, two, and more, as named numbers, and
    nccl_modern = 1 on Hopper and later (compute capability above 8.0)."""
    out = {}
    for ceiling in K.Ceiling:
        for tag, value in zip(("1", "2", "n"), K.per_channel_max(ceiling, generation)):
            out[f"pc_{ceiling.value}_{tag}"] = value
    out["nccl_modern"] = float(generation in (K.Gen.HOPPER, K.Gen.BLACKWELL))
    return out


def config_numbers(config: PlanConfig) -> dict:
    """A plan's numeric degrees and sizes."""
    return dict(
        dp=config.dp, tp=config.tp, pp=config.pp, cp=config.cp, vpp=config.vpp, mbs=config.mbs,
        n_micro=config.n_micro, gbs=config.gbs, seq_len=config.seq_len,
        dp_replicate=config.dp_replicate,  # hybrid sharding: 1 unless dp_shard < dp
        **dtype_numbers(FRAMEWORKS[config.framework], config.grad_dtype),
        overlap=int(config.overlap_grad_reduce),
        recompute_layers=config.recompute_layers,  # fit: 0 is every layer at the plan's level
        recompute_group=config.recompute_group,  # fit: layers per checkpointed unit
        distribute=int(config.distribute_saved_activations),
        contiguous=int(config.contiguous_checkpoints),  # fit: DeepSpeed's buffers ahead
        # moe: expert parallelism (1, 1 and no a2a for a dense model)
        ep=config.ep, etp=config.etp, **MOE.config_numbers(config),
        cp_a2a=config.cp_a2a or 1,  # cp-kind: the hierarchical kind's all-to-all group
        # offload: the optimizer fraction and the activation layers on the host
        offload_optimizer=config.offload_optimizer,
        offload_activations=config.offload_activations,
    )


FALLS_BACK_ON_GEMM_16 = ("grouped_mm_eff_16", "att_eff_fwd", "att_eff_bwd")
"""The kernels' shares of the 16-bit peak that are the 16-bit GEMM figure where the profile has
not measured the kernel (hardware_numbers, attention_numbers): explain names them η there, and
calibrate moves them with the GEMM figure it fits."""


PADS_HEAD_DIM = ("flex",)
"""The flash-attention kernel families that compute at head widths rounded up to a power of two
(FlexAttention's Triton template: formulas.timing.triton_padded_head_dim); cuDNN and
FlashAttention-2 run kernels for 192-wide heads as they are."""


def attention_numbers(framework: Framework, hw: HardwareProfile, precision: Precision,
                      model: ModelSpec) -> dict:
    """The shares of the 16-bit peak the framework's flash-attention kernel reaches on the
    profile's GPU, forward and backward (schema.AttentionEfficiency, each figure's source in the
    profile); the 16-bit GEMM figure where the profile has not measured that kernel. With them
    the work the kernel runs over the attention's FLOPs, forward and backward (1 but where it
    pads the model's head widths: PADS_HEAD_DIM, T.padded_attention_work)."""
    gemm = hw.gemm_efficiency(attention_precision(precision))
    measured = hw.efficiency.attention
    kernel = framework.attention_kernel
    pad_fwd, pad_bwd = (T.padded_attention_work(model.dim_head, model.value_head_dim)
                        if kernel in PADS_HEAD_DIM else (1.0, 1.0))
    return dict(att_eff_fwd=getattr(measured, f"{kernel}_forward") or gemm,
                att_eff_bwd=getattr(measured, f"{kernel}_backward") or gemm,
                att_pad_fwd=float(pad_fwd), att_pad_bwd=float(pad_bwd))


def dtype_numbers(framework: Framework, grad_dtype: str) -> dict:
    """Bytes per element the plan's tensors take: 16-bit weights as gathered and computed with,
    gradients as the framework reduces them (torchtitan always in fp32), 16-bit activations."""
    return dict(w_bytes=WEIGHT_BYTES, g_bytes=framework.grad_bytes(BYTES[grad_dtype]),
                act_bytes=ACT_BYTES)


def numbers(model: ModelSpec, hw: HardwareProfile, config: PlanConfig) -> SimpleNamespace:
    """Everything plan_costs needs for one plan, as plain floats."""
    return SimpleNamespace(**model_numbers(model, config.seq_len),
                           **hardware_numbers(hw, config.precision), **config_numbers(config),
                           **attention_numbers(FRAMEWORKS[config.framework], hw,
                                               config.precision, model),
                           **precision_numbers(FRAMEWORKS[config.framework], hw, config.precision,
                                               config.fp8_recipe, config.fp8_param_gather))


def may_be_nonzero(value) -> bool:
    """Whether a plan number may be non-zero (an array or a symbol is taken as may-be): the
    expressions a number switches on are built only where it may."""
    return not (isinstance(value, (int, float)) and value == 0)


def same(name, value):
    """The `note` of a plain evaluation: every named intermediate as it is."""
    return value


def any_row(value) -> bool:
    """A model indicator (moe, mla) as a Python truth: any row's, where tests stack models into
    arrays (a dense row then takes the MoE expressions, which give it exactly 0)."""
    return bool(np.any(np.asarray(value)))


def moe_picker(x, moe_model: bool):
    """pick(moe_value, dense_value): a MoE/MLA model (any row's, when models are stacked) builds
    its own expression, moe_value(), and pick() selects it row by row, so that a dense row gets
    exactly the dense value; a dense model builds nothing more than dense_value."""
    def pick(moe_value, dense_value):
        return _ops.select(x.moe_mla, moe_value(), dense_value) if moe_model else dense_value

    return pick


def merged(k: SimpleNamespace, more: SimpleNamespace) -> SimpleNamespace:
    """The intermediates so far with those of the next concern (a later value of a name wins)."""
    return SimpleNamespace(**{**vars(k), **vars(more)})
