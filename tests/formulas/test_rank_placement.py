"""Which layers and micro-batches each pipeline rank holds: formulas.pipeline.in_flight_on_rank
against the event simulation, formulas.moe.moe_layers_on_rank against the splits plan3d writes
for torchtitan and Megatron-Core (planner/frameworks), on floats, arrays and symbols."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy

from planner.errors import PlanError
from planner.formulas import moe as MO
from planner.formulas import pipeline as PL
from planner.formulas.choices import Schedule
from planner.frameworks.megatron import pipeline_layout
from planner.frameworks.torchtitan import titan_rank_stages, titan_split, titan_stage_layers
from planner.outputs.timeline import peak_in_flight, simulate


def is_moe(i, k, f, phase=0):
    """DeepSeek's test for layer i (HF DeepseekV3DecoderLayer): i ≥ first_k_dense, i mod f = 0;
    with phase f − 1, Qwen-MoE's (HF Qwen3MoeDecoderLayer): (i + 1) mod f = 0."""
    return i >= k and i % f == phase


@pytest.mark.parametrize("schedule", [Schedule.ONE_F_ONE_B, Schedule.GPIPE,
                                      Schedule.INTERLEAVED])
@pytest.mark.parametrize("pp,vpp,m", [(2, 2, 4), (4, 2, 8), (4, 3, 8), (8, 2, 16), (4, 1, 2)])
def test_in_flight_on_rank_is_the_simulated_peak(schedule, pp, vpp, m):
    v = vpp if schedule is Schedule.INTERLEAVED else 1
    if schedule is Schedule.INTERLEAVED and (v == 1 or m % pp):
        pytest.skip("the interleaved schedule needs v ≥ 2 and m a multiple of p")
    peaks = peak_in_flight(simulate(schedule, pp, m, v))
    assert [PL.in_flight_on_rank(r, pp, m, v, schedule) for r in range(pp)] == \
        pytest.approx(peaks, abs=1e-12)


@pytest.mark.parametrize("schedule", list(Schedule))
def test_in_flight_on_rank_ends_are_the_first_and_last_stage(schedule):
    for pp, m, v in itertools.product((2, 4, 8, 16), (1, 4, 16, 64), (1, 2, 4)):
        assert PL.in_flight_on_rank(0, pp, m, v, schedule) == \
            PL.in_flight_first_stage(pp, m, v, schedule)
        assert PL.in_flight_on_rank(pp - 1, pp, m, v, schedule) == \
            pytest.approx(PL.in_flight_last_stage(pp, m, v, schedule), abs=1e-12)
        # never more in flight on a later rank
        ranks = [PL.in_flight_on_rank(r, pp, m, v, schedule) for r in range(pp)]
        assert ranks == sorted(ranks, reverse=True)


def test_deepseek_v3_torchtitan_pp16_v2_by_hand():
    # torchtitan, L = 61, S = 32 stages (pp 16 · v 2; 32 ∤ 61): L + 2 = 63 slots, ⌊63/32⌋ = 1,
    # the first 63 mod 32 = 31 stages one more, the embedding and the output one slot each:
    # stage j starts at layer j + min(j, 31) − 1 → stage 0 = {0}, stage 1 = {1, 2},
    # stage 2 = {3, 4}, …, stage 16 = {31, 32}, stage 18 = {35, 36}, stage 31 = {} (the output).
    # Looped: rank r holds stages r and r + 16. first_k_dense = 3:
    # rank 0 {0, 31, 32} → 2 MoE; rank 1 {1, 2, 33, 34} → 2; rank 2 {3, 4, 35, 36} → 4;
    # rank 15 {29, 30} → 2.
    got = [MO.moe_layers_on_rank(61, 3, 1, 16, 2, r, 1, 1) for r in range(16)]
    assert got == [2, 2] + [4] * 13 + [2]
    # what torchtitan builds from the settings plan3d writes (frameworks/torchtitan.py)
    assert titan_split(61, 32, 2) == (2, 1, 1)
    layers = titan_stage_layers(61, 32, 1, 1)
    assert [layers[r] + layers[r + 16] for r in range(16)] == [3] + [4] * 14 + [2]


def _titan_moe_by_rank(n_layers, pp, vpp, k, f, v_shape=False, phase=0):
    """MoE layers per rank of torchtitan's split as plan3d writes it, None where it writes the
    module lists or weights other than (1, 1) and (0, 0)."""
    stages = 2 * pp if v_shape else pp * vpp
    split = titan_split(n_layers, stages, -(-n_layers // stages))
    if split is None or split[1] != split[2]:
        return None
    layers = titan_stage_layers(n_layers, stages, split[1], split[2])
    starts = np.cumsum([0] + layers)
    return [sum(is_moe(i, k, f, phase) for s in titan_rank_stages(r, pp, stages, v_shape)
                for i in range(starts[s], starts[s + 1])) for r in range(pp)]


@pytest.mark.parametrize("n_layers,k,f,phase", [
    (61, 3, 1, 0), (48, 0, 1, 0), (94, 0, 1, 0), (32, 1, 2, 0), (27, 1, 1, 0), (80, 0, 2, 0),
    # Qwen-MoE's decoder_sparse_step: MoE at (i + 1) mod f = 0
    (48, 0, 2, 1), (27, 0, 2, 1), (61, 3, 3, 2)])
def test_moe_layers_on_rank_is_torchtitan_split(n_layers, k, f, phase):
    checked = 0
    for pp, vpp, v_shape in itertools.product((2, 3, 4, 8, 16), (1, 2, 3, 4), (False, True)):
        if v_shape and vpp > 1 or (2 * pp if v_shape else pp * vpp) > n_layers:
            continue
        want = _titan_moe_by_rank(n_layers, pp, vpp, k, f, v_shape, phase)
        if want is None:
            continue
        stages = 2 * pp if v_shape else pp * vpp
        ends = 0 if n_layers % stages == 0 else 1  # torchtitan's weights (1, 1), else (0, 0)
        got = [MO.moe_layers_on_rank(n_layers, k, f, pp, vpp, r, ends, ends, int(v_shape),
                                     phase=phase) for r in range(pp)]
        assert got == want, (pp, vpp, v_shape)
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("n_layers,mtp,k", [(61, 1, 3), (61, 0, 3), (94, 0, 0), (48, 0, 1),
                                            (62, 2, 3)])
def test_moe_layers_on_rank_is_megatron_layout(n_layers, mtp, k):
    # Megatron-Core's --pipeline-model-parallel-layout as plan3d writes it (chunk j on rank
    # j mod p; "m" MTP modules in the last chunk's slots, counted as MoE layers), and for one
    # chunk with p ∤ L and no MTP the --decoder-first/last-pipeline-num-layers split
    checked = 0
    for pp, vpp in itertools.product((2, 4, 8, 16), (1, 2, 4, 5)):
        if pp * vpp > n_layers:
            continue
        uneven = vpp == 1 and mtp == 0 and n_layers % pp
        if uneven:
            full = -(-n_layers // pp)
            rest = n_layers - (pp - 2) * full
            sizes = [rest // 2] + [full] * (pp - 2) + [rest - rest // 2]
            chunks = ["t" * s for s in sizes]
        else:
            try:
                chunks = pipeline_layout(n_layers, pp, vpp, mtp)
            except PlanError:  # a layout Megatron refuses (MTP wider than the last chunk)
                continue
        want = []
        for r in range(pp):
            layer, count = 0, 0
            for j, chunk in enumerate(chunks):
                for ch in chunk:
                    if ch in "tm":
                        count += j % pp == r and is_moe(layer, k, 1)
                        layer += 1
            want.append(count)
        lead, trail = PL.uneven_end_slots(n_layers, pp) if uneven else (0, 0)
        got = [MO.moe_layers_on_rank(n_layers + mtp, k, 1, pp, vpp, r, lead, trail)
               for r in range(pp)]
        assert got == want, (pp, vpp)
        checked += 1
    assert checked >= 12


def test_moe_layers_on_rank_on_arrays_and_symbols():
    L = np.array([61.0, 61.0, 94.0, 61.0])
    p = np.array([16.0, 8.0, 8.0, 4.0])
    v = np.array([2.0, 1.0, 4.0, 5.0])
    ends = np.array([1.0, 1.0, 0.0, 0.0])
    for r in (0, 1, 2):
        got = MO.moe_layers_on_rank(L, 3, 1, p, v, r, ends, ends)
        want = [MO.moe_layers_on_rank(float(a), 3, 1, float(b), float(c), r, float(e),
                                      float(e)) for a, b, c, e in zip(L, p, v, ends)]
        assert list(got) == want
    # on symbols: a named function of the rank, L, p and v, whose value is the formula's
    Ls, ps, vs = sympy.symbols("L p v", positive=True)
    expr = MO.moe_layers_on_rank(Ls, 3, 1, ps, vs, ps - 1, 1, 1)
    assert str(expr) == "n_moe,r(p - 1; L, p, v)"
    assert float(expr.xreplace({Ls: 61, ps: 16, vs: 2}).evalf()) == 2.0
    # a dense model holds none
    assert MO.moe_layers_on_rank(61, 3, 1, 16, 2, 2, 1, 1, is_moe=0) == 0


def test_uneven_end_slots_by_hand():
    # L = 61, p = 16: F = ⌈61/16⌉ = 4, R = 61 − 14·4 = 5: first stage ⌊5/2⌋ = 2 layers (lead
    # 4 − 2 = 2), last ⌈5/2⌉ = 3 (trail 1); 61 + 2 + 1 = 64 = 16·4 slots
    assert PL.uneven_end_slots(61, 16) == (2, 1)
    assert PL.uneven_end_slots(64, 16) == (0, 0)
