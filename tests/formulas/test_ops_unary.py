"""_ops' one-argument functions (ceil, log2, ln, sqrt: one dispatcher, _ops._unary) give each
backend's own result: Python's for numbers, numpy's for arrays, sympy's exact forms for symbols."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from planner.formulas import _ops

CASES = [  # (op, a value, its result by hand, the sympy form of op(x))
    (_ops.ceil, 2.5, 3.0, lambda x: sp.ceiling(x)),
    (_ops.log2, 8.0, 3.0, lambda x: sp.log(x) / sp.log(2)),  # log(x, 2) is log(x)/log(2)
    (_ops.ln, math.e ** 2, 2.0, lambda x: sp.log(x)),
    (_ops.sqrt, 16.0, 4.0, lambda x: x ** sp.Rational(1, 2)),
]


@pytest.mark.parametrize("op,value,expected,symbolic", CASES,
                         ids=[c[0].__name__ for c in CASES])
def test_each_backend(op, value, expected, symbolic):
    plain = op(value)
    assert type(plain) is float and plain == pytest.approx(expected, rel=1e-15)
    arr = op(np.array([value, value]))
    assert isinstance(arr, np.ndarray) and arr.tolist() == pytest.approx([expected] * 2)
    x = sp.Symbol("x", positive=True)
    assert op(x) == symbolic(x)  # sympy's own form, structurally equal
    assert float(op(x).subs(x, value)) == pytest.approx(expected, rel=1e-12)


def test_ceil_of_a_whole_number_and_the_names():
    assert _ops.ceil(3) == 3.0 and type(_ops.ceil(3)) is float
    assert [f.__name__ for f in (_ops.ceil, _ops.log2, _ops.ln, _ops.sqrt)] == [
        "ceil", "log2", "ln", "sqrt"]
    assert str(_ops.sqrt(sp.Symbol("h"))) == "sqrt(h)"  # not h**0.5
