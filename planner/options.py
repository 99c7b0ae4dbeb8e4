"""Parsing the CLI's text values into a PlanRequest: comma lists, `auto`, enum names. No I/O."""

from __future__ import annotations

from pydantic import ValidationError

from .errors import PlanError
from .formulas.choices import Attention, Precision, Recompute, Schedule, ZeroStage
from .request import PlanRequest


def _split(text: str | None) -> list[str] | None:
    if text is None:
        return None
    items = [s.strip() for s in str(text).split(",") if s.strip()]
    return items or None


def int_list(text: str | None, flag: str) -> list[int] | None:
    items = _split(text)
    if items is None:
        return None
    out = []
    for s in items:
        try:
            value = int(s)
        except ValueError:
            raise PlanError(f"--{flag} takes whole numbers (e.g. 8 or 4,8), got '{s}'") from None
        if value < 1:
            raise PlanError(f"--{flag} must be ≥ 1, got {value}")
        out.append(value)
    return sorted(set(out))


def enum_list(text: str | None, enum, flag: str, allow_auto: bool = True):
    """Values of an enum by name; `auto` → None (every value)."""
    items = _split(text)
    if items is None or (allow_auto and items == ["auto"]):
        return None
    out = []
    for s in items:
        key = s.lower()
        try:
            out.append(enum(int(key)) if issubclass(enum, int) else enum(key))
        except ValueError:
            names = ", ".join(str(int(m)) if issubclass(enum, int) else m.value for m in enum)
            raise PlanError(f"--{flag}: '{s}' is not one of {names}"
                            + (" or auto" if allow_auto else "")) from None
    return list(dict.fromkeys(out))


def one_enum(text: str, enum, flag: str):
    values = enum_list(text, enum, flag, allow_auto=False)
    if not values or len(values) != 1:
        raise PlanError(f"--{flag} takes one value")
    return values[0]


def validation_message(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        parts.append(f"--{loc.replace('_', '-')}: {e['msg']}" if loc else e["msg"])
    return "; ".join(parts)


def parse_request(*, gpus, dp, tp, pp, cp, vpp, mbs, zero, recompute, schedule, sp, gbs,
                  tokens_per_step, seq_len, precision, grad_dtype, attention,
                  overlap_grad_reduce, allow_tp_across_nodes=False) -> PlanRequest:
    """The flags, validated, as a PlanRequest. Raises PlanError or pydantic's ValidationError."""
    if grad_dtype not in ("fp32", "bf16"):
        raise PlanError(f"--grad-dtype must be fp32 or bf16, got '{grad_dtype}'")
    for flag, value in (("gpus", gpus), ("gbs", gbs), ("tokens-per-step", tokens_per_step),
                        ("seq-len", seq_len)):
        if value is not None and value < 1:
            raise PlanError(f"--{flag} must be a positive whole number, got {value}")
    return PlanRequest(
        gpus=gpus, dp=int_list(dp, "dp"), tp=int_list(tp, "tp"), pp=int_list(pp, "pp"),
        cp=int_list(cp, "cp"), vpp=int_list(vpp, "vpp"), mbs=int_list(mbs, "mbs"),
        zero=enum_list(zero, ZeroStage, "zero"), recompute=enum_list(recompute, Recompute,
                                                                     "recompute"),
        schedule=enum_list(schedule, Schedule, "schedule", allow_auto=False),
        sp=None if sp is None else [sp], gbs=gbs, tokens_per_step=tokens_per_step,
        seq_len=seq_len, precision=one_enum(precision, Precision, "precision"),
        grad_dtype=grad_dtype, attention=one_enum(attention, Attention, "attention"),
        overlap_grad_reduce=overlap_grad_reduce, allow_tp_across_nodes=allow_tp_across_nodes)


SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}


def token_count(text: str | None, flag: str = "train-tokens") -> float | None:
    """A count with an optional suffix: 15T, 300B, 2.5e12."""
    if text is None:
        return None
    s = text.strip().lower()
    scale = SUFFIXES.get(s[-1:], None)
    number = s[:-1] if scale else s
    try:
        value = float(number) * (scale or 1)
    except ValueError:
        raise PlanError(f"--{flag} takes a number with an optional K/M/B/T suffix "
                        f"(e.g. 15T or 300B), got '{text}'") from None
    if not value > 0 or value == float("inf"):
        raise PlanError(f"--{flag} must be positive, got '{text}'")
    return value
