"""plan3d compare: the same job on several profiles and GPU counts."""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Annotated

import typer

from ..errors import (
    NoFeasiblePlan,
    PlanError,
)
from .app import PanelledHelp, app
from .common import _checked_json, _fail, _request, _write_file
from .flags import (
    PANELS,
    AllowTpOpt,
    GoodputOpt,
    HeadroomOpt,
    JsonOpt,
    ModelOpt,
    OffloadModeOpt,
)
from .plan_flags import PlanFlags, with_plan_flags


@app.command(cls=PanelledHelp)
@with_plan_flags
def compare(
    model: ModelOpt,
    hw: Annotated[str, typer.Option(
        "--hw", rich_help_panel=PANELS.what,
        help="Hardware profiles to compare, comma list (names or files).")],
    gpus: Annotated[str, typer.Option(
        "--gpus", "-n", rich_help_panel=PANELS.what, help="GPU counts, comma list. With "
        "--deadline-days: the counts to try, or one count, the most to try (whole NVLink "
        "domains, doubling up to it).")],
    train_tokens: Annotated[str, typer.Option(
        help="Tokens to train on (e.g. 15T, 300B).", rich_help_panel=PANELS.time)],
    price: Annotated[str | None, typer.Option(
        rich_help_panel=PANELS.time,
        help="Price of a GPU-hour: one number for all profiles, or per profile, e.g. "
        "h100-nvlink=2.5,b200-nvlink=4.")] = None,
    gpu_power_w: Annotated[str | None, typer.Option(
        rich_help_panel=PANELS.time,
        help="Average GPU power in W for the energy, one number or NAME=W pairs (default: each "
        "profile's TDP).")] = None,
    goodput: GoodputOpt = None, flags: PlanFlags = None,
    allow_tp_across_nodes: AllowTpOpt = False,
    offload: OffloadModeOpt = "fit",
    deadline_days: Annotated[float | None, typer.Option(
        rich_help_panel=PANELS.time,
        help="Size each profile: the fewest GPUs whose best plan trains the tokens within this "
        "many days.")] = None,
    headroom: HeadroomOpt = None,
    json_: JsonOpt = False,
    chart: Annotated[str | None, typer.Option(
        rich_help_panel=PANELS.output,
        help="Draw days and cost against GPUs to an .svg or .png file (needs matplotlib: "
        "pip install 'plan3d\\[chart]').")] = None,
) -> None:
    """The same job on several profiles and GPU counts: the best plan of each, with days,
    GPU-hours, cost and energy; the cheapest and the fastest first."""
    from .. import api
    from ..outputs import render
    from ..search.options import int_list, token_count
    from ..search.request import MAX_GPUS

    try:
        fmt = None
        if chart is not None:
            fmt = chart.rsplit(".", 1)[-1].lower() if "." in chart else ""
            if fmt not in ("svg", "png"):
                raise PlanError(f"--chart writes .svg or .png: give a path ending in one of them, "
                                f"got '{chart}'")
            from ..compare import check_chart

            check_chart()  # before computing: the chart extra may be missing
        names = [s.strip() for s in hw.split(",") if s.strip()]
        counts = int_list(gpus, "gpus", MAX_GPUS) or []
        req = _request(max(counts, default=1), asdict(flags),
                       allow_tp_across_nodes=allow_tp_across_nodes, offload=offload)
        result = api.compare_request(model, names, counts, req, token_count(train_tokens),
                                     price, gpu_power_w, goodput, deadline_days, headroom)
        data = _checked_json(result.model_dump(mode="json"))
        if chart is not None:
            from ..compare import chart_image

            _write_file(chart, chart_image(result, fmt))
    except PlanError as exc:
        raise _fail(exc) from None
    if json_:
        render.print_json(data)
    else:
        out = render.console()
        render.render_compare(result, out)
        if chart is not None:
            out.print(f"wrote {chart}")
    if result.cheapest is None:
        sys.stdout.flush()
        raise _fail(NoFeasiblePlan(
            f"no profile trains the tokens within {deadline_days:g} days at the sizes tried; "
            "try more --gpus or a later deadline" if deadline_days is not None else
            "no cell has a plan that fits; try more --gpus or profiles with more memory"))
