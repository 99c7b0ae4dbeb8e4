"""Multi-token prediction (DeepSeek-AI 2024, DeepSeek-V3 §2.2): D sequential modules after the
main model, each predicting one more token ahead, on the last pipeline stage.

What one module is, as Megatron-Core builds it (megatron/core/transformer/
multi_token_prediction.py @ d98e8a64dd, `MultiTokenPredictionLayer`): two RMSNorms (enorm on
the shifted tokens' embedding, hnorm on the previous depth's hidden state), a linear projection
eh_proj of their concatenation, 2h → h (column-parallel over t), one transformer layer of the
decoder's spec (a MoE layer for DeepSeek-V3), its final norm, and the shared output head with
its own cross-entropy loss (`process_mtp_loss`: the output layer runs once per depth). Where it
runs: on the last pipeline stage, after the decoder ("without custom PP layout, we only support
put all of MTP layers on the last pipeline stage", `mtp_on_this_rank`; a layout places them
with `m` in the last chunk of a rank); that stage also builds the embedding the modules look up
(core/models/gpt/gpt_model.py @ d98e8a64dd: `if self.pre_process or self.mtp_process`).
Megatron counts their FLOPs in its throughput (training/training.py
`num_floating_point_operations` @ d98e8a64dd: the layers, 2·h² eh_proj and (D + 1) logits).

Notation: D modules (0 without MTP), h hidden, t tensor parallel, V′ the padded vocabulary.
"""

from __future__ import annotations

from . import _ops

MTP_NORMS = 3
"""RMSNorms one module holds besides its layer's: enorm, hnorm and its final norm (the "3 ·
hidden" of Megatron's num_floating_point_operations for MTP norms)."""


def mtp_extra_params(depth, hidden, vocab_padded, tp, norm_width=1):
    """Parameters per GPU the D modules hold beside their transformer layers (the caller adds
    D layers at the stage's own split): eh_proj 2h·h over t and three norms per module, and the
    embedding copy the last stage builds for the modules' lookups (V′·h/t, once for D ≥ 1):
        D·(2h²/t + 3·w·h) + min(D, 1)·V′·h/t"""
    return (depth * (2 * hidden * hidden / tp + MTP_NORMS * norm_width * hidden)
            + _ops.minimum(depth, 1) * vocab_padded * hidden / tp)


def eh_proj_flops(tokens, hidden):
    """Forward FLOPs of one module's projection on T tokens: 2·T·2h·h."""
    return 2 * tokens * 2 * hidden * hidden


def mtp_time_s(depth, eh_proj_s, head_s):
    """The D modules' time per micro-batch on the last stage beside their transformer layers
    (which the stage's layer slots count): the projection, and one more pass of the output head
    and its loss, forward and backward:  D·(T_eh + T_head)"""
    return depth * (eh_proj_s + head_s)


def mtp_activation_bytes(depth, in_flight, seq_len, mbs, hidden, cp, sp_divisor, loss_bytes,
                         act_bytes=2):
    """What the D modules keep on the last stage beside their layers' activations (counted with
    the stage's layer slots): per micro-batch in flight, the projection's 2h-wide input and the
    module head's h-wide input (act·s·b·3h/(c·t_sp)); and each module's loss at its peak (its
    logits are computed in the same forward as the main loss, before either backward runs):
        D·(n_f·3·act·s·b·h/(c·t_sp) + A_loss)"""
    inputs = 3 * act_bytes * seq_len * mbs * hidden / (cp * sp_divisor)
    return depth * (in_flight * inputs + loss_bytes)
