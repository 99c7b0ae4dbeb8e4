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

from ._ops import le
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


# --- What frameworks really save (proven by the PyTorch oracle in tests/oracle/) ---------------
#
# Korthikanti's count above describes Megatron-Core with fused kernels (Transformer Engine's
# LayerNormLinear, flash attention, fused bias-GELU/SwiGLU): tests/oracle/test_fused_layers.py
# builds those kernels' saved sets as custom autograd Functions and finds it within 0.1 %. The
# functions below are what the oracle measures where a framework saves something else: eager
# PyTorch blocks (torchtitan), torchtitan's per-op selective AC, and the loss and LM head.

FP32_BYTES = 4  # fp32 copies, RMSNorm statistics, log-sum-exp, log-probabilities


def eager_layer_activation_bytes(seq_len, mbs, hidden, n_heads, n_sdpa_kv_heads, head_dim, ffn, tp, cp,
                                 sequence_parallel: bool, act_bytes=2):
    """Bytes an eager (uncompiled) torchtitan Llama block saves for backward with no AC.

    Per RMSNorm (`_norm(x.float()).type_as(x) * weight`): its fp32 input copy 4sbh, the fp32
    rstd 4sb and the normalised 16-bit tensor act·sbh (kept by `* weight` for the weight's
    gradient), all on the sequence shard (/t_sp); and its output act·sbh, kept by the next matmul
    at full sequence (DTensor saves the all-gathered input).  Attention: RoPE'd Q (a·d_h), K and V
    as SDPA receives them (k' = a after `repeat_kv`, k with native GQA), the SDPA output (a·d_h,
    which is also `wo`'s input: CUDA flash returns it in [b, s, a, d] order), and the fp32
    log-sum-exp 4·a·s·b.  SwiGLU keeps w1(x), silu(w1(x)), w3(x) and their product: 4·act·sbf.

        2·[(4 + act)·sbh/t_sp + 4sb/t_sp + act·sbh] + act·sb·d_h·(2a + 2k')/t + 4asb/t + 4·act·sbf/t

    with s the sequence over c.  For t = 1 this is 2sb(8h + 4) + 2sb·d_h(2a + 2k') + 4asb + 8sbf
    (act = 2).  Source: measured by tests/oracle/test_torchtitan_block.py on the structure of
    torchtitan `torchtitan/models/llama/model.py @ ba24697` (repeat_kv, k' = a); the t > 1 and
    sequence-parallel terms follow torchtitan's DTensor plan and are not measured."""
    s = seq_len / cp
    sp = tp if sequence_parallel else 1
    norms = 2 * (s * mbs * hidden * (FP32_BYTES + act_bytes) / sp + FP32_BYTES * s * mbs / sp
                 + act_bytes * s * mbs * hidden)
    attention = (act_bytes * s * mbs * head_dim * (2 * n_heads + 2 * n_sdpa_kv_heads)
                 + SOFTMAX_STATS_BYTES * n_heads * s * mbs) / tp
    mlp = 4 * act_bytes * s * mbs * ffn / tp
    return norms + attention + mlp


def torchtitan_sac_layer_activation_bytes(seq_len, mbs, hidden, n_heads, n_kv_heads, head_dim, ffn, tp,
                                          cp, sequence_parallel: bool, act_bytes=2):
    """Bytes a torchtitan Llama block keeps under per-op selective AC (`--activation_checkpoint.mode
    selective --activation_checkpoint.selective_ac_option op`).

    The policy saves the outputs of the ops in `_save_list` (mm, flash/efficient SDPA,
    reduce_scatter, abs, max) except every second mm, and recomputes everything else.  A block
    calls its mms in the order wq, wk, wv, wo, w1, w3, w2, so it keeps wq, wv, w1 and w2; plus the
    SDPA output and its fp32 log-sum-exp, and the checkpoint holds the block input:

        act·sbh/t_sp + act·sb·d_h·(a + k)/t + act·sbf/t + act·sbh + act·sb·a·d_h/t + 4asb/t
        + 2·act·sbh/t · 1[t > 1]            (sequence parallel only: the two reduce-scatter outputs)

    w2's saved output is h wide at the full sequence: with t > 1 it is RowwiseParallel's partial
    sum before its reduce-scatter.  For Llama 3.1 8B at t = 1 this is 0.46× the Korthikanti
    selective set.  Source: torchtitan `torchtitan/parallelisms/parallelize_llama.py @ ba24697`
    (`_save_list`, `_apply_ac_to_transformer_block`) and `torchtitan/distributed/
    activation_checkpoint.py @ b5bcd76` (same rule); t = 1 measured by
    tests/oracle/test_torchtitan_block.py, the t > 1 terms derived from the TP plan, not measured."""
    s = seq_len / cp
    sp = tp if sequence_parallel else 1
    block_input = act_bytes * s * mbs * hidden / sp
    kept_matmuls = (act_bytes * s * mbs * (head_dim * (n_heads + n_kv_heads) + ffn) / tp
                    + act_bytes * s * mbs * hidden)
    sdpa = (act_bytes * s * mbs * n_heads * head_dim + SOFTMAX_STATS_BYTES * n_heads * s * mbs) / tp
    kept = block_input + kept_matmuls + sdpa
    if sequence_parallel:
        kept = kept + 2 * act_bytes * s * mbs * hidden / tp * (1 - le(tp, 1))
    return kept


def fused_head_activation_bytes(seq_len, mbs, hidden, tp, cp, sequence_parallel: bool, act_bytes=2):
    """The final norm's input and the LM head's input, kept for backward by a fused stack
    (Megatron-Core: TE's norm keeps its input, ColumnParallelLinear its input shard):
    2·act·sbh/t_sp ≈ 4sbh.  Korthikanti 2022 §4.3 leaves it out; the oracle counts it (the fp32
    norm statistics, 4sb, are under 0.1 %).  Source: tests/oracle/test_loss_and_head.py."""
    sp = tp if sequence_parallel else 1
    return 2 * act_bytes * seq_len / cp * mbs * hidden / sp


def eager_head_activation_bytes(seq_len, mbs, hidden, tp, cp, sequence_parallel: bool, act_bytes=2):
    """The final RMSNorm and LM-head input of an eager torchtitan model: the norm's fp32 input copy,
    rstd and normalised 16-bit tensor on the sequence shard, and the head's (all-gathered) input:

        (4 + act)·sbh/t_sp + 4sb/t_sp + act·sbh          (= 8sbh + 4sb at t = 1)

    Source: measured by tests/oracle/test_loss_and_head.py and, inside a whole step,
    tests/oracle/test_step_peak.py (torchtitan model structure @ ba24697)."""
    s = seq_len / cp
    sp = tp if sequence_parallel else 1
    return (s * mbs * hidden * (FP32_BYTES + act_bytes) / sp + FP32_BYTES * s * mbs / sp
            + act_bytes * s * mbs * hidden)


def torchtitan_loss_peak_bytes(seq_len, mbs, vocab_padded, tp, cp):
    """Peak bytes of torchtitan's loss, `cross_entropy(pred.flatten(0, 1).float(), labels)`, with
    the 16-bit logits deleted before backward (`del pred`, torchtitan train.py @ ba24697,
    trainer.py @ b5bcd76):

        3 · 4·s·b·V/t = 12·s·b·V/t

    At the peak, inside the backward of log_softmax, three fp32 s×b×V tensors are alive: the saved
    log-probabilities, nll_loss's gradient and log_softmax's gradient.  (The forward holds at most
    10·s·b·V: 16-bit logits, their fp32 copy and the log-probabilities.)  With t > 1 loss parallel
    is assumed to keep the same three tensors per vocabulary shard (not measured).
    Source: measured by tests/oracle/test_loss_and_head.py."""
    return 3 * FP32_BYTES * seq_len / cp * mbs * vocab_padded / tp


def compiled_loss_peak_bytes(seq_len, mbs, vocab_padded, tp, cp, logit_bytes=2):
    """Peak bytes of torchtitan's loss compiled alone (`compile.components = ["loss"]`,
    `torch.compile(cross_entropy_loss)`, components/loss.py @ 0cfbd0b3c):

        2·act·s·b·V/t = 4·s·b·V/t

    The compiled graph saves its 16-bit input, the logits (so torchtitan's `del pred` frees
    nothing), with two fp32 values per row, and its backward writes the 16-bit gradient of the
    logits in one fused kernel: the fp32 upcast, the softmax and their gradients never exist as
    vocabulary-wide tensors.  The forward holds only the logits.  With t > 1 assumed per
    vocabulary shard under loss parallelism (not measured).  Source: measured on the CPU
    (Inductor, torch 2.13) by tests/oracle/test_torchtitan_moe_sac.py: the saved tensors and
    the backward kernel's one vocabulary-wide buffer; Triton on CUDA fuses the same graph."""
    return 2 * logit_bytes * seq_len / cp * mbs * vocab_padded / tp


def vocab_parallel_loss_peak_bytes(seq_len, mbs, vocab_padded, tp, cp, logit_bytes=2):
    """Peak bytes of Megatron-Core's vocab-parallel cross entropy on 16-bit logits:

        (act + 4)·s·b·V/t = 6·s·b·V/t

    Forward: the 16-bit logits and their fp32 copy (turned in place into the softmax, which is
    saved); backward: the fp32 gradient (computed in place in the saved softmax) and its cast to
    the logits' dtype.  Source: Megatron-LM `megatron/core/tensor_parallel/cross_entropy.py @
    d98e8a6` (`_VocabParallelCrossEntropy`); measured by tests/oracle/test_loss_and_head.py
    against megatron-core 0.16's own function and a one-rank emulation."""
    return (logit_bytes + FP32_BYTES) * seq_len / cp * mbs * vocab_padded / tp


def loss_phase_activation_bytes(n_layers, layer_bytes, head_bytes, loss_peak_bytes):
    """Activation bytes alive at a step's peak, during the loss's backward, on a GPU that holds the
    loss (one micro-batch, no pipeline): every layer's saved set, the final norm's and LM head's
    saved inputs, and the loss peak:  L·layer + head + loss.  Model states (parameters; no
    gradient exists yet) come on top.  Source: measured by tests/oracle/test_step_peak.py within
    5 % on a whole torchtitan-style step."""
    return n_layers * layer_bytes + head_bytes + loss_peak_bytes


def backward_gradient_bytes(seq_len, mbs, hidden, ffn, n_mlp, tp, cp, act_bytes=2):
    """Activation gradients alive while one layer's backward runs, beside every saved set:

        act·(s/c)·b·(h + (n_mlp − 1)·f/t)

    the residual stream's gradient (h wide, at the full sequence: under sequence parallelism the
    all-gathered output gradient) and, at the MLP's backward where they peak, the gradients of
    its f-wide intermediates (gate and up for a gated MLP, n_mlp = 3; the activation's input for
    a plain one, n_mlp = 2).  Korthikanti et al. (2022) count only saved tensors; these come on
    top in the backward phase.  Source: measured by tests/oracle/test_step_peak.py — a whole
    torchtitan-style Llama 3.1 8B step with full AC peaks at exactly L·(layer input) + one
    recomputed layer + act·sb·(h + 2f) (8 × act·sbh at f = 3.5h); t > 1 follows the TP plan and
    is not measured."""
    return act_bytes * seq_len / cp * mbs * (hidden + (n_mlp - 1) * ffn / tp)


def backward_phase_activation_bytes(n_layers, layer_bytes, working_bytes, gradient_bytes):
    """Activation bytes alive during a layer's backward on a GPU holding n_layers saved sets (one
    micro-batch): L·layer + working + gradients, where working is what the layer under backward
    recomputes (its whole no-recompute set under full recompute, the rest of it under selective)
    and gradients are backward_gradient_bytes.  The loss's buffers are gone by then, so on the
    CPU oracle a step's allocated peak is the larger of this and loss_phase_activation_bytes;
    plan3d's cost model nevertheless adds the two, because the reserved memory torchtitan
    measured for 70B at tp 8 is matched by the sum and not by the larger (planner/cost.py).  Source:
    measured by tests/oracle/test_step_peak.py within 5 % (full AC exact, no AC and per-op SAC
    ~3.5 % low, at L = 4)."""
    return n_layers * layer_bytes + working_bytes + gradient_bytes


def fp8_linear_input_bytes(seq_len, mbs, hidden, n_heads, head_dim, ffn, tp, cp,
                           sequence_parallel: bool):
    """Elements of one layer's saved tensors that are linear layers' inputs, which Transformer
    Engine keeps in fp8 (1 byte) instead of 16-bit under an fp8 recipe: the QKV input (the first
    norm's output, h wide), the output projection's input (a·d_h), the MLP's first input (the
    second norm's output, h) and its last input (the activation's output, f):

        sb·(2h/t_sp + a·d_h/t + f/t)      (s over c)

    What stays 16-bit: the norms' inputs, the core attention's Q, K, V and the activation's input.
    Source: TransformerEngine module/linear.py @ d0067d0 (the quantized input saved with only
    its columnwise data, l.599-617) and module/layernorm_linear.py (the 16-bit input and the fp8
    ln_out, l.526-536); Megatron-Core transformer_config.py @ d98e8a6 (core attention in 16-bit
    unless fp8_dot_product_attention, the activation's input unless
    activation_func_fp8_input_store)."""
    s = seq_len / cp
    sp = tp if sequence_parallel else 1
    return s * mbs * (2 * hidden / sp + (n_heads * head_dim + ffn) / tp)
