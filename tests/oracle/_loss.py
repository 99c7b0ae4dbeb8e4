"""Megatron-Core's vocab-parallel cross entropy, emulated on one rank for the oracle.

Follows `_VocabParallelCrossEntropy` in Megatron-LM `megatron/core/tensor_parallel/cross_entropy.py
@ d98e8a6` step by step (no code copied): forward casts the 16-bit logits to an fp32 copy,
subtracts the row max in place, exponentiates in place, divides by the row sum in place and
saves that softmax with the target mask and masked targets; backward subtracts 1 at the target in
place and scales by the incoming gradient in place, returning fp32, which autograd casts to the
logits' dtype.  The tensor-parallel all-reduces are identities on one rank.
"""

from __future__ import annotations

import torch


class VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target):  # logits [s, b, V] (16-bit), target [s, b]
        logits = logits.float()
        logits_max = torch.max(logits, dim=-1)[0]
        logits -= logits_max.unsqueeze(-1)
        target_mask = (target < 0) | (target >= logits.shape[-1])
        masked_target = target.clone()
        masked_target[target_mask] = 0
        logits_2d = logits.view(-1, logits.shape[-1])
        masked_target_1d = masked_target.view(-1)
        arange_1d = torch.arange(logits_2d.shape[0], device=logits.device)
        predicted = logits_2d[arange_1d, masked_target_1d].clone().view_as(target)
        predicted[target_mask] = 0.0
        torch.exp(logits, out=logits)
        sum_exp = logits.sum(dim=-1)
        loss = torch.log(sum_exp) - predicted
        logits.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(logits, target_mask, masked_target_1d)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target_mask, masked_target_1d = ctx.saved_tensors
        grad_2d = softmax.view(-1, softmax.shape[-1])
        arange_1d = torch.arange(grad_2d.shape[0], device=grad_2d.device)
        grad_2d[arange_1d, masked_target_1d] -= 1.0 - target_mask.view(-1).float()
        softmax.mul_(grad_output.unsqueeze(-1))
        return softmax, None
