"""What a layout rule is, below both the frameworks (which state their own rules) and the model
(planner/model/constraints.py holds the rules every framework enforces): a `Rule`, the integers of
a layout that rules read, and the context-parallel kind an all-to-all group size makes.

Imports nothing of planner's but the formulas' choices and the schema, so that the frameworks and
the constraints can both import it and neither has to import the other back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

from .formulas.choices import (
    Attention,
    ContextKind,
    Precision,
    Recompute,
    RecomputeModule,
    Schedule,
)
from .schema import PlanConfig


@dataclass(frozen=True)
class Rule:
    """One rule: what it says (the search lists it), when it holds, and what to tell a user whose
    plan breaks it."""

    text: str
    holds: Callable  # (model, layout) -> bool, or a bool array over the layouts
    message: Callable  # (model, layout) -> str, for one layout that breaks it


def layout(config: PlanConfig, cp_a2a: int) -> SimpleNamespace:
    """A PlanConfig as the integers the rules read, with its all-to-all group c_a (1 for the
    ring; planner.frameworks.a2a_ranks gives it)."""
    return SimpleNamespace(
        dp=config.dp, tp=config.tp, pp=config.pp, cp=config.cp, vpp=config.vpp, mbs=config.mbs,
        n_micro=config.n_micro, gbs=config.gbs, seq_len=config.seq_len,
        interleaved=config.schedule is Schedule.INTERLEAVED, sp=config.sequence_parallel,
        schedule=config.schedule, ep=config.ep, etp=config.etp,  # moe
        # moe: the MoE run settings a framework may not have (the search never sets them)
        a2a_overlap=int(config.moe_a2a_overlap), moe_allgather=int(config.moe_dispatcher
                                                                    == "allgather"),
        deepep=int(config.moe_dispatcher == "deepep"),  # the search's column of the same name
        moe_capped=int(bool(config.moe_capacity_factor)), moe_forced=int(config.moe_forced_balance),
        moe_shared_overlap=int(config.moe_shared_expert_overlap),
        mtp_on=int(config.mtp),  # moe: whether the model's MTP modules train
        recompute_moe=recompute_moe(config.recompute, config.recompute_modules),
        dp_shard=config.dp_shard or config.dp,  # hybrid sharding
        cp_a2a=cp_a2a,  # cp-kind: the all-to-all group c_a (1 for the ring)
        # offload: fraction of the optimizer, parameters (0/1), activation layers; recompute none
        off_opt=config.offload_optimizer, off_params=int(config.offload_params),
        off_act=config.offload_activations,
        recompute_none=int(config.recompute.value == "none"),
        recompute_full=int(config.recompute.value == "full"),  # fit: DeepSpeed cpu_checkpointing
        # torchtitan's own settings, which its refusals name where they offer another framework
        compile_loss=int(config.compile_loss), torchtitan_flex_ac=int(config.torchtitan_flex_ac),
        **choices(config.zero_stage, config.schedule, config.precision, config.attention))


def recompute_moe(recompute, modules) -> int:
    """1 when a plan's selective recompute checkpoints whole MoE layers (`moe` among
    --recompute-modules), else 0 (Megatron's all-to-all overlap refuses it)."""
    return int(recompute is Recompute.SELECTIVE and RecomputeModule.MOE in (modules or ()))


def choices(zero_stage, schedule: Schedule, precision: Precision,
            attention: Attention = Attention.FLASH) -> dict:
    """The discrete choices the framework rules read, as numbers: zero (the ZeRO stage), gpipe,
    fp16, fp8 and classic (1 when the plan uses them: classic, a materialised attention)."""
    return dict(zero=int(zero_stage), gpipe=int(schedule is Schedule.GPIPE),
                fp16=int(precision is Precision.FP16),
                fp8=int(precision in (Precision.FP8, Precision.NVFP4)),
                classic=int(attention is Attention.CLASSIC))


def kind_of_group(cp, cp_a2a):
    """cp-kind: the inverse of formulas.context.a2a_group, on ints or arrays: {kind: 1 where an
    all-to-all group of c_a ranks makes that kind} — the ring at c_a = 1, the all-to-all at
    c_a = c, hierarchical between (the search's c_a column holds all three)."""
    return {ContextKind.RING: cp_a2a == 1, ContextKind.ALL_TO_ALL: cp_a2a == cp,
            ContextKind.HIERARCHICAL: (cp_a2a > 1) & (cp_a2a < cp)}
