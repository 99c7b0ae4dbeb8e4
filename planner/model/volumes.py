"""Communication volumes per GPU per step: tensor parallelism's per layer, the pipeline's at its
boundaries, context parallelism's by kind, and the schedule's parameter copies
(formulas/comm.py, formulas/context.py)."""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import comm as C
from ..formulas import pipeline as PL
from ..formulas.choices import Recompute, RecomputeModule
from .context import context_parts
from .numbers import Choices, same


def volumes(x, c: Choices, k: SimpleNamespace, note=same) -> SimpleNamespace:
    """TP, PP and CP bytes per step (the DP bytes depend on the ZeRO stage: data_parallel.py)."""
    s, b, h, t, cp, p, m, v, layers = k.s, k.b, k.h, k.t, k.cp, k.p, k.m, k.v, k.layers
    tp_layer = note("tp_layer_bytes", C.tp_layer_bytes(s, b, h, t, cp, x.act_bytes))
    # full recompute reruns each recomputed layer's forward with its TP collectives (fit: a
    # share k.rerun of the stage's layers under partial recompute)
    fwd_passes = 1 + k.rerun if c.recompute is Recompute.FULL else 1
    # fit: `--recompute-modules moe` reruns the MoE block's forward, its token exchange with it
    # (moe_layer.py custom_forward under the checkpoint @ d98e8a64dd): one more pass of it
    ep_passes = fwd_passes + int(c.recompute is Recompute.SELECTIVE
                                 and RecomputeModule.MOE in (c.recompute_modules or ()))
    tp_bytes = note("tp_bytes", C.tp_step_bytes(layers, m, tp_layer, fwd_passes))
    boundary = note("pp_boundary_bytes", C.pp_boundary_bytes(s, b, h, t, cp, x.act_bytes))
    # chunk boundaries a micro-batch crosses between GPUs: v·p − 1, or 2(p − 1) down and back up
    # a V (ZB-V, DualPipeV); pp_step_bytes counts v·p − 1, so a V passes v = (hops + 1)/p
    v_hops = (PL.pipeline_hops(p, v, c.schedule) + 1) / p
    pp_bytes = note("pp_bytes", C.pp_step_bytes(p, m, v_hops, boundary))
    # cp-kind: ring attention, all-to-all over the heads (Ulysses) or both (hierarchical), as
    # the plan's kind (or its framework's default) says: context_parts
    cp_parts = context_parts(x, c, s, b, t, cp, note)
    cp_bytes = note("cp_bytes", C.cp_step_bytes(layers, m, cp_parts.layer))
    # the bubble needs the stage's F, B and W times for the split-backward schedules: schedule.py
    param_copies = note("parameter_copies", PL.parameter_copies(c.schedule))  # DualPipe: 2
    return SimpleNamespace(tp_layer=tp_layer, fwd_passes=fwd_passes, ep_passes=ep_passes,
                           tp_bytes=tp_bytes, boundary=boundary, v_hops=v_hops, pp_bytes=pp_bytes,
                           cp_parts=cp_parts, cp_bytes=cp_bytes, param_copies=param_copies)
