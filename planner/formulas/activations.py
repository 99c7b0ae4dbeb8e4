"""Activation memory per GPU (Korthikanti et al. 2022, §4 and Table 2), generalised.

Per transformer layer and micro-batch, with s sequence length, b micro-batch size, h hidden size,
a heads, t tensor-parallel size, and 16-bit activations (2 bytes) plus 1-byte dropout masks, the
paper counts 34·sbh + 5·a·s²·b bytes:

    attention: 11sbh + 5as²b   (QKV input 2sbh; Q, K 4sbh; softmax 2as²b, its dropout mask as²b
                                and output 2as²b; V 2sbh; output-projection input 2sbh; mask sbh)
    MLP:       19sbh           (input 2sbh; GELU input 8sbh; GELU output 8sbh; mask sbh)
    norms:      4sbh

Tensor parallelism splits everything inside the attention and MLP blocks (24sbh and 5as²b) and
leaves 10sbh (the blocks' inputs, the norms' inputs, the dropout masks) whole; sequence
parallelism splits those too. Table 2:

    no parallelism          sbh(34 + 5as/h)
    tensor parallel         sbh(10 + 24/t + 5as/(ht))
    tensor + sequence       sbh(34/t + 5as/(ht))
    tensor, selective       sbh(10 + 24/t)
    tensor + seq, selective sbh·34/t
    full recompute          2sbh   (only the layer's input)

Generalised here without changing those values: Q is a·d_h wide and K, V are k·d_h wide (GQA),
the MLP stores n_mlp tensors of width f (GELU: its input and output; SwiGLU: gate, up and their
product), dropout masks exist only when the model uses dropout, and a fused (flash) attention
kernel stores no s×s matrix, only the fp32 log-sum-exp per row and head (4·a·s·b bytes).
Context parallelism splits the sequence c ways, so every term is divided by c.
"""

from __future__ import annotations

from .choices import Attention, Recompute

MASK_BYTES = 1  # dropout masks are bytes (Korthikanti 2022 §4.1)
SOFTMAX_STATS_BYTES = 4  # flash attention keeps an fp32 log-sum-exp per query row and head


def replicated_activation_bytes(seq_len, mbs, hidden, dropout, act_bytes=2):
    """What TP does not split: the two norms' inputs (2·2sbh with 2-byte activations), the
    attention and MLP inputs (2·2sbh) and two dropout masks (2sbh):  sbh(4·act + 2·dropout) = 10sbh."""
    return seq_len * mbs * hidden * (4 * act_bytes + 2 * MASK_BYTES * dropout)


def sharded_activation_bytes(seq_len, mbs, hidden, n_heads, n_kv_heads, head_dim, ffn,
                             n_mlp_matrices, act_bytes=2):
    """What TP splits, before dividing by t: Q and the output-projection input (a·d_h wide each),
    K and V (k·d_h each), and n_mlp tensors of width f:  act·sb·(d_h(2a + 2k) + n_mlp·f).
    For GPT (k = a, a·d_h = h, f = 4h, n_mlp = 2) this is 2sb(4h + 8h) = 24sbh."""
    return act_bytes * seq_len * mbs * (head_dim * (2 * n_heads + 2 * n_kv_heads)
                                        + n_mlp_matrices * ffn)


def score_activation_bytes(seq_len, mbs, n_heads, dropout, attention: Attention, act_bytes=2):
    """The attention core, before dividing by t.

    classic: softmax output (2as²b) + with dropout its mask (as²b) and output (2as²b) = 5as²b;
    flash: the fp32 log-sum-exp only, 4·a·s·b."""
    if attention is Attention.CLASSIC:
        return n_heads * seq_len**2 * mbs * (act_bytes + dropout * (MASK_BYTES + act_bytes))
    return SOFTMAX_STATS_BYTES * n_heads * seq_len * mbs


def layer_activation_bytes(seq_len, mbs, hidden, n_heads, n_kv_heads, head_dim, ffn,
                           n_mlp_matrices, dropout, tp, cp, sequence_parallel: bool,
                           recompute: Recompute, attention: Attention, act_bytes=2):
    """Bytes one layer keeps for the backward pass of one micro-batch, on one GPU.

    none:      replicated/t_sp + sharded/t + scores/t
    selective: replicated/t_sp + sharded/t           (the core is recomputed)
    full:      act·sbh/t_sp                          (the layer's input only)
    where t_sp = t with sequence parallelism and 1 without; everything over c (context parallel)."""
    s = seq_len / cp
    replicated = replicated_activation_bytes(s, mbs, hidden, dropout, act_bytes)
    sp_divisor = tp if sequence_parallel else 1
    if recompute is Recompute.FULL:
        return act_bytes * s * mbs * hidden / sp_divisor
    kept = (replicated / sp_divisor
            + sharded_activation_bytes(s, mbs, hidden, n_heads, n_kv_heads, head_dim, ffn,
                                       n_mlp_matrices, act_bytes) / tp)
    if recompute is Recompute.SELECTIVE:
        return kept
    return kept + score_activation_bytes(s, mbs, n_heads, dropout, attention, act_bytes) / tp


def embedding_activation_bytes(seq_len, mbs, hidden, dropout, tp, cp, sequence_parallel: bool):
    """The first stage's embedding dropout mask, sbh bytes per micro-batch (/t with sequence
    parallelism) — Korthikanti 2022 §4.3's sbhp/t for p in-flight micro-batches."""
    sp_divisor = tp if sequence_parallel else 1
    return MASK_BYTES * dropout * seq_len / cp * mbs * hidden / sp_divisor


def logits_activation_bytes(seq_len, mbs, vocab_padded, tp, cp, logit_bytes=4):
    """The last stage's fp32 logits for the cross-entropy, 4·s·b·V/t (Korthikanti 2022 §4.3)."""
    return logit_bytes * seq_len / cp * mbs * vocab_padded / tp
