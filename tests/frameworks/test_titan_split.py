"""torchtitan's pipeline split as plan3d writes it: exactly the stages the plan has, none over
the ⌈L/S⌉ layers plan3d costs per stage (issue 20). torchtitan's own functions check the same
rank by rank in tests/parsers/test_torchtitan.py."""

from __future__ import annotations

import math

import pytest

from planner.frameworks.torchtitan import (
    titan_rank_stages,
    titan_split,
    titan_stage_count,
    titan_stage_layers,
)


def test_torchtitan_defaults_overload_a_rank_of_70b_pp4():
    # L = 80, S = 4, first/last weights 1: 82 effective layers → 21, 21, 20, 20, less one on the
    # first and last stage: [20, 21, 20, 19] — 21 on rank 1, above the 20 plan3d costs
    assert titan_stage_layers(80, 4, 1, 1) == [20, 21, 20, 19]
    # so the split drops the weights: 80/20 = 4 stages of 20
    assert titan_split(80, 4, 20) == (20, 0, 0)
    assert titan_stage_layers(80, 4, 0, 0) == [20, 20, 20, 20]


def test_the_defaults_are_kept_where_they_keep_to_the_cost():
    # L = 78: 80 effective over 4 → 20 each, less one at each end: [19, 20, 20, 19] ≤ ⌈78/4⌉ = 20
    assert titan_split(78, 4, 20) == (20, 1, 1)
    assert titan_stage_layers(78, 4, 1, 1) == [19, 20, 20, 19]


def test_v_placement_pairs_stages_from_both_ends():
    # pp 4, 8 stages, V: rank 0 holds stages 0 and 7, rank 3 holds 3 and 4
    assert titan_rank_stages(0, 4, 8, v_shape=True) == (0, 7)
    assert titan_rank_stages(3, 4, 8, v_shape=True) == (3, 4)
    assert titan_rank_stages(1, 4, 8, v_shape=False) == (1, 5)


@pytest.mark.parametrize("n_layers", [1, 2, 3, 7, 16, 32, 61, 80, 126])
def test_every_split_gives_the_stages_and_keeps_to_the_cost(n_layers):
    for stages in range(1, n_layers + 3):
        cap = math.ceil(n_layers / stages)
        split = titan_split(n_layers, stages, cap)
        if split is None:
            continue  # the emitter lists each stage's modules instead
        per_stage, first, last = split
        assert titan_stage_count(n_layers, per_stage, first, last) == stages
        layers = titan_stage_layers(n_layers, stages, first, last)
        assert sum(layers) == n_layers and max(layers) <= cap and min(layers) >= 0
