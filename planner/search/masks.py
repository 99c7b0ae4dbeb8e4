"""The rules' masks over the search's choice groups, each evaluated once per distinct input.

The search weighs one choice group (recompute, sequence parallelism, schedule) at a time, and the
groups that share a schedule kind and full recompute read the same part of the space (the same
arrays: evaluate._group_space). Most rules read only those arrays and a few of the group's
choices, so their mask is the same for many groups; evaluated per group, the rules cost ≈ 10 %
of the DeepSeek-V3 search on 16,384 GB200. `RuleMasks` evaluates each rule once per distinct
input: while a rule runs, every attribute it reads of the layouts is noted (the array itself, or
the scalar's type and value); a later group whose layouts hold the same values under those names
(the same array objects, equal scalars) gets the mask already computed. This is exact: a rule is a
pure function of the model (one per search) and the attributes it reads, so the same reads give
the same evaluation, step by step, and the same mask. The part's arrays are read-only (a write
would change a mask already kept)."""

from __future__ import annotations

import numpy as np

_MISSING = object()  # an attribute the layouts do not have (a rule's getattr default applies)


class _Recorder:
    """The layouts as a rule reads them, noting each attribute it asks for and what it got."""

    def __init__(self, values: dict):
        self._values = values
        self._read: list[tuple[str, object]] = []

    def __getattr__(self, name: str):
        value = self._values.get(name, _MISSING)
        self._read.append((name, value))
        if value is _MISSING:
            raise AttributeError(name)
        return value


def _same(a, b) -> bool:
    """Whether a rule would read the same value: the same array object (the part's arrays are
    shared by its groups and read-only), else a scalar of the same type and value."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return a is b
    return a is b or (type(a) is type(b) and a == b)


class RuleMasks:
    """Each rule's mask, kept for the groups that read the same inputs (see the module's
    docstring). One per search: the model is fixed, and so is the framework."""

    def __init__(self, model):
        self.model = model
        self._kept: dict[tuple, list[tuple[tuple, object]]] = {}

    def holds(self, key: tuple, rule, values: dict):
        """rule.holds(model, layouts) for the layouts `values` ({attribute: value}); `key` names
        the rule (its rule list and place: a framework builds some of its rules anew per call)."""
        for reads, mask in self._kept.get(key, ()):
            if all(_same(values.get(name, _MISSING), seen) for name, seen in reads):
                return mask
        layouts = _Recorder(values)
        mask = rule.holds(self.model, layouts)
        self._kept.setdefault(key, []).append((tuple(layouts._read), mask))
        return mask

    def all_hold(self, name: str, rules, values: dict):
        """The mask of the layouts that obey every rule of `rules` (as constraints.admissible and
        Framework.admissible combine them)."""
        ok = True
        for place, rule in enumerate(rules):
            ok = ok & self.holds((name, place, rule.text), rule, values)
        return ok
