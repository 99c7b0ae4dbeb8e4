"""One plan, explained: every term's formula in the papers' notation, rendered through sympy from
the same plan_costs that computes the numbers, next to its value.

The model is run twice: on floats (the values) and on symbols (the formulas). On the symbolic run
each named intermediate is recorded and replaced by its own symbol, so that a formula reads in
terms of the quantities above it (M_act = n_f·(L/p)·A_layer + …), as a paper would write it.
Choices that depend on values (which link a group crosses, which stage is the most loaded) are
decided by the plan's own numbers as the formulas are built (formulas._ops.resolving), so sympy
never sees a comparison. The profile's constants (peak, efficiency, bandwidths, bytes per element)
stay named symbols; `constants` lists their values. A formula too long to read on one line is
folded: its repeated sub-expressions become named sub-terms (w₁, w₂, …), each shown once.

The rendered text depends only on the model's shape, the profile, the plan's configuration and
plan3d itself, so it is kept on disk (formula_cache_dir) under a key made of all four: a repeated
explain reads it back without importing sympy."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

from ..results import CollectiveCall, Plan, Term
from ..schema import HardwareProfile, ModelSpec, PlanConfig
from .cost import Choices, numbers, plan_costs
from .estimate import check_config, plan_from_costs
from .nccl import Call, priced
from .numbers import FALLS_BACK_ON_GEMM_16
from .terms import SUB_TERMS, TERMS

# The papers' symbols (Narayanan 2021, Korthikanti 2022, Rajbhandari 2020), and the profile's
# constants under names of their own.
SYMBOLS = {
    "seq_len": "s", "mbs": "b", "hidden": "h", "n_layers": "L", "n_heads": "a", "n_kv_heads": "k",
    "head_dim": "d_h", "ffn": "f", "vocab": "V", "tp": "t", "pp": "p", "dp": "d", "cp": "c",
    "vpp": "v", "n_micro": "m", "gbs": "B",
    "peak_flops": "F_peak", "gemm_eff": "η", "hbm_bw": "W_hbm", "hbm_eff": "η_hbm",
    "peak_flops_16": "F_16", "gemm_eff_16": "η_16",
    "fast_bw": "W_nvl", "net_bw": "W_net", "fast_lat": "α_nvl", "net_lat": "α_net",
    "a2a_share": "ρ_a2a", "a2a_ramp_s": "τ_a2a",  # NCCL all-to-all's measured curve (moe, cp)
    "ctx": "M_ctx", "nccl_conn": "B_conn", "nccl_ch": "n_ch", "nvls_head": "B_nvls",
    "p2p_nvl": "B_p2p,nvl", "p2p_net": "B_p2p,net", "ws_torch": "M_ws,torch",
    "ws_te": "M_ws,te", "frag": "φ", "kernel_s": "t_k", "n_sm": "N_SM",
    "scatter_bw": "W_sc", "host_op_s": "t_h", "grouped_mm_eff_16": "η_gmm",
    "att_eff_fwd": "η_att", "att_eff_bwd": "η_att,b", "att_pad_fwd": "π_att", "att_pad_bwd": "π_att,b",
    "act_bytes": "ε_a", "w_bytes": "ε_w", "g_bytes": "ε_g",
    "nvls_bw": "W_nvls", "overlap_slow": "σ", "max_vio": "v_max", "speed_cv": "κ_g",
    "sr_base": "α_0", "sr_step_nvl": "α_s,nvl", "sr_step_net": "α_s,net", "sr_ll_nvl": "α_LL,nvl",
    "sr_ll_net": "α_LL,net",  # one NCCL send/recv (formulas/collectives.py)
    "cp_a2a": "c_a",  # cp-kind: the hierarchical kind's all-to-all group
    # offload: the offloaded optimizer fraction and activation layers, the host's link and DRAM
    "offload_optimizer": "f_o", "offload_activations": "N_off", "host_bw": "W_host",
    "dram_bw": "W_dram",
    # goodput: the cluster's interruption rate, relaunch time and checkpoint bandwidths per GPU
    "fail_rate": "λ_fail", "restart": "T_launch", "ckpt_write_bw": "W_ckpt", "ckpt_read_bw": "W_load",
}

MOE_SYMBOLS = {"top_k": "k_r", "expert_ffn": "f_e", "ep": "e"}
"""moe: the routed experts' shape and the expert-parallel degree,
symbols in a MoE model's formulas (explain only)."""

# What each constant is, for the constants table (values in base units).
CONSTANT_MEANINGS = {
    "peak_flops": ("FLOP/s", "dense peak of the plan's matmul precision"),
    "gemm_eff": ("", "share of peak training GEMMs reach (profile)"),
    "peak_flops_16": ("FLOP/s", "16-bit dense peak (attention, LM head, experts kept 16-bit)"),
    "gemm_eff_16": ("", "16-bit GEMM efficiency"),
    "hbm_bw": ("B/s", "HBM bandwidth"), "hbm_eff": ("", "share of HBM bandwidth reached"),
    "fast_bw": ("B/s", "NVLink bus bandwidth"), "net_bw": ("B/s", "network bus bandwidth"),
    "fast_lat": ("s", "NVLink latency per ring step"), "net_lat": ("s", "network latency per step"),
    "a2a_share": ("", "NCCL all-to-all's bus bandwidth at large messages over W_nvl (profile)"),
    "a2a_ramp_s": ("s", "all-to-all ramp time: half its bandwidth at a buffer of ρ_a2a·W_nvl·τ_a2a "
                   "(profile)"),
    "ctx": ("B", "CUDA context with lazily loaded kernels (426 MiB: formulas/runtime.py)"),
    "nccl_conn": ("B", "one NCCL connection's LL + LL128 + Simple FIFOs, in 2 MiB granules"),
    "nccl_ch": ("", "ring channels NCCL opens per communicator"),
    "nvls_head": ("B", "NVLS buffers per head: 2·channels·128 KiB·8 (0 without NVLS)"),
    "p2p_nvl": ("B", "point-to-point FIFOs per NVLink peer: 32 channels·512 KiB·8"),
    "p2p_net": ("B", "point-to-point FIFOs per network peer: channels·128 KiB·8"),
    "ws_torch": ("B", "PyTorch's cuBLAS + cuBLASLt workspaces, two threads"),
    "ws_te": ("B", "Transformer Engine's cuBLAS workspace, per stream"),
    "frag": ("", "fragmentation"),
    "kernel_s": ("s", "kernel launch overhead"), "n_sm": ("", "streaming multiprocessors"),
    "scatter_bw": ("B/s", "PyTorch's atomic scatter-add of routed rows (TileOPs #608, H200)"),
    "host_op_s": ("s", "host time per eager kernel: dispatch 3 µs (measured) + launch 3 µs"),
    "grouped_mm_eff_16": ("", "share of the 16-bit peak torch._grouped_mm reaches (profile)"),
    "att_eff_fwd": ("", "share of the 16-bit peak the framework's flash-attention kernel "
                    "reaches, forward (profile)"),
    "att_eff_bwd": ("", "the same, backward"),
    "att_pad_fwd": ("", "work the attention kernel runs over the FLOPs at its padded head widths "
                    "(FlexAttention: powers of two), forward"),
    "att_pad_bwd": ("", "the same, backward"),
    "act_bytes": ("B", "bytes per activation element"), "w_bytes": ("B", "bytes per weight"),
    "g_bytes": ("B", "bytes per gradient element"),
    "nvls_bw": ("B/s", "NVLink SHARP (NVLS) all-reduce bus bandwidth"),
    "sr_base": ("s", "NCCL's base latency of a send/recv or all-to-all, Simple"),
    "sr_step_nvl": ("s", "one NCCL Simple step on NVLink"),
    "sr_step_net": ("s", "one NCCL Simple step across the network"),
    "sr_ll_nvl": ("s", "one NCCL send/recv on NVLink, LL (up to 16 KiB)"),
    "sr_ll_net": ("s", "one NCCL send/recv across the network, LL (up to 16 KiB)"),
    "overlap_slow": ("", "compute slowdown beside overlapped NCCL kernels (Lee et al. 2025)"),
    "max_vio": ("", "busiest expert's load over the mean − 1 by the model's balancing (MoE; "
                "Wang et al. 2024 Table 2)"),
    "speed_cv": ("", "spread of the GPUs' speeds, σ/μ (Sinha et al. 2022, SC22)"),
    # offload: named by the plans that offload
    "host_bw": ("B/s", "host↔GPU link bandwidth per GPU, one direction (PCIe, NVLink-C2C)"),
    "dram_bw": ("B/s", "host DRAM bandwidth, this GPU's share (the CPU Adam step)"),
    "fail_rate": ("1/GPU-h", "job interruptions per GPU-hour (the profile's reliability section, "
                  "--failures-per-gpu-hour)"),
    "restart": ("s", "relaunch after an interruption, before the checkpoint's read (assumed)"),
    "ckpt_write_bw": ("B/s", "checkpoint write bandwidth per GPU, all writing (profile, "
                      "--storage-write-gb-per-s-per-gpu)"),
    "ckpt_read_bw": ("B/s", "checkpoint read bandwidth per GPU on a restart"),
}

CACHE_ENTRIES = 256  # plans whose formulas the cache keeps (~10 kB each)
GUARD = 1e-9  # max(GUARD-sized number, x): a guard against dividing by zero, not a choice
FOLD_CHARS = 110  # a formula longer than this is folded into named sub-terms
SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def _symbolic_numbers(model: ModelSpec, x: SimpleNamespace) -> tuple[SimpleNamespace, dict]:
    """x with the papers' variables as positive symbols; shape facts that make the papers' forms
    appear (k = a, d_h = h/a, f = 4h, learned positions = s) substituted where the model has them;
    the 16-bit peak and efficiency are F_peak and η themselves when the plan runs in 16 bits."""
    import sympy

    sym = {k: sympy.Symbol(v, positive=True) for k, v in SYMBOLS.items()}
    xs = dict(vars(x))
    values = {}
    for key, s in sym.items():
        values[s] = getattr(x, key)
        xs[key] = s
    if x.peak_flops_16 == x.peak_flops and x.gemm_eff_16 == x.gemm_eff:
        xs["peak_flops_16"], xs["gemm_eff_16"] = sym["peak_flops"], sym["gemm_eff"]
    for key in ("att_pad_fwd", "att_pad_bwd"):  # a kernel that pads nothing: no factor shown
        if getattr(x, key) == 1:
            xs[key] = 1
    if x.a2a_ramp_s == 0:  # no measured all-to-all curve: the ring's figure at every size
        xs["a2a_share"], xs["a2a_ramp_s"] = 1, 0
    for key in FALLS_BACK_ON_GEMM_16:  # a kernel the profile has not measured runs at η_16
        if getattr(x, key) == x.gemm_eff_16:
            xs[key] = xs["gemm_eff_16"]
    if model.kv_heads == model.n_heads:
        xs["n_kv_heads"] = sym["n_heads"]
    if model.dim_head * model.n_heads == model.hidden:
        xs["head_dim"] = sym["hidden"] / sym["n_heads"]
    if model.ffn == 4 * model.hidden:
        xs["ffn"] = 4 * sym["hidden"]
    if x.positions == x.seq_len:
        xs["positions"] = sym["seq_len"]
    if model.is_moe:  # moe: the routed experts' shape (top-k, expert width) as symbols
        for key, name in MOE_SYMBOLS.items():
            if getattr(x, key) == 0:  # no dense first layers: nothing to name
                continue
            s = sympy.Symbol(name, positive=True)
            values[s] = getattr(x, key)
            xs[key] = s
        xs["expert_matmul"] = model.n_mlp_matrices * xs["hidden"] * xs["expert_ffn"]
    return SimpleNamespace(**xs), values


def _resolve(expr, values: dict):
    """Pick each Piecewise branch by the plan's own numbers (what `resolving` did not decide)."""
    import sympy

    if not isinstance(expr, sympy.Basic) or not expr.has(sympy.Piecewise):
        return expr

    def choose(pw):
        for branch, cond in pw.args:
            if cond is sympy.true or bool(cond.xreplace(values)):
                return branch
        return pw

    return expr.replace(lambda e: isinstance(e, sympy.Piecewise), choose)


def _valued(expr, values: dict) -> float:
    """A formula's value at the plan's numbers (`values`: each symbol's), its Piecewise branches
    chosen by them (_resolve); a plain number as it is."""
    import sympy

    if not isinstance(expr, sympy.Basic):
        return float(expr)
    value = _resolve(expr, values).xreplace(values)  # a bare symbol becomes its plain number
    return float(value.doit() if isinstance(value, sympy.Basic) else value)


def formula_text(expr) -> str:
    """A formula on one line, readable: products as ·, squares as ², other powers as ^."""
    import sympy

    if not isinstance(expr, sympy.Basic):
        return f"{expr:g}" if isinstance(expr, float) else str(expr)
    return _sympy_text(expr)


@functools.lru_cache(maxsize=4096)
def _sympy_text(expr) -> str:
    """formula_text of a sympy expression, once per distinct expression: factor_terms is most of
    explain's time, and plans of the same choices give the same formulas (sympy's objects are
    immutable, and equal only when alike: 2.0 ≠ 2)."""
    import sympy

    # whole-number floats the profile's numbers leave (an oversubscription of 1.0, 4.0 replicas)
    # print as integers, and a factor of 1 drops out
    expr = expr.xreplace({f: sympy.Integer(int(f)) for f in expr.atoms(sympy.Float)
                          if float(f).is_integer()})
    text = sympy.sstr(sympy.factor_terms(expr))
    return (text.replace("**2", "²").replace("**3", "³").replace("**", "^").replace("*", "·")
            .replace("Min", "min").replace("Max", "max").replace("ceiling", "ceil"))


NCCL_PICK_TEXT = ("one call as NCCL's tuner picks it (min over algorithm × protocol, "
                  "formulas/collectives.py)")
"""The formula column of an NCCL pick's sub-term: a time in seconds (the other sub-terms,
ceilings, are counts)."""


def _nccl_picks(symbol: str, expr, values: dict):
    """Each NCCL tuner pick in a formula — the min over algorithm × protocol candidates that
    formulas/collectives.py builds, the disabled ones at DISABLED_S — as a named sub-term
    symbol₁, symbol₂, … with its value: the time of one call, whose constants are NCCL's own
    tables (BASE/HW_LATENCY_US), not the paper's variables."""
    import sympy

    from ..formulas.collectives import DISABLED_S

    base = symbol  # the whole symbol: T_ep,layer₁ and T_ep,exp₁ are not one name
    subs, names = [], {}
    picks = [m for m in expr.atoms(sympy.Min) if sympy.Float(DISABLED_S) in m.args]
    for m in sorted(picks, key=sympy.default_sort_key):
        name = sympy.Symbol(f"{base}{str(len(subs) + 1).translate(SUBSCRIPTS)}", positive=True)
        names[m] = name
        subs.append((str(name), NCCL_PICK_TEXT, _valued(m, values)))
    return expr.xreplace(names), subs


def _fold(symbol: str, expr, values: dict, start: int = 0):
    """A long formula as (short form, [(sub-symbol, sub-formula text, value)]): each ceiling in it
    (tile and wave counts) becomes a named sub-term symbol₁, symbol₂, …, inner ones first, each
    shown once."""
    import sympy

    base = symbol  # the whole symbol: T_ep,layer₁ and T_ep,exp₁ are not one name
    subs, known, names = [], dict(values), {}
    while True:
        inner = [c for c in expr.atoms(sympy.ceiling) if not c.args[0].has(sympy.ceiling)]
        if not inner:
            break
        for c in sorted(inner, key=sympy.default_sort_key):
            name = sympy.Symbol(f"{base}{str(start + len(subs) + 1).translate(SUBSCRIPTS)}",
                                positive=True)
            value = _valued(c, known)
            known[name] = value
            names[c] = name
            subs.append((str(name), formula_text(c), value))
        expr = expr.xreplace(names)
    return formula_text(expr), subs


def _named_sub_terms(name: str, exprs: tuple, values: dict, named: dict):
    """Quantities the cost path named together as sub-terms of a term ("term:kinds:label", kinds
    comma-separated, terms.SUB_TERMS): each a symbol (the kind's prefix, the label as
    subscript) with the plan's value, kept for the term's rows; where one of them is 0 the
    formula they enter is taken to vanish, and they drop out as 0s."""
    import sympy

    term, kinds, label = name.split(":")
    if term not in TERMS:
        return exprs
    found = [_valued(e, values) for e in exprs]
    if 0 in found:
        return tuple(0 for _ in exprs)
    out = []
    for kind, value in zip(kinds.split(","), found):
        prefix, unit, text = SUB_TERMS[kind]
        symbol = sympy.Symbol(f"{prefix}_{label}", positive=True)
        values[symbol] = value
        named.setdefault(term, []).append((str(symbol), text, value, unit))
        out.append(symbol)
    return tuple(out)


def _atoms_decided(expr, values: dict):
    """max/min of plain inputs (max(1, N_SM)) and the guards against a zero divisor
    (max(10⁻¹², W + F)) decided by the plan's numbers, inner ones first; max(0, T − …) stays."""
    import sympy

    def decidable(e):
        guard = any(a.is_Number and 0 < abs(float(a)) <= GUARD for a in e.args)
        return guard or all(a.is_Number or a.is_Symbol for a in e.args)

    def decide(e):
        vals = [_valued(a, values) for a in e.args]
        pick = max if isinstance(e, sympy.Max) else min
        return e.args[vals.index(pick(vals))]

    while True:
        found = {e: decide(e) for e in expr.atoms(sympy.Max, sympy.Min) if decidable(e)}
        if not found:
            return expr
        expr = _rebuilt(expr, found, {})


def _rebuilt(expr, found: dict, memo: dict):
    """expr with `found`'s sub-expressions replaced, each distinct node rebuilt once; the min
    and max above them kept as they are (evaluating one again compares its arguments by
    factoring their difference: seconds for a collective's time)."""
    import sympy

    if expr in found:
        return found[expr]
    if not expr.args or expr in memo:
        return memo.get(expr, expr)
    args = tuple(_rebuilt(a, found, memo) for a in expr.args)
    if args == expr.args:
        out = expr
    elif isinstance(expr, (sympy.Min, sympy.Max)) and not all(a.is_Number for a in args):
        out = expr.func(*args, evaluate=False)
    else:
        out = expr.func(*args)
    memo[expr] = out
    return out


def symbolic_terms(model: ModelSpec, hw: HardwareProfile, config: PlanConfig,
                   numeric: dict[str, float]) -> tuple[dict[str, str], dict[str, list]]:
    """Each noted term's formula as text, and the named sub-terms of the folded ones."""
    import sympy

    from ..formulas._ops import resolving

    x = numbers(model, hw, config)
    xs, values = _symbolic_numbers(model, x)
    for key, info in TERMS.items():
        if key in numeric:
            values[sympy.Symbol(info.symbol, positive=True)] = numeric[key]
    formulas: dict[str, str] = {}
    folded: dict[str, list] = {}
    named: dict[str, list] = {}  # sub-terms a formula named for itself, by term

    def note(name, expr):
        if ":" in name:
            return _named_sub_terms(name, expr, values, named)
        if name not in TERMS:
            return expr
        expr = _resolve(expr, values)
        picks = []
        if isinstance(expr, sympy.Basic):
            expr = _atoms_decided(expr, values)
            expr, picks = _nccl_picks(TERMS[name].symbol, expr, values)
            values.update({sympy.Symbol(n, positive=True): v for n, _, v in picks})
        text = formula_text(expr)
        subs = []
        if len(text) > FOLD_CHARS and isinstance(expr, sympy.Basic):
            text, subs = _fold(TERMS[name].symbol, expr, values, len(picks))
        picks = [(*p, TERMS[name].unit) for p in picks]
        subs = [(*f, "count") for f in subs]  # the ceilings: tile and wave counts
        subs = named.pop(name, []) + picks + subs
        if subs:
            folded[name] = subs
        formulas[name] = text
        return sympy.Symbol(TERMS[name].symbol, positive=True)

    with resolving(values):
        plan_costs(xs, Choices.of(config), note)
    return formulas, folded


def formula_cache_dir() -> Path | None:
    """Where rendered formulas are kept: $PLAN3D_CACHE_DIR, else $XDG_CACHE_HOME/plan3d (default
    ~/.cache/plan3d); None (no cache) when PLAN3D_NO_CACHE is set."""
    if os.environ.get("PLAN3D_NO_CACHE"):
        return None
    explicit = os.environ.get("PLAN3D_CACHE_DIR")
    if explicit:
        return Path(explicit)
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "plan3d"


def _code_stamp() -> str:
    """plan3d's version and the size and modification time of each of its modules: a formula
    rendered by other code never matches."""
    from .._version import __version__

    here = Path(__file__).resolve().parent.parent  # the planner package
    parts = [__version__]
    for path in sorted(here.rglob("*.py")):
        st = path.stat()
        parts.append(f"{path.relative_to(here)}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(parts)


def formula_cache_key(model: ModelSpec, hw: HardwareProfile, config: PlanConfig) -> str:
    """Everything a plan's rendered formulas depend on: the model's shape, the profile, the
    configuration, plan3d's code."""
    text = "\n".join((model.model_dump_json(), hw.model_dump_json(), config.model_dump_json(),
                      _code_stamp()))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _cached(key: str):
    folder = formula_cache_dir()
    if folder is None:
        return None
    try:
        data = json.loads((folder / f"formulas-{key}.json").read_text("utf-8"))
        return data["formulas"], {k: [tuple(s) for s in v] for k, v in data["folded"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _store(key: str, formulas: dict, folded: dict) -> None:
    """Write the entry (a temporary file, then a rename); a cache that cannot be written is
    skipped, never an error."""
    folder = formula_cache_dir()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".formulas-{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"formulas": formulas, "folded": folded}), "utf-8")
        os.replace(tmp, folder / f"formulas-{key}.json")
        entries = sorted(folder.glob("formulas-*.json"), key=lambda p: p.stat().st_mtime)
        for old in entries[:-CACHE_ENTRIES]:  # keep the most recent
            old.unlink(missing_ok=True)
    except OSError:
        pass


def recorded_costs(model: ModelSpec, hw: HardwareProfile, config: PlanConfig
                   ) -> tuple[dict, dict[str, float], list[Call]]:
    """plan_costs of one plan, every named intermediate's value by its name, and the step's
    collectives as priced (model/nccl.py Call): the numbers explain shows beside the formulas."""
    recorded: dict[str, float] = {}
    ledger: list[Call] = []

    def record(name, value):
        if name == "collectives":
            ledger.extend(value)
            return value
        if ":" in name:  # sub-terms: their values come with their formulas (_named_sub_terms)
            return value
        recorded[name] = float(value)
        return value

    return plan_costs(numbers(model, hw, config), Choices.of(config), record), recorded, ledger


def explain(model: ModelSpec, hw: HardwareProfile, config: PlanConfig) -> Plan:
    """One plan with its full breakdown: each term's formula, value and reason; a folded term's
    sub-terms follow it, keyed `term:1`, `term:2`, …"""
    check_config(model, hw, config)
    costs, recorded, ledger = recorded_costs(model, hw, config)
    key = formula_cache_key(model, hw, config)
    hit = _cached(key)
    if hit is None:
        formulas, folded = symbolic_terms(model, hw, config, recorded)
        _store(key, formulas, folded)
    else:
        formulas, folded = hit
    terms = []
    for k, info in TERMS.items():
        if k not in recorded:
            continue
        terms.append(Term(key=k, symbol=info.symbol, group=info.group, unit=info.unit,
                          formula=formulas.get(k, ""), value=recorded[k], why=info.why))
        for i, (symbol, text, value, unit) in enumerate(folded.get(k, []), 1):
            terms.append(Term(key=f"{k}:{i}", symbol=symbol, group=info.group, unit=unit,
                              formula=text, value=value, why=f"sub-term of {info.symbol}"))
    plan = plan_from_costs(model, hw, config, costs)
    comm = plan.comm.model_copy(update={"collectives": collective_calls(ledger)})
    return plan.model_copy(update={"terms": terms, "comm": comm})


def collective_calls(ledger: list) -> list[CollectiveCall]:
    """The noted collectives (model/nccl.py Call) that move anything, each with the tuner's
    pick for one call and its latency and transfer (nccl.priced), in the order the cost path
    priced them."""
    out = []
    for call in ledger:
        pick = priced(call)
        if pick is None or float(call.calls) <= 0:
            continue
        out.append(CollectiveCall(
            name=call.name, algorithm=_algorithm(call, pick),
            protocol="-" if call.p2p == "deepep" and call.coll is None
            else pick.proto.name.capitalize() if pick.proto.name == "SIMPLE"
            else pick.proto.name,
            ranks=float(call.ranks),
            nodes=float(getattr(call.link, "n_nodes", 2 - float(getattr(call.link, "inside", 1)))),
            message_bytes=float(call.buffer_bytes), calls_per_step=float(call.calls),
            latency_s=pick.latency_s, transfer_s=pick.transfer_s,
            step_s=float(call.calls) * pick.time_s))
    return out


def _algorithm(call: Call, pick) -> str:
    """The table's algorithm: the tuner's for a collective, p2p for NCCL's point-to-point
    calls (send/recv, all-to-all), deepep for DeepEP's kernels."""
    if call.coll is not None:
        return pick.algo.value
    return "deepep" if call.p2p == "deepep" else "p2p"


def named_in(listed: list[tuple], formulas: list[str]) -> list[tuple]:
    """The constants (symbol first) that some formula names: a symbol counts where it stands
    as a whole name between operators, not inside a longer one (η in η_hbm)."""
    import re

    names = {token.rstrip(",") for formula in formulas
             for token in re.findall(r"[^\s·()+\-/*^]+", formula)}
    return [c for c in listed if c[0] in names]


def constants(model: ModelSpec, hw: HardwareProfile, config: PlanConfig) -> list[tuple]:
    """The profile's constants, (symbol, value, unit, meaning) each, for named_in to keep those
    the plan's formulas name (a constant the formulas replace by another symbol — the 16-bit
    figures in a 16-bit plan, an unmeasured kernel's share — or do not reach is not named)."""
    x = numbers(model, hw, config)
    return [(SYMBOLS[key], float(getattr(x, key)), unit, meaning)
            for key, (unit, meaning) in CONSTANT_MEANINGS.items()]
