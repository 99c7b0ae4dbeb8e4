"""plan3d schema: the JSON Schema of each command's --json output."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import (
    PlanError,
)
from .app import app
from .common import _fail


@app.command()
def schema(
    command: Annotated[str | None, typer.Argument(
        help="explain, search, compare, validate, models, hardware or calibrate; none: all of "
             "them, keyed by command.")] = None,
) -> None:
    """Print the JSON Schema of a command's --json output (the stable interface for scripts)."""
    from ..outputs import render
    from ..outputs.schema import all_schemas, output_schema

    try:
        data = output_schema(command.strip().lower()) if command is not None else all_schemas()
    except PlanError as exc:
        raise _fail(exc) from None
    render.print_json(data)
