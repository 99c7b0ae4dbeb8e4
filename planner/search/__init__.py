"""The search: a request resolved into the space of candidate layouts, costed in chunks, ranked,
with the alternatives it weighed and, when nothing fits, why.

`planner.search(model, hw, request)` is the library's search function; importing this package
puts the package itself at that name, so the package is callable and calls it."""

from __future__ import annotations

import sys
import types


class _CallableSearch(types.ModuleType):
    def __call__(self, model, hw, request, **kwargs):
        """Rank the plans that fit (planner.search.core.search)."""
        from .core import search

        return search(model, hw, request, **kwargs)


sys.modules[__name__].__class__ = _CallableSearch
