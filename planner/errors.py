"""The one exception plan3d raises for bad input; the CLI prints its message on one line.

Exit codes (the CLI's stable interface): 0 success, 1 no plan fits, 2 bad usage or input,
3 internal error (a bug in plan3d: please report it)."""

from __future__ import annotations

import difflib
import re
from typing import Any

EXIT_OK, EXIT_NO_FIT, EXIT_USAGE, EXIT_BUG = 0, 1, 2, 3


class PlanError(ValueError):
    """Something the user gave is wrong; the message says what, and what would be right."""


class NoFeasiblePlan(PlanError):
    """Nothing fits: the message carries the diagnosis."""


def exit_code(exc: BaseException) -> int:
    """The CLI's exit status for an exception plan3d raises."""
    return EXIT_NO_FIT if isinstance(exc, NoFeasiblePlan) else EXIT_USAGE


# ---------------------------------------------------------------------------------------------
# pydantic's validation errors, for a person: `field.path: what was expected, got what`

_EXPECTED = {
    "int_type": "a whole number", "int_parsing": "a whole number",
    "int_from_float": "a whole number", "float_type": "a number", "float_parsing": "a number",
    "finite_number": "a finite number", "bool_type": "true or false",
    "bool_parsing": "true or false", "string_type": "text (a quoted string)",
    "dict_type": "a table (a TOML [section] or a JSON object)",
    "model_type": "a table (a TOML [section] or a JSON object)",
    "model_attributes_type": "a table (a TOML [section] or a JSON object)",
    "list_type": "a list", "tuple_type": "a list", "none_required": "nothing",
}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def field_path(loc: tuple) -> str:
    """('efficiency', 'gemm', 'bf16') → efficiency.gemm.bf16; list indices as [i]."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _fields_at(model_cls, loc: tuple) -> list[str]:
    """The field names of the (nested) pydantic model that `loc` points into, for did-you-mean."""
    from pydantic import BaseModel

    cls = model_cls
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(cls, "model_fields", None)
        if not fields or part not in fields:
            return []
        annotation = fields[part].annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            return []
        cls = nested[0]
    return list(getattr(cls, "model_fields", {}))


def problem_text(e: dict, model_cls=None) -> str:
    """One pydantic error dict as `what was expected, got what`."""
    kind, ctx, given = e.get("type", ""), e.get("ctx") or {}, e.get("input")
    got = f", got {_show(given)}"
    if kind == "missing":
        return "required, but missing"
    if kind == "extra_forbidden":
        known = _fields_at(model_cls, tuple(e["loc"][:-1])) if model_cls is not None else []
        close = difflib.get_close_matches(str(e["loc"][-1]), known, n=2, cutoff=0.5)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        listing = f"; known fields: {', '.join(known)}" if known and not close else ""
        return f"unknown field{hint}{listing}"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}{got}"
    bounds = {"greater_than": ">", "greater_than_equal": "≥", "less_than": "<",
              "less_than_equal": "≤"}
    if kind in bounds:
        limit = next(iter(ctx.values()), "?")
        return f"must be {bounds[kind]} {limit}{got}"
    if kind in ("enum", "literal_error"):
        return f"must be {ctx.get('expected', 'one of the allowed values')}{got}"
    if kind in ("too_short", "too_long"):
        return f"expected {ctx.get('min_length', ctx.get('max_length', '?'))} items{got}"
    if kind == "value_error":
        return str(e.get("msg", "")).removeprefix("Value error, ")
    msg = str(e.get("msg", "invalid value"))
    return (msg[:1].lower() + msg[1:]).removeprefix("input should be ") + got


def describe_validation(err, where: str = "", model_cls=None, limit: int = 4) -> str:
    """A pydantic ValidationError as one line: `where: field: problem; field: problem`."""
    parts = []
    errors = err.errors()
    for e in errors[:limit]:
        loc = field_path(tuple(e["loc"])) or "(the whole entry)"
        parts.append(f"{loc}: {problem_text(e, model_cls)}")
    if len(errors) > limit:
        parts.append(f"and {len(errors) - limit} more")
    text = "; ".join(parts)
    return f"{where}: {text}" if where else text


def in_flag_names(text: str, fields, renamed: dict[str, str] | None = None) -> str:
    """`text` with each field name of `fields` (snake_case, a whole word) written as the
    command-line flag that sets it: fp8_recipe → --fp8-recipe; `renamed` maps the names whose
    flag is spelled otherwise (zero_stage → --zero), or plain words to translate too (recompute →
    --recompute). A name already written as a flag, or inside a dotted key, is left alone."""
    flags = {name: "--" + name.replace("_", "-") for name in fields if "_" in name}
    flags.update(renamed or {})
    if not flags:
        return text
    words = "|".join(sorted(map(re.escape, flags), key=len, reverse=True))
    return re.sub(rf"(?<![\w.-])({words})(?![\w.-])", lambda m: flags[m.group(1)], text)


def flag_refusal(err, fields, renamed: dict[str, str] | None = None) -> str:
    """A pydantic ValidationError of a model the command-line flags filled, as one line in the
    flags' names: `--flag: problem` for a field, the validator's own sentence for a rule across
    fields (in_flag_names)."""
    parts = []
    for e in err.errors():
        text = in_flag_names(problem_text(e), fields, renamed)
        loc = field_path(tuple(e["loc"]))
        parts.append(f"{in_flag_names(loc, fields, renamed)}: {text}" if loc else text)
    return "; ".join(parts)
