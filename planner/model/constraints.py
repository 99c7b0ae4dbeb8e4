"""The rules a layout must obey before it is costed, written once.

Each rule is a predicate on a layout's integers that holds on Python ints (one plan: estimate and
explain refuse the first rule broken, with a message naming what is wrong and what would be right)
and on int64 arrays (the search's whole space at once, as a mask). A layout is any object with the
attributes dp, tp, pp, cp, vpp, mbs, n_micro, gbs, seq_len, interleaved (the interleaved 1F1B
schedule), sp (sequence parallelism) and the choices zero, gpipe, fp16, fp8; `of(config)` builds
one from a PlanConfig.

These are the rules every framework plan3d plans for enforces (Megatron-LM's
megatron/training/arguments.py `validate_args` states each); what one framework runs beyond them
(its ZeRO stages, schedules, how many pipeline chunks the layers allow) is in that framework's
module, planner/frameworks/, as rules of the same form.
"""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import context as CX
from ..formulas.choices import Schedule
from ..frameworks import a2a_ranks
from ..rules import Rule, choices, layout
from ..schema import ModelSpec, PlanConfig

__all__ = ["Rule", "RULES", "admissible", "broken", "choices", "of", "one_layout", "removed_by"]


def of(config: PlanConfig) -> SimpleNamespace:
    """A PlanConfig as the integers the rules read, its all-to-all group c_a from the plan's
    context-parallel kind (its framework's default when it names none)."""
    return layout(config, a2a_ranks(config))


def _runs(layout, schedule: Schedule) -> bool:
    """Whether a layout (or a group of them: the search builds one per schedule) runs
    `schedule`; a layout without a `schedule` runs 1F1B or the interleaved schedule."""
    return getattr(layout, "schedule", None) is schedule


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

)

SCHEDULE_RULES = (
    # ZB-H1 keeps 1F1B's p warm-up micro-batches; its bubble (p − 1)(F + B − W) needs m ≥ p
    Rule("zb-h1 needs n_micro ≥ pp",
         lambda m, c: (not _runs(c, Schedule.ZB_H1)) | (c.n_micro >= c.pp),
         lambda m, c: f"zb-h1 needs n_micro ≥ pp ({c.n_micro} micro-batches, pp={c.pp})"),
    # ZB-H2's first stage runs 2p − 1 forwards before its first backward (Qi et al. 2024 §2.2)
    Rule("zb-h2 needs n_micro ≥ 2·pp − 1",
         lambda m, c: (not _runs(c, Schedule.ZB_H2)) | (c.n_micro >= 2 * c.pp - 1),
         lambda m, c: f"zb-h2 needs n_micro ≥ 2·pp − 1 = {2 * c.pp - 1} ({c.n_micro} "
                      "micro-batches): its first stage runs 2·pp − 1 forwards before a backward"),
    # the V schedules put two chunks on each GPU; DualPipeV's step asserts m ≥ 2p
    # (deepseek-ai/DualPipe dualpipev.py), and ZB-V's warm-up runs 2p − 1 chunk-0 forwards
    Rule("zbv and dualpipev need n_micro ≥ 2·pp and 2·pp ≤ layers (two chunks per GPU)",
         lambda m, c: (not (_runs(c, Schedule.ZBV) or _runs(c, Schedule.DUALPIPEV)))
         | ((c.n_micro >= 2 * c.pp) & (2 * c.pp <= m.n_layers)),
         lambda m, c: f"{c.schedule.value} needs n_micro ≥ 2·pp = {2 * c.pp} (got "
                      f"{c.n_micro}) and 2·pp ≤ the {m.n_layers} layers (two chunks per GPU)"),
    # DualPipe feeds half the micro-batches from each end and pairs ranks k and p − 1 − k
    # (deepseek-ai/DualPipe dualpipe.py: num_ranks % 2 == 0, num_chunks even and ≥ 2·num_ranks)
    Rule("dualpipe needs an even pp and an even n_micro ≥ 2·pp",
         lambda m, c: (not _runs(c, Schedule.DUALPIPE))
         | ((c.pp % 2 == 0) & (c.n_micro % 2 == 0) & (c.n_micro >= 2 * c.pp)),
         lambda m, c: f"dualpipe needs an even pp and an even n_micro ≥ 2·pp (got pp={c.pp}, "
                      f"n_micro={c.n_micro}): half the micro-batches enter at each end"),
)
"""The rules of the split-backward schedules (issue 15): they read the layout's `schedule`."""

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


MOE_RULES = (
    # ---- moe: expert parallelism (Megatron-Core MoE parallel folding; megatron/training/
    # arguments.py validate_args and megatron/core/parallel_state.py @ d98e8a64dd) -------------
    Rule("ep = etp = 1 for a dense model",
         lambda m, c: (m.n_experts > 1) | ((_ep(c) == 1) & (_etp(c) == 1)),
         lambda m, c: f"{m.name} has no routed experts, so there is nothing to split over "
                      f"expert parallelism: ep = etp = 1 is the only value that works; leave --ep "
                      f"and --etp out (got ep={_ep(c)}, etp={_etp(c)})"),
    Rule("ep divides the routed experts",
         lambda m, c: m.n_experts % _ep(c) == 0,
         lambda m, c: f"ep={_ep(c)} must divide the {m.n_experts} routed experts of {m.name}: "
                      f"ep = {', '.join(str(d) for d in _divisors(m.n_experts))} work "
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
"""The expert-parallel rules (moe)."""

def _dp_shard(layout):
    """The layout's shard group over dp (dp itself where the layout does not say: no HSDP)."""
    return getattr(layout, "dp_shard", layout.dp)


HSDP_RULES = (
    # torchtitan parallel_dims.py @ b5bcd76 (dp_replicate·dp_shard·cp·tp·pp = world size);
    # Megatron-Core parallel_state.py @ d98e8a64dd ("Data parallel size should be divisible by
    # partial DistOpt shard factor"). Which ZeRO stages shard hybridly is each framework's rule.
    Rule("hybrid sharding: dp_shard divides dp; dp_shard < dp only for a dense model (the "
         "experts' partial sharding is not modelled)",
         lambda m, c: (c.dp % _dp_shard(c) == 0) & ((_dp_shard(c) == c.dp) | (m.n_experts == 1)),
         lambda m, c: (f"--dp-shard {_dp_shard(c)} must divide dp = {c.dp} (dp_replicate = "
                       "dp/dp_shard replicas of the shard group)" if c.dp % _dp_shard(c) else
                       f"--dp-shard with the mixture of experts {m.name} is not modelled (its "
                       "expert states shard over the expert data-parallel group); leave "
                       "--dp-shard out")),
)


def _cp_a2a(layout):
    """The layout's all-to-all group c_a (1 where the layout does not say: a ring or no CP)."""
    return getattr(layout, "cp_a2a", 1)


CP_KIND_RULES = (
    # ---- cp-kind: the all-to-all of Ulysses (c_a = cp) and of the hierarchical kind (c_a =
    # cp_a2a) trades the sequence split for a head split of Q, K and V: each TP rank's a/t heads
    # and k/t KV heads go c_a ways. Transformer Engine asserts it ("cp_comm_type='a2a' requires
    # num_heads % cp_size == 0 for Q, K, V", attention/dot_product_attention/context_parallel.py
    # @ d0067d0 l.4246-4249, AttnFuncWithCPAndQKVOA2A; its a2a+p2p views the heads as
    # [.., cp_a2a, h/cp_a2a, ..] in flash_attn_a2a_communicate, l.387-450); DeepSpeed-Ulysses
    # scatters each tensor's heads over the sequence-parallel group (deepspeed/sequence/
    # layer.py @ edaa72212 l.40, 56: "Number of heads … must be divisible by the sequence
    # parallel size"; its uneven-heads path, l.246-255, assumes Q and KV have the same heads,
    # "If not, additional logic is required for cases like GQA", and does not cover a GQA model)
    Rule("the all-to-all group c_a (cp for a2a, cp_a2a for hierarchical) divides the heads and "
         "the KV heads per TP rank: t·c_a divides a and k",
         lambda m, c: CX.a2a_heads_fit(m.n_heads, m.kv_heads, c.tp, _cp_a2a(c)) == 1,
         lambda m, c: f"the context-parallel all-to-all over c_a = {_cp_a2a(c)} ranks splits each "
                      f"TP rank's heads c_a ways: tp·c_a = {c.tp}·{_cp_a2a(c)} = "
                      f"{c.tp * _cp_a2a(c)} must divide the {m.n_heads} heads and the "
                      f"{m.kv_heads} KV heads of {m.name}; use a smaller tp or all-to-all group, "
                      "or the ring (--cp-kind ring)"),
)
"""The rules of the context-parallel kinds (cp-kind)."""

RULES = RULES + SCHEDULE_RULES + MOE_RULES + HSDP_RULES + CP_KIND_RULES
"""Every rule: the shared ones, then the schedules', the experts', hybrid sharding's and the
context-parallel kinds'."""



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


def removed_by(model: ModelSpec, layouts, rules=None) -> list[tuple[Rule, int, int]]:
    """How many of the layouts (arrays) each rule removes, each layout counted under the first
    rule it breaks, and the index of the first layout it removes; rules that remove none are left
    out. For the search's diagnosis."""
    import numpy as np

    alive = None
    out = []
    for rule in RULES if rules is None else rules:
        holds = np.asarray(rule.holds(model, layouts), dtype=bool)
        if alive is None:
            alive = np.ones(holds.shape, dtype=bool)
        gone = alive & ~holds
        if gone.any():
            out.append((rule, int(gone.sum()), int(np.flatnonzero(gone)[0])))
        alive &= holds
    return out


def one_layout(layouts, i: int) -> SimpleNamespace:
    """Layout i of a set of layouts (arrays, or scalars shared by all) as plain ints, for
    Rule.message."""
    import numpy as np

    return SimpleNamespace(**{k: (v[i].item() if isinstance(v, np.ndarray) else v)
                              for k, v in vars(layouts).items()})
