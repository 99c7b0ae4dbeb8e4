"""Training at scale as clusters really run: the slowest of N ranks sets the step (stragglers), and
failures, checkpoints and restarts take their share of the wall clock (goodput).

Stragglers. Identical GPUs do not run at identical speed: power management and manufacturing
spread give each GPU its own clock under load. A synchronous step ends when the slowest rank
ends (every parallel dimension synchronises: TP and CP inside each layer, PP at every
micro-batch boundary, the data-parallel gradient reduction once per step over all N ranks), so
with per-rank compute times ~ normal(μ, σ) the step's compute is E[max of N] ≈ μ + σ·z(N).

Failures. Interruptions arrive at a rate proportional to the GPUs (a job fails when any part of
it does), so the job's mean time between failures is T_MTBF = 1 / (N · λ_fail). A checkpoint of
δ seconds every τ seconds, and a restart of T_restart seconds plus, on average, half an interval
of lost work per failure, leave the goodput — the share of wall-clock time that trains — of
(τ/(τ + δ)) · (1 − (T_restart + (τ + δ)/2) / T_MTBF), best at the Young/Daly interval. (The
symbols are explain's; M there is the memory a GPU needs.)

Runs on floats, numpy arrays and sympy symbols (`_ops` for the choices)."""

from __future__ import annotations

from . import _ops

HOUR_S = 3600.0
DAY_S = 86400.0

# ---- stragglers ------------------------------------------------------------------------------

GPU_SPEED_CV = 0.08 / 5.4
"""Per-GPU variability of compute speed, σ/μ ≈ 1.5 %. Sinha et al. 2022, "Not All GPUs Are
Created Equal: Characterizing Variability in Large-Scale, Accelerator-Rich Systems" (SC22,
arXiv 2208.11035): over >90 % of the GPUs of five clusters (Summit, Vortex, Frontera, Longhorn,
Corona), the same SKU shows 8 % average performance variation (max 22 %), outliers up to 1.5×
slower than the median. Their variation is the spread between the box plot's whiskers (the
non-outlier range) relative to the median; for a normal spread the whiskers (Q1 − 1.5·IQR,
Q3 + 1.5·IQR) lie ±2.70σ apart from the median, 5.4σ in all: σ/μ = 0.08/5.4. Cross-check, not
fitted: at 65,536 GPUs this gives 1.48 % × z(65,536) = 1.48 % × 4.31 ≈ 6.4 % added to the
compute, the order of the 9 % GPU time variability Golden et al. 2025 (PRISM, arXiv 2510.15596)
observe at 64k GPUs."""

EULER_GAMMA = 0.5772156649015329
LN_4PI = 2.5310242469692907  # ln 4π


def expected_max_normal(n):
    """E[max of n standard normals] by the extreme-value (Gumbel) limit (Cramér 1946; e.g.
    David & Nagaraja, "Order Statistics", §10.5): with a = √(2 ln n),
        z(n) ≈ a − (ln ln n + ln 4π) / (2a) + γ / a,
    γ Euler's constant; exact E[max] is 1.4236 at n = 8 and 3.855 at n = 10⁴, where this gives
    1.522 and 3.873. One rank waits for nobody: z(1) = 0 (n = 1 is kept off the logarithm)."""
    many = _ops.maximum(n, 2)
    a = (2 * _ops.ln(many)) ** 0.5
    z = a - (_ops.ln(_ops.ln(many)) + LN_4PI) / (2 * a) + EULER_GAMMA / a
    return (1 - _ops.le(n, 1)) * z


REFERENCE_RANKS = 8
"""The GPUs behind the profiles' GEMM efficiencies: the A100 in-layer efficiency is fitted to
Korthikanti et al. 2022 Table 4, one layer timed on 8 GPUs (TP 8), and every other profile's is
its single-GPU MAMF figure scaled by that in-layer/pure ratio. Those timings already waited for
the slowest of 8 GPUs; a job of N waits for the slowest of N, z(N) − z(8) spreads more."""


def straggler_s(compute_s, n_ranks, cv, reference_ranks=REFERENCE_RANKS):
    """Time the slowest of n ranks adds to a step's compute of compute_s per rank, beyond what
    the efficiency's own reference (the slowest of `reference_ranks`) holds:
    compute · (σ/μ) · max(0, z(n) − z(n_ref)). Communication is not scaled (the links, not the
    GPU clocks, set it); the ranks that synchronise are all N of the job, since the
    data-parallel reduction (or, without it, the pipeline's flush) joins every rank once a
    step."""
    spread = _ops.shown("z({0}) - z({1})", _spread_beyond, n_ranks, reference_ranks)
    return compute_s * cv * _ops.maximum(0, spread)


def _spread_beyond(n_ranks, reference_ranks):
    """z(n) − z(n_ref): how much further the slowest of n ranks lies than the slowest of n_ref,
    in standard deviations (explain shows it so, by name: _ops.shown)."""
    return expected_max_normal(n_ranks) - expected_max_normal(reference_ranks)


# ---- failures --------------------------------------------------------------------------------

LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16384
FAILURES_PER_GPU_HOUR = LLAMA3_INTERRUPTIONS / (LLAMA3_DAYS * 24 * LLAMA3_GPUS)
"""Unexpected interruptions per GPU-hour: 419 in a 54-day snapshot of Llama 3 405B pre-training
on 16,384 H100 (Dubey et al. 2024, "The Llama 3 Herd of Models", §3.3.4 text):
419 / (54 · 24 · 16,384) = 1.973·10⁻⁵ per GPU-hour — one every 50,700 GPU-hours, 7.8 a day at
16,384 GPUs. (Only the text's totals are used here.)"""

STORAGE_WRITE_GB_PER_S_PER_GPU = 2000.0 / 24576
"""Checkpoint write bandwidth per GPU when every GPU saves its shard at once: Llama 3's
Tectonic storage sustains 2 TB/s (7 TB/s peak) for its 24K-GPU clusters, and "checkpoint
writes saturate the storage fabric for short durations" (Dubey et al. 2024 §3.3.1):
2,000 GB/s / 24,576 GPUs = 0.0814 GB/s each. The default where a profile states none (the
profiles' [storage] sections give their own); time to train divides by the goodput
(formulas/budget.py wall_clock_s)."""

RESTART_S = 600.0
"""Relaunch after an interruption (reschedule, rendezvous, NCCL set-up; the checkpoint's load is
added from its size): 10 minutes, an assumption — no published per-restart figure for the runs
above was found. Shown as such in `explain`; the goodput's sensitivity to it is a test."""


def interruptions_per_day(n_gpus, failures_per_gpu_hour):
    """Expected interruptions a day at N GPUs: 24 · N · λ_fail."""
    return 24 * n_gpus * failures_per_gpu_hour


def mtbf_s(n_gpus, failures_per_gpu_hour):
    """The job's mean time between interruptions: T_MTBF = 3600 / (N · λ_fail) seconds, λ_fail
    the interruptions per GPU-hour."""
    return HOUR_S / (n_gpus * failures_per_gpu_hour)


def checkpoint_bytes(params, saved_bytes_per_param):
    """What a checkpoint holds: each parameter once, with the bytes the framework saves of it —
    its weight and its optimizer state (Megatron and DeepSpeed: 16-bit weight + fp32 master and
    Adam's m, v = 2 + 12 = 14; torchtitan: fp32 weight + m, v = 12): bytes·Ψ. Replicas (data
    parallel copies of the weights or the optimizer) are written once."""
    return saved_bytes_per_param * params


def checkpoint_write_s(total_bytes, n_gpus, write_bytes_per_s_per_gpu):
    """A distributed checkpoint (Megatron dist-checkpointing fully-parallel save, PyTorch DCP):
    every GPU writes its own share at once, δ = bytes / (N · b)."""
    return total_bytes / (n_gpus * write_bytes_per_s_per_gpu)


def checkpoint_load_s(total_bytes, n_gpus, read_bytes_per_s_per_gpu):
    """Reading it back after a restart, likewise in parallel: bytes / (N · b)."""
    return total_bytes / (n_gpus * read_bytes_per_s_per_gpu)


def young_daly_interval_s(checkpoint_s, mtbf):
    """The checkpoint interval that maximises goodput (Young 1974, "A first order approximation
    to the optimum checkpoint interval"; Daly 2006, "A higher order estimate of the optimum
    checkpoint interval for restart dumps", eq. 37 for δ < 2·T_MTBF):
        τ = √(2δ·T_MTBF) · (1 + √(δ/(2·T_MTBF))/3 + δ/(18·T_MTBF)) − δ."""
    ratio = checkpoint_s / (2 * mtbf)
    return _ops.sqrt(2 * checkpoint_s * mtbf) * (1 + _ops.sqrt(ratio) / 3 + ratio / 9) \
        - checkpoint_s


def goodput(interval_s, checkpoint_s, restart_s, mtbf):
    """The share of wall-clock time that trains, to first order in 1/T_MTBF (Young's model):
    τ/(τ + δ) of the time between failures is not spent writing checkpoints, and each failure,
    one per T_MTBF seconds, costs the restart T_restart and on average half an interval
    (τ + δ)/2 of work lost: G = τ/(τ + δ) · (1 − (T_restart + (τ + δ)/2)/T_MTBF), never below
    0."""
    return _ops.maximum(0, interval_s / (interval_s + checkpoint_s)
                        * (1 - (restart_s + (interval_s + checkpoint_s) / 2) / mtbf))
