"""A tiny namespace that lets one formula run on floats, numpy arrays and sympy symbols.

Formulas never branch on values. Where a quantity needs a minimum, a maximum, a ceiling or a
choice between two links, it calls one of these, and the call is routed to the backend of its
arguments: Python's own functions for floats, numpy for arrays, sympy for symbols. sympy is only
imported when a symbol is actually seen, so the vectorised search never pays for it.
"""

from __future__ import annotations

import functools
import math

import numpy as np

_PLAIN = (float, int, np.ndarray, np.floating)


def _is_symbolic(*xs) -> bool:
    for x in xs:  # plain numbers and arrays first: the search calls this millions of times
        if not isinstance(x, _PLAIN) and (type(x).__module__.startswith("sympy")
                                          or getattr(x, "_shown", False)):
            return True
    return False


_RESOLVE: list = []  # explain's plan values while it builds formulas (see resolving)


class resolving:
    """While active (`with resolving(values):`), le and divides on symbols are decided at once by
    the plan's own numbers (`values` maps each symbol to its value), so a formula never carries a
    Piecewise for sympy to simplify: the indicator becomes the plain 1 or 0 the plan has."""

    def __init__(self, values: dict):
        self.values = values

    def __enter__(self):
        _RESOLVE.append(self.values)
        return self

    def __exit__(self, *exc):
        _RESOLVE.pop()
        return False


def _decided(a, b, test):
    """1 or 0 for a symbolic comparison under `resolving`, else None."""
    if not _RESOLVE:
        return None
    values = _RESOLVE[-1]

    def num(x):
        return float(x.xreplace(values)) if hasattr(x, "xreplace") else float(x)

    return 1 if test(num(a), num(b)) else 0


_NUMERIC = frozenset((float, int, bool, np.float64, np.int64, np.bool_))

ARRAY, NUMBER = 1, 2
"""What _kind finds: numpy computes the op (ARRAY), or Python's own functions do (NUMBER)."""


def _kind(*xs):
    """ARRAY when some argument is a numpy array and every other one a plain number: the search's
    case; NUMBER when every argument is a plain number; None for anything else (symbols, other
    types: the general tests decide). By exact type, in one pass, because the search makes
    hundreds of thousands of these calls and on a small chunk each test costs about what its
    arithmetic does."""
    kind = NUMBER
    for x in xs:
        t = type(x)
        if t is np.ndarray:
            kind = ARRAY
        elif t not in _NUMERIC:
            return None
    return kind


def _arrays(*xs) -> bool:
    """True when some argument is a numpy array and every other one a plain number (_kind)."""
    return _kind(*xs) == ARRAY


def _is_array(*xs) -> bool:
    for x in xs:
        if isinstance(x, np.ndarray):
            return True
    return False


def _on_arrays(*xs) -> bool:
    """Whether numpy computes an op of these arguments: the search's case (_arrays, by exact
    type) first, else any array among arguments none of which is a symbol."""
    return _arrays(*xs) or (_is_array(*xs) and not _is_symbolic(*xs))


@functools.lru_cache(maxsize=4096)
def _sympy_extremum(kind: str, type_a: type, a, type_b: type, b):
    """sympy's Min or Max of a and b, evaluated, once per distinct (a, b): evaluating one compares
    its arguments (factoring a − b), ~25 ms for a collective's time, and explain builds the same
    ones again for every plan of the same choices (its inputs are symbols; the plan's numbers only
    decide le and divides). sympy's objects are immutable, so a repeat is the same object. The
    types are in the key because 2 == 2.0 for Python, not for sympy."""
    import sympy

    return getattr(sympy, kind)(a, b)


def _unary(name: str, doc: str, on_symbol, on_array, on_number):
    """One function of one argument on any backend: on_symbol(sympy, x) for a symbol (sympy
    imported only then), on_array(x) for a numpy array, on_number(x) for a plain number."""

    def op(x):
        kind = _kind(x)  # the search's cases first
        if kind == ARRAY:
            return on_array(x)
        if kind == NUMBER:
            return on_number(x)
        if _on_arrays(x):
            return on_array(x)
        if _is_symbolic(x):
            import sympy

            return on_symbol(sympy, x)
        return on_number(x)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


ceil = _unary("ceil", "⌈x⌉ on any backend.", lambda sympy, x: sympy.ceiling(x), np.ceil,
              lambda x: float(math.ceil(x)))
floor = _unary("floor", "⌊x⌋ on any backend.", lambda sympy, x: sympy.floor(x), np.floor,
               lambda x: float(math.floor(x)))
log2 = _unary("log2", "log₂ x on any backend.", lambda sympy, x: sympy.log(x, 2), np.log2,
              math.log2)
ln = _unary("ln", "Natural logarithm on any backend.", lambda sympy, x: sympy.log(x), np.log,
            math.log)
sqrt = _unary("sqrt", "Square root on any backend (a symbol's prints as sqrt(x), not x**0.5).",
              lambda sympy, x: sympy.sqrt(x), np.sqrt, math.sqrt)


def minimum(a, b):
    """min(a, b) on any backend."""
    kind = _kind(a, b)
    if kind == ARRAY:
        return np.minimum(a, b)
    if kind == NUMBER:
        return min(a, b)
    if _on_arrays(a, b):
        return np.minimum(a, b)
    if _is_symbolic(a, b):
        return _sympy_extremum("Min", type(a), a, type(b), b)
    return min(a, b)


def maximum(a, b):
    """max(a, b) on any backend."""
    kind = _kind(a, b)
    if kind == ARRAY:
        return np.maximum(a, b)
    if kind == NUMBER:
        return max(a, b)
    if _on_arrays(a, b):
        return np.maximum(a, b)
    if _is_symbolic(a, b):
        return _sympy_extremum("Max", type(a), a, type(b), b)
    return max(a, b)


def le(a, b):
    """The indicator 1[a ≤ b] as a number (1.0 or 0.0) on any backend."""
    kind = _kind(a, b)
    if kind == NUMBER:
        return 1.0 if a <= b else 0.0
    if kind == ARRAY or _on_arrays(a, b):
        return (np.asarray(a) <= np.asarray(b)).astype(np.float64)
    if _is_symbolic(a, b):
        decided = _decided(a, b, lambda x, y: x <= y)
        if decided is not None:
            return decided
        import sympy

        return sympy.Piecewise((1, sympy.Le(a, b)), (0, True))
    return 1.0 if a <= b else 0.0


def divides(a, b):
    """The indicator 1[a divides b] (b mod a = 0) as a number on any backend."""
    if _is_symbolic(a, b):
        decided = _decided(a, b, lambda x, y: math.fmod(y, x) == 0)
        if decided is not None:
            return decided
        import sympy

        return sympy.Piecewise((1, sympy.Eq(sympy.Mod(b, a), 0)), (0, True))
    if _is_array(a, b):  # b/a is exact when a divides b (whole numbers in float64): one floor
        q = np.asarray(b, dtype=np.float64) / np.asarray(a, dtype=np.float64)
        return (q == np.floor(q)).astype(np.float64)
    return 1.0 if b % a == 0 else 0.0


def all_off(indicator) -> bool:
    """Whether an indicator is a numpy array of zeros alone (select would give if_zero on every
    row): what lets a formula skip computing the if_one side it would throw away. False for
    anything else (a plain number, a symbol), which computes both sides as before."""
    return type(indicator) is np.ndarray and not (indicator > 0.5).any()


def select(indicator, if_one, if_zero):
    """indicator·if_one + (1 − indicator)·if_zero, for an indicator that is 0 or 1 (on arrays, the
    same by np.where, which is one pass instead of three)."""
    kind = _kind(indicator, if_one, if_zero)
    if kind == NUMBER:
        return indicator * if_one + (1 - indicator) * if_zero
    if kind == ARRAY or _on_arrays(indicator, if_one, if_zero):
        return np.where(np.asarray(indicator) > 0.5, if_one, if_zero)
    return indicator * if_one + (1 - indicator) * if_zero


def smallest(values):
    """min of several values on any backend: one n-ary Min for symbols (nested binary ones make
    sympy compare every pair as it builds them), np.minimum pair by pair for arrays (the same
    values as a reduce over the stacked arrays, without stacking them: the search prices NCCL's
    ~10 candidates this way ~1,000 times)."""
    values = list(values) if isinstance(values, (list, tuple)) or hasattr(values, "__next__") \
        else [values]
    if _on_arrays(*values):
        best = np.minimum(values[0], values[1]) if len(values) > 1 else np.asarray(values[0])
        for v in values[2:]:
            best = np.minimum(best, v)
        return best
    if _is_symbolic(*values):
        import sympy

        return sympy.Min(*values, evaluate=False)
    return min(values)


def shown(text: str, fn, *args):
    """fn(*args) on floats and arrays; on symbols, an unevaluated sympy function of the same
    value that a formula prints as `text` with its arguments in place ({0}, {1}, …), so that
    explain shows a named quantity (z(N) − z(8)) rather than its expansion in sympy floats. Its
    value is fn's own (evalf calls fn on the arguments' values): the formula stays the one
    function fn."""
    if not _is_symbolic(*args):
        return fn(*args)
    return _shown_function(text, fn)(*args)


@functools.lru_cache(maxsize=64)
def _shown_function(text: str, fn):
    """The sympy function class behind `shown`, one per (text, fn), so that two formulas built
    from the same quantity hold the same function (sympy compares functions by class)."""
    import sympy

    def _sympystr(self, printer):
        return text.format(*(printer._print(a) for a in self.args))

    def _eval_evalf(self, prec):
        return sympy.Float(fn(*(float(a.evalf(prec)) for a in self.args)), prec)

    return type(f"shown_{fn.__name__}", (sympy.Function,),
                {"_sympystr": _sympystr, "_eval_evalf": _eval_evalf, "_shown": True})

