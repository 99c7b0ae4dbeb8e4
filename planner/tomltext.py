"""Writing TOML (the standard library reads it, but does not write it): values and plain tables,
shared by the calibrated-profile writer and the torchtitan emitter."""

from __future__ import annotations

import math
from typing import Any


def toml_string(text: str) -> str:
    """A TOML basic string, escaped."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    """One TOML value: boolean, integer, float (nan/inf too), string, or array of these."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} to TOML")


def toml_tables(sections: dict[str, dict[str, Any]]) -> str:
    """TOML tables of plain key = value pairs."""
    blocks = []
    for name, table in sections.items():
        body = "".join(f"{key} = {toml_value(value)}\n" for key, value in table.items())
        blocks.append(f"[{name}]\n{body}")
    return "\n".join(blocks)
