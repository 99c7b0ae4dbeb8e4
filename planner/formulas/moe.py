"""Mixture of experts and multi-head latent attention: saved activations, the all-to-all token
exchange, and the grouped expert GEMMs.

Notation: E routed experts, k experts per token, f_e one expert's width, n_s shared experts of
width f_s, ep the expert-parallel degree (experts split over ep GPUs, E/ep each), etp the expert
tensor-parallel degree (each expert's matrices split etp ways), T the tokens one GPU feeds into a
MoE layer per micro-batch (b·s/(c·t): Megatron-Core's token dispatchers take the sequence-parallel
shard of each tensor-parallel rank, megatron/core/transformer/moe/token_dispatcher.py), and MLA's
r_q, r_kv, d_qk = d_n + d_r, d_v (DeepSeek-AI 2024, DeepSeek-V2 §2.1).

Expert parallelism (Lepikhin et al. 2021, GShard §2.2; Fedus et al. 2022, Switch §2.2): every
token is sent to the GPUs holding its k experts (dispatch) and the outputs come back (combine).
Megatron-Core's MoE parallel folding (Liu et al. 2025, "MoE Parallel Folding", arXiv:2504.14960
§3) lets the expert layers lay out the same GPUs as ep × etp × edp while the dense layers use
dp × cp × tp, so edp = dp·cp·tp / (ep·etp).
"""

from __future__ import annotations

import numpy as np

from . import _ops
from .activations import replicated_activation_bytes, score_activation_bytes
from .choices import Attention, Recompute

ROUTER_SCORE_BYTES = 4
"""The router's logits and probabilities are fp32 (Megatron-Core's router casts them,
--moe-router-dtype fp32; HF modeling_deepseek_v3 computes scores in fp32)."""

MOE_IMBALANCE = 1.25
"""Default load-imbalance factor: the busiest expert-parallel rank receives this multiple of the
mean routed tokens. Taken as Switch Transformer's capacity factor 1.25, the headroom over perfect
balance its routers need to drop almost no tokens (Fedus et al. 2022, §2.2 and Table 1); the
per-layer expert load of auxiliary-loss-balanced MoE runs sits around this range (DeepSeek-V3
§2.1.2 bounds it further with node-limited routing). A plan may set its own."""


# ---------------------------------------------------------------------------------------------
# Saved activations


def mla_sharded_activation_bytes(seq_len, mbs, n_heads, qk_head_dim, v_head_dim, ffn,
                                 n_mlp_matrices, act_bytes=2):
    """What TP splits in an MLA layer, before dividing by t: Q and K (a·d_qk wide each, keys
    decompressed per head), V and the output-projection input (a·d_v each), and the MLP's n_mlp
    tensors of width f:  act·sb·(a·(2·d_qk + 2·d_v) + n_mlp·f). With d_qk = d_v = d_h and k = a
    this is sharded_activation_bytes."""
    return act_bytes * seq_len * mbs * (n_heads * (2 * qk_head_dim + 2 * v_head_dim)
                                        + n_mlp_matrices * ffn)


def mla_latent_activation_bytes(seq_len, mbs, q_lora_rank, kv_lora_rank, qk_rope_head_dim,
                                act_bytes=2):
    """The compressed latents MLA keeps: the query latent c_Q (r_q) and the key/value latent with
    the rotary key [c_KV; k_R] (r_kv + d_r); c_Q and c_KV twice, as their RMSNorm's input and as
    the up-projection's input, k_R once (it skips the norm): act·sb·(2·r_q + 2·r_kv + d_r).
    Computed by the duplicated down-projections on each rank's sequence shard, so split by t only
    with sequence parallelism (the caller divides)."""
    return act_bytes * seq_len * mbs * (2 * q_lora_rank + 2 * kv_lora_rank + qk_rope_head_dim)


def mla_layer_activation_bytes(seq_len, mbs, hidden, n_heads, q_lora_rank, kv_lora_rank,
                               qk_head_dim, qk_rope_head_dim, v_head_dim, ffn, n_mlp_matrices,
                               dropout, tp, cp, sequence_parallel: bool, recompute: Recompute,
                               attention: Attention, act_bytes=2):
    """Bytes one MLA layer keeps for the backward pass of one micro-batch on one GPU — the
    Korthikanti 2022 §4 accounting of layer_activation_bytes with MLA's tensors:

    none:      replicated/t_sp + latents/t_sp + mla_sharded/t + scores/t
    selective: replicated/t_sp + latents/t_sp + mla_sharded/t
    full:      act·sbh/t_sp
    t_sp = t with sequence parallelism, 1 without; everything over c. `ffn` is the MLP width the
    layer stores per token (k·f_e + n_s·f_s for a MoE layer). Assumption for the oracle to
    check: the latents are saved once each, in 16-bit."""
    s = seq_len / cp
    sp_divisor = tp if sequence_parallel else 1
    if recompute is Recompute.FULL:
        return act_bytes * s * mbs * hidden / sp_divisor
    kept = ((replicated_activation_bytes(s, mbs, hidden, dropout, act_bytes)
             + mla_latent_activation_bytes(s, mbs, q_lora_rank, kv_lora_rank, qk_rope_head_dim,
                                           act_bytes)) / sp_divisor
            + mla_sharded_activation_bytes(s, mbs, n_heads, qk_head_dim, v_head_dim, ffn,
                                           n_mlp_matrices, act_bytes) / tp)
    if recompute is Recompute.SELECTIVE:
        return kept
    return kept + score_activation_bytes(s, mbs, n_heads, dropout, attention, act_bytes) / tp


def routed_ffn_width(expert_ffn, top_k, shared_ffn=0, n_shared_experts=0, imbalance=1):
    """The MLP width a MoE layer stores per token of the GPU's own batch: k routed copies of
    f_e, scaled by the load imbalance (the busiest rank holds imbalance × the mean), plus the
    shared experts: imbalance·k·f_e + n_s·f_s. Dense: k = 1, imbalance = 1 → f."""
    return imbalance * top_k * expert_ffn + n_shared_experts * shared_ffn


def moe_dispatch_activation_bytes(seq_len, mbs, hidden, n_experts, top_k, tp, cp,
                                  sequence_parallel: bool, imbalance=1, act_bytes=2):
    """What a MoE layer keeps beyond its MLP tensors, per micro-batch and GPU: the k − 1 extra
    permuted copies of each token's input the expert GEMMs save (the first copy is the MLP input
    already counted) and the router's fp32 probabilities (E per token, kept for the gate's
    backward): sb/t_sp·((imbalance·k − 1)·act·h + 4·E), over c. Zero for E = k = 1 (a dense MLP
    has no router; the caller passes E = 0 then)."""
    sp_divisor = tp if sequence_parallel else 1
    tokens = seq_len / cp * mbs / sp_divisor
    return tokens * ((imbalance * top_k - 1) * act_bytes * hidden + ROUTER_SCORE_BYTES * n_experts)


# ---------------------------------------------------------------------------------------------
# Expert-parallel groups


def ep_ranks_in_domain(ep, etp, domain):
    """EP ranks sharing one NVLink domain: Megatron orders expert ranks etp fastest, then ep
    (megatron/core/parallel_state.py, order "tp-ep-dp-pp" for the expert groups), so an EP
    group's members sit etp apart and min(ep, domain/etp) of them share a domain (at least 1)."""
    return _ops.maximum(_ops.minimum(ep, domain / etp), 1)


# ---------------------------------------------------------------------------------------------
# Expert GEMMs and expert memory


def expert_tokens(tokens, top_k, ep, n_experts, imbalance=1):
    """Rows each local expert's GEMMs see: the ep·T tokens of the EP group, k copies, spread over
    E experts, times the imbalance for the busiest: imbalance·ep·T·k/E."""
    return imbalance * ep * tokens * top_k / n_experts


def local_experts(n_experts, ep):
    """Experts one GPU holds: E/ep (ep divides E: a constraint)."""
    return n_experts / ep


def expert_state_shard(ep, etp):
    """Expert weights are split ep·etp ways (experts over ep, each matrix over etp) before any
    ZeRO sharding, against t for the dense weights."""
    return ep * etp


def expert_data_parallel(dp, cp, tp, ep, etp):
    """edp = dp·cp·tp/(ep·etp): the replicas of each expert shard, over which its gradients are
    reduced and (distributed optimizer) its optimizer state is sharded (Megatron-Core parallel
    folding, Liu et al. 2025 §3)."""
    return dp * cp * tp / (ep * etp)


def grouped_gemm_wave_efficiency(rows_per_expert, cols, n_local_experts, n_units, tile_rows=128,
                                 tile_cols=128):
    """Useful share of a grouped GEMM over the local experts (one launch, every expert's tiles
    together, as Megatron-Core's --moe-grouped-gemm / TE GroupedLinear): each expert's
    rows_e × cols output is padded to whole tiles, and the tiles of all experts fill waves of
    n_units SMs:
        useful / run = n_e·r·c / (⌈n_e·⌈r/tr⌉·⌈c/tc⌉ / n⌉ · n · tr·tc)
    (NVIDIA "Matrix Multiplication Background", tile and wave quantisation). Few rows per expert
    (fine-grained experts, small micro-batches) waste most of each tile."""
    tiles = n_local_experts * _ops.ceil(rows_per_expert / tile_rows) * _ops.ceil(cols / tile_cols)
    run = _ops.ceil(tiles / n_units) * n_units * tile_rows * tile_cols
    return n_local_experts * rows_per_expert * cols / run


def concurrent_experts(n_local_experts, streams):
    """Local experts whose GEMM tiles share the SMs' waves at once: all E_l in one grouped kernel
    (streams = 0: torch._grouped_mm, a CUTLASS grouped GEMM), else at most the `streams` the
    per-expert GEMMs are spread over (Transformer Engine's GroupedLinear: 4, formulas.moe_step
    .GROUPED_GEMM_STREAMS):  min(E_l, streams). `streams` is the framework's constant."""
    if streams <= 0:
        return n_local_experts
    return _ops.minimum(n_local_experts, streams)


def expert_layer_wave_efficiency(rows_per_expert, hidden, expert_ffn, n_mlp_matrices, etp,
                                 n_local_experts, n_units, tile_rows=128, tile_cols=128):
    """FLOP-weighted grouped-GEMM efficiency of an expert MLP's two forward GEMMs, fc1 with
    N = (n_mlp − 1)·f_e/etp (gate and up fused) and fc2 with N = h (K = f_e/etp):
    Σ flops / Σ (flops / efficiency); both GEMMs have the same flops per row when n_mlp = 2,
    and fc1 twice fc2's for SwiGLU."""
    fc1 = (n_mlp_matrices - 1) * expert_ffn / etp
    fc2 = expert_ffn / etp
    w1 = grouped_gemm_wave_efficiency(rows_per_expert, fc1, n_local_experts, n_units, tile_rows,
                                      tile_cols)
    w2 = grouped_gemm_wave_efficiency(rows_per_expert, hidden, n_local_experts, n_units,
                                      tile_rows, tile_cols)
    return (fc1 * hidden + fc2 * hidden) / (fc1 * hidden / w1 + fc2 * hidden / w2)


def moe_layers_in_span(start, stop, first_k_dense, moe_layer_freq, is_moe=1, phase=0):
    """MoE layers among layers [start, stop): those i ≥ k = first_k_dense with i mod f = φ
    (0-based i; φ = 0 is HF DeepseekV3DecoderLayer's test, φ = f − 1 Qwen-MoE's
    (i + 1) mod f = 0), the i ≡ φ (mod f) in [max(start, k), stop):

        max(0, ⌈(stop − φ)/f⌉ − ⌈(max(start, k) − φ)/f⌉)

    (the multiples of f in the span shifted by −φ; ⌈·⌉ counts them for negative ends too),
    exact for every span. 0 for a dense model (is_moe = 0). ModelSpec.n_moe_layers is this over
    all layers."""
    first = _ops.maximum(start, first_k_dense)
    return is_moe * _ops.maximum(0, _ops.ceil((stop - phase) / moe_layer_freq)
                                 - _ops.ceil((first - phase) / moe_layer_freq))


def _chunk_moe_layers(chunk, n_layers, n_chunks, lead, trail, first_k_dense, moe_layer_freq,
                      phase):
    """MoE layers of pipeline chunk j: moe_layers_in_span over its layers
    [first(j), first(j + 1)) (pipeline.chunk_first_layer over L + lead + trail slots), cut at
    layer L."""
    from .pipeline import chunk_first_layer

    n_slots = n_layers + lead + trail
    start = _ops.minimum(chunk_first_layer(chunk, n_slots, n_chunks, lead), n_layers)
    stop = _ops.minimum(chunk_first_layer(chunk + 1, n_slots, n_chunks, lead), n_layers)
    return moe_layers_in_span(start, stop, first_k_dense, moe_layer_freq, 1, phase)


def _rank_moe_layers(n_layers, first_k_dense, moe_layer_freq, pp, vpp, rank, lead, trail,
                     phase=0, v_shape=False):
    """moe_layers_on_rank on floats or arrays (one term per chunk, up to the largest v)."""
    if v_shape:
        return sum(_chunk_moe_layers(chunk, n_layers, 2 * pp, lead, trail, first_k_dense,
                                     moe_layer_freq, phase)
                   for chunk in (rank, 2 * pp - 1 - rank))
    total = 0
    for i in range(int(np.max(vpp))):
        total = total + _ops.le(i + 1, vpp) * _chunk_moe_layers(
            rank + i * pp, n_layers, pp * vpp, lead, trail, first_k_dense, moe_layer_freq, phase)
    return total


def moe_layers_on_rank(n_layers, first_k_dense, moe_layer_freq, pp, vpp, rank, lead=0, trail=0,
                       v_shape=0, is_moe=1, phase=0):
    """MoE layers pipeline rank r holds: the sum of moe_layers_in_span over its chunks' layers,

        Σ_i n_moe(chunk c_i),  c_i = r + i·p for i < v (looped placement: Megatron-Core's chunk
        k on rank k mod p, pipeline_parallel_layer_layout.py @ d98e8a64dd; torchtitan's
        `_get_pp_rank_to_stage_indices_mapping` @ 0.3.0), or c = r and 2p − 1 − r for the
        V schedules (ZB-V, DualPipeV: v = 1 here, two half-stage chunks),

    each chunk's layers from pipeline.chunk_first_layer over L + lead + trail slots (L counts
    the MTP modules where the framework places them as layers; they are MoE layers as the
    model's last is). DeepSeek-V3 (L = 61, first_k_dense 3), p = 16, v = 1 under Megatron's
    uneven split (lead 2, trail 1: 64 slots, 4 a stage): rank 0 holds layers 0-1, both dense,
    rank 1 layers 2-5, three MoE, rank 2 layers 6-9, four. 0 for a dense model. The MoE layers
    are those of moe_layers_in_span (phase φ)."""
    value = _ops.shown("n_moe,r({5}; {0}, {3}, {4})", _rank_moe_layers if not v_shape else
                       _rank_moe_layers_v, n_layers, first_k_dense, moe_layer_freq, pp, vpp,
                       rank, lead, trail, phase)
    return is_moe * value


def _rank_moe_layers_v(n_layers, first_k_dense, moe_layer_freq, pp, vpp, rank, lead, trail,
                       phase):
    """moe_layers_on_rank for the V schedules (two chunks per rank)."""
    return _rank_moe_layers(n_layers, first_k_dense, moe_layer_freq, pp, vpp, rank, lead, trail,
                            phase, True)
