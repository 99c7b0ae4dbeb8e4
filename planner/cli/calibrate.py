"""plan3d calibrate: fit a profile's efficiency factors to measured step times."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import (
    PlanError,
)
from .app import app
from .common import _checked_json, _fail, _write_file
from .flags import FrameworkOpt, HwOpt, JsonOpt


@app.command()
def calibrate(
    measurements: Annotated[str, typer.Argument(help="CSV or JSON of measured runs (model, dp, "
                                                "tp, pp, mbs, gbs, ..., step_s).")],
    hw: HwOpt = "h100-nvlink",
    output: Annotated[str | None, typer.Option("--output", "-o",
                                               help="Write the calibrated profile (TOML).")] = None,
    fit: Annotated[str, typer.Option(help="Factors to fit: gemm, hbm, fast_busbw, "
                                     "net_busbw (comma list).")] = "gemm,hbm,fast_busbw,net_busbw",
    name: Annotated[str | None, typer.Option(help="Name of the new profile.")] = None,
    json_: JsonOpt = False, framework: FrameworkOpt = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Write the profile even if the fit did not converge, moved nothing, is "
        "less certain than a value, or fits the runs worse than --hw.")] = False,
) -> None:
    """Fit a profile's efficiency factors to your cluster's measured step times."""
    from pathlib import Path

    from .. import calibrate as cal
    from ..catalog import load_hardware
    from ..outputs import render

    try:
        profile = load_hardware(hw)
        from ..search.options import resolve_framework

        runs = cal.load_measurements(Path(measurements), profile,
                                     framework=resolve_framework(framework, None))
        factors = tuple(s.strip() for s in fit.split(",") if s.strip())
        if not factors:
            raise PlanError(f"--fit was given no factor ({fit!r}); name some of gemm, hbm, "
                            "fast_busbw, net_busbw")
        if name is not None and not name.strip():
            raise PlanError("--name was given an empty name; give the new profile a name or "
                            "leave the flag out")
        result = cal.calibrate(runs, profile, fit=factors, name=name)
        data = _checked_json(result.model_dump(mode="json"))
        if output and not force:
            cal.check_writable(result)
        toml_text = cal.calibration_toml(result, measurements) if output else None
        if output:
            _write_file(output, toml_text)
    except PlanError as exc:
        raise _fail(exc) from None
    if json_:
        render.print_json(data)
    else:
        render.render_calibration(result, render.console(), output)
