"""Pipeline schedules: the bubble and the micro-batches each stage holds in flight.

p pipeline stages, m micro-batches per step (per data-parallel rank), v model chunks per GPU
(virtual stages) for the interleaved schedule.

The zero-bubble family splits a stage's backward into the input gradient B (on the critical path:
the previous stage waits for it) and the weight gradient W (which can wait), Qi et al. 2024,
"Zero Bubble Pipeline Parallelism" (ICLR 2024) §2. Their bubbles depend on the times of one
stage's forward F, input gradient B and weight gradient W for one micro-batch, so the formulas
for those schedules take the three times; the others ignore them. Every bubble here is that of a
step whose optimizer step waits for the whole pipeline (as Megatron-LM, torchtitan and DeepSpeed
run it), checked against planner.timeline's event simulation (tests/test_timeline.py).
"""

from __future__ import annotations

from . import _ops
from .choices import Schedule

SPLIT_BACKWARD = (Schedule.ZB_H1, Schedule.ZB_H2, Schedule.ZBV, Schedule.DUALPIPE,
                  Schedule.DUALPIPEV)
"""The schedules that run B and W as separate passes (their bubble depends on F, B and W)."""


def bubble_fraction(pp, n_micro, vpp=1, schedule=Schedule.ONE_F_ONE_B, fwd_s=1.0, bgrad_s=1.0,
                    wgrad_s=1.0):
    """Idle share of the step: (p − 1) / (v·m + p − 1).

    GPipe and 1F1B (v = 1): the pipeline fills and drains once per step, p − 1 slots of one
    micro-batch's time out of m + p − 1 (Huang et al. 2019; Narayanan et al. 2021 §2.2.1, whose
    bubble *time over ideal time* is (p − 1)/m). Interleaved: each slot is 1/v as long
    (Narayanan 2021 §2.2.2: (p − 1)/(v·m) over ideal time). At p = 4, m = 12: 3/15 = 1/5.

    The schedules that split the backward (SPLIT_BACKWARD): idle / (m·(F + B + W) + idle), with
    idle = bubble_time_s(p, schedule, F, B, W)."""
    if schedule in SPLIT_BACKWARD:
        idle = bubble_time_s(pp, schedule, fwd_s, bgrad_s, wgrad_s)
        return idle / (n_micro * (fwd_s + bgrad_s + wgrad_s) + idle)
    return (pp - 1) / (vpp * n_micro + pp - 1)


def pipeline_slots(pp, n_micro, vpp=1, schedule=Schedule.ONE_F_ONE_B, fwd_s=1.0, bgrad_s=1.0,
                   wgrad_s=1.0):
    """The step's length in units of one stage's time for one whole micro-batch:
    m + (p − 1)/v  (so that bubble_fraction = ((p − 1)/v) / slots); for the schedules that split
    the backward, m + bubble_time_s / (F + B + W)."""
    if schedule in SPLIT_BACKWARD:
        return n_micro + bubble_time_s(pp, schedule, fwd_s, bgrad_s, wgrad_s) / (
            fwd_s + bgrad_s + wgrad_s)
    return n_micro + (pp - 1) / vpp


def bubble_time_s(pp, schedule: Schedule, fwd_s, bgrad_s, wgrad_s, vpp=1):
    """The idle time of one stage in a step, beyond its m·(F + B + W) of work, where F, B and W are
    one stage's forward, input-gradient and weight-gradient times for one micro-batch (for a
    V-shaped schedule, the GPU's two chunks together). Exact — equal to planner.timeline's
    event simulation of each schedule's order — for W ≤ F and W ≤ B (a layer's forward and its
    input gradient each run at least the weight-gradient GEMMs' FLOPs) and the micro-batch counts
    of planner.constraints; ZB-V's needs F ≤ B too, and for F > B (the cost model's times give
    it when the forward's TP all-reduce is exposed and the backward's hidden) it falls short of
    the simulated step by up to 6 % at F = 1.5·B (tested).

    1F1B, GPipe:  (p − 1)(F + B + W)            Narayanan et al. 2021 §2.2.1 (v = 1).
    Interleaved:  (p − 1)(F + B + W)/v          Narayanan et al. 2021 §2.2.2.
    ZB-H1:        (p − 1)(F + B − W)            Qi et al. 2024 §2.1 and Table 1.
    ZB-H2:        (p − 1)·max(F, F + B − 2W)    Qi et al. 2024 §2.2 give (p − 1)(F + B − 2W), the
        steady state where the next step's warm-up fills this step's cool-down (their §4
        post-validation replaces the optimizer's synchronisation); with the optimizer step
        waiting for the pipeline, the last stage still starts (p − 1)·F late.
    ZB-V:         (p − 1)·max(F, B, 2(B − W))/2   the order of PyTorch's ScheduleZBVZeroBubble
        (Qi et al. 2024 arXiv v2 §6): (p − 1)·F/2 at F = B = W, where it is zero-bubble in the
        steady state; no closed form is published for unequal times: this one is derived from
        the simulation and checked against it for F ≤ B (the F term bounds F > B from below).
    DualPipe:     max((k − 1)F + 2kB − kW, k(2F + B − W)), k = p/2 − 1. DeepSeek-V3 report
        Table 2 gives k(F&B + B′ − 3W) with the whole backward B′ = B + W and the overlapped pair
        F&B = F + B′ (the overlap hides communication, not compute): k(F + 2B − W), equal to
        this at F = B = W and above it for F < B (their figure is an upper bound).
    DualPipeV:    the DualPipe form on the 2p half-stage chunks (F/2, B/2, W/2) with k = p − 1
        (deepseek-ai/DualPipe README: the same bubble, PP = 2p stages on PP/2 devices).

    At p = 4, F = B = W = 1: 1F1B 9, ZB-H1 3, ZB-H2 3, ZB-V 1.5, DualPipe 2, DualPipeV 3."""
    F, B, W = fwd_s, bgrad_s, wgrad_s
    if schedule is Schedule.ZB_H1:
        return (pp - 1) * (F + B - W)
    if schedule is Schedule.ZB_H2:
        return (pp - 1) * _ops.maximum(F, F + B - 2 * W)
    if schedule is Schedule.ZBV:
        return (pp - 1) * _ops.maximum(_ops.maximum(F, B), 2 * (B - W)) / 2
    if schedule is Schedule.DUALPIPE:
        return dualpipe_bubble_s(pp / 2 - 1, F, B, W)
    if schedule is Schedule.DUALPIPEV:
        return dualpipe_bubble_s(pp - 1, F / 2, B / 2, W / 2)
    return (pp - 1) * (F + B + W) / vpp


def dualpipe_bubble_s(k, fwd_s, bgrad_s, wgrad_s):
    """DualPipe's idle time with k = PP/2 − 1 and one stage's F, B, W:
    max((k − 1)F + 2kB − kW, k(2F + B − W)). The first term: the (F&B) pairs of the main
    step wait on the B chain, k(F + 2B − W) as DeepSeek-V3 Table 2 counts it, less one F the
    middle ranks run unpaired; the second: the warm-up's forwards, when F is long against B."""
    return _ops.maximum((k - 1) * fwd_s + 2 * k * bgrad_s - k * wgrad_s,
                        k * (2 * fwd_s + bgrad_s - wgrad_s))


def parameter_copies(schedule: Schedule):
    """How many pipeline stages' parameters each GPU holds, relative to its share L/p of the
    layers: 2 for DualPipe (one stage of each direction: DeepSeek-V3 report Table 2,
    "Parameter 2×"), 1 for every other schedule — DualPipeV's two chunks are halves of one
    share (deepseek-ai/DualPipe README: DualPipeV's 2× is per device over PP/2 devices). The
    gradients and optimizer state of the copy are held too."""
    return 2 if schedule is Schedule.DUALPIPE else 1


def in_flight_first_stage(pp, n_micro, vpp, schedule: Schedule):
    """Micro-batches whose activations the first stage holds at its peak, in units of a whole
    stage's layers.

    GPipe: m (all forwards before any backward).
    1F1B: min(p, m) (p − 1 warm-up forwards, then one more before the first backward).
    Interleaved: min(p + (p − 1)/v, m): Megatron's first rank runs 2(p − 1) + (v − 1)·p warm-up
    chunk-forwards plus one, each 1/v of the stage — Korthikanti 2022's factor (1 + (p−1)/(p·v))·p.

    The split-backward schedules hold a micro-batch from its forward until its W (W reads the
    saved layer inputs), on every stage alike: see in_flight_split."""
    if schedule in SPLIT_BACKWARD:
        return in_flight_split(pp, n_micro, schedule)
    if schedule is Schedule.GPIPE:
        return n_micro
    if schedule is Schedule.ONE_F_ONE_B:
        return _ops.minimum(pp, n_micro)
    return _ops.minimum(pp + (pp - 1) / vpp, n_micro)


def in_flight_last_stage(pp, n_micro, vpp, schedule: Schedule):
    """The last stage's peak: GPipe m; 1F1B one (it runs each backward right after its forward);
    interleaved ((v − 1)·p + 1)/v (its warm-up is (v − 1)·p chunk-forwards); the split-backward
    schedules as the first stage (in_flight_split)."""
    if schedule in SPLIT_BACKWARD:
        return in_flight_split(pp, n_micro, schedule)
    if schedule is Schedule.GPIPE:
        return n_micro
    if schedule is Schedule.ONE_F_ONE_B:
        return _ops.minimum(1, n_micro)
    return _ops.minimum(((vpp - 1) * pp + 1) / vpp, n_micro)


def in_flight_split(pp, n_micro, schedule: Schedule):
    """Micro-batches (in units of a whole stage's layers) a stage of a split-backward schedule
    holds at its peak, counting one from its forward to its W — the same on every stage:

    ZB-H1 min(p, m)          1F1B's peak, on every stage (Qi et al. 2024 §2.1, Table 1: p·M_B);
    ZB-H2 min(2p − 1, m)     Qi et al. 2024 §2.2, Table 1: (2p − 1)·M_B;
    ZB-V  p                  2p half-stage chunks: 1F1B's first stage (Qi et al. 2024 v2 §6);
    DualPipe p + 1           DeepSeek-V3 report Table 2, "Activation PP + 1";
    DualPipeV p + 1/2        2p + 1 half-stage chunks (deepseek-ai/DualPipe README, PP + 1 with
                             PP = 2p chunks).
    A micro-batch waiting only for its W holds less than all of its activations (W needs the
    inputs of the linear layers, not the attention or activation-function tensors), so these
    are upper bounds; planner.timeline.peak_in_flight counts the same way."""
    if schedule is Schedule.ZB_H1:
        return in_flight_first_stage(pp, n_micro, 1, Schedule.ONE_F_ONE_B)
    if schedule is Schedule.ZB_H2:
        return _ops.minimum(2 * pp - 1, n_micro)
    if schedule is Schedule.ZBV:
        return pp
    if schedule is Schedule.DUALPIPE:
        return pp + 1
    return pp + 1 / 2


def pipeline_hops(pp, vpp, schedule: Schedule):
    """Stage-to-stage sends one micro-batch's forward makes between GPUs (its backward makes as
    many): v·p − 1 for GPipe, 1F1B and the interleaved schedule (a chunk boundary from GPU p − 1
    back to GPU 0 is a send too); 2(p − 1) for the V-shaped ZB-V and DualPipeV (down the GPUs and
    back up; the turn at the last GPU stays on it); p − 1 for DualPipe and the other one-chunk
    schedules, in either direction. Sources: the V placement of Qi et al. 2024 v2 §6 and
    deepseek-ai/DualPipe dualpipev.py (chunk 0 on stage k, chunk 1 on stage 2p − 1 − k).
    planner.formulas.comm.pp_step_bytes counts v·p − 1: for a V pass it v = (2p − 1)/p."""
    if schedule in (Schedule.ZBV, Schedule.DUALPIPEV):
        return 2 * (pp - 1)
    return vpp * pp - 1


def ends_on_first_gpu(schedule: Schedule):
    """1 where the first GPU of the pipeline also runs the model's last stage, 0 otherwise: in a
    V (ZB-V, DualPipeV) chunk 1 of GPU 0 is stage 2p − 1, and DualPipe's GPU 0 holds stage p − 1
    of the reverse direction; that GPU then holds the embedding and the LM head (and the logits),
    as a single stage does, while GPU p − 1 holds neither end (a V) or both (DualPipe)."""
    return 1 if schedule in (Schedule.ZBV, Schedule.DUALPIPE, Schedule.DUALPIPEV) else 0


def warmup_chunk_forwards(rank, pp, vpp, extra=0):
    """Chunk forwards (each 1/v of the stage) pipeline rank r runs before its first backward in
    Megatron-Core's interleaved 1F1B, before the clamp at the step's m·v:

        W_r = (p − r − 1)·2 + (v − 1)·p + extra

    (schedules.py get_pp_rank_microbatches @ d98e8a64dd, l. 964–970, with
    microbatch_group_size_per_vp_stage = p, its default). extra = 1 under
    --overlap-moe-expert-parallel-comm, which runs one more warm-up forward "to ensure the
    forward and backward computations are independent in all 1f1b steps"; 0 otherwise. As many
    backwards run alone in the cool-down. At p = 4, v = 8: rank 0 6 + 28 = 34 (35 with the
    overlap's), rank 3 28."""
    return (pp - rank - 1) * 2 + (vpp - 1) * pp + extra


def in_flight_on_rank(rank, pp, n_micro, vpp, schedule: Schedule):
    """Micro-batches (in units of a whole stage's layers) pipeline rank r holds at its peak, its
    first backward: r = 0 gives in_flight_first_stage, r = p − 1 in_flight_last_stage.

    GPipe: m.  1F1B: min(p − r, m) (p − r − 1 warm-up forwards, then one more).
    Interleaved: min(((p − r − 1)·2 + (v − 1)·p + 1)/v, m): rank r's warm-up chunk-forwards
    (warmup_chunk_forwards) plus one, each 1/v of the stage.
    The split-backward schedules: the same on every rank (in_flight_split).
    At p = 4, v = 2, m = 8: rank 0 (6 + 4 + 1)/2 = 5.5, rank 1 4.5, rank 3 2.5."""
    if schedule in SPLIT_BACKWARD:
        return in_flight_split(pp, n_micro, schedule)
    if schedule is Schedule.GPIPE:
        return n_micro
    if schedule is Schedule.ONE_F_ONE_B:
        return _ops.minimum(pp - rank, n_micro)
    return _ops.minimum((warmup_chunk_forwards(rank, pp, vpp) + 1) / vpp, n_micro)


def merged_in_flight(in_flight, stage_layers, n_micro, merged):
    """Micro-batches (in whole stages) a rank holds at its peak under Megatron's merged 1F1B
    (--overlap-moe-expert-parallel-comm, merged = 1; 0 leaves `in_flight` as is). Its extra
    warm-up forward (warmup_chunk_forwards) only moves the first steady-state forward ahead of
    the first backward: the forwards finished before that backward are W + 1 with or without it
    (schedules.py l. 964–970, 1733 @ d98e8a64dd). Each merged pass then runs forward layer i
    before backward layer n − 1 − i releases its state
    (models/common/model_chunk_schedule_plan.py TransformerModelChunkSchedulePlan.run,
    TransformerLayerSchedulePlan.run @ d98e8a64dd), so one layer more, of the stage's L_s:

        n + merged·(min(n + 1/L_s, m) − n)

    At m = 1 (or every forward in the warm-up, n = m) no pass is merged: n. An upper bound, as
    the backward layer frees its MLP's tensors before its attention's."""
    return in_flight + merged * (_ops.minimum(in_flight + 1 / stage_layers, n_micro) - in_flight)


def chunk_first_layer(chunk, n_slots, n_chunks, lead=0):
    """The first layer of pipeline chunk j (0-based, in model order) when S chunks split N layer
    slots as evenly as they can, the first N mod S chunks one slot more, and the first `lead`
    slots stand for the embedding rather than a layer:

        j·⌊N/S⌋ + min(j, N mod S) − lead        (never below 0)

    Megatron-Core's --pipeline-model-parallel-layout as plan3d writes it (lead 0; N = L + D
    with the D MTP modules in the last slots), and torchtitan's split, which spreads L + 2 slots
    (the embedding and the output weighed as one layer each, lead 1) where pp·vpp does not divide
    L (`_generate_llm_fqn_per_model_part` @ 0.3.0). Chunk j holds layers
    [first(j), first(j + 1)), cut at the model's last layer by the caller."""
    per_chunk = _ops.floor(n_slots / n_chunks)  # ⌊N/S⌋
    extra = n_slots - n_chunks * per_chunk  # N mod S
    return _ops.maximum(chunk * per_chunk + _ops.minimum(chunk, extra) - lead, 0)


def uneven_end_slots(n_layers, pp):
    """The slots (lead, trail) by which the first and last of p stages fall short of ⌈L/p⌉
    layers where every middle stage holds ⌈L/p⌉ (Megatron-Core's
    --decoder-first/last-pipeline-num-layers as plan3d writes them for p ∤ L with one chunk):
    with F = ⌈L/p⌉ and R = L − (p − 2)·F, lead = F − ⌊R/2⌋, trail = F − ⌈R/2⌉; 0 and 0 when p
    divides L. Spread by chunk_first_layer over L + lead + trail = p·F slots."""
    full = _ops.ceil(n_layers / pp)
    rest = n_layers - (pp - 2) * full
    uneven = 1 - _ops.divides(pp, n_layers)
    return (uneven * (full - _ops.floor(rest / 2)), uneven * (full - _ops.ceil(rest / 2)))
