"""Floating-point operations, from the shapes (a multiply-add is 2 FLOPs).

Per layer and micro-batch the forward pass runs each weight matrix once over b·s tokens,
2·b·s·(matmul weights), plus the two attention matmuls QKᵀ and P·V, 2·2·b·s²·a·d_h; the LM head
adds 2·b·s·V·h. The backward pass costs twice the forward (gradients of inputs and of weights).
For GPT (12h² matmul weights, a·d_h = h) three passes give Korthikanti 2022's model FLOPs
72·B·L·s·h²·(1 + s/6h + V/12hL), and with full recompute's extra forward Narayanan 2021 eq. 3,
96·B·s·L·h²·(1 + s/6h + V/16Lh).

Convention: *model* FLOPs (MFU's numerator) are counted two ways, named by MFU_CONVENTIONS and
picked by the `causal_skip` argument of layer_attention_flops: "full" counts the attention
matmuls over the whole s×s square (Narayanan 2021, Korthikanti 2022, PaLM), "causal" counts the
unmasked half, as current Megatron-Core logs it (megatron/training/training.py
num_floating_point_operations, "causal mask (only half of the mask is non-zero)", NVIDIA/Megatron-LM
@ d98e8a64dd). The two differ by L·B·3·2·b·s²·a·d_h/… — little at 4k tokens, much at 128k. The time
model uses the FLOPs actually executed: a causal fused (flash) kernel skips the masked half, the
classic implementation computes the whole square.
"""


from __future__ import annotations

MFU_CONVENTIONS = {"causal": 1, "full": 0}
"""The model-FLOP conventions: each name → the causal_skip its attention FLOPs are counted with."""
DEFAULT_MFU_CONVENTION = "causal"  # what Megatron-Core logs (see above)


def matmul_weight_params_active(attention_weights, mlp_weights_per_expert, top_k, router):
    """Weights each token meets in one layer: attention, top-k experts' MLPs (1 for dense), router."""
    return attention_weights + top_k * mlp_weights_per_expert + router


def layer_matmul_flops(seq_len, mbs, active_weights):
    """Forward matmul FLOPs of one layer for one micro-batch: 2·b·s·(weights met per token).
    GPT: 2·b·s·12h² = 24bsh²."""
    return 2 * mbs * seq_len * active_weights


def layer_attention_flops(seq_len, mbs, n_heads, head_dim, causal_skip=0):
    """Forward QKᵀ and P·V for one micro-batch: 4·b·s²·a·d_h / (1 + causal_skip).
    causal_skip = 0 counts the whole square (GPT: 4bs²h); 1 halves it, for a causal kernel that
    skips the masked blocks."""
    return 4 * mbs * seq_len**2 * n_heads * head_dim / (1 + causal_skip)


def head_flops(seq_len, mbs, vocab, hidden):
    """Forward LM head (logits) for one micro-batch: 2·b·s·V·h."""
    return 2 * mbs * seq_len * vocab * hidden


def model_flops(gbs, seq_len, n_layers, layer_matmul_per_seq, layer_attention_per_seq,
                head_per_seq):
    """Model FLOPs per step (no recompute): 3·B·(L·(layer matmuls + attention) + head),
    with the per-sequence (b = 1) forward figures."""
    return 3 * gbs * (n_layers * (layer_matmul_per_seq + layer_attention_per_seq) + head_per_seq)


def recompute_flops(gbs, n_layers, layer_matmul_per_seq, layer_attention_per_seq,
                    matmul_share, attention_share):
    """Extra forward work recomputation adds per step: B·L·(share·matmuls + share·attention).
    full: both shares 1 (the whole layer forward again); selective: attention only (QKᵀ, P·V)."""
    return gbs * n_layers * (matmul_share * layer_matmul_per_seq
                             + attention_share * layer_attention_per_seq)


def flash_backward_flops(gbs, n_layers, layer_attention_per_seq, flash):
    """FLOPs a flash kernel's backward adds by recomputing S = QKᵀ: half the attention forward
    per layer and sequence, B·L·att/2 (flash = 1; 0 for a materialised attention)."""
    return gbs * n_layers * flash * layer_attention_per_seq / 2


def narayanan_flops(gbs, seq_len, n_layers, hidden, vocab):
    """Narayanan et al. 2021 eq. 3, FLOPs per iteration with full recompute for the GPT shape:
    96·B·s·l·h²·(1 + s/6h + V/16lh)."""
    return 96 * gbs * seq_len * n_layers * hidden**2 * (
        1 + seq_len / (6 * hidden) + vocab / (16 * n_layers * hidden))


def korthikanti_model_flops(gbs, seq_len, n_layers, hidden, vocab):
    """Korthikanti et al. 2022 §6, model FLOPs per iteration for the GPT shape:
    72·B·L·s·h²·(1 + s/6h + V/12hL)."""
    return 72 * gbs * n_layers * seq_len * hidden**2 * (
        1 + seq_len / (6 * hidden) + vocab / (12 * hidden * n_layers))


# ---------------------------------------------------------------------------------------------
# Mixture of experts and MLA. MFU convention for MoE: model FLOPs count the parameters a token
# actually meets, the *active* ones (top-k routed experts, the shared experts, the router's h×E
# scoring GEMM), never the E − k experts it skips, and no capacity padding or dropped tokens;
# this is the convention of DeepSeek-V3's and Megatron-Core's MoE MFU figures (6·N_active per
# token plus attention).


def moe_matmul_weights_active(attention_weights, expert_weights, top_k, shared_weights, router):
    """Weights one token meets in a MoE layer: attention + k·(one expert) + shared experts +
    router h·E. With shared_weights = 0 this is matmul_weight_params_active."""
    return attention_weights + top_k * expert_weights + shared_weights + router


def mla_matmul_weights(hidden, n_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
                       qk_rope_head_dim, v_head_dim, has_q_lora=1):
    """The weight matrices of one MLA block (the latent norms are not matmuls):
    has_q_lora·h·r_q + q_in·a·(d_n + d_r) + h·(r_kv + d_r) + r_kv·a·(d_n + d_v) + a·d_v·h,
    q_in = r_q or h. DeepSeek-V3: 187,105,280 (the block's 187,107,328 less 1536 + 512)."""
    q_in = has_q_lora * q_lora_rank + (1 - has_q_lora) * hidden
    return (has_q_lora * hidden * q_lora_rank
            + q_in * n_heads * (qk_nope_head_dim + qk_rope_head_dim)
            + hidden * (kv_lora_rank + qk_rope_head_dim)
            + kv_lora_rank * n_heads * (qk_nope_head_dim + v_head_dim)
            + n_heads * v_head_dim * hidden)


def mla_attention_flops(seq_len, mbs, n_heads, qk_head_dim, v_head_dim, causal_skip=0):
    """Forward QKᵀ (per head d_qk = d_n + d_r wide) and P·V (d_v wide) for one micro-batch, in
    training's non-absorbed form (keys and values decompressed, DeepSeek-V2 §2.1.2):
    2·b·s²·a·(d_qk + d_v) / (1 + causal_skip). With d_qk = d_v = d_h this is
    layer_attention_flops."""
    return 2 * mbs * seq_len**2 * n_heads * (qk_head_dim + v_head_dim) / (1 + causal_skip)


def mixed_model_flops(gbs, n_dense_layers, n_moe_layers, dense_matmul_per_seq,
                      moe_matmul_per_seq, attention_per_seq, head_per_seq):
    """Model FLOPs per step of a model whose layers differ in their MLP (DeepSeek's first dense
    layers, interleaved MoE): 3·B·(L_d·mm_dense + L_m·mm_moe + (L_d + L_m)·attention + head).
    With L_m = 0 (or mm_moe = mm_dense) this is model_flops."""
    return 3 * gbs * (n_dense_layers * dense_matmul_per_seq + n_moe_layers * moe_matmul_per_seq
                      + (n_dense_layers + n_moe_layers) * attention_per_seq + head_per_seq)
