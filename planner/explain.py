"""One plan, explained: every term's formula in the papers' notation, rendered through sympy from
the same plan_costs that computes the numbers, next to its value.

The model is run twice: on floats (the values) and on symbols (the formulas). On the symbolic run
each named intermediate is recorded and replaced by its own symbol, so that a formula reads in
terms of the quantities above it (M_act = n_f·(L/p)·A_layer + …), as a paper would write it.
Choices that depend on values (which link a group crosses, which stage is the most loaded) are
resolved with the plan's own numbers."""

from __future__ import annotations

from types import SimpleNamespace

import sympy

from .cost import Choices, numbers, plan_costs
from .estimate import check_config, plan_from_costs
from .results import Plan, Term
from .schema import HardwareProfile, ModelSpec, PlanConfig
from .terms import TERMS

# The papers' symbols (Narayanan 2021, Korthikanti 2022, Rajbhandari 2020).
SYMBOLS = {
    "seq_len": "s", "mbs": "b", "hidden": "h", "n_layers": "L", "n_heads": "a", "n_kv_heads": "k",
    "head_dim": "d_h", "ffn": "f", "vocab": "V", "tp": "t", "pp": "p", "dp": "d", "cp": "c",
    "vpp": "v", "n_micro": "m", "gbs": "B",
    "peak_flops": "F_peak", "gemm_eff": "η", "hbm_bw": "W_hbm", "hbm_eff": "η_hbm",
    "fast_bw": "W_nvl", "net_bw": "W_net", "fast_lat": "α_nvl", "net_lat": "α_net",
    "reserved": "R", "frag": "φ", "kernel_s": "t_k", "n_sm": "N_SM",
}


def _symbolic_numbers(model: ModelSpec, x: SimpleNamespace) -> tuple[SimpleNamespace, dict]:
    """x with the papers' variables as positive symbols; shape facts that make the papers' forms
    appear (k = a, d_h = h/a, f = 4h, learned positions = s) substituted where the model has them."""
    sym = {k: sympy.Symbol(v, positive=True) for k, v in SYMBOLS.items()}
    xs = dict(vars(x))
    values = {}
    for key, s in sym.items():
        values[s] = getattr(x, key)
        xs[key] = s
    if model.kv_heads == model.n_heads:
        xs["n_kv_heads"] = sym["n_heads"]
    if model.dim_head * model.n_heads == model.hidden:
        xs["head_dim"] = sym["hidden"] / sym["n_heads"]
    if model.ffn == 4 * model.hidden:
        xs["ffn"] = 4 * sym["hidden"]
    if x.positions == x.seq_len:
        xs["positions"] = sym["seq_len"]
    return SimpleNamespace(**xs), values


def _resolve(expr, values: dict):
    """Pick each Piecewise branch by the plan's own numbers."""
    if not isinstance(expr, sympy.Basic) or not expr.has(sympy.Piecewise):
        return expr

    def choose(pw):
        for branch, cond in pw.args:
            if cond is sympy.true or bool(cond.xreplace(values)):
                return branch
        return pw

    return expr.replace(lambda e: isinstance(e, sympy.Piecewise), choose)


def formula_text(expr) -> str:
    """A formula on one line, readable: products as ·, squares as ²."""
    if not isinstance(expr, sympy.Basic):
        return f"{expr:g}" if isinstance(expr, float) else str(expr)
    text = sympy.sstr(sympy.factor_terms(expr))
    return (text.replace("**2", "²").replace("**3", "³").replace("*", "·")
            .replace("Min", "min").replace("Max", "max").replace("ceiling", "ceil"))


def symbolic_terms(model: ModelSpec, hw: HardwareProfile, config: PlanConfig,
                   numeric: dict[str, float]) -> dict[str, str]:
    """Each noted term's formula, as text."""
    x = numbers(model, hw, config)
    xs, values = _symbolic_numbers(model, x)
    for key, info in TERMS.items():
        if key in numeric:
            values[sympy.Symbol(info.symbol, positive=True)] = numeric[key]
    formulas: dict[str, str] = {}

    def note(name, expr):
        if name not in TERMS:
            return expr
        formulas[name] = formula_text(_resolve(expr, values))
        return sympy.Symbol(TERMS[name].symbol, positive=True)

    plan_costs(xs, Choices.of(config), note)
    return formulas


def explain(model: ModelSpec, hw: HardwareProfile, config: PlanConfig) -> Plan:
    """One plan with its full breakdown: each term's formula, value and reason."""
    check_config(model, hw, config)
    recorded: dict[str, float] = {}

    def record(name, value):
        recorded[name] = float(value)
        return value

    costs = plan_costs(numbers(model, hw, config), Choices.of(config), record)
    formulas = symbolic_terms(model, hw, config, recorded)
    terms = [Term(key=k, symbol=info.symbol, group=info.group, unit=info.unit,
                  formula=formulas.get(k, ""), value=recorded[k], why=info.why)
             for k, info in TERMS.items() if k in recorded]
    return plan_from_costs(model, hw, config, costs).model_copy(update={"terms": terms})
