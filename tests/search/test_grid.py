"""The MoE search's grid (planner/search/grid.py): the model evaluated once per layout and
broadcast over the crossed expert and dispatcher columns gives every candidate exactly the
costs of the flat evaluation, row by row; the space's id columns number what they say. A
candidate's memory costed alone (model.cost.memory_layout_costs, then states.stage_memory;
costing.memory_in_chunks) is exactly the memory the whole model gives it: stage_memory reads
nothing of the layout half beyond that part (an attribute it read and the part did not hold
would raise)."""

from dataclasses import replace

import numpy as np
import pytest

from planner.catalog import load_hardware, load_model
from planner.formulas.choices import Recompute
from planner.frameworks import FRAMEWORKS
from planner.model.cost import Choices, memory_layout_costs, numbers, plan_costs
from planner.model.states import stage_memory
from planner.schema import PlanConfig
from planner.search import costing
from planner.search.evaluate import _runnable_groups, base_numbers
from planner.search.grid import grid_of, numbered
from planner.search.recompute import fitting_full_recompute, memory_at_one_layer
from planner.search.request import PlanRequest
from planner.search.space import (
    CROSSED,
    LAYOUT_COLUMNS,
    LAYOUT_ID,
    numeric_space,
)

KEYS = costing.KEPT_COSTS + ("stage_layers", "optimizer_bytes")


def _groups(model, gpus, framework="megatron", **extra):
    """Each choice group's candidates (float64 columns with the space's ids), choices, runs."""
    m, h = load_model(model), load_hardware("h100-nvlink")
    req = PlanRequest(gpus=gpus, framework=framework, **extra)
    fw = FRAMEWORKS[framework]
    base = base_numbers(m, h, req, fw)
    for (*_, zeros), _, cols, _, choices in _runnable_groups(m, req, fw, base,
                                                              numeric_space(m, h, req), False):
        yield base, cols, choices, zeros


def _flat(columns):
    return {k: v for k, v in columns.items() if not k.startswith("_")}


@pytest.mark.parametrize("model, gpus, framework", [("deepseek-v3", 128, "megatron"),
                                                    ("mixtral-8x7b", 64, "torchtitan"),
                                                    ("mixtral-8x7b", 64, "deepspeed")])
def test_the_grid_gives_every_candidate_the_flat_costs(model, gpus, framework):
    """costs_in_chunks on the grid equals the flat evaluation (the ids left out, so that no grid
    is made) exactly, every kept cost, every ZeRO stage, in every choice group."""
    gridded = 0
    for base, cols, choices, zeros in _groups(model, gpus, framework):
        if grid_of(cols) is None:  # one ep and one dispatcher left by the rules: flat
            assert len(np.unique(cols["ep"])) == len(np.unique(cols["deepep"])) == 1
            continue
        on_grid = costing.costs_in_chunks(base, cols, choices, zeros, KEYS)
        flat = costing.costs_in_chunks(base, _flat(cols), choices, zeros, KEYS)
        for a, b in zip(on_grid, flat):
            for k in KEYS:
                assert np.array_equal(a[k], b[k]), k
        gridded += 1
        if gridded == 6:  # recompute none and selective, with and without sp, two schedules
            break
    assert gridded >= 3


def test_a_column_of_each_candidates_own_is_a_layout_of_its_own():
    """A column that is neither a layout's nor crossed (partial recompute's layers, one per
    candidate) refines the layouts: the grid's costs still equal the flat ones, and its memory
    (memory_in_chunks) too."""
    base, cols, choices, zeros = next(
        g for g in _groups("deepseek-v3", 256, recompute=[Recompute.FULL]))
    n = len(cols["tp"])
    layers = 1.0 + np.arange(n) % 3  # differs among the candidates of one layout
    shared = {k: v for k, v in base.items() if k != "recompute_layers"}
    cols = {**cols, "recompute_layers": layers}
    grid = grid_of(cols)
    assert grid.shape[0] > len(np.unique(cols[LAYOUT_ID]))  # the layers made more layouts
    on_grid = costing.costs_in_chunks(shared, cols, choices, zeros, KEYS)
    flat = costing.costs_in_chunks(shared, _flat(cols), choices, zeros, KEYS)
    for a, b in zip(on_grid, flat):
        for k in KEYS:
            assert np.array_equal(a[k], b[k]), k
    for a, b in zip(costing.memory_in_chunks(shared, cols, choices, zeros),
                    costing.memory_in_chunks(shared, _flat(cols), choices, zeros)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("model, gpus", [("deepseek-v3", 256), ("70b", 256)])
def test_partial_recompute_memory_shared_by_the_stages_is_each_stages_own(model, gpus):
    """memory_at_one_layer costs the layout half once on the rows any ZeRO stage tries and each
    stage's memory on all of them: each stage gets exactly what memory_in_chunks gives its own
    rows alone (the grid for DeepSeek-V3, flat for 70B), in their order. The stages here run
    overlapping, different rows (every second, third, … row), and fit a budget at the median."""
    base, cols, choices, zeros = next(_groups(model, gpus, recompute=[Recompute.FULL]))
    n = len(cols["tp"])
    runs = {z: np.arange(n) % (i + 2) != 0 for i, z in enumerate(zeros)}
    outs = {z: costing.costs_in_chunks(base, {k: v[keep] for k, v in cols.items()},
                                       replace(choices, zero_stage=z), None,
                                       ("total_bytes", "stage_layers"))[0]
            for z, keep in runs.items()}
    budget = float(np.median(np.concatenate([o["total_bytes"] for o in outs.values()])))
    ones = memory_at_one_layer(base, cols, runs, outs, choices, budget)
    shared = {k: v for k, v in base.items() if k != "recompute_layers"}
    checked = 0
    for z, keep in runs.items():
        tried = fitting_full_recompute(outs[z], budget)
        if not tried.any():
            assert z not in ones
            continue
        rows = np.flatnonzero(keep)[tried]
        alone = costing.memory_in_chunks(
            shared, {**{k: v[rows] for k, v in cols.items()},
                     "recompute_layers": np.ones(len(rows))}, replace(choices, zero_stage=z))[0]
        assert np.array_equal(ones[z], alone)
        checked += 1
    assert checked >= 2


@pytest.mark.parametrize("extra", [{}, {"dp_shard": "auto"}, {"cp_kind": "auto"}])
def test_the_space_numbers_its_layouts_and_crossed_columns(extra):
    """Within one layout id every LAYOUT_COLUMNS column holds one value, and within one crossed
    id its columns hold one value; two rows that differ in no layout column share the id."""
    m, h = load_model("deepseek-v3"), load_hardware("h100-nvlink")
    space = numeric_space(m, h, PlanRequest(gpus=64, **extra))
    codes, rows = numbered(space[LAYOUT_ID])
    present = [k for k in LAYOUT_COLUMNS if k in space]
    for k in present:
        assert np.array_equal(space[k], space[k][rows][codes]), k
    distinct = np.unique(np.stack([space[k] for k in present], axis=1), axis=0)
    assert len(rows) == len(distinct)  # one id per distinct layout
    for id_name, names in CROSSED.items():
        codes, rows = numbered(space[id_name])
        for k in names:
            assert np.array_equal(space[k], space[k][rows][codes]), k


def test_a_dense_model_is_evaluated_flat():
    """Nothing is crossed in a dense model's space (ep = etp = 1, one dispatcher): no grid."""
    m, h = load_model("70b"), load_hardware("h100-nvlink")
    space = numeric_space(m, h, PlanRequest(gpus=64))
    assert grid_of(space) is None


def test_numbered_sparse_ids_as_dense_ones():
    """numbered: the same codes by the dense pass and by the sort (ids far apart)."""
    ids = np.array([5, 3, 5, 9, 3])
    codes, rows = numbered(ids)
    assert codes.tolist() == [1, 0, 1, 2, 0] and ids[rows].tolist() == [3, 5, 9]
    codes, rows = numbered(ids * 10**9)
    assert codes.tolist() == [1, 0, 1, 2, 0] and (ids * 10**9)[rows].tolist() == [3e9, 5e9, 9e9]


MEMORY_PARTS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
         "overhead_bytes", "total_bytes")


@pytest.mark.parametrize("model, gpus, framework, extra", [
    ("deepseek-v3", 128, "megatron", {}),  # the grid: ep, etp, DeepEP, the overlap crossed
    ("mixtral-8x7b", 64, "torchtitan", {"dp_shard": "auto"}),  # hybrid sharding's replicas
    ("mixtral-8x7b", 64, "deepspeed", {"recompute": [Recompute.FULL], "sp": [False],
                                       "distribute_saved_activations": True}),
    ("70b", 64, "megatron", {"cp_kind": "auto"}),  # flat: a dense model
    ("70b", 32, "deepspeed", {"offload_optimizer": 0.5}),  # offload's host share
    ("70b", 32, "torchtitan", {"offload_params": True}),
])
def test_memory_alone_is_the_whole_models_memory(model, gpus, framework, extra):
    """memory_in_chunks equals costs_in_chunks' total_bytes exactly, every ZeRO stage of every
    choice group (on the grid and flat alike)."""
    checked = 0
    for base, cols, choices, zeros in _groups(model, gpus, framework, **extra):
        whole = costing.costs_in_chunks(base, cols, choices, zeros, ("total_bytes",))
        alone = costing.memory_in_chunks(base, cols, choices, zeros)
        flat = costing.memory_in_chunks(base, _flat(cols), choices, zeros)
        for w, a, f in zip(whole, alone, flat):
            assert np.array_equal(w["total_bytes"], a)
            assert np.array_equal(a, f)
        checked += 1
    assert checked >= 1


@pytest.mark.parametrize("model, cfg", [
    ("deepseek-v3", dict(dp=16, tp=2, pp=8, ep=16, vpp=2, n_micro=16, zero_stage=1,
                         moe_dispatcher="deepep", framework="megatron")),
    ("mixtral-8x7b", dict(dp=8, tp=1, pp=2, ep=8, n_micro=8, zero_stage=3, dp_shard=4,
                          framework="torchtitan")),
    ("70b", dict(dp=4, tp=4, pp=2, n_micro=8, zero_stage=1, recompute="full",
                 sequence_parallel=False, distribute_saved_activations=True,
                 offload_optimizer=0.5, framework="deepspeed")),
])
def test_one_plans_memory_alone_part_by_part(model, cfg):
    """One plan (plain numbers): each memory part from memory_layout_costs equals plan_costs',
    and the memory half holds none of the collectives' times it leaves out."""
    base = dict(mbs=1, seq_len=4096, recompute="selective", sequence_parallel=True)
    config = PlanConfig(**{**base, **cfg, "gbs": cfg["dp"] * cfg["n_micro"]})
    x, c = numbers(load_model(model), load_hardware("h100-nvlink"), config), Choices.of(config)
    k = memory_layout_costs(x, c)
    mem = stage_memory(x, c, k)
    whole = plan_costs(x, c)
    for name, value in zip(MEMORY_PARTS, (mem.weights, mem.grads, mem.optimizer, mem.activations,
                                   mem.overhead, mem.total_bytes)):
        assert value == whole[name], name
    assert not any(hasattr(k, t) for t in ("tp_mb_s", "ep_mb_s", "tp_share", "compute_mb_s"))
