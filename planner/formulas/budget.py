"""What a plan costs to train: days, GPU-hours, money, energy.

T tokens to train, τ tokens per second of the plan, N GPUs."""

from __future__ import annotations

SECONDS_PER_DAY = 86_400
SECONDS_PER_HOUR = 3_600


def training_s(train_tokens, tokens_per_s):
    """Wall-clock seconds to see T tokens: T / τ."""
    return train_tokens / tokens_per_s


def gpu_hours(n_gpus, train_tokens, tokens_per_s):
    """N · T / τ / 3600."""
    return n_gpus * training_s(train_tokens, tokens_per_s) / SECONDS_PER_HOUR


def energy_j(n_gpus, train_tokens, tokens_per_s, gpu_power_w):
    """GPU energy at a constant board power: N · P_gpu · T/τ (GPUs only: no CPUs, network or
    cooling — multiply by the facility's PUE for the bill)."""
    return n_gpus * gpu_power_w * training_s(train_tokens, tokens_per_s)


def narayanan_training_s(train_tokens, n_params, n_gpus, flops_per_gpu_s):
    """Narayanan et al. 2021 §5.1 estimate: 8·T·P / (n·X) — 6TP model FLOPs plus the recomputed
    forward (2TP). GPT-3 175B, 300B tokens, 1,024 A100 at 140 TFLOP/s: ≈ 34 days."""
    return 8 * train_tokens * n_params / (n_gpus * flops_per_gpu_s)
