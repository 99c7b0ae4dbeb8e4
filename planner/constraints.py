"""The rules a layout must obey before it is costed, written once.

Each rule is a predicate on a layout's integers that holds on Python ints (one plan: estimate and
explain refuse the first rule broken, with a message naming what is wrong and what would be right)
and on int64 arrays (the search's whole space at once, as a mask). A layout is any object with the
attributes dp, tp, pp, cp, vpp, mbs, n_micro, gbs, seq_len, interleaved (the interleaved 1F1B
schedule) and sp (sequence parallelism); `of(config)` builds one from a PlanConfig.

They are the rules Megatron-LM enforces (megatron/training/arguments.py `validate_args`), which
are also the strictest of the frameworks plan3d emits launch settings for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

from .formulas.choices import Schedule
from .schema import ModelSpec, PlanConfig


@dataclass(frozen=True)
class Rule:
    """One rule: what it says (the search lists it), when it holds, and what to tell a user whose
    plan breaks it."""

    text: str
    holds: Callable  # (model, layout) -> bool, or a bool array over the layouts
    message: Callable  # (model, layout) -> str, for one layout that breaks it


def of(config: PlanConfig) -> SimpleNamespace:
    """A PlanConfig as the integers the rules read."""
    return SimpleNamespace(
        dp=config.dp, tp=config.tp, pp=config.pp, cp=config.cp, vpp=config.vpp, mbs=config.mbs,
        n_micro=config.n_micro, gbs=config.gbs, seq_len=config.seq_len,
        interleaved=config.schedule is Schedule.INTERLEAVED, sp=config.sequence_parallel,
        ep=config.ep, etp=config.etp)  # moe


RULES = (
    Rule("gbs = mbs·n_micro·dp (the search: gbs divisible by dp·mbs, n_micro = gbs/(dp·mbs))",
         lambda m, c: c.gbs == c.mbs * c.n_micro * c.dp,
         lambda m, c: f"global batch {c.gbs} must equal mbs·n_micro·dp = "
                      f"{c.mbs}·{c.n_micro}·{c.dp} = {c.mbs * c.n_micro * c.dp}"),
    # Megatron splits the heads (and the KV groups) of attention over the tp ranks
    Rule("tp divides the attention heads and the KV heads",
         lambda m, c: (m.n_heads % c.tp == 0) & (m.kv_heads % c.tp == 0),
         lambda m, c: f"tp={c.tp} must divide the attention heads ({m.n_heads}) and the "
                      f"KV heads ({m.kv_heads}) of {m.name}"),
    Rule("tp divides the FFN size",
         lambda m, c: m.ffn % c.tp == 0,
         lambda m, c: f"tp={c.tp} must divide the FFN size ({m.ffn}) of {m.name}"),
    # stages may be uneven (Megatron's --decoder-first/last-pipeline-num-layers); the fullest,
    # v·⌈L/(p·v)⌉ layers, is the one sized, and it sets the pace
    Rule("pp·vpp ≤ layers (uneven stages allowed: the fullest stage, v·⌈L/(p·v)⌉ layers, is sized "
         "and sets the pace)",
         lambda m, c: c.pp * c.vpp <= m.n_layers,
         lambda m, c: f"pp·vpp = {c.pp}·{c.vpp} exceeds the {m.n_layers} layers of {m.name}: "
                      "every pipeline chunk needs at least one layer"),
    # load-balanced context parallelism gives each rank two of 2·cp chunks (one early, one late)
    Rule("cp > 1: seq_len divisible by 2·cp",
         lambda m, c: (c.cp == 1) | (c.seq_len % (2 * c.cp) == 0),
         lambda m, c: f"seq_len {c.seq_len} must be divisible by 2·cp = {2 * c.cp} "
                      "(load-balanced context parallelism splits it in 2·cp chunks)"),
    Rule("vpp > 1 only with the interleaved schedule",
         lambda m, c: (c.vpp == 1) | c.interleaved,
         lambda m, c: f"vpp={c.vpp} needs --schedule interleaved"),
    Rule("the interleaved schedule needs pp ≥ 2 and vpp ≥ 2",
         lambda m, c: (c.interleaved == 0) | ((c.pp >= 2) & (c.vpp >= 2)),
         lambda m, c: f"the interleaved schedule needs pp ≥ 2 and vpp ≥ 2 (got pp={c.pp}, "
                      f"vpp={c.vpp}); with one chunk per GPU use --schedule 1f1b"),
    # Megatron runs the interleaved schedule's micro-batches in groups of pp
    Rule("the interleaved schedule needs n_micro a multiple of pp",
         lambda m, c: (c.interleaved == 0) | (c.n_micro % c.pp == 0),
         lambda m, c: f"the interleaved schedule needs n_micro to be a multiple of pp "
                      f"({c.n_micro} micro-batches, pp={c.pp}); Megatron groups "
                      "micro-batches pp at a time"),
    Rule("sequence parallelism only with tp > 1",
         lambda m, c: (c.sp == 0) | (c.tp > 1),
         lambda m, c: "sequence parallelism needs tp > 1 (use --no-sp with tp = 1)"),
    # ---- moe: expert parallelism (Megatron-Core MoE parallel folding; megatron/training/
    # arguments.py validate_args and megatron/core/parallel_state.py @ d98e8a64dd) -------------
    Rule("ep = etp = 1 for a dense model",
         lambda m, c: (m.n_experts > 1) | ((_ep(c) == 1) & (_etp(c) == 1)),
         lambda m, c: f"{m.name} has no routed experts: --ep and --etp must be 1 "
                      f"(got ep={_ep(c)}, etp={_etp(c)})"),
    Rule("ep divides the routed experts",
         lambda m, c: m.n_experts % _ep(c) == 0,
         lambda m, c: f"ep={_ep(c)} must divide the {m.n_experts} routed experts of {m.name} "
                      "(Megatron: num_experts a multiple of expert_model_parallel_size)"),
    Rule("ep·etp divides dp·cp·tp (the expert layers' ep × etp × edp tile the dense layers' "
         "dp × cp × tp GPUs: edp = dp·cp·tp/(ep·etp))",
         lambda m, c: (c.dp * c.cp * c.tp) % (_ep(c) * _etp(c)) == 0,
         lambda m, c: f"ep·etp = {_ep(c)}·{_etp(c)} = {_ep(c) * _etp(c)} must divide "
                      f"dp·cp·tp = {c.dp}·{c.cp}·{c.tp} = {c.dp * c.cp * c.tp}: the expert "
                      "layers fold onto the same GPUs as the dense layers"),
    Rule("etp divides the expert FFN size",
         lambda m, c: m.expert_ffn % _etp(c) == 0,
         lambda m, c: f"etp={_etp(c)} must divide the expert FFN size ({m.expert_ffn}) of "
                      f"{m.name}"),
    # Megatron-Core refuses MoE with TP in training without sequence parallelism
    # (megatron/core/transformer/moe/moe_layer.py forward, ValueError, @ d98e8a64dd)
    Rule("a MoE model with tp > 1 needs sequence parallelism",
         lambda m, c: (m.n_experts == 1) | (c.tp == 1) | (c.sp != 0),
         lambda m, c: f"{m.name} is a mixture of experts: with tp={c.tp} it needs sequence "
                      "parallelism (--sp); Megatron-Core's MoE dispatch takes each TP rank's "
                      "sequence shard"),
)

MOE_RULES = RULES[-5:]
"""The expert-parallel rules (moe), the last five of RULES."""


def _ep(layout):
    """The layout's expert-parallel degree (1 where the layout does not say: a dense plan)."""
    return getattr(layout, "ep", 1)


def _etp(layout):
    return getattr(layout, "etp", 1)


def broken(model: ModelSpec, layout) -> Rule | None:
    """The first rule one layout breaks, or None."""
    for rule in RULES:
        if not rule.holds(model, layout):
            return rule
    return None


def admissible(model: ModelSpec, layouts):
    """The mask of layouts (arrays) that obey every rule."""
    ok = True
    for rule in RULES:
        ok = ok & rule.holds(model, layouts)
    return ok
