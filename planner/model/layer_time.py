"""One layer's compute time per micro-batch on a GPU: its GEMMs (at their wave quantisation; a
MoE layer's expert GEMMs apart), attention, the element-wise and attention-core kernels bound by
HBM, kernel launches; forward, backward and recomputation (formulas/timing.py)."""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import _ops
from ..formulas import flops as F
from ..formulas import host as H
from ..formulas import moe as MO
from ..formulas import moe_layer as ML
from ..formulas import quantization as Q
from ..formulas import recompute as RC
from ..formulas import timing as T
from ..formulas.choices import Attention, Recompute, RecomputeModule
from . import flops as FL
from . import moe as MOE
from .numbers import Choices, may_be_nonzero, moe_picker, same


def moe_matmul_s(x, k: SimpleNamespace, tokens, has_sm, streams=0, fp8_experts=True,
                note=same):
    """moe: a MoE/MLA layer's GEMMs (the time sizes a MoE layer, a stage's heaviest): the
    non-expert weights over t at their own wave quantisation, the expert GEMMs per GPU as
    T·k·load tokens through one expert each (etp splits the expert and gathers etp× the
    tokens), as grouped GEMMs of expert_tokens rows per local expert, the experts whose GEMMs
    run at once (the framework's `streams`: moe.concurrent_experts) sharing the waves.
    Returns (all of them, the MoE block's own: experts, shared experts and router, which
    `--recompute-modules moe` reruns)."""
    s, b, h, t, cp = k.s, k.b, k.h, k.t, k.cp
    # the shared experts apart (explain's T_sh), at the same wave quantisation and efficiency
    ne_weights = _ops.select(x.moe, x.attn_matmul + h * x.router_experts,
                             x.attn_matmul + x.dense_matmul)
    # (shown as the layer's wave efficiency in place of the dense one, which is not used)
    ne_wave = note("wave_efficiency", _ops.select(has_sm, T.layer_gemm_wave_efficiency(
        tokens, h, x.n_heads, x.n_kv_heads, x.head_dim, x.ne_ffn, x.n_mlp, t,
        _ops.maximum(x.n_sm, 1), x.tile_rows, x.tile_cols), 1))
    rows_per_expert = MO.expert_tokens(k.moe_tokens * x.etp, x.top_k, x.ep, x.n_experts,
                                       k.lam)
    # under fp8 each expert's rows are padded to the recipe's multiple (Megatron's Fp8Padding or
    # --moe-router-padding-for-quantization: moe/experts.py, token_dispatcher.py @ d98e8a64dd),
    # (a − 1)/2 rows on average (formulas.moe_layer.padded_rows), which the GEMMs run
    padded = rows_per_expert + ML.padded_rows(1, x.moe_align)
    expert_wave = note("expert_wave_efficiency", _ops.select(
        has_sm * x.moe, MO.expert_layer_wave_efficiency(
            padded, h, x.expert_ffn, x.n_mlp, x.etp,
            MO.concurrent_experts(MO.local_experts(x.n_experts, x.ep), streams),
            _ops.maximum(x.n_sm, 1), x.tile_rows, x.tile_cols), 1))
    # a framework whose FP8 recipe converts linear layers only runs the experts' grouped GEMMs
    # in 16 bits (Framework.fp8_expert_gemms)
    peak, eff = ((x.peak_flops, x.gemm_eff) if fp8_experts
                 else (x.peak_flops_16, x.gemm_eff_16))
    if streams == 0:  # one grouped kernel, torch._grouped_mm: in 16 bits, its measured share
        eff = (_ops.select(x.fp8, eff, x.grouped_mm_eff_16) if fp8_experts
               else x.grouped_mm_eff_16)
    expert_s = note("expert_matmul_s", x.moe * T.compute_time_s(
        F.layer_matmul_flops(k.moe_tokens * x.top_k * k.lam, 1, x.expert_matmul)
        * padded / rows_per_expert, peak, eff * expert_wave))
    def ne_gemm_s(weights):  # non-expert GEMMs over t, at the non-expert waves
        return T.compute_time_s(F.layer_matmul_flops(s, b, weights) / (t * cp), x.peak_flops,
                                x.gemm_eff * ne_wave)

    ne_s = ne_gemm_s(ne_weights)
    shared_s = ne_gemm_s(x.shared_matmul)
    if may_be_nonzero(x.shared_matmul):
        ne_s = ne_s + note("shared_matmul_s", x.moe * shared_s)
    # fit: the MoE block's GEMMs apart (the router's at the non-expert waves)
    block_s = x.moe * (ne_gemm_s(h * x.router_experts) + shared_s) + expert_s
    return ne_s + expert_s, block_s


def layer_times(x, c: Choices, k: SimpleNamespace, note=same) -> SimpleNamespace:
    """One layer's forward, backward and recomputation, and the parts the overlaps read."""
    s, b, h, t, cp = k.s, k.b, k.h, k.t, k.cp
    pick = moe_picker(x, k.moe_model)
    materialised = 1 if c.attention is Attention.CLASSIC else 0
    sp_divisor = t if c.sequence_parallel else 1
    tokens = b * s / cp
    # a profile without an SM count (n_sm = 0) leaves wave quantisation out: w = 1
    has_sm = 1 - _ops.le(x.n_sm, 0)
    wave = note("wave_efficiency", _ops.select(has_sm, T.layer_gemm_wave_efficiency(
        tokens, h, x.n_heads, x.n_kv_heads, x.head_dim, x.ffn, x.n_mlp, t,
        _ops.maximum(x.n_sm, 1), x.tile_rows, x.tile_cols, tokens * x.top_k / x.n_experts), 1))
    moe_mm = (moe_matmul_s(x, k, tokens, has_sm, c.framework.expert_gemm_streams,
                           c.framework.fp8_expert_gemms, note)
              if k.moe_model else (0, 0))
    mm_s = note("matmul_s", pick(lambda: moe_mm[0],
                                 T.compute_time_s(F.layer_matmul_flops(s, b, k.active) / (t * cp),
                                                  x.peak_flops, x.gemm_eff * wave)))
    att_s, att_bwd = attention_times(x, c, k, pick, note)
    elem_s = note("elementwise_s", T.memory_bound_time_s(T.layer_elementwise_bytes(
        s, b, h, k.routed_ffn, x.n_mlp, x.n_heads, x.n_kv_heads, x.head_dim, x.dropout,
        x.rotary, t, cp, sp_divisor, x.act_bytes), x.hbm_bw, x.hbm_eff))
    core_s = note("attention_core_s", T.memory_bound_time_s(T.attention_core_bytes(
        s, b, x.n_heads, t, cp, x.dropout, materialised, x.act_bytes), x.hbm_bw, x.hbm_eff))
    launch_s = T.kernel_overhead_s(T.KERNELS_PER_LAYER_FORWARD, x.kernel_s)
    # moe: the router's and the permutation's HBM traffic and kernels (model/moe.py)
    moe_extra_s = (note("moe_router_permute_s", x.moe * MOE.forward_extra_s(
        x, c.moe_dispatcher, k.moe_tokens, k.lam, t, c.framework.expert_gemm_streams))
        if k.moe_model else 0)
    # moe: the un-fused un-permutation's atomic scatter-add beyond its streaming cost, where the
    # framework runs one (Megatron without --moe-permute-fusion); once again in the backward, as
    # the permutation's index_add_ (not doubled with the rest: the scatter's own backward is a
    # gather, a streaming pass)
    scatter_s = 0
    fused = c.moe_permute_fusion and c.framework.fused_permutation
    if k.moe_model and c.framework.unfused_permute_scatters and not fused:
        scatter_s = note("moe_atomic_scatter_s", x.moe * unfused_scatter_s(x, k))
    # moe: the routed rows weighed by their scores in a pass of their own where no fused
    # kernel does it (Framework.route_weighting: Megatron's un-fused path, torchtitan's fp32 one)
    weigh_s = 0
    if k.moe_model and c.framework.route_weighting is not None and not fused:
        weigh_s = note("moe_weighting_s", x.moe * weighting_s(x, k, c.framework.route_weighting))
    gpu_fwd_s = mm_s + att_s + elem_s + core_s + launch_s + moe_extra_s + scatter_s + weigh_s
    # moe: the host's share where the framework waits for the token counts (forward only)
    host_s = host_wait_s(x, c, k, gpu_fwd_s, note)
    fwd_s = note("forward_layer_s", gpu_fwd_s + host_s)
    bwd_s = note("backward_layer_s", T.backward_layer_s(fwd_s - host_s - att_s - scatter_s,
                                                        att_s, att_bwd) + scatter_s)
    # what the backward runs again: the checkpointed modules' forward (the attention core;
    # fit: the MLP's matmuls with `mlp`), or the recomputed layers' whole forward
    modules = c.recompute_modules or (RecomputeModule.CORE_ATTN,)
    # fit: `moe` reruns the MoE block's GEMMs, router and permutation, and its dispatcher's
    # wait for the token counts (the layer's host_s; the exchange: volumes.py ep_passes)
    selective_s = (int(RecomputeModule.CORE_ATTN in modules) * (att_s + core_s)
                   + k.mlp_share * mm_s + module_rerun_s(x, c, k, modules)
                   + int(RecomputeModule.MOE in modules) * (x.moe * (moe_mm[1] + moe_extra_s)
                                                            + weigh_s + host_s))
    if FL.op_sac(c):  # torchtitan's per-op SAC: share ρ of the matmuls, every unsaved op
        share = note("op_sac_share", pick(lambda: FL.op_sac_layer_share(x, h, c.torchtitan_flex_ac),
                                          x.sac_dense_matmul / k.active))
        selective_s = RC.op_sac_rerun_s(mm_s, share, fwd_s - host_s - mm_s - att_s - core_s, att_s,
                                        RC.op_sac_regions(x.mla, int(c.torchtitan_flex_ac)))
    recompute_s = note("recompute_layer_s", {Recompute.NONE: 0, Recompute.SELECTIVE: selective_s,
                                             Recompute.FULL: k.rerun * fwd_s}[c.recompute])
    return SimpleNamespace(mm_s=mm_s, att_s=att_s, att_bwd=att_bwd, fwd_s=fwd_s, bwd_s=bwd_s,
                           recompute_s=recompute_s, quant_s=quantize_layer_s(x, c, k, note))


def attention_times(x, c: Choices, k: SimpleNamespace, pick, note=same):
    """One layer's attention products forward per micro-batch (QKᵀ and P·V, the causal half
    under flash; MLA's d_qk and d_v for a MoE/MLA model), and the backward's time over it: the
    framework's flash kernel at its measured forward and backward shares, on the work it runs
    at its padded head widths (π_att, π_att,b: T.padded_attention_work), its backward
    T.flash_backward_flops_factor × the forward's FLOPs; a materialised attention's products
    are batched GEMMs, at the GEMM figure both ways, the backward 2×."""
    s, b, t, cp = k.s, k.b, k.t, k.cp
    flash = c.attention is Attention.FLASH
    causal_skip = 1 if flash else 0
    flops = F.layer_attention_flops(s, b, x.n_heads, x.head_dim, causal_skip)
    flops = pick(lambda: _ops.select(x.mla, F.mla_attention_flops(  # moe: MLA's d_qk, d_v
        s, b, x.n_heads, x.head_dim, x.v_dim, causal_skip), flops), flops)
    factor = T.CLASSIC_BACKWARD_FACTOR
    eff_fwd, eff_bwd, pad_fwd, pad_bwd = x.gemm_eff_16, x.gemm_eff_16, 1, 1
    if flash:  # the kernel's measured shares, on the work it runs (its padded head widths)
        eff_fwd, eff_bwd = x.att_eff_fwd, x.att_eff_bwd
        pad_fwd, pad_bwd = x.att_pad_fwd, x.att_pad_bwd
        factor = pick(lambda: _ops.select(x.mla, T.flash_backward_flops_factor(
            x.head_dim, x.v_dim), T.FLASH_BACKWARD_FACTOR), T.FLASH_BACKWARD_FACTOR)
    att_s = note("attention_s", T.compute_time_s(flops * pad_fwd / (t * cp), x.peak_flops_16,
                                                 eff_fwd))
    return att_s, T.attention_backward_ratio(factor * pad_bwd / pad_fwd, eff_fwd, eff_bwd)


def host_wait_s(x, c: Choices, k: SimpleNamespace, gpu_fwd_s, note=same):
    """moe: what one MoE layer's forward adds where the framework's host waits for the device
    once in it (Framework.moe_forward_sync): its forward from that wait to the next runs from an
    empty launch queue, formulas.host.synced_exposed_s of the layer's GPU time and the kernels
    it launches (moe.forward_kernels) at t_h each. layer_times keeps it out of the backward
    (autograd reuses the split lists) and torchtitan's op-SAC recompute (its policy saves the
    copy); full recompute reruns the forward and its wait, `--recompute-modules moe` the MoE
    block's."""
    sync = c.framework.moe_forward_sync
    if not k.moe_model or sync == "none":
        return 0
    synced = 1 if sync == "always" else 1 - _ops.le(x.ep, 1)
    kernels = MOE.forward_kernels(x, c.moe_dispatcher, c.framework.expert_gemm_streams)
    return note("moe_host_wait_s", x.moe * synced * H.synced_exposed_s(gpu_fwd_s, kernels,
                                                                       x.host_op_s))


def unfused_scatter_s(x, k: SimpleNamespace):
    """moe: one forward's un-permutation as PyTorch's atomic scatter-add, beyond the streaming
    pass the permutation traffic is costed at (formulas.moe_layer.atomic_scatter_excess_s of the
    T·k rows read and T written that one GPU's tokens un-permute)."""
    moved = ML.unpermute_scatter_bytes(k.moe_tokens, x.top_k, x.hidden, x.act_bytes)
    return ML.atomic_scatter_excess_s(moved, x.scatter_bw, x.hbm_bw * x.hbm_eff)


def weighting_s(x, k: SimpleNamespace, weighting: tuple[int, int]):
    """moe: one forward's separate weighing of the routed rows by their scores
    (formulas.moe_layer.score_weighting_bytes, the framework's (fp32, out_passes)) at the
    profile's memory-bound efficiency."""
    fp32, out_passes = weighting
    moved = ML.score_weighting_bytes(k.moe_tokens, x.top_k, x.hidden, x.act_bytes, fp32,
                                     out_passes)
    return T.memory_bound_time_s(moved, x.hbm_bw, x.hbm_eff)


def module_rerun_s(x, c: Choices, k: SimpleNamespace, modules) -> float:
    """fit: what the backward reruns of `layernorm` (a MoE layer's pre-MLP norm, an MLA layer's
    input norm), `moe_act` (the routed experts' activation function), `mla_up_proj` (MLA's two
    up-projection GEMMs, formulas.recompute.mla_up_proj_weights, and its latent norms) and
    `shared_experts` (their GEMMs and activation function): the GEMMs at the layer's peak and
    efficiency, the rest memory-bound (formulas.recompute); 0 for a dense model, whose norms
    Transformer Engine fuses.  `moe` reruns the whole MoE block: layer_times adds its GEMMs and
    kernels, and the exchange's passes count its token exchange again (volumes.py)."""
    if not k.moe_model:
        return 0
    s, b, h, t, cp, sp = k.s, k.b, k.h, k.t, k.cp, c.sequence_parallel
    rerun = 0
    if RecomputeModule.LAYERNORM in modules:
        rerun = rerun + RC.layernorm_rerun_bytes(s, b, h, t, cp, sp, x.moe + x.mla, x.act_bytes)
    if RecomputeModule.MOE_ACT in modules and RecomputeModule.MOE not in modules:
        rerun = rerun + x.moe * RC.activation_fn_rerun_bytes(
            s, b, MO.routed_ffn_width(x.expert_ffn, x.top_k, imbalance=k.lam), x.n_mlp, t, cp,
            x.act_bytes)
    if RecomputeModule.MLA_UP_PROJ in modules:
        # the q and kv latent norms fused into the up-projections: n = 1 each of width r
        rerun = rerun + x.mla * (x.q_rank + x.kv_rank) / h * RC.layernorm_rerun_bytes(
            s, b, h, t, cp, sp, 1, x.act_bytes)
    if RecomputeModule.SHARED_EXPERTS in modules and RecomputeModule.MOE not in modules:
        rerun = rerun + x.moe * RC.activation_fn_rerun_bytes(
            s, b, x.shared_ffn * x.n_shared, x.n_mlp, t, cp, x.act_bytes)
    if RecomputeModule.MOE in modules:  # the block's activation functions, routed and shared
        rerun = rerun + x.moe * RC.activation_fn_rerun_bytes(
            s, b, MO.routed_ffn_width(x.expert_ffn, x.top_k, x.shared_ffn, x.n_shared, k.lam),
            x.n_mlp, t, cp, x.act_bytes)
    # the up-projections' and shared experts' GEMMs (`moe`'s block: layer_times)
    weights = FL.module_matmul_weights(x, modules, 1, moe_block=False)
    gemm_s = T.compute_time_s(F.layer_matmul_flops(s, b, weights) / (t * cp), x.peak_flops,
                              x.gemm_eff)
    return T.memory_bound_time_s(rerun, x.hbm_bw, x.hbm_eff) + gemm_s


def quantize_layer_s(x, c: Choices, k: SimpleNamespace, note=same):
    """fit: the recipe's casts of one layer's activations and gradients per micro-batch, a
    memory-bound pass (formulas.quantization: elements × (16-bit reads + the copies written));
    0 without a recipe."""
    if not may_be_nonzero(x.fp8):
        return 0
    elements = Q.layer_quantized_elements(k.s, k.b, k.h, x.n_heads, x.n_kv_heads, x.head_dim,
                                          k.routed_ffn, x.n_mlp, k.t, k.cp, c.sequence_parallel)
    return note("quantize_layer_s", x.fp8 * Q.quantize_time_s(Q.quantize_hbm_bytes(
        elements, x.act_bytes, x.w_copy, x.quant_passes), x.hbm_bw, x.hbm_eff))
