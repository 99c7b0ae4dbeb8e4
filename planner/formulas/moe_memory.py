"""What a MoE layer and an MLA attention keep for the backward pass as torchtitan runs them
eagerly (bf16 activations, fp32 router), exact to the byte against the PyTorch oracle
(tests/oracle/test_moe_mla_layers.py), per GPU and micro-batch.

T tokens the layer sees, R rows its local experts receive (T·k without expert parallelism; with
it the busiest rank's λ·T·k, moe_layer.rank_load), h hidden, E experts, k experts per token,
f_e expert width, n_s shared experts of width f_s; MLA's r_q, r_kv, d_n, d_r, d_qk = d_n + d_r,
d_v and a heads. The layer's input (the norm's output) is counted by the caller, as for a
dense MLP.

Structure: torchtitan @ b5bcd76, torchtitan/models/common/moe.py (TokenChoiceTopKRouter,
GroupedExperts, MoE), torchtitan/models/common/token_dispatcher.py (LocalTokenDispatcher),
torchtitan/models/deepseek_v3/model.py (Attention, MLA). What autograd keeps follows from
PyTorch's derivative formulas (tools/autograd/derivatives.yaml): a product keeps each operand
the other's gradient needs, an index keeps its indices, a cast nothing.
"""

from __future__ import annotations

from . import _ops

INDEX_BYTES = 8
"""int64 indices (topk, argsort)."""

FP32 = 4


def router_saved_bytes(tokens, hidden, n_experts, top_k, route_norm=1):
    """The router: the fp32 copy of the input the gate GEMM runs on under fp32 autocast (4h a
    token) and the gate's fp32 weight copy (4·E·h, once), the score function's output (4E),
    the top-k indices the gather keeps (8k), and with normalisation (route_norm = 1) the
    gathered scores and their sum (4k + 4):
        T·(4h + 4E + 8k + route_norm·(4k + 4)) + 4·E·h"""
    return (tokens * (FP32 * hidden + FP32 * n_experts + INDEX_BYTES * top_k
                      + route_norm * (FP32 * top_k + FP32))
            + FP32 * n_experts * hidden)


def sort_saved_bytes(tokens, top_k):
    """The local reorder: argsort's order (gathering the scores) and the token index of each
    row (gathering the inputs, scatter-adding the outputs), int64 each:  16·T·k."""
    return 2 * INDEX_BYTES * tokens * top_k


def expert_saved_bytes(rows, hidden, expert_ffn, act_bytes=2):
    """The grouped SwiGLU experts on R rows: the sorted input rows (the w1 and w3 GEMMs' A),
    w1's output (silu's input), silu's output and w3's output (the product's operands) and the
    product (w2's A):  R·act·(h + 4·f_e). Every row counts, so the busiest rank's R sets it."""
    return rows * act_bytes * (hidden + 4 * expert_ffn)


def combine_saved_bytes(rows, hidden):
    """The combine: the expert outputs are scaled by their scores in fp32, so the product keeps
    the fp32 copy of the outputs (4h a row) and the scores (4 a row):  R·(4h + 4)."""
    return rows * (FP32 * hidden + FP32)


def shared_expert_saved_bytes(tokens, shared_ffn, n_shared_experts, act_bytes=2):
    """The shared experts, one SwiGLU MLP of width n_s·f_s on all T tokens (its input is the
    layer's): w1's output, silu's output, w3's output, the product:  T·act·4·n_s·f_s."""
    return tokens * act_bytes * 4 * n_shared_experts * shared_ffn


def moe_saved_bytes(tokens, rows, hidden, n_experts, top_k, expert_ffn, shared_ffn,
                    n_shared_experts, route_norm=1, act_bytes=2):
    """A torchtitan MoE layer's MLP half, eager, no AC:
        router + sort + experts(R) + combine(R) + shared
    With ep = 1, R = T·k."""
    return (router_saved_bytes(tokens, hidden, n_experts, top_k, route_norm)
            + sort_saved_bytes(tokens, top_k)
            + expert_saved_bytes(rows, hidden, expert_ffn, act_bytes)
            + combine_saved_bytes(rows, hidden)
            + shared_expert_saved_bytes(tokens, shared_ffn, n_shared_experts, act_bytes))


def dispatch_saved_bytes(tokens, rows, hidden, n_experts, top_k, route_norm=1, act_bytes=2):
    """What a torchtitan MoE layer keeps beyond the f-wide SwiGLU tensors a dense eager MLP of
    width λ·k·f_e + n_s·f_s would keep (those are counted by the dense eager formula): the
    router, the sort, the gathered input rows and the fp32-scored combine:
        router + sort + R·act·h + combine(R)"""
    return (router_saved_bytes(tokens, hidden, n_experts, top_k, route_norm)
            + sort_saved_bytes(tokens, top_k) + rows * act_bytes * hidden
            + combine_saved_bytes(rows, hidden))


def rmsnorm_saved_bytes(tokens, width, act_bytes=2):
    """An fp32-computed RMSNorm (torchtitan's `_norm(x.float()).type_as(x) * weight`): the fp32
    input copy, the fp32 1/rms, the normalised value cast back (the weight product's operand)
    and the product (the next GEMM's input):  T·(4w + 4 + 2·act·w)."""
    return tokens * (FP32 * width + FP32 + 2 * act_bytes * width)


def mla_saved_bytes(tokens, n_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
                    qk_rope_head_dim, v_head_dim, act_bytes=2):
    """torchtitan's MLA attention with a flash kernel, eager, no AC (its input counted by the
    caller): the two latent norms (rmsnorm_saved_bytes of r_q and r_kv; the latents themselves
    are not kept: the norms keep their fp32 copies), the kernel's Q and K (a·d_qk each), V as a
    view of the whole wkv_b output (a·(d_n + d_v): K's no-PE half shares its buffer), the
    output (a·d_v, wo's input too) and the fp32 log-sum-exp (a):
        norms + T·(act·a·(2·d_qk + d_n + 2·d_v) + 4a)
    RoPE multiplies by constant angles and keeps nothing; the rotary key k_R lives in K."""
    qk = qk_nope_head_dim + qk_rope_head_dim
    return (rmsnorm_saved_bytes(tokens, q_lora_rank, act_bytes)
            + rmsnorm_saved_bytes(tokens, kv_lora_rank, act_bytes)
            + tokens * (act_bytes * n_heads * (2 * qk + qk_nope_head_dim + 2 * v_head_dim)
                        + FP32 * n_heads))


def torchtitan_flex_sac_block_bytes(tokens, rows_in, rows_out, hidden, shared_ffn,
                                    n_shared_experts, tp=1, sequence_parallel=False, act_bytes=2):
    """What a torchtitan DeepSeek-V3 MoE block keeps for backward under per-op selective AC on a
    flavour with flex attention (16B, 236B, 671B) and the model not compiled, T tokens of the
    block on the GPU, R_in routed rows the dispatch all-to-all brings it, R_out = T·k it sends:

        T·(2·(act·h + 4)/t_sp + 2·act·h + act·(n_s·f_s/t + h)·[n_s > 0]) + act·h·(R_in + R_out)

    `_apply_op_sac_to_transformer_block_with_flex` wraps the `moe` module in op SAC and the MLA
    `attention` in full AC, leaving the two `nn.RMSNorm`s and the residual adds outside: each norm
    keeps its input and fp32 rstd (PyTorch >= 2.9 runs `rms_norm` on CUDA as `_fused_rms_norm`,
    whose autograd node keeps input, weight, rstd); the attention keeps its input, the MLA
    tensors are recomputed; the MoE keeps its input and the outputs the op policy saves: no
    router mm (`per_op_sac_force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]` recomputes
    it uncounted), the shared experts' first and third mm (w1, n_s·f_s wide; w2, h wide; every
    second mm is recomputed), and the outputs of both `all_to_all_single`s with expert
    parallelism (R_in·h dispatched rows, R_out·h combined; 0 without it); the grouped GEMMs
    (`torch._grouped_mm`, not in the save list), the router's scores and the fp32-scored
    combine are recomputed.  At DeepSeek-V3 16B's shape (h 2048, n_s·f_s 2816, k 6; T 16384,
    λ 1.19, ep 8) 1.22 GiB a layer, where the Korthikanti-style MLA set is 3.24 GiB.

    Assumptions: bf16 activations (FSDP2 mixed precision); t = 1 measured; for t > 1 the norms
    run on the sequence shard (t_sp = t with sequence parallelism) and the attention and MoE
    inputs are gathered to the full sequence, derived from the TP plan, not measured.
    Source: pytorch/torchtitan @ 0cfbd0b3c (2025-10-02) torchtitan/distributed/
    activation_checkpoint.py, models/deepseek_v3/infra/parallelize.py (`_op_sac_save_list`),
    models/moe.py, distributed/expert_parallel.py, config/job_config.py; measured to the byte by
    tests/oracle/test_torchtitan_moe_sac.py, whose oracle block equals torchtitan's own at
    0cfbd0b3c run on the CPU without expert parallelism."""
    sp = tp if sequence_parallel else 1
    shared = _ops.minimum(1, n_shared_experts) * (n_shared_experts * shared_ffn / tp + hidden)
    return (tokens * (2 * (act_bytes * hidden + FP32) / sp + 2 * act_bytes * hidden
                      + act_bytes * shared)
            + act_bytes * hidden * (rows_in + rows_out))


def torchtitan_sac_mla_moe_block_bytes(tokens, rows_in, rows_out, hidden, n_heads, q_lora_rank,
                                       kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
                                       v_head_dim, top_k, shared_ffn, n_shared_experts, tp=1,
                                       sequence_parallel=False, act_bytes=2):
    """What a torchtitan DeepSeek-V3 MLA + MoE block keeps for backward under its per-op
    selective AC as torchtitan >= v0.2.1 applies it (0.2.2, 0.3.0: the releases `--emit
    torchtitan` writes for): the WHOLE block in one op-SAC region, T tokens, R_in routed rows the
    dispatch all-to-all brings, R_out = T·k it sends, q = [r_q > 0]:

        T·(act·h/t_sp + act·a·(2·d_qk + d_n + 2·d_v)/t + 4a/t + 12k
           + (1 − q)·act·a·d_qk/t + q·act·(r_q + r_kv + d_r + h)
           + [n_s > 0]·act·(n_s·f_s/t + (1 − q)·h)) + act·h·(R_in + R_out)

    The block's input (the checkpoint's); the compiled flex-attention region, an
    `inductor_compiled_code` op in the save list, whose outputs are its AOT forward's: q and k
    (a·d_qk each), V viewing the whole wkv_b output (a·(d_n + d_v)), the output (a·d_v), the
    fp32 log-sum-exp; `topk`'s fp32 values and int64 indices; every odd mm of the block counted
    from its first (the router gate forced to recompute, uncounted): without q compression wq,
    wkv_b (V's buffer, counted once), the shared experts' w1 and w2; with it wq_a, wkv_a, wo
    and the shared w3 — the MLA's 4 or 5 mms set the shared experts' parity; the
    `all_to_all_single` outputs with expert parallelism. Rerun: the norms (now inside the
    region), RoPE, the router, the grouped expert GEMMs (`_grouped_mm` is not saved), the
    combine.  Node-limited routing's two extra topk (236B, 671B: 12·(2G + G_lim) B a token,
    ≤ 0.2 % of the block) and the EP split counts' CUDA→CPU copy (E integers) are left out.
    16B (h 2048, a 16, d 128/64/128, r_kv 512, k 6, n_s·f_s 2816) at T 16384, λ 1.19, ep 8:
    T·(4096 + 24,576 + 64 + 72 + 6144 + 9728) + 4096·2.19·6·T ≈ 98,500·T = 1.50 GiB a layer,
    where the pre-v0.2.1 flex path keeps 1.22 GiB (torchtitan_flex_sac_block_bytes).

    Assumptions: bf16 activations; t = 1 and no expert parallelism measured; for t > 1 the
    input on the sequence shard (t_sp = t with sequence parallelism), head-split tensors and
    the shared experts' width over t, the latent and h-wide mm outputs whole — derived, not
    measured; the all-to-all outputs as their rows.
    Source: torchtitan 0.3.0 torchtitan/distributed/activation_checkpoint.py
    (`_get_default_save_ops` l.31-94: torch's compute_intensive_ops, flex_attention, linear,
    topk, inductor_compiled_code, all_to_all_single, reduce_scatter; `SelectiveAC._wrap_block`
    l.214-287: every second mm/linear, `force_recompute_mm_shapes_by_fqns` ["moe.router.gate"]),
    models/common/attention.py `FlexAttention` (`wrap_inductor_compiled_regions`),
    models/deepseek_v3/model.py, models/common/moe.py. 0.2.2's `_apply_op_sac` wraps the whole
    block likewise, its flex region compiled and wrapped the same way (`inductor_compiled_code`
    in deepseek_v3/infra/parallelize.py `_op_sac_save_list`), but saves no topk: 12k B a token
    less there (0.2 % of the 16B block), not told apart. Measured to the byte by
    tests/oracle/test_torchtitan030_sac.py on torchtitan 0.3.0's own block and SelectiveAC."""
    sp = tp if sequence_parallel else 1
    q = _ops.minimum(1, q_lora_rank)
    qk = qk_nope_head_dim + qk_rope_head_dim
    attention = (act_bytes * n_heads * (2 * qk + qk_nope_head_dim + 2 * v_head_dim)
                 + FP32 * n_heads) / tp
    mms = ((1 - q) * act_bytes * n_heads * qk / tp
           + q * act_bytes * (q_lora_rank + kv_lora_rank + qk_rope_head_dim + hidden))
    shared = _ops.minimum(1, n_shared_experts) * act_bytes * (
        n_shared_experts * shared_ffn / tp + (1 - q) * hidden)
    return (tokens * (act_bytes * hidden / sp + attention + (FP32 + INDEX_BYTES) * top_k + mms
                      + shared)
            + act_bytes * hidden * (rows_in + rows_out))
