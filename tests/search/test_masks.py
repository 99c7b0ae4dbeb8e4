"""The rules' masks kept across the search's choice groups (planner/search/masks.py): the same
masks as evaluating every rule per group, and a rule is evaluated again when what it reads
differs."""

from types import SimpleNamespace

import numpy as np
import pytest

from planner.catalog import load_hardware, load_model
from planner.formulas.choices import Schedule
from planner.frameworks import FRAMEWORKS
from planner.model import constraints
from planner.rules import Rule
from planner.search.evaluate import _group_runs, _group_space, rule_settings
from planner.search.masks import RuleMasks
from planner.search.request import PlanRequest
from planner.search.space import choice_groups, numeric_space


@pytest.mark.parametrize("model, gpus, framework", [("deepseek-v3", 2048, "megatron"),
                                                    ("70b", 512, "torchtitan"),
                                                    ("70b", 64, "deepspeed")])
def test_kept_masks_equal_the_rules_evaluated_per_group(model, gpus, framework):
    """Every choice group's masks, with the masks kept from earlier groups, equal
    constraints.admissible & Framework.admissible evaluated afresh on that group."""
    m, h = load_model(model), load_hardware("h100-nvlink")
    req = PlanRequest(gpus=gpus, framework=framework)
    fw = FRAMEWORKS[framework]
    space, parts, masks = numeric_space(m, h, req), {}, RuleMasks(m)
    groups = 0
    for r, sp, sched, zeros in choice_groups(req):
        group = _group_space(space, sched is Schedule.INTERLEAVED, r, parts)
        kept = _group_runs(m, req, fw, masks, group, (r, sp, sched, zeros))
        layouts = SimpleNamespace(
            **group, gbs=req.global_batch(m), seq_len=req.seq(m),
            interleaved=sched is Schedule.INTERLEAVED, sp=sp, schedule=sched,
            **rule_settings(req, [r]))
        shared = constraints.admissible(m, layouts)
        for z in zeros:
            fresh = shared & fw.admissible(m, SimpleNamespace(
                **vars(layouts), **constraints.choices(z, sched, req.precision)))
            assert np.array_equal(np.broadcast_to(kept[z], group["tp"].shape),
                                  np.broadcast_to(fresh, group["tp"].shape))
        groups += 1
    assert groups >= 6  # deepspeed: 3 recomputes × 2 sp × 1F1B
    # and masks were kept: fewer evaluations than rules × groups (the point of it)
    evaluated = sum(len(v) for v in masks._kept.values())
    assert evaluated < groups * (len(constraints.RULES) + len(fw.all_rules()) * 2)


def test_a_rule_is_evaluated_again_when_a_value_it_reads_differs():
    calls = []
    rule = Rule("tp below the limit", lambda m, c: calls.append(1) or (c.tp <= c.limit), str)
    masks = RuleMasks(model=None)
    tp = np.array([1, 2, 4, 8])
    assert masks.holds(("r", 0, rule.text), rule, {"tp": tp, "limit": 4, "sp": True}).tolist() \
        == [True, True, True, False]
    # another value of what it does not read (sp): kept
    masks.holds(("r", 0, rule.text), rule, {"tp": tp, "limit": 4, "sp": False})
    assert len(calls) == 1
    # another scalar it reads, another type of the same value, another array: evaluated again
    assert masks.holds(("r", 0, rule.text), rule, {"tp": tp, "limit": 2}).tolist() \
        == [True, True, False, False]
    masks.holds(("r", 0, rule.text), rule, {"tp": tp, "limit": 4.0})
    masks.holds(("r", 0, rule.text), rule, {"tp": tp.copy(), "limit": 4})
    assert len(calls) == 4


def test_a_missing_attribute_is_part_of_what_a_rule_read():
    rule = Rule("ep of 1", lambda m, c: getattr(c, "ep", 1) == 1, str)
    masks = RuleMasks(model=None)
    assert masks.holds(("r", 0, rule.text), rule, {}) is True
    assert masks.holds(("r", 0, rule.text), rule, {"ep": 2}) is False
    assert masks.holds(("r", 0, rule.text), rule, {}) is True
