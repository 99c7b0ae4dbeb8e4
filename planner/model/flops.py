"""FLOPs per step: the model's (the MFU's numerator, under either attention convention) and the
hardware's (what runs: a causal flash kernel's half square, recomputation), for dense and
MoE/MLA layers (formulas/flops.py)."""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import _ops
from ..formulas import flops as F
from ..formulas import moe_mtp as MTP
from ..formulas import params as P
from ..formulas import recompute as RC
from ..formulas.choices import Attention, Recompute, RecomputeModule
from .numbers import Choices, moe_picker, same


def flops(x, c: Choices, k: SimpleNamespace, note=same) -> SimpleNamespace:
    """Model FLOPs (full and causal convention), hardware FLOPs, and a layer's active matmul
    weights (the time of its GEMMs: layer_time.py)."""
    s, h, L = k.s, k.h, k.L
    pick = moe_picker(x, k.moe_model)
    attn_w = P.attention_weight_params(h, x.n_heads, x.n_kv_heads, x.head_dim)
    mlp_w = P.mlp_weight_params(h, x.ffn, x.n_mlp)
    active = F.matmul_weight_params_active(attn_w, mlp_w, x.top_k, h * x.router_experts)
    mm_seq = F.layer_matmul_flops(s, 1, active)  # forward, per sequence
    att_seq = F.layer_attention_flops(s, 1, x.n_heads, x.head_dim)
    head_seq = F.head_flops(s, 1, x.vocab, h)
    causal_skip = 1 if c.attention is Attention.FLASH else 0
    # moe: MoE/MLA model FLOPs count the active weights (a MoE layer's k routed and the shared
    # experts, the router; a dense layer's MLP) and MLA's d_qk/d_v attention products
    n_moe_layers = x.moe * x.n_moe_layers
    dense_mm_seq = F.layer_matmul_flops(s, 1, x.attn_matmul + x.dense_matmul)
    moe_mm_seq = F.layer_matmul_flops(s, 1, F.moe_matmul_weights_active(
        x.attn_matmul, x.expert_matmul, x.top_k, x.shared_matmul, h * x.router_experts))
    mean_mm_seq = ((L - n_moe_layers) * dense_mm_seq + n_moe_layers * moe_mm_seq) / L
    # moe: the D multi-token-prediction modules count as Megatron counts them
    # (training/training.py num_floating_point_operations @ d98e8a64dd): D more layers of the
    # last layer's kind, eh_proj, and D more head passes (formulas/moe_mtp.py)
    D = k.mtp_depth
    n_dense, n_moe, L_all = L - n_moe_layers + D * (1 - x.moe), n_moe_layers + D * x.moe, L + D
    head_all = (1 + D) * head_seq + D * MTP.eh_proj_flops(s, h)

    def att_flops(skip):
        return _ops.select(x.mla,
                           F.mla_attention_flops(s, 1, x.n_heads, x.head_dim, x.v_dim, skip),
                           F.layer_attention_flops(s, 1, x.n_heads, x.head_dim, skip))

    model_flops = note("model_flops", pick(lambda: F.mixed_model_flops(
        x.gbs, n_dense, n_moe, dense_mm_seq, moe_mm_seq, att_flops(0), head_all),
        F.model_flops(x.gbs, s, L, mm_seq, att_seq, head_seq)))
    # the same under the causal convention (the unmasked half of the square, as Megatron-Core logs)
    att_causal = F.layer_attention_flops(s, 1, x.n_heads, x.head_dim, F.MFU_CONVENTIONS["causal"])
    model_flops_causal = note("model_flops_causal", pick(lambda: F.mixed_model_flops(
        x.gbs, n_dense, n_moe, dense_mm_seq, moe_mm_seq,
        att_flops(F.MFU_CONVENTIONS["causal"]), head_all),
        F.model_flops(x.gbs, s, L, mm_seq, att_causal, head_seq)))
    # hardware FLOPs are what runs: a causal flash kernel skips the masked half of the square,
    # and recomputation runs (part of) the forward again
    att_run = F.layer_attention_flops(s, 1, x.n_heads, x.head_dim, causal_skip)
    shares = recompute_shares(x, c, k, active)  # fit: partial and per-module levels
    mlp_share = shares[Recompute.SELECTIVE][0]  # what layer_time reruns of the matmuls
    if k.moe_model and c.recompute is Recompute.SELECTIVE:  # fit: the MoE/MLA modules' GEMMs
        mm_share, att_share = shares[Recompute.SELECTIVE]
        weights = module_matmul_weights(x, c.recompute_modules or (), n_moe_layers / L)
        shares[Recompute.SELECTIVE] = (
            mm_share + weights * F.layer_matmul_flops(s, 1, 1) / mean_mm_seq, att_share)
    if op_sac(c):  # torchtitan's per-op SAC: its rerun matmuls, not the attention product
        shares[Recompute.SELECTIVE] = (note("op_sac_mean_share", pick(
            lambda: op_sac_mean_share(x, k.L, n_moe_layers, c.torchtitan_flex_ac),
            x.sac_dense_matmul / active)),
            pick(lambda: RC.op_sac_regions(x.mla, int(c.torchtitan_flex_ac)), 0))
    att_run_moe = att_flops(causal_skip)  # moe
    hardware_flops = note("hardware_flops", pick(
        lambda: F.mixed_model_flops(x.gbs, n_dense, n_moe, dense_mm_seq, moe_mm_seq,
                                    att_run_moe, head_all)
        + F.recompute_flops(x.gbs, L_all, mean_mm_seq, att_run_moe, *shares[c.recompute])
        + F.flash_backward_flops(x.gbs, L_all, att_run_moe, causal_skip),
        F.model_flops(x.gbs, s, L, mm_seq, att_run, head_seq)
        + F.recompute_flops(x.gbs, L, mm_seq, att_run, *shares[c.recompute])
        + F.flash_backward_flops(x.gbs, L, att_run, causal_skip)))
    return SimpleNamespace(active=active, mlp_share=mlp_share,
                           model_flops=model_flops,
                           model_flops_causal=model_flops_causal, hardware_flops=hardware_flops)


def op_sac(c: Choices) -> bool:
    """Whether the plan's selective recompute is torchtitan's per-op policy
    (formulas.recompute.op_sac_recomputed_weights) rather than a list of modules."""
    return (c.framework.op_sac_selective and c.recompute is Recompute.SELECTIVE
            and c.recompute_modules is None)


def moe_layer_matmul(x, h):
    """moe: the matmul weights a token meets in a MoE layer, and in a dense (MLA) layer."""
    return (F.moe_matmul_weights_active(x.attn_matmul, x.expert_matmul, x.top_k,
                                        x.shared_matmul, h * x.router_experts),
            x.attn_matmul + x.dense_matmul)


def op_sac_weights(x, flex):
    """(dense, MoE) layer matmul weights torchtitan's per-op SAC reruns: the whole block one
    region, or with `flex` (PlanConfig.torchtitan_flex_ac) its pre-v0.2.1 flex path."""
    if flex:
        return x.sac_dense_matmul_flex, x.sac_moe_matmul_flex
    return x.sac_dense_matmul, x.sac_moe_matmul


def op_sac_layer_share(x, h, flex=False):
    """moe: the share of a MoE layer's matmul weights (of a dense layer's, in an MLA model
    without experts) torchtitan's per-op SAC reruns, W_rec/W_active."""
    moe_w, dense_w = moe_layer_matmul(x, h)
    dense, moe = op_sac_weights(x, flex)
    return _ops.select(x.moe, moe / moe_w, dense / dense_w)


def op_sac_mean_share(x, n_layers, n_moe_layers, flex=False):
    """moe: the rerun share of the matmuls over the model's dense and MoE layers (the hardware
    FLOPs' mean layer): Σ W_rec / Σ W_active."""
    moe_w, dense_w = moe_layer_matmul(x, x.hidden)
    n_dense = n_layers - n_moe_layers
    dense, moe = op_sac_weights(x, flex)
    return ((n_dense * dense + n_moe_layers * moe)
            / (n_dense * dense_w + n_moe_layers * moe_w))


def module_matmul_weights(x, modules, moe_fraction, moe_block=True):
    """fit: the matmul weights per token of the model's mean layer that `mla_up_proj`,
    `shared_experts` and `moe` in --recompute-modules rerun: MLA's up-projections
    (formulas.recompute.mla_up_proj_weights) in every layer, and in the MoE layers (a share
    moe_fraction of them) the shared experts, or with `moe` the router, k experts and the
    shared experts (left out with moe_block False, for a caller that times the block's GEMMs
    at their own waves)."""
    weights = 0
    if RecomputeModule.MLA_UP_PROJ in modules:
        weights = weights + x.mla * RC.mla_up_proj_weights(
            x.hidden, x.n_heads, x.q_rank, x.kv_rank, x.head_dim, x.v_dim, x.rope_dim)
    if RecomputeModule.MOE in modules:
        if moe_block:
            weights = weights + x.moe * moe_fraction * (
                x.hidden * x.router_experts + x.top_k * x.expert_matmul + x.shared_matmul)
    elif RecomputeModule.SHARED_EXPERTS in modules:
        weights = weights + x.moe * moe_fraction * x.shared_matmul
    return weights


def recompute_shares(x, c: Choices, k: SimpleNamespace, active) -> dict:
    """What each recompute level runs again, as (share of the matmuls, share of the attention
    products): selective reruns its checkpointed modules (the attention core; fit: the MLP's
    matmuls, n·h·f of the active weights, with `mlp` in --recompute-modules), full recompute
    every layer it recomputes (k.rerun of the stage's layers)."""
    modules = c.recompute_modules or (RecomputeModule.CORE_ATTN,)
    mlp_share = (P.mlp_weight_params(k.h, x.ffn, x.n_mlp) / active
                 if RecomputeModule.MLP in modules else 0)
    return {Recompute.NONE: (0, 0),
            Recompute.SELECTIVE: (mlp_share, int(RecomputeModule.CORE_ATTN in modules)),
            Recompute.FULL: (k.rerun, k.rerun)}
