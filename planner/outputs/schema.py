"""The JSON Schema of every command's `--json` output, generated from the pydantic models the
command dumps: the documented, stable interface that scripts and CI jobs read (`plan3d schema`)."""

from __future__ import annotations

from functools import cache

from pydantic import TypeAdapter

from ..errors import PlanError

DRAFT = "https://json-schema.org/draft/2020-12/schema"

DESCRIPTIONS = {
    "explain": "plan3d explain --json: one plan (planner.results.Plan) and the constants its "
               "formulas name, with `launch` when --emit is given. Exit 1 (memory.fits false) "
               "when the plan does not fit.",
    "search": "plan3d search --json: the ranked plans that fit (planner.search.SearchResult), "
              "with `launch` for plan 1 when --emit is given.",
    "compare": "plan3d compare --json: the best plan of each (profile, GPU count) with its "
               "budget, and the cheapest and fastest cells (planner.compare.CompareResult). "
               "Exit 1 when no cell has a plan (or, with --deadline-days, none finishes in time).",
    "validate": "plan3d validate --json: the published runs, predicted vs measured.",
    "models": "plan3d models --json: the built-in model presets.",
    "hardware": "plan3d hardware --json: the built-in hardware profiles (their file fields).",
    "calibrate": "plan3d calibrate --json: the fitted profile, factor by factor and run by run.",
}
COMMANDS = tuple(DESCRIPTIONS)


def _output_types() -> dict:
    """Each command's output type, built on first use (they pull in most of the package)."""
    from ..api import ModelListing
    from ..calibrate import CalibrationResult
    from ..compare import CompareResult
    from ..frameworks.emit import EmitResult
    from ..model.validation import ValidationReport
    from ..results import Constant, Plan
    from ..schema import HardwareProfile
    from ..search.core import SearchResult

    class ExplainOutput(Plan):
        """One plan: its layout, memory, communication, time, warnings and terms, and the
        profile's constants its formulas name."""

        constants: list[Constant] = []
        launch: EmitResult | None = None

    class SearchOutput(SearchResult):
        """The plans that fit, best first, and how many were considered."""

        launch: EmitResult | None = None

    return {"explain": ExplainOutput, "search": SearchOutput, "validate": ValidationReport,
            "models": list[ModelListing], "hardware": list[HardwareProfile],
            "calibrate": CalibrationResult, "compare": CompareResult}


@cache
def output_schema(command: str) -> dict:
    """The JSON Schema (draft 2020-12) of `plan3d COMMAND --json`."""
    if command not in DESCRIPTIONS:
        import difflib

        close = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise PlanError(f"no schema for {command!r}{hint} (commands with --json: "
                        f"{', '.join(COMMANDS)})")
    body = TypeAdapter(_output_types()[command]).json_schema(mode="serialization")
    return {"$schema": DRAFT, "title": f"plan3d {command} --json",
            "description": DESCRIPTIONS[command],
            **{k: v for k, v in body.items() if k not in ("title", "description")}}


def all_schemas() -> dict:
    return {name: output_schema(name) for name in COMMANDS}
