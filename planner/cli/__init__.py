"""The command line: each command parses, calls one library function, renders. Imported by nothing.

One module per command group: plan (explain, search), listing (models, hardware, validate),
calibrate, compare, schema; app.py holds the typer application and the error contract, flags.py
the shared options, common.py what the commands share beyond them.

Exit codes: 0 success, 1 no plan fits, 2 bad usage or input, 3 internal error (a bug). Every
failure is one line on stderr, `plan3d: error: ...`; `--json` output is strict JSON on stdout and
nothing else goes there."""

from __future__ import annotations

import os

# The command line uses no pydantic plugins; without this, pydantic scans every installed
# distribution's entry points for plugins when the first model is built (~0.1 s at start-up).
# Set before anything imports pydantic models; a user's own setting wins.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
# The planner does element-wise array arithmetic only, no BLAS: without this, importing numpy
# starts an OpenBLAS thread per core, which costs the second core of a 2-core machine ~0.1 s of
# CPU at start-up. A user's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from ..errors import EXIT_BUG, EXIT_NO_FIT, EXIT_OK, EXIT_USAGE
from . import calibrate, compare, listing, plan, schema  # noqa: F401 - each registers its commands
from .app import app, main

__all__ = ["app", "main", "EXIT_OK", "EXIT_NO_FIT", "EXIT_USAGE", "EXIT_BUG"]

COMMANDS = ("explain", "search", "models", "hardware", "validate", "calibrate", "compare", "schema")
"""The commands in the order --help lists them (the modules register them as they are imported)."""
app.registered_commands.sort(key=lambda c: COMMANDS.index(c.callback.__name__))
