"""plan3d: closed-form cost models and a search for 3D-parallel LLM training.

The library the CLI is built on::

    from planner import load_model, load_hardware, explain, estimate, search
    from planner.schema import PlanConfig

    model, hw = load_model("70b"), load_hardware("h100-nvlink")
    plan = explain(model, hw, PlanConfig(dp=16, tp=8, pp=4, mbs=1, n_micro=64, gbs=1024,
                                         seq_len=8192))
    plan.memory.total_bytes, plan.time.step_s, [t.formula for t in plan.terms]
"""

from ._version import __version__


def __getattr__(name):
    """load_model, load_hardware and estimate, imported on first use: `import planner` stays
    cheap, so the command line can set up its process before pydantic and numpy load."""
    if name in ("load_model", "load_hardware"):
        from . import catalog

        return getattr(catalog, name)
    if name == "estimate":
        from .model.estimate import estimate as _estimate

        return _estimate
    raise AttributeError(f"module 'planner' has no attribute {name!r}")


def explain(model, hw, config):
    """One plan with every term's formula (imports sympy on first use)."""
    from .model.explain import explain as _explain

    return _explain(model, hw, config)


def search(model, hw, request, **kwargs):
    """Rank the plans that fit (see planner.search.search)."""
    from .search.core import search as _search

    return _search(model, hw, request, **kwargs)


__all__ = ["load_model", "load_hardware", "estimate", "explain", "search", "__version__"]
