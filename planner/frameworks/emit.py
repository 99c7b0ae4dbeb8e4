"""Launch settings for a chosen plan, written in the option names of a training framework.

`emit(fmt, config, model)` turns one `PlanConfig` (and the model it was planned for) into text
ready to paste: Megatron-LM command-line arguments, a Megatron-Bridge (NeMo) YAML override,
torchtitan TOML sections, or a DeepSpeed JSON config. The emitters live in the framework modules
(`planner/frameworks/`), beside the conventions the plan was costed with, so a plan and the
settings written for it cannot drift apart. Where a framework can only approximate the plan the
difference goes into `EmitResult.notes`; where it cannot express the plan at all, `emit` raises
`PlanError` with a one-line reason.
"""

from __future__ import annotations

from ..errors import PlanError
from ..schema import ModelSpec, PlanConfig
from . import FORMATS, of_format
from .base import EmitResult, check_plan

FRAMEWORKS = tuple(FORMATS)
"""The launch-settings formats `emit` writes, in the order the CLI lists them."""


def emit(fmt: str, config: PlanConfig, model: ModelSpec) -> EmitResult:
    """Launch settings for `config` (planned for `model`) in the format `fmt` (a framework's name,
    or nemo for Megatron-Bridge; `NAME@VERSION` for an emitter in VERSIONED).

    Raises PlanError, naming the framework and the reason, when the framework cannot express the
    plan, and when the name is unknown (the message lists the known ones)."""
    key, framework = of_format(fmt)
    version = str(fmt).partition("@")[2].strip() or None
    check_plan(key, config, framework.schedules)
    from .moe_launch import check_expressible  # which emitters express EP

    check_expressible(key, config, model)
    if version is None:
        return framework.emitters[key](config, model)
    if key not in VERSIONED:
        raise PlanError(f"{key}: the emitter writes one interface ({framework.release[:60]}…); "
                        f"drop '@{version}'")
    return framework.emitters[key](config, model, version=version)


VERSIONED = {"torchtitan"}
"""Emitters that take `FORMAT@VERSION` (the README's table lists the versions each is tested
against): torchtitan changed its configuration interface between 0.2 (TOML) and 0.3."""


def with_warning(result: EmitResult, reason: str) -> EmitResult:
    """The settings under a warning that the plan does not fit (explain --emit --force): a
    comment line for args, YAML and TOML; a leading "_comment" key for JSON, which has no
    comments (DeepSpeed's config reader ignores keys it does not know)."""
    import dataclasses
    import json

    warning = f"plan3d WARNING (written under --force): {reason}"
    if result.format == "json":
        text = json.dumps({"_comment": warning, **json.loads(result.text)}, indent=2) + "\n"
    else:
        text = f"# {warning}\n" + result.text
    return dataclasses.replace(result, text=text)


__all__ = ["FRAMEWORKS", "EmitResult", "emit", "with_warning"]
