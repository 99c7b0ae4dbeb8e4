"""The training frameworks plan3d plans for, one module each: what each runs, how it lays memory
out, what it overlaps, and its launch settings.

`get(name)` returns a `Framework`; `FORMATS` maps each `--emit` format to the framework that
writes it (nemo is Megatron-Core's, written as a Megatron-Bridge override)."""

from __future__ import annotations

from ..errors import PlanError
from ..formulas.choices import ContextKind
from .base import Framework
from .deepspeed import FRAMEWORK as DEEPSPEED
from .megatron import FRAMEWORK as MEGATRON
from .torchtitan import FRAMEWORK as TORCHTITAN

DEFAULT = "megatron"
FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (MEGATRON, TORCHTITAN, DEEPSPEED)}
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
        raise PlanError(f"unknown framework {name!r}; known: {', '.join(NAMES)}")
    return FRAMEWORKS[key]


def of_format(fmt: str) -> tuple[str, Framework]:
    """The --emit format's canonical name and the framework that writes it."""
    key = str(fmt).strip().lower()
    key = FORMAT_ALIASES.get(key, key)
    if key not in FORMATS:
        raise PlanError(f"unknown framework {fmt!r}; known: {', '.join(FORMATS)}")
    return key, FORMATS[key]


def context_kind(config):
    """cp-kind: the plan's context-parallel kind, its framework's default (the first of
    Framework.cp_kinds) when the plan names none."""
    return config.cp_kind or FRAMEWORKS[config.framework].cp_kinds[0]


def a2a_ranks(config) -> int:
    """cp-kind: the plan's all-to-all group c_a: 1 for the ring, cp for all-to-all, cp_a2a for the
    hierarchical kind (formulas.context.a2a_group)."""
    from ..formulas.context import a2a_group

    return a2a_group(context_kind(config), config.cp, config.cp_a2a or 1)


def kind_of_group(cp, cp_a2a):
    """cp-kind: the inverse of formulas.context.a2a_group, on ints or arrays: {kind: 1 where an
    all-to-all group of c_a ranks makes that kind} — the ring at c_a = 1, the all-to-all at
    c_a = c, hierarchical between (the search's c_a column holds all three)."""
    return {ContextKind.RING: cp_a2a == 1, ContextKind.ALL_TO_ALL: cp_a2a == cp,
            ContextKind.HIERARCHICAL: (cp_a2a > 1) & (cp_a2a < cp)}


__all__ = ["Framework", "FRAMEWORKS", "FORMATS", "NAMES", "DEFAULT", "get", "of_format"]
