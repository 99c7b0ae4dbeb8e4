"""Oracle: what torchtitan 0.3.0's own DeepSeek-V3 MLA + MoE block keeps for backward under its
own SelectiveAC (the whole block one per-op region, as torchtitan >= v0.2.1 applies it):
formulas.moe_memory.torchtitan_sac_mla_moe_block_bytes against the selective-checkpoint cache
plus the block's input (tests/oracle/_tt030.py: the real model and policy, stand-ins only for the
compiled flex region, `_grouped_mm` and the gate's fp32 autocast). Without expert parallelism
(the all-to-all terms are derived, not measured). Tolerance: exact.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchtitan.distributed.activation_checkpoint")

from planner.formulas import moe_memory as M  # noqa: E402

pytestmark = pytest.mark.oracle

try:
    from ._tt030 import sac_cache_bytes  # noqa: E402
except ImportError as err:  # another torchtitan than 0.3.0's layout
    pytest.skip(f"torchtitan 0.3.0 not importable: {err}", allow_module_level=True)

# (h, a, r_q, r_kv, d_n, d_r, d_v, f_e, E, k, n_s, s, b): without and with q compression (the
# MLA's 4 or 5 mms shift the shared experts' parity), top-2/4/6, one or two shared experts
SHAPES = [(64, 4, 0, 32, 16, 8, 16, 32, 8, 2, 1, 16, 2), (64, 4, 24, 32, 16, 8, 16, 32, 8, 2, 1, 16, 2),
          (96, 2, 0, 48, 24, 8, 16, 24, 16, 4, 2, 8, 3),
          (128, 4, 32, 64, 32, 16, 32, 48, 8, 6, 2, 16, 1)]


def _formula(dims):
    h, a, r_q, r_kv, d_n, d_r, d_v, f_e, _, k, n_s, s, b = dims
    return M.torchtitan_sac_mla_moe_block_bytes(s * b, 0, 0, h, a, r_q, r_kv, d_n, d_r, d_v, k,
                                                f_e, n_s)


@pytest.mark.parametrize("dims", SHAPES)
def test_block_matches_formula(dims):
    h, s, b = dims[0], dims[-2], dims[-1]
    cached, _ = sac_cache_bytes(dims)
    assert cached + 2 * s * b * h == _formula(dims)  # the cache + the checkpoint's bf16 input


def test_block_by_hand_and_it_trains():
    # h 64, a 4, r_q 24, r_kv 32, d_n 16, d_r 8, d_v 16, f_e 32, k 2, one shared, T = 32, bf16;
    # per token: wq_a 48, wkv_a 2·40 = 80, wo 128, V's wkv_b buffer 2·4·32 = 256, q and k
    # 2·2·4·24 = 384, out 2·4·16 = 128, lse 4·4 = 16, topk 2·(4 + 8) = 24, shared w3 64
    # → 1128 B, 32 · 1128 = 36,096 cached; the input 32·128 = 4096 → 40,192
    cached, grads = sac_cache_bytes(SHAPES[1], backward=True)
    assert cached == 36_096 and _formula(SHAPES[1]) == 40_192
    assert all(g is not None for g in grads.values())  # the checkpointed block really trains
