"""_ops' comparisons and choices (le, select, minimum, maximum) on each backend, through the one
classification by exact type (_ops._kind) that routes the search's arrays to numpy and plain
numbers (Python's and numpy's scalars alike) to Python: a number's result is the plain number
Python gives, an array's is numpy's element by element, a symbol's is sympy's."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from planner.formulas import _ops

NUMBERS = [2.0, 3, True, np.float64(2.0), np.int64(3), np.bool_(True)]


@pytest.mark.parametrize("a", NUMBERS, ids=[type(v).__name__ for v in NUMBERS])
@pytest.mark.parametrize("b", [2.5, 1, np.float64(0.5)], ids=["float", "int", "np.float64"])
def test_plain_numbers_get_pythons_results(a, b):
    assert _ops._kind(a, b) == _ops.NUMBER
    le = _ops.le(a, b)
    assert type(le) is float and le == (1.0 if float(a) <= float(b) else 0.0)
    assert _ops.minimum(a, b) == min(float(a), float(b))
    assert _ops.maximum(a, b) == max(float(a), float(b))
    assert not isinstance(_ops.minimum(a, b), np.ndarray)
    # select(i, x, y) = i·x + (1 − i)·y for an indicator i of 0 or 1
    assert _ops.select(1.0, a, b) == a and _ops.select(0.0, a, b) == b


def test_arrays_with_numbers_are_numpys_element_by_element():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])
    assert _ops._kind(a, 2.0) == _ops._kind(np.int64(2), b) == _ops.ARRAY
    assert _ops.le(a, b).tolist() == [1.0, 1.0, 0.0]  # 1 ≤ 3, 2 ≤ 2, 3 > 1
    assert _ops.le(2.0, a).tolist() == [0.0, 1.0, 1.0]
    assert _ops.minimum(a, 2.0).tolist() == [1.0, 2.0, 2.0]
    assert _ops.maximum(np.int64(2), b).tolist() == [3.0, 2.0, 2.0]
    assert _ops.select(_ops.le(a, b), a, -1.0).tolist() == [1.0, 2.0, -1.0]
    assert _ops.select(1.0, a, b).tolist() == a.tolist()  # a number's indicator on arrays


def test_other_types_take_the_general_path():
    """A symbol, or an array beside a type the exact test does not know (a numpy float32
    scalar), is not classified: sympy decides the one, numpy the other, as before."""
    x = sp.Symbol("x", positive=True)
    assert _ops._kind(x, 1.0) is None
    assert isinstance(_ops.minimum(x, 1.0), sp.Min)
    assert isinstance(_ops.le(x, 1.0), sp.Piecewise)
    mixed = _ops.maximum(np.array([1.0, 3.0]), np.float32(2.0))
    assert _ops._kind(np.array([1.0]), np.float32(2.0)) is None
    assert isinstance(mixed, np.ndarray) and mixed.tolist() == [2.0, 3.0]
