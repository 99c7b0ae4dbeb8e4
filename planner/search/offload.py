"""offload: the search's offload variants: for each layout that does not fit, the least offload to
host memory (optimizer fraction, parameters, activation layers) that makes it fit."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from ..formulas.choices import Recompute
from ..model.numbers import Choices
from ..schema import HardwareProfile, ModelSpec
from .costing import KEPT_COSTS, costs_in_chunks
from .request import PlanRequest


def offload_worth_trying(hw: HardwareProfile, fastest_fit_s: float) -> float:
    """offload: the slowest step a candidate may have for offload to be tried on it: the fastest
    step that fits without offload, plus the tie band (no bound when nothing fits): a slower one
    can neither win nor tie."""
    from .ranking import TIE_BAND

    return fastest_fit_s * (1 + TIE_BAND) * (1 + 1e-9)


OFFLOAD_COLUMNS = ("off_opt", "off_params", "off_act")
"""offload: the search's columns of each candidate's offload settings."""


OFFLOAD_KEPT = ("optimizer_bytes", "weights_bytes", "gradients_bytes", "layer_activation_bytes")
"""offload: what offload_variants reads of a candidate's costs without offload."""


OFFLOAD_FRACTION_STEP = 0.05  # the grid of optimizer fractions the search tries


def offload_layout(req: PlanRequest, recomputes=None) -> dict:
    """offload: what the framework rules read of the request's fixed offload (planner.constraints
    .of names): the fraction, the parameters, the activation layers, and whether the recompute is
    none (of `recomputes`, default the request's)."""
    fixed = req.fixed_offload()
    recomputes = recomputes or req.recompute or list(Recompute)
    return dict(off_opt=fixed["offload_optimizer"], off_params=int(fixed["offload_params"]),
                off_act=fixed["offload_activations"],
                recompute_none=int(Recompute.NONE in recomputes),
                recompute_full=int(Recompute.FULL in recomputes))  # fit


def offload_columns(config, size: int) -> dict[str, np.ndarray]:
    """offload: the columns of `size` candidates that share a plan's offload settings, as
    read-only views of one value each (np.broadcast_to: no memory until concatenated)."""
    return {"off_opt": np.broadcast_to(np.asarray(float(config.offload_optimizer)), (size,)),
            "off_params": np.broadcast_to(np.asarray(int(config.offload_params)), (size,)),
            "off_act": np.broadcast_to(np.asarray(int(config.offload_activations)), (size,))}


def offload_variants(model: ModelSpec, hw: HardwareProfile, framework, base: dict,
                     cols: dict[str, np.ndarray], out: dict[str, np.ndarray], choices: Choices,
                     layout_extra: dict, budget: float):
    """offload: for the candidates of one choice group and ZeRO stage that do not fit in
    `budget`, the least offload that makes each fit, as the framework runs it (its rules read
    `layout_extra`, the group's batch, schedule and choices, beside `cols`): (columns, costs)
    per kind tried. A candidate that fits is never offloaded, so the space of plans that fit
    without offload is unchanged; one that offload does not make fit (on the device and in host
    memory) is not admitted either.

    Kinds, each tried on every unfit candidate, so that the fastest way to fit competes: the
    optimizer states, the fraction f = ⌈excess/M_opt⌉ on a 0.05 grid, or 1 where the framework
    offloads only all of them (formulas.offload.min_offload_fraction); the parameters with their
    gradients and optimizer (f = 1); the activations of N = ⌈excess/(A_layer·(1 + φ))⌉ layers
    (the allocator's slack φ goes with them; formulas.offload.activation_offload_saved_bytes)."""
    from ..formulas import offload as OF

    excess = out["total_bytes"] - budget
    left = excess > 0
    if not left.any():
        return
    frag = base["frag"] if framework.memory.fragmentation is None else framework.memory.fragmentation
    opt = out["optimizer_bytes"]
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(opt > 0, np.round(OF.min_offload_fraction(
            np.maximum(excess, 0), np.where(opt > 0, opt, 1), OFFLOAD_FRACTION_STEP), 6), 2.0)
        layers = OF.min_offload_layers(np.maximum(excess, 0),
                                       np.maximum(out["layer_activation_bytes"], 1.0), frag)
    if framework.memory.host_checkpoints:  # fit: DeepSpeed cpu_checkpointing moves every layer's
        layers = np.ceil(model.n_layers / np.asarray(cols["pp"], dtype=np.float64))
        layers = np.broadcast_to(layers, excess.shape)
    kinds = (
        ("optimizer", np.minimum(fraction, 1.0), 0, 0, fraction <= 1),
        ("optimizer", 1.0, 0, 0, fraction <= 1),  # where the framework offloads all or nothing
        ("params", 1.0, 1, 0, np.ones(len(excess), dtype=bool)),
        ("activations", 0.0, 0, layers,
         (layers < model.n_layers) | bool(framework.memory.host_checkpoints)),
    )
    unfit, optimizer_done = left, np.zeros(len(excess), dtype=bool)
    for kind, f, params, n_act, reachable in kinds:
        # every kind on every unfit candidate; all of the optimizer only where its least
        # fraction did not make the candidate fit (or the framework refused the fraction)
        left = unfit & ~optimizer_done if kind == "optimizer" else unfit
        f_all = np.broadcast_to(np.asarray(f, dtype=np.float64), excess.shape)
        n_all = np.broadcast_to(np.asarray(n_act, dtype=np.float64), excess.shape)
        layouts = SimpleNamespace(**cols, **layout_extra)
        layouts.off_opt, layouts.off_params, layouts.off_act = f_all, params, n_all
        layouts.recompute_none = int(choices.recompute is Recompute.NONE)
        layouts.recompute_full = int(choices.recompute is Recompute.FULL)  # fit
        rows = left & reachable & np.asarray(framework.admissible(model, layouts), dtype=bool)
        if not rows.any():
            continue
        sub = {k: v[rows] for k, v in cols.items()}
        f_cols = {k: v.astype(np.float64) for k, v in sub.items()}
        f_cols.update(offload_optimizer=f_all[rows], offload_activations=n_all[rows])
        shared = {k: v for k, v in base.items() if k not in f_cols}
        tried = costs_in_chunks(shared, f_cols, replace(choices, offload=True,
                                                      offload_params=bool(params)),
                                None, KEPT_COSTS + ("host_bytes",))[0]
        fits = ((tried["total_bytes"] <= budget)
                & (tried["host_bytes"] <= hw.host.memory_bytes))
        if fits.any():
            extra = {k: v[fits] for k, v in sub.items()}
            extra.update(off_opt=f_all[rows][fits], off_params=np.full(int(fits.sum()), params),
                         off_act=n_all[rows][fits].astype(np.int64))
            yield extra, {k: tried[k][fits] for k in KEPT_COSTS}
            if kind == "optimizer":
                optimizer_done[np.flatnonzero(rows)[fits]] = True
