"""The optimizer step and the pipeline schedule: the Adam step's memory-bound time (with what
offload moves to the host), the fullest stage's time per micro-batch with every exposed part, and
the schedule's bubble and slots from its F, B and W (formulas/pipeline.py, formulas/timing.py)."""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import offload as OF
from ..formulas import pipeline as PL
from ..formulas import timing as T
from .numbers import BYTES, Choices, model_states, same
from .offload import offload_times


def optimizer_step(x, c: Choices, k: SimpleNamespace, dp: SimpleNamespace,
                   note=same) -> SimpleNamespace:
    """The GPU's optimizer step, and offload's additions to the step and to each micro-batch."""
    z = int(c.zero_stage)
    opt_shard = k.d_shard if z >= 1 else 1
    m_bytes = BYTES[c.adam_moments]  # Adam's m and v as the plan keeps them
    opt_bytes = T.optimizer_step_bytes(dp.held_params, x.g_bytes, x.w_bytes, opt_shard, m_bytes)
    if dp.moe:  # moe: the expert shards' Adam step, over edp under ZeRO ≥ 1
        opt_bytes = opt_bytes + T.optimizer_step_bytes(dp.held_experts, x.g_bytes, x.w_bytes,
                                                       dp.edp if z >= 1 else 1, m_bytes)
    if c.offload:  # offload: the GPU steps only the optimizer states it keeps
        opt_bytes = OF.device_optimizer_bytes(opt_bytes, x.offload_optimizer)
    optimizer_s = note("optimizer_s", T.memory_bound_time_s(opt_bytes, x.hbm_bw, x.hbm_eff))
    offload = SimpleNamespace(step_s=0, mb_s=0, d2h_bytes=0, h2d_bytes=0)
    if c.offload:  # offload: host-link copies and the CPU step (formulas/offload.py)
        states = model_states(c, x.g_bytes)
        psi_o = dp.held_params / opt_shard + (dp.held_experts / (dp.edp if z >= 1 else 1)
                                              if dp.moe else 0)
        offload = offload_times(x, c, k, states, psi_o, dp.held_params, dp.zero_rounds, note)
    return SimpleNamespace(optimizer_s=optimizer_s, offload=offload)


def stage_schedule(x, c: Choices, k: SimpleNamespace, dp: SimpleNamespace,
                   opt: SimpleNamespace, note=same) -> SimpleNamespace:
    """The stage's time per micro-batch and the schedule's bubble and slots."""
    stage_mb_s = note("stage_microbatch_s", k.compute_mb_s + k.tp_mb_s + k.cp_mb_s + k.pp_mb_s
                      + dp.zero3_mb_s + k.ep_mb_s + opt.offload.mb_s)  # moe: + exposed a2a; offload
    bgrad_mb_s = stage_mb_s - k.fwd_mb_s - k.wgrad_mb_s  # B: the backward less its W
    times = (c.schedule, k.fwd_mb_s, bgrad_mb_s, k.wgrad_mb_s)
    return SimpleNamespace(stage_mb_s=stage_mb_s,
                           bubble=note("bubble_fraction", PL.bubble_fraction(k.p, k.m, k.v, *times)),
                           slots=PL.pipeline_slots(k.p, k.m, k.v, *times))
