"""The cost model of one plan, composed from the formulas — written once, for every backend.

`plan_costs(x, c)` takes the plan's numbers `x` (floats for one plan, float64 arrays for the
search, sympy symbols for `explain`) and its discrete choices `c`, and returns every quantity the
planner reports, by name. estimate.py, search.py and explain.py are thin adapters over it, so the
three can never disagree.
"""

from __future__ import annotations

from types import SimpleNamespace

from .activations import activations
from .collectives import expert_all_to_all, link_shares, placement, tensor_and_context_times
from .data_parallel import dp_times, dp_traffic
from .flops import flops
from .goodput import goodput_costs
from .layer_time import layer_times
from .microbatch import microbatch_times
from .numbers import Choices, merged, numbers, same
from .parameters import parameters, stage_layout
from .schedule import optimizer_step, stage_schedule
from .states import stage_memory
from .step import reported, step_time
from .volumes import volumes

__all__ = ["Choices", "numbers", "plan_costs", "layout_costs", "memory_layout_costs",
           "zero_costs"]


def plan_costs(x, c: Choices, note=same) -> dict:
    """Every reported quantity of a plan. `x` holds numbers (any backend), `c` the choices.

    `note(name, value)` is called on each named intermediate (see TERMS) and its return value is
    used downstream: the identity for numbers; `explain` records the expression and hands back a
    symbol, so that every term's formula is shown in terms of the terms before it.

    Composed of two halves, so that the search can share the first among the ZeRO stages:
    layout_costs (what the ZeRO stage does not change) and zero_costs (what it does)."""
    return zero_costs(x, c, layout_costs(x, c, note), note)


def layout_costs(x, c: Choices, note=same) -> SimpleNamespace:
    """The half of plan_costs that the ZeRO stage does not change (c.zero_stage is not read):
    parameters, activations, communication volumes, FLOPs, the layer times, the links and the
    collectives' times. Returns every intermediate, by its name, for zero_costs. Continues
    from memory_layout_costs, so that the memory costed alone is the memory costed here."""
    k = memory_layout_costs(x, c, note)
    for concern in (flops, layer_times, link_shares, tensor_and_context_times, expert_all_to_all,
                    microbatch_times):
        k = merged(k, concern(x, c, k, note))
    return k


def memory_layout_costs(x, c: Choices, note=same) -> SimpleNamespace:
    """The part of layout_costs the memory reads (states.stage_memory): the degrees and the
    fullest GPU's layers, where each group sits (collectives.placement), the parameters, the
    activations and the parameter copies — none of the FLOPs, traffic or times, which are most
    of layout_costs' work on a MoE model (NCCL's pricing of the expert exchange and of the
    links' shares). What the search costs when it needs a candidate's memory alone
    (search.costing.memory_in_chunks)."""
    k = stage_layout(x, c, note)  # the degrees and the fullest GPU's layers
    for concern in (placement, parameters, activations, volumes):
        k = merged(k, concern(x, c, k, note))
    return k


def zero_costs(x, c: Choices, k: SimpleNamespace, note=same) -> dict:
    """The half of plan_costs that depends on the ZeRO stage, on layout_costs' intermediates `k`:
    the memory of the most loaded stage, data-parallel traffic and its exposed time, the optimizer
    step, and the step time, throughput and MFU they lead to."""
    mem = stage_memory(x, c, k, note)  # weights, gradients, optimizer, activations, buffers
    dp = dp_traffic(x, c, k, mem, note)  # ZeRO's collectives: bytes, then exposed time
    dp = merged(dp, dp_times(x, c, k, dp, note))
    opt = optimizer_step(x, c, k, dp, note)  # the Adam step (and offload's copies)
    sched = stage_schedule(x, c, k, dp, opt, note)  # a micro-batch on the stage; the bubble
    step = step_time(x, c, k, dp, opt, sched, note)  # bounded below by the busiest link
    out = reported(x, c, k, mem, dp, opt, sched, step, note)
    # goodput: failures, checkpoints and restarts (the layout changes only the checkpoint's
    # bytes per parameter, by framework)
    return {**out, **vars(goodput_costs(x, c, k, note))}
