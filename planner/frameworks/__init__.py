"""The training frameworks plan3d plans for, one module each: what each runs, how it lays memory
out, what it overlaps, and its launch settings.

`get(name)` returns a `Framework`; `FORMATS` maps each `--emit` format to the framework that
writes it (nemo is Megatron-Core's, written as a Megatron-Bridge override)."""

from __future__ import annotations

from ..errors import PlanError
from ..rules import kind_of_group
from .base import FRAMEWORKS, Framework, a2a_ranks, context_kind
from .deepspeed import FRAMEWORK as DEEPSPEED
from .megatron import FRAMEWORK as MEGATRON
from .torchtitan import FRAMEWORK as TORCHTITAN

DEFAULT = "megatron"
FRAMEWORKS.update({f.name: f for f in (MEGATRON, TORCHTITAN, DEEPSPEED)})  # base.FRAMEWORKS
NAMES = tuple(FRAMEWORKS)

ALIASES = {
    "megatron-lm": "megatron", "mcore": "megatron", "megatron-core": "megatron",
    "nemo": "megatron", "megatron-bridge": "megatron", "mbridge": "megatron",
    "titan": "torchtitan", "ds": "deepspeed",
}
"""Other names users give a framework (NeMo and Megatron-Bridge run Megatron-Core)."""

FORMATS: dict[str, Framework] = {fmt: f for f in FRAMEWORKS.values() for fmt in f.emitters}
"""Each --emit format and the framework whose conventions it follows."""

FORMAT_ALIASES = {
    "megatron-lm": "megatron", "mcore": "megatron", "megatron-core": "megatron",
    "megatron-bridge": "nemo", "mbridge": "nemo", "titan": "torchtitan", "ds": "deepspeed",
}


def get(name: str) -> Framework:
    """The framework called `name` (or one of its aliases); a PlanError listing the known ones
    otherwise."""
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in FRAMEWORKS:
        import difflib

        close = difflib.get_close_matches(key, [*NAMES, *ALIASES], n=1)
        hint = f"; did you mean {ALIASES.get(close[0], close[0])}?" if close else ""
        raise PlanError(f"unknown framework {name!r}{hint} (known: {', '.join(NAMES)})")
    return FRAMEWORKS[key]


def of_format(fmt: str) -> tuple[str, Framework]:
    """The --emit format's canonical name and the framework that writes it (a version suffix,
    `torchtitan@0.2`, is the emitter's: planner.frameworks.emit)."""
    key = str(fmt).strip().lower().split("@")[0]
    key = FORMAT_ALIASES.get(key, key)
    if key not in FORMATS:
        raise PlanError(f"unknown framework {fmt!r}; known: {', '.join(FORMATS)}")
    return key, FORMATS[key]


__all__ = ["Framework", "FRAMEWORKS", "FORMATS", "NAMES", "DEFAULT", "get", "of_format",
           "a2a_ranks", "context_kind", "kind_of_group"]
