"""Symbolic identities, proved with sympy on the very functions the planner runs.

plan_costs is evaluated with every model, hardware and plan number a positive sympy symbol, with
only the quantity an identity is about fixed (pp = 1, tp = 1, cp = 1, g = w = 2). Its mins and
maxes are built unevaluated and only the outputs an identity is about are evaluated (.doit()): see
symbolic_costs. A last test
introspects every public function of planner.formulas.* and evaluates it on symbols: a formula
that branched on a value (`if x > 0`, `min(a, b)`) could not run on symbols.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import pkgutil
import typing
from contextlib import contextmanager
from enum import Enum
from functools import cache
from types import SimpleNamespace
from unittest import mock

import pytest
import sympy as sp

import planner.formulas
from planner.catalog import load_hardware, load_model
from planner.formulas import _ops, memory, params, pipeline
from planner.formulas.choices import (
    MLP_MATRICES,
    Attention,
    MlpKind,
    Precision,
    Recompute,
    Schedule,
    ZeroStage,
)
from planner.model.cost import Choices, numbers, plan_costs
from planner.model.numbers import hardware_numbers, model_numbers
from planner.schema import PlanConfig


def zero(expr) -> bool:
    return sp.simplify(expr) == 0


def same(a, b) -> bool:
    return zero(sp.sympify(a) - sp.sympify(b))


@cache
def inputs() -> dict:
    """The numbers plan_costs reads, from the project's own numbers() (so a new input is picked
    up automatically), for a GQA/SwiGLU model on the A100 profile."""
    config = PlanConfig(dp=1, gbs=1, seq_len=4096, sequence_parallel=False)
    return vars(numbers(load_model("llama-2-70b"), load_hardware("a100-nvlink"), config))


@cache
def model_and_hardware_names() -> frozenset:
    return frozenset(model_numbers(load_model("llama-2-70b"))) | frozenset(
        hardware_numbers(load_hardware("a100-nvlink"), Precision.BF16))


SYM = {name: sp.Symbol(name, positive=True) for name in inputs()}


@cache
def symbolic_costs(choices: Choices, fixed: tuple[tuple[str, int], ...],
                   plan_only: bool = False) -> dict:
    """plan_costs with every input a positive symbol, except `fixed`; with plan_only the model
    and hardware numbers stay numeric (Llama 2 70B on A100) and only the plan's numbers (dp, tp,
    pp, cp, vpp, mbs, n_micro, gbs, seq_len, byte widths, overlap) are symbols: the identities
    below are statements about the plan's degrees, and this keeps sympy fast."""
    x = dict(SYM)
    if plan_only:
        x.update({n: v for n, v in inputs().items() if n in model_and_hardware_names()})
    x.update(dict(fixed))
    with unevaluated_extrema():
        return plan_costs(SimpleNamespace(**x), choices)


@contextmanager
def unevaluated_extrema():
    """_ops.minimum and _ops.maximum build sympy's Min and Max unevaluated (as _ops.smallest
    already does). Evaluating Max(a, b) on the whole plan's expressions makes sympy factor a − b
    for every pair of arguments: minutes per plan (the step time's max over the link floors, each
    exposed time's max(0, comm − compute)), for outputs no identity reads. An unevaluated Max is
    still max(a, b), exactly, so nothing can be proved that does not hold; `evaluated` then
    evaluates the outputs an identity is about, and those alone."""
    minimum, maximum = _ops.minimum, _ops.maximum

    def lazy_min(a, b):
        return sp.Min(a, b, evaluate=False) if _ops._is_symbolic(a, b) else minimum(a, b)

    def lazy_max(a, b):
        return sp.Max(a, b, evaluate=False) if _ops._is_symbolic(a, b) else maximum(a, b)

    with mock.patch.object(_ops, "minimum", lazy_min), mock.patch.object(_ops, "maximum", lazy_max):
        yield


def evaluated(costs: dict, name: str):
    """One output of symbolic_costs with its mins and maxes evaluated."""
    return sp.sympify(costs[name]).doit()


def float_costs(**config) -> dict:
    config = PlanConfig(**config)
    x = numbers(load_model("llama-2-70b"), load_hardware("a100-nvlink"), config)
    return plan_costs(x, Choices.of(config))


def without_piecewise(expr):
    """Replace each distinct Piecewise (the most-loaded-stage indicator) by an opaque symbol:
    the identities hold for either stage, and sympy then needs only rational arithmetic."""
    return expr.xreplace({p: sp.Dummy() for p in expr.atoms(sp.Piecewise)})


# one all-symbolic evaluation serves the pp = 1 and the ZeRO-3 identities
ZERO3_1F1B = Choices(ZeroStage.PARAMETERS, Recompute.FULL, Schedule.ONE_F_ONE_B, True,
                     Attention.FLASH)
# fp8 0 and recompute_layers 0: the identities are about 16-bit plans with every layer at the
# plan's recompute level (a recipe's quantised weights and partial recompute are tested in
# tests/formulas/test_fp8_recipes.py and test_recompute_levels.py)
PP1_G2 = (("pp", 1), ("vpp", 1), ("w_bytes", 2), ("g_bytes", 2), ("fp8", 0),
          ("recompute_layers", 0))


# ---- pp = 1, tp = 1, cp = 1 ------------------------------------------------------------------

def test_pp1_removes_bubble_and_pp_traffic():
    r = symbolic_costs(ZERO3_1F1B, PP1_G2, plan_only=True)
    assert evaluated(r, "bubble_fraction") == 0
    assert evaluated(r, "pp_bytes") == 0
    assert evaluated(r, "bubble_s") == 0
    assert evaluated(r, "pp_exposed_s") == 0
    # the identity is not vacuous: pp = 2 has both
    r2 = float_costs(dp=1, pp=2, n_micro=4, gbs=4, seq_len=4096, sequence_parallel=False)
    assert r2["bubble_fraction"] > 0 and r2["pp_bytes"] > 0


def test_pp1_removes_bubble_and_pp_traffic_gpipe():
    c = Choices(ZeroStage.NONE, Recompute.NONE, Schedule.GPIPE, False, Attention.CLASSIC)
    r = symbolic_costs(c, (("pp", 1), ("vpp", 1)), plan_only=True)
    assert evaluated(r, "bubble_fraction") == 0 and evaluated(r, "pp_bytes") == 0
    assert evaluated(r, "bubble_s") == 0 and evaluated(r, "pp_exposed_s") == 0


def test_pp1_bubble_vanishes_for_any_v_and_m():
    m, v = sp.symbols("m v", positive=True)
    assert pipeline.bubble_fraction(1, m, v) == 0
    assert same(pipeline.pipeline_slots(1, m, v), m)


def test_tp1_removes_tp_traffic():
    c = Choices(ZeroStage.OPTIMIZER, Recompute.FULL, Schedule.INTERLEAVED, False,
                Attention.CLASSIC)
    r = symbolic_costs(c, (("tp", 1),), plan_only=True)
    assert evaluated(r, "tp_bytes") == 0
    assert evaluated(r, "tp_exposed_s") == 0
    r2 = float_costs(dp=1, tp=2, gbs=1, seq_len=4096, sequence_parallel=False)
    assert r2["tp_bytes"] > 0 and r2["tp_exposed_s"] > 0


def test_cp1_removes_cp_traffic():
    c = Choices(ZeroStage.GRADIENTS, Recompute.SELECTIVE, Schedule.GPIPE, True, Attention.FLASH)
    r = symbolic_costs(c, (("cp", 1),), plan_only=True)
    assert evaluated(r, "cp_bytes") == 0
    assert evaluated(r, "cp_exposed_s") == 0
    r2 = float_costs(dp=1, cp=2, gbs=1, seq_len=4096, sequence_parallel=False)
    assert r2["cp_bytes"] > 0


# ---- ZeRO-3 ----------------------------------------------------------------------------------

def test_zero3_model_states_are_16psi_over_d():
    psi, d = sp.symbols("Psi d", positive=True)
    states = (memory.weight_bytes(psi, 2, d, ZeroStage.PARAMETERS)
              + memory.gradient_bytes(psi, 2, d, ZeroStage.PARAMETERS)
              + memory.optimizer_bytes(psi, 4, 8, d, ZeroStage.PARAMETERS))
    assert same(states, 16 * psi / d)


def test_zero3_model_states_through_plan_costs():
    """Whole plan, every plan number symbolic, 16-bit weights and gradients: the reported weights +
    gradients + optimizer state of the most loaded stage are 16·Ψ_stage/(dp_shard·cp), with
    dp_shard = dp/r (hybrid sharding's r replicas; r = 1 without it), plus a MoE stage's routed
    experts, 16·Ψ_experts/edp with edp = dp·cp·tp/(ep·etp)."""
    r = symbolic_costs(ZERO3_1F1B, PP1_G2, plan_only=True)
    states = sum(evaluated(r, name) for name in ("weights_bytes", "gradients_bytes",
                                                 "optimizer_bytes"))
    edp = SYM["dp"] * SYM["cp"] * SYM["tp"] / (SYM["ep"] * SYM["etp"])
    diff = (states
            - 16 * evaluated(r, "stage_params") / (SYM["dp"] / SYM["dp_replicate"] * SYM["cp"])
            - 16 * evaluated(r, "expert_stage_params") / edp)
    assert sp.cancel(without_piecewise(diff)) == 0


# ---- schedules -------------------------------------------------------------------------------

def test_interleaved_with_v1_has_the_1f1b_bubble():
    p, m = sp.symbols("p m", positive=True)
    assert same(pipeline.bubble_fraction(p, m, 1), (p - 1) / (m + p - 1))  # 1F1B / GPipe
    assert same(pipeline.pipeline_slots(p, m, 1), m + p - 1)
    # and the last stage holds what 1F1B's last stage holds
    assert same(pipeline.in_flight_last_stage(p, m, 1, Schedule.INTERLEAVED),
                pipeline.in_flight_last_stage(p, m, 1, Schedule.ONE_F_ONE_B))


def test_interleaved_first_stage_in_flight_is_korthikanti_factor():
    """Documented difference (not an identity with 1F1B): Megatron's interleaved schedule warms up
    2(p − 1) + (v − 1)p chunk-forwards on the first rank, so it holds p + (p − 1)/v stages' worth
    of micro-batches, = p·(1 + (p − 1)/(p·v)) (Korthikanti 2022 §4.2.3); at v = 1 that is 2p − 1,
    not 1F1B's p (Megatron runs the non-interleaved schedule when v = 1)."""
    p, v = sp.symbols("p v", positive=True)
    m = sp.oo  # uncapped by the number of micro-batches
    first = pipeline.in_flight_first_stage(p, m, v, Schedule.INTERLEAVED)
    assert same(first, p * (1 + (p - 1) / (p * v)))
    assert same(first, (2 * (p - 1) + (v - 1) * p + 1) / v)


def test_bubble_is_independent_of_schedule_in_plan_costs():
    hw, model = load_hardware("a100-nvlink"), load_model("llama-2-70b")
    out = {}
    for schedule in (Schedule.ONE_F_ONE_B, Schedule.GPIPE, Schedule.INTERLEAVED):
        config = PlanConfig(dp=2, tp=8, pp=4, vpp=1, n_micro=16, gbs=32, seq_len=4096,
                            schedule=schedule)
        out[schedule] = plan_costs(numbers(model, hw, config), Choices.of(config))
    for key in ("bubble_fraction", "pp_bytes"):
        assert (out[Schedule.INTERLEAVED][key] == out[Schedule.ONE_F_ONE_B][key]
                == out[Schedule.GPIPE][key]), key


# ---- SwiGLU at 8h/3 ----------------------------------------------------------------------------

def test_swiglu_at_8h_over_3_has_gelu_4h_parameters():
    h = sp.Symbol("h", positive=True)
    swiglu = params.mlp_weight_params(h, sp.Rational(8, 3) * h, MLP_MATRICES[MlpKind.SWIGLU])
    gelu = params.mlp_weight_params(h, 4 * h, MLP_MATRICES[MlpKind.GELU])
    assert same(swiglu, gelu) and same(gelu, 8 * h**2)
    # and so the whole (bias-free, RMSNorm) layer
    a = sp.Symbol("a", positive=True)

    def layer(ffn, kind):
        return params.layer_params(h, a, a, h / a, ffn, MLP_MATRICES[kind], 0, 1)

    assert same(layer(sp.Rational(8, 3) * h, MlpKind.SWIGLU), layer(4 * h, MlpKind.GELU))


# ---- no hidden value branching ---------------------------------------------------------------

DISCRETE_BY_NAME = {"zero_stage": list(ZeroStage),
                    # NCCL's per-channel caps (tree, tree LL128, ring LL128; K.channel_caps):
                    # none, and caps of the order of the symbols' prime values
                    "caps": [None, (3.0, 2.0, 5.0)],
                    # torchtitan's per-op SAC: a block's mm weights in call order (none, one,
                    # five: the even-positioned are rerun)
                    "counted_weights": [(), (3.0,), (3.0, 5.0, 7.0, 11.0, 13.0)]}


def public_functions():
    for info in pkgutil.iter_modules(planner.formulas.__path__):
        module = importlib.import_module(f"planner.formulas.{info.name}")
        for name, obj in vars(module).items():
            # _ops.shown takes a formula and its arguments (how a symbol's formula names it);
            # its formulas are held to this test themselves (reliability.straggler_s);
            # _ops.all_off asks what backend a value is on (False for a symbol), no formula
            if (inspect.isfunction(obj) and obj.__module__ == module.__name__
                    and not name.startswith("_") and obj not in (_ops.shown, _ops.all_off)):
                yield pytest.param(obj, id=f"{info.name}.{name}")


PRIMES = [3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83]


def discrete_values(fn, name):
    hint = typing.get_type_hints(fn).get(name)
    if name in DISCRETE_BY_NAME:
        return DISCRETE_BY_NAME[name]
    if hint is bool:
        return [True, False]
    if isinstance(hint, type) and issubclass(hint, Enum):
        return list(hint)
    return None


def test_the_introspection_finds_the_formulas():
    names = {p.id for p in public_functions()}
    assert len(names) >= 50
    for must in ("pipeline.bubble_fraction", "comm.ring_allreduce_bytes", "params.padded_vocab",
                 "activations.layer_activation_bytes", "memory.optimizer_bytes", "_ops.minimum"):
        assert must in names


@pytest.mark.parametrize("fn", list(public_functions()))
def test_every_formula_runs_on_symbols_and_agrees_with_floats(fn):
    """Each public formula, for every value of its discrete arguments, evaluates on positive
    symbols; substituting numbers into the symbolic result gives the float evaluation."""
    sig = inspect.signature(fn)
    continuous, discrete = [], {}
    for name in sig.parameters:
        values = discrete_values(fn, name)
        if values is None:
            continuous.append(name)
        else:
            discrete[name] = values
    symbols = {n: sp.Symbol(f"x_{n}", positive=True) for n in continuous}
    point = {n: PRIMES[i % len(PRIMES)] for i, n in enumerate(continuous)}
    for combo in itertools.product(*discrete.values()):
        chosen = dict(zip(discrete, combo))
        symbolic = fn(**symbols, **chosen)
        numeric = fn(**{n: float(v) for n, v in point.items()}, **chosen)
        # a formula may return a fixed tuple of quantities (a collective's latency and transfer
        # parts): each is held to the same test
        if not isinstance(symbolic, tuple):
            symbolic, numeric = (symbolic,), (numeric,)
        assert len(symbolic) == len(numeric)
        for sym_part, num_part in zip(symbolic, numeric):
            assert isinstance(sym_part, (sp.Basic, int, float)), (fn.__name__, type(sym_part))
            # xreplace, not subs: subs puts the numbers in one symbol at a time, re-evaluating
            # every Min/Max of partly numeric arguments on the way (seconds for NCCL's tuner)
            at_point = sp.sympify(sym_part).xreplace({symbols[n]: v for n, v in point.items()})
            assert float(at_point) == pytest.approx(float(num_part), rel=1e-12, abs=1e-300), (
                fn.__name__, chosen, at_point, num_part)
