"""plan3d models, hardware and validate: the built-in presets and profiles, and the published runs
through the model."""

from __future__ import annotations

from ..errors import (
    PlanError,
)
from .app import app
from .common import _checked_json, _fail
from .flags import FrameworkOpt, HwOpt, JsonOpt


@app.command()
def models(json_: JsonOpt = False) -> None:
    """List the built-in model presets and size aliases."""
    from .. import api
    from ..outputs import render

    listing = api.list_models()
    if json_:
        render.print_json([m.model_dump(mode="json") for m in listing])
    else:
        render.render_models(listing, render.console())


@app.command()
def hardware(json_: JsonOpt = False) -> None:
    """List the built-in hardware profiles."""
    from .. import api
    from ..outputs import render

    listing = api.list_hardware()
    if json_:
        render.print_json([h.model_dump(mode="json") for h in listing])
    else:
        render.render_hardware(listing, render.console())


@app.command()
def validate(hw: HwOpt = "h100-nvlink", json_: JsonOpt = False,
             framework: FrameworkOpt = None) -> None:
    """The published runs measured on the profile's GPU (A100, H100) through the model:
    predicted vs measured step time."""
    from ..catalog import load_hardware
    from ..model.validation import validate as run
    from ..outputs import render
    from ..search.options import resolve_framework

    try:
        report = run(load_hardware(hw), framework=resolve_framework(framework, None))
        data = _checked_json(report.model_dump(mode="json"))
    except PlanError as exc:
        raise _fail(exc) from None
    if json_:
        render.print_json(data)
    else:
        render.render_validation(report, render.console())
