"""What every test shares: the terminal size the CLI sees, and where explain keeps its formulas."""

from __future__ import annotations

import os

import pytest

TERMINAL_SIZE = ("COLUMNS", "LINES")


@pytest.fixture(autouse=True, scope="session")
def _no_inherited_terminal_size():
    """The CLI reads COLUMNS at each invocation (render.console), so a test of its default width
    must not inherit one. pytest imports pdb, pdb imports readline, and GNU readline sets COLUMNS
    and LINES (80 × 24 without a terminal) in the process's C environment; os.environ does not
    see that, but the processes it starts do. So pytest-xdist's workers start with COLUMNS=80,
    and the tests that read the piped default width (160) failed only under `-n` (and a
    subprocess started with the inherited environment would get 80 in any run). The variables
    are removed for the session (a test that wants a width sets its own) and put back after."""
    saved = {name: os.environ.pop(name) for name in TERMINAL_SIZE if name in os.environ}
    for name in TERMINAL_SIZE:  # readline's, which os.environ never saw (plain `pytest`)
        os.unsetenv(name)
    yield
    os.environ.update(saved)


@pytest.fixture(autouse=True, scope="session")
def _own_formula_cache(tmp_path_factory):
    """explain keeps rendered formulas on disk (model/explain.py, ~/.cache/plan3d by default): the
    session gets an empty folder of its own, so that the suite neither writes into the user's
    cache nor runs faster or slower by what earlier runs (or other checkouts) left there. A test
    that needs its own sets PLAN3D_CACHE_DIR or PLAN3D_NO_CACHE itself."""
    saved = os.environ.get("PLAN3D_CACHE_DIR")
    os.environ["PLAN3D_CACHE_DIR"] = str(tmp_path_factory.mktemp("plan3d-cache"))
    yield
    if saved is None:
        os.environ.pop("PLAN3D_CACHE_DIR", None)
    else:
        os.environ["PLAN3D_CACHE_DIR"] = saved
