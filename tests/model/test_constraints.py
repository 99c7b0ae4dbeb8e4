"""planner.model.constraints: one set of rules, on ints (estimate, explain) and on arrays (search)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from planner.catalog import load_model
from planner.model import constraints
from planner.model.constraints import MOE_RULES, RULES, SCHEDULE_RULES, admissible, broken

LLAMA70 = load_model("llama-3.1-70b")  # 80 layers, 64 heads, 8 KV heads, ffn 28672


def _layout(**kw):
    base = dict(dp=8, tp=8, pp=8, cp=1, vpp=1, mbs=1, n_micro=16, gbs=128, seq_len=8192,
                interleaved=False, sp=True)
    base.update(kw)
    return SimpleNamespace(**base)


@pytest.mark.parametrize("change, rule_text", [
    # 2·16·8 = 256 ≠ 128
    (dict(mbs=2), "gbs = mbs·n_micro·dp"),
    # 8 KV heads are not divisible by 16 (1·32·4 = 128 keeps the batch)
    (dict(tp=16, dp=4, n_micro=32), "tp divides the attention heads"),
    # 8192 mod (2·3) = 2
    (dict(cp=3), "cp > 1: seq_len divisible by 2·cp"),
    (dict(vpp=2), "vpp > 1 only with the interleaved schedule"),
    (dict(interleaved=True), "the interleaved schedule needs pp ≥ 2 and vpp ≥ 2"),
    # 12 micro-batches, pp = 8: 12 mod 8 = 4
    (dict(vpp=2, interleaved=True, n_micro=12, gbs=96), "the interleaved schedule needs n_micro"),
    # 1·2·64 = 128
    (dict(tp=1, dp=64, n_micro=2), "sequence parallelism only with tp > 1"),
])
def test_each_rule_is_the_first_broken_by_its_case(change, rule_text):
    assert broken(LLAMA70, _layout()) is None
    rule = broken(LLAMA70, _layout(**change))
    assert rule is not None and rule.text.startswith(rule_text)
    assert rule.message(LLAMA70, _layout(**change))  # a message a user can read


def test_ffn_rule_on_a_model_whose_ffn_tp_does_not_divide():
    # 64 heads and 8 KV heads allow tp = 8, but an FFN of 28676 = 4·7169 does not split 8 ways
    model = LLAMA70.model_copy(update={"ffn": 28676})
    rule = broken(model, _layout())
    assert rule is not None and rule.text == "tp divides the FFN size"
    assert "28676" in rule.message(model, _layout())


def test_arrays_and_ints_agree_on_a_grid():
    """The search's mask equals the scalar verdict, layout by layout, over a grid that breaks
    every rule somewhere (an FFN of 28676 = 4·7169 splits 1, 2 or 4 ways, not 8 or 16)."""
    model = LLAMA70.model_copy(update={"ffn": 28676})
    rows = list(itertools.product([1, 2, 4, 8, 16], [1, 2, 3, 4], [1, 2, 8, 16], [1, 2, 4, 6],
                                  [1, 2], [8, 12, 16], [False, True], [False, True]))
    tp, cp, pp, vpp, mbs, n_micro, inter, sp = (np.array(c) for c in zip(*rows))
    dp = np.full(len(rows), 8)
    gbs = np.full(len(rows), 128)
    arrays = SimpleNamespace(dp=dp, tp=tp, pp=pp, cp=cp, vpp=vpp, mbs=mbs, n_micro=n_micro,
                             gbs=gbs, seq_len=8192, interleaved=inter, sp=sp)
    mask = admissible(model, arrays)
    scalar = [broken(model, _layout(dp=8, tp=t, cp=c, pp=p, vpp=v, mbs=b, n_micro=m, gbs=128,
                                      interleaved=bool(i), sp=bool(s))) is None
              for t, c, p, v, b, m, i, s in rows]
    assert mask.tolist() == scalar
    assert 0 < mask.sum() < len(rows)
    # every rule is broken by some row, so the agreement covers each of them (the expert rules,
    # which a dense model without ep/etp cannot break, have their own grid in test_moe_ep.py)
    for rule in RULES:
        if rule in SCHEDULE_RULES or rule in MOE_RULES or rule in constraints.HSDP_RULES:
            continue  # own tests: schedules, moe grids, hybrid sharding (test_hsdp.py)
        assert not np.all(rule.holds(model, arrays)), rule.text


@pytest.mark.parametrize("schedule,rule,bad,good", [
    # (pp, n_micro) that break / keep the schedule's rule; LLAMA70 has 80 layers
    ("zb-h1", "zb-h1 needs", (8, 7), (8, 8)),
    ("zb-h2", "zb-h2 needs", (8, 14), (8, 15)),  # 2·8 − 1 = 15
    ("zbv", "zbv and dualpipev", (8, 15), (8, 16)),
    ("zbv", "zbv and dualpipev", (41, 82), (40, 80)),  # 2·41 = 82 chunks > 80 layers
    ("dualpipev", "zbv and dualpipev", (4, 7), (4, 8)),
    ("dualpipe", "dualpipe needs", (4, 10 - 1), (4, 10)),  # odd n_micro
    ("dualpipe", "dualpipe needs", (3, 12), (4, 12)),  # odd pp
    ("dualpipe", "dualpipe needs", (4, 6), (4, 8)),  # n_micro < 2·pp
])
def test_schedule_rules(schedule, rule, bad, good):
    from planner.formulas.choices import Schedule

    sched = Schedule(schedule)

    def layout(pp, n_micro, arrays=False):
        wrap = (lambda v: np.array([v])) if arrays else (lambda v: v)
        return SimpleNamespace(dp=wrap(1), tp=wrap(1), pp=wrap(pp), cp=wrap(1), vpp=wrap(1),
                               mbs=wrap(1), n_micro=wrap(n_micro), gbs=wrap(n_micro),
                               seq_len=8192, interleaved=False, sp=False, schedule=sched)

    hit = broken(LLAMA70, layout(*bad))
    assert hit is not None and hit.text.startswith(rule)
    assert hit.message(LLAMA70, layout(*bad))
    assert broken(LLAMA70, layout(*good)) is None
    assert not admissible(LLAMA70, layout(*bad, arrays=True)).any()
    assert admissible(LLAMA70, layout(*good, arrays=True)).all()
    # the schedule's rules hold for layouts that run 1F1B
    assert all(r.holds(LLAMA70, SimpleNamespace(**{**vars(layout(*bad)), "schedule": None}))
               for r in SCHEDULE_RULES)


def test_of_reads_a_plan_config():
    from planner.formulas.choices import Schedule
    from planner.schema import PlanConfig

    cfg = PlanConfig(dp=4, tp=8, pp=4, vpp=2, mbs=1, n_micro=8, gbs=32, seq_len=8192,
                     schedule=Schedule.INTERLEAVED)
    layout = constraints.of(cfg)
    assert (layout.interleaved, layout.sp, layout.pp, layout.vpp) == (True, True, 4, 2)
    assert broken(LLAMA70, layout) is None
