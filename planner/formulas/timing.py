"""Time: compute at an achievable fraction of peak, memory-bound work at an achievable fraction of
HBM bandwidth, and the communication that compute does not hide.

All times are per GPU; the pipeline's step is governed by its slowest stage (the last, which also
runs the LM head and the loss).
"""

from __future__ import annotations

from . import _ops


def compute_time_s(flops, peak_flops_per_s, efficiency):
    """flops / (peak · η), η the fraction of dense peak that training GEMMs reach (profile)."""
    return flops / (peak_flops_per_s * efficiency)


def wave_efficiency(rows, cols, n_units, tile_rows=128, tile_cols=128):
    """Wave quantisation of a GEMM's rows × cols output tiled over n_units SMs: the busy share of
    the last wave, tiles / (⌈tiles / n⌉ · n), tiles = ⌈rows/tr⌉·⌈cols/tc⌉ (NVIDIA, "Matrix
    Multiplication Background User's Guide", wave quantization). A GEMM sliced t ways by tensor
    parallelism has fewer tiles, so a larger share of its last wave idles."""
    tiles = _ops.ceil(rows / tile_rows) * _ops.ceil(cols / tile_cols)
    return tiles / (_ops.ceil(tiles / n_units) * n_units)


def layer_gemm_wave_efficiency(tokens, hidden, n_heads, n_kv_heads, head_dim, ffn,
                               n_mlp_matrices, tp, n_units, tile_rows=128, tile_cols=128,
                               expert_tokens=None):
    """FLOP-weighted wave efficiency of one layer's four forward GEMMs on one GPU, with M the
    tokens of the micro-batch (b·s/c) and per GEMM (N, K):
    QKV (d_h(a + 2k)/t, h), output (h, a·d_h/t), MLP in ((n_mlp − 1)·f/t, h), MLP out (h, f/t);
    the MLP's rows are the tokens each expert sees (expert_tokens, M for a dense model).
    Σ flops / Σ (flops / wave)."""
    m_mlp = tokens if expert_tokens is None else expert_tokens
    gemms = [(tokens, head_dim * (n_heads + 2 * n_kv_heads) / tp, hidden),
             (tokens, hidden, n_heads * head_dim / tp),
             (m_mlp, (n_mlp_matrices - 1) * ffn / tp, hidden),
             (m_mlp, hidden, ffn / tp)]
    work = sum(m * n * k for m, n, k in gemms)
    slowed = sum(m * n * k / wave_efficiency(m, n, n_units, tile_rows, tile_cols)
                 for m, n, k in gemms)
    return work / slowed


def memory_bound_time_s(bytes_moved, hbm_bytes_per_s, efficiency):
    """bytes / (HBM bandwidth · η_hbm): norms, residual adds, activations, softmax, optimizer."""
    return bytes_moved / (hbm_bytes_per_s * efficiency)


def layer_elementwise_bytes(seq_len, mbs, hidden, ffn, n_mlp_matrices, n_heads, n_kv_heads,
                            head_dim, dropout, rotary, tp, cp, sp_divisor, act_bytes=2):
    """HBM traffic of one layer's forward pass outside the GEMMs, per GPU and micro-batch:

    replicated over TP (split by t only with sequence parallelism, sp_divisor = t):
        two norms (read + write: 2·act each), two residual adds with bias and dropout
        (read two, write one: 3·act each, + the 1-byte mask): sbh·(10·act + 2·dropout)
    split by TP:
        the MLP activation (GELU reads f, writes f; SwiGLU reads 2f, writes f): n_mlp·act·sbf
        rotary embedding on Q and K (read + write): rotary·2·act·sb·d_h·(a + k)
    everything over c (context parallel)."""
    s = seq_len / cp
    replicated = s * mbs * hidden * (10 * act_bytes + 2 * dropout)
    sharded = (n_mlp_matrices * act_bytes * s * mbs * ffn
               + rotary * 2 * act_bytes * s * mbs * head_dim * (n_heads + n_kv_heads))
    return replicated / sp_divisor + sharded / tp


def attention_core_bytes(seq_len, mbs, n_heads, tp, cp, dropout, materialised, act_bytes=2):
    """HBM traffic of a classic (materialised, = 1) attention core per GPU and micro-batch: the
    softmax reads and writes the a·(s/c)·s·b scores (2·act), dropout reads them, writes them and
    a 1-byte mask (2·act + 1). A fused kernel (materialised = 0) keeps them on chip."""
    return (materialised * n_heads * seq_len / cp * seq_len * mbs / tp
            * (2 * act_bytes + dropout * (2 * act_bytes + 1)))


KERNELS_PER_LAYER_FORWARD = 12
"""Kernels one layer's forward launches in a fused Megatron/TE layer: QKV, attention, output
projection, MLP's two (or three, fused to two) GEMMs, activation, two norms, two fused
bias-dropout-adds, rotary, and a cast — about 12; the backward launches about twice as many."""


def kernel_overhead_s(n_kernels, overhead_s):
    """A fixed cost per kernel (launch latency and the partial last wave): n · t_k. It is what
    makes a micro-batch sliced thinner (more TP, more CP, smaller b) less efficient per token."""
    return n_kernels * overhead_s


def optimizer_step_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard_optimizer,
                         bytes_per_moment=4):
    """Adam's step streams, per parameter it owns: the gradient in, the fp32 master and the
    moments m and v (b_m bytes each) in and out, the new 16-bit weight out:
    (g + 2·(4 + 2·b_m) + w)·Ψ/d_opt; 24 B of the states at fp32 moments, 16 at bf16 (Megatron's
    precision-aware optimizer, Transformer Engine FusedAdam exp_avg_dtype/exp_avg_sq_dtype)."""
    states = 2 * (MASTER_BYTES + 2 * bytes_per_moment)
    return (bytes_per_grad + states + bytes_per_weight) * params / dp_shard_optimizer


MASTER_BYTES = 4
"""The fp32 master copy of a parameter Adam steps."""


FLASH_BACKWARD_FACTOR = 2.5
"""FlashAttention's backward runs five matmuls (it recomputes S = QKᵀ, then dV, dP, dQ, dK)
against the forward's two: 2.5× the forward's FLOPs (Dao 2023, FlashAttention-2 §2.3–3.1)."""
CLASSIC_BACKWARD_FACTOR = 2.0
"""A materialised attention keeps P, so its backward runs four matmuls: 2× the forward."""


def _forward_width(qk_head_dim, v_head_dim):
    """The head width the attention forward's products run over: QKᵀ d_qk, P·V d_v."""
    return qk_head_dim + v_head_dim


def _backward_width(qk_head_dim, v_head_dim):
    """The head width a flash backward's products run over: S = QKᵀ again, dQ and dK (d_qk
    each), dV and dP (d_v each)."""
    return 3 * qk_head_dim + 2 * v_head_dim


def flash_backward_flops_factor(qk_head_dim, v_head_dim):
    """A flash backward's FLOPs over its forward's with query/key heads d_qk wide and value heads
    d_v: the forward runs QKᵀ (d_qk) and P·V (d_v); the backward recomputes S = QKᵀ and runs dQ
    and dK (d_qk each), dV and dP (d_v each):

        f = (3·d_qk + 2·d_v) / (d_qk + d_v)

    FLASH_BACKWARD_FACTOR (2.5) where d_qk = d_v; MLA's 192/128 (DeepSeek-V2 §2.1.2): 2.6."""
    return _backward_width(qk_head_dim, v_head_dim) / _forward_width(qk_head_dim, v_head_dim)


def triton_padded_head_dim(head_dim):
    """The head width FlexAttention's Triton kernel computes at: the next power of two,
    2^⌈log₂ d⌉, its tiles loading the columns beyond d masked to zero (torch/_inductor/kernel/
    flex/common.py QK_HEAD_DIM_ROUNDED, V_HEAD_DIM_ROUNDED = next_power_of_2(…) — l.294/301 @
    v2.9.0, l.325/332 @ v2.10.0; the templates' Q·Kᵀ, dQ, dK run QK_HEAD_DIM_ROUNDED wide, P·V,
    dV, dP V_HEAD_DIM_ROUNDED: flex_attention.py.jinja, flex_backwards.py.jinja). 192 → 256."""
    return 2 ** _ops.ceil(_ops.log2(head_dim))


def padded_attention_work(qk_head_dim, v_head_dim):
    """The work a kernel that rounds head widths up (triton_padded_head_dim: P) runs over the
    attention's FLOPs, (forward, backward):

        π_f = (P(d_qk) + P(d_v)) / (d_qk + d_v),   π_b = (3·P(d_qk) + 2·P(d_v)) / (3·d_qk + 2·d_v)

    the products' widths as in flash_backward_flops_factor. 1 at power-of-two widths; MLA's
    192/128: 384/320 = 1.2 and 1024/832 = 1.2308."""
    p_qk, p_v = triton_padded_head_dim(qk_head_dim), triton_padded_head_dim(v_head_dim)
    return (_forward_width(p_qk, p_v) / _forward_width(qk_head_dim, v_head_dim),
            _backward_width(p_qk, p_v) / _backward_width(qk_head_dim, v_head_dim))


def attention_backward_ratio(flops_factor, forward_efficiency, backward_efficiency):
    """The attention products' backward time over their forward time:

        r = f · η_fwd / η_bwd

    f the backward's FLOPs over the forward's (FLASH_BACKWARD_FACTOR, CLASSIC_BACKWARD_FACTOR),
    η each direction's share of the peak (the kernel's measured figures; r = f where they are
    equal). FlashAttention's backward runs below its forward's rate: 2.88× the forward's time
    for cuDNN's and 2.87× for FlashAttention-2's at H100, head dim 128, 16k tokens, no mask,
    against the 2.5× of its FLOPs (Shah et al. 2024, FlashAttention-3, the forward and backward
    figures); causal, cuDNN's 2.98–3.12× at 8k–4k (cudnn-frontend's H200 benchmark)."""
    return flops_factor * forward_efficiency / backward_efficiency


def backward_layer_s(forward_other_s, attention_s, attention_backward_factor):
    """One layer's backward: input and weight gradients, twice the forward for the GEMMs and the
    memory-bound work, attention_backward_factor × the attention products."""
    return 2 * forward_other_s + attention_backward_factor * attention_s


def head_time_s(head_flops, logits_bytes, peak_flops_per_s, efficiency, hbm_bytes_per_s,
                hbm_efficiency):
    """The LM head and loss on the last stage: its GEMM forward and backward (3× the forward's
    FLOPs) and three passes over the fp32 logits (write, softmax, gradient)."""
    return (3 * compute_time_s(head_flops, peak_flops_per_s, efficiency)
            + memory_bound_time_s(3 * logits_bytes, hbm_bytes_per_s, hbm_efficiency))


def exposed_time_s(comm_s, overlappable_compute_s):
    """Communication that runs beside compute shows only where it is longer: max(0, comm − compute)."""
    return _ops.maximum(0, comm_s - overlappable_compute_s)


def step_time_s(stage_microbatch_s, slots, dp_exposed_s, optimizer_s):
    """Step = one stage's time for a whole micro-batch × the schedule's slots (m + (p − 1)/v)
    + the data-parallel tail compute cannot hide + the optimizer step."""
    return stage_microbatch_s * slots + dp_exposed_s + optimizer_s


def mfu(model_flops_per_step, step_s, n_gpus, peak_flops_per_s):
    """Model FLOPs utilisation: model FLOPs / (step time · GPUs · peak)."""
    return model_flops_per_step / (step_s * n_gpus * peak_flops_per_s)


def tokens_per_s(gbs, seq_len, step_s):
    """B·s / step time."""
    return gbs * seq_len / step_s
