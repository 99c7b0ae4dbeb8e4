"""What a plan costs to train: days, GPU-hours, money, energy.

T tokens to train, τ tokens per second of the plan, N GPUs, g the goodput (the share of the
wall-clock time that trains; 1 = no interruptions; derived from failures and checkpoints in
formulas/reliability.py)."""

from __future__ import annotations

SECONDS_PER_DAY = 86_400
SECONDS_PER_HOUR = 3_600


def training_s(train_tokens, tokens_per_s):
    """Wall-clock seconds to see T tokens: T / τ."""
    return train_tokens / tokens_per_s


def gpu_hours(n_gpus, train_tokens, tokens_per_s, goodput=1):
    """N · T / (τ · g) / 3600: the GPUs are held for the whole wall-clock time, lost time too."""
    return n_gpus * wall_clock_s(train_tokens, tokens_per_s, goodput) / SECONDS_PER_HOUR


def energy_j(n_gpus, train_tokens, tokens_per_s, gpu_power_w, goodput=1):
    """GPU energy at a constant board power over the wall-clock time: N · P_gpu · T / (τ · g)
    (GPUs only: no CPUs, network or cooling — multiply by the facility's PUE for the bill; the
    time lost to interruptions is counted at the same power, an upper bound like the TDP the
    power defaults to)."""
    return n_gpus * gpu_power_w * wall_clock_s(train_tokens, tokens_per_s, goodput)


def narayanan_training_s(train_tokens, n_params, n_gpus, flops_per_gpu_s):
    """Narayanan et al. 2021 §5.1 estimate: 8·T·P / (n·X) — 6TP model FLOPs plus the recomputed
    forward (2TP). GPT-3 175B, 300B tokens, 1,024 A100 at 140 TFLOP/s: ≈ 34 days."""
    return 8 * train_tokens * n_params / (n_gpus * flops_per_gpu_s)


# ---- goodput: the share of wall-clock time that trains (formulas/reliability.py) ----------


def wall_clock_s(train_tokens, tokens_per_s, goodput):
    """Wall-clock seconds to train T tokens when a share g of the time trains: T / (τ · g).
    g = 1 is an uninterrupted run (training_s)."""
    return training_s(train_tokens, tokens_per_s) / goodput


def deadline_step_s(deadline_s, train_tokens, tokens_per_step, goodput):
    """The longest step time that trains T tokens within a wall-clock deadline D when a share g
    of the time trains, at B tokens per step: T/B steps in D·g seconds, D·g·B / T. The inverse of
    wall_clock_s at τ = B / step."""
    return deadline_s * goodput * tokens_per_step / train_tokens
