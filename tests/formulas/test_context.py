"""Context-parallel kinds (planner.formulas.context): hand cases, identities between the kinds,
and the ring at c_a = 1 as Megatron's ring attention moves it."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from planner.formulas import context as X
from planner.formulas.choices import ContextKind

MiB = 2**20
# Llama 3.1 70B: a = 64 heads, k = 8 KV heads, d_h = 128; s = 128 Ki tokens, b = 1, t = 1, c = 8
LLAMA = dict(seq_len=131072, mbs=1, n_heads=64, n_kv_heads=8, head_dim=128, tp=1, cp=8)


def total(kind, cp_a2a=1, **over):
    a = {**LLAMA, **over}
    c_a = X.a2a_group(kind, a["cp"], cp_a2a)
    return X.context_layer_bytes(a["seq_len"], a["mbs"], a["n_heads"], a["n_kv_heads"],
                                 a["head_dim"], a["tp"], a["cp"], c_a)


def test_hand_cases_llama_70b_128k():
    # one K/V chunk: 2 B · 2 (K, V) · 16,384 tokens · 8 heads · 128 = 64 MiB
    assert X.kv_chunk_bytes(131072, 1, 8, 128, 1, 8) == 64 * MiB
    # ring: 3·(c − 1) chunks = 21 · 64 MiB = 1,344 MiB
    assert total(ContextKind.RING) == 1344 * MiB
    # Ulysses: 2·(c − 1)/c · 2 B·16,384·128·(2·64 + 2·8) = 1.75 · 576 MiB = 1,008 MiB
    assert total(ContextKind.ALL_TO_ALL) == 1008 * MiB
    # a2a+p2p with c_a = 4: 2·3/4 · 576 MiB + 3·(8/4 − 1) · 64 MiB = 864 + 192 = 1,056 MiB
    assert total(ContextKind.HIERARCHICAL, cp_a2a=4) == 1056 * MiB


def test_ring_is_the_cost_models_ring():
    s, b, k, d, t, c, act = sp.symbols("s b k d_h t c act", positive=True)
    a = sp.Symbol("a", positive=True)
    ring = X.ring_layer_bytes(s, b, k, d, t, c, 1, act)
    # each rank passes its K and V chunk, act·2·b·(s/c)·k·d_h/t, c − 1 times forward and, with
    # their gradients, twice as much backward: 3·(c − 1) chunks
    assert sp.simplify(ring - 3 * (c - 1) * act * 2 * b * s / c * k * d / t) == 0
    assert X.a2a_layer_bytes(s, b, a, k, d, t, c, 1, act) == 0


def test_kinds_are_the_ends_of_the_hierarchy():
    s, b, a, k, d, t, c, act = sp.symbols("s b a k d_h t c act", positive=True)
    # c_a = c: the ring part vanishes, all of it is Ulysses'
    assert X.ring_layer_bytes(s, b, k, d, t, c, c, act) == 0
    ulysses = X.context_layer_bytes(s, b, a, k, d, t, c, c, act)
    assert sp.simplify(ulysses - 2 * (c - 1) / c * act * b * s / c * d * (2 * a + 2 * k) / t) == 0
    # c = 1: no traffic at all
    assert X.context_layer_bytes(s, b, a, k, d, t, 1, 1, act) == 0


def test_messages():
    assert X.ring_messages(8, 1) == 21  # 3·7, as cost.py counts the ring
    assert X.a2a_messages(8) == 56  # 8 all-to-alls of 7 exchanges
    assert X.a2a_messages(1) == 0 and X.ring_messages(8, 8) == 0


def test_a2a_groups_and_the_head_rule():
    assert X.a2a_group(ContextKind.RING, 8, 4) == 1
    assert X.a2a_group(ContextKind.ALL_TO_ALL, 8, 4) == 8
    assert X.a2a_group(ContextKind.HIERARCHICAL, 8, 4) == 4
    # 8 KV heads over tp = 8 leave one per rank: no all-to-all beyond c_a = 1
    assert X.a2a_heads_fit(64, 8, 8, 1) and not X.a2a_heads_fit(64, 8, 8, 2)
    assert X.a2a_heads_fit(64, 8, 1, 8) and not X.a2a_heads_fit(64, 8, 1, 16)
    mask = X.a2a_heads_fit(64, 8, np.array([1, 2, 4, 8]), np.array([8, 4, 4, 2]))
    assert mask.tolist() == [True, True, False, False]


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_arrays_floats_agree(cp):
    arr = X.context_layer_bytes(np.array([8192.0, 131072.0]), 1.0, 64.0, 8.0, 128.0, 1.0,
                                float(cp), 2.0)
    for i, s in enumerate((8192.0, 131072.0)):
        assert arr[i] == X.context_layer_bytes(s, 1.0, 64.0, 8.0, 128.0, 1.0, float(cp), 2.0)
