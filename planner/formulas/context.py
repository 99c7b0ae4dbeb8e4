"""Context parallelism's traffic, by kind: ring (p2p), all-to-all (Ulysses) and the hierarchical
a2a+p2p form. Bytes one GPU sends per layer per micro-batch, forward and backward together.

s sequence, b micro-batch (sequences), a heads, k KV heads, d_h head width, t tensor-parallel
degree, c context-parallel degree, c_a the all-to-all group inside it (1 for the ring, c for
Ulysses), act bytes per activation element. Each rank holds s/c tokens (two of 2c load-balanced
chunks).

One pair of formulas covers the three kinds: an all-to-all over c_a ranks and a ring over the
c/c_a groups; ``a2a_group`` picks c_a from the kind. After the all-to-all each rank holds the
sequence of its group, s·c_a/c tokens, for k/(t·c_a) KV heads, so the ring passes chunks of the
same size as a plain ring over c ranks.

Which framework runs which (Megatron-Bridge docs, "Hybrid / Hierarchical Context Parallel"):
Megatron-LM and NeMo run all three (``--cp-comm-type p2p|a2a|a2a+p2p``, plus all_gather, not
modelled here); DeepSpeed runs Ulysses (``sequence_parallel_size``); torchtitan runs ring
attention (PyTorch ``context_parallel``).
"""

from __future__ import annotations

from . import _ops
from .choices import ContextKind


def kv_chunk_bytes(seq_len, mbs, n_kv_heads, head_dim, tp, cp, act_bytes=2):
    """One rank's K and V for its s/c tokens and k/t KV heads: act·2·b·(s/c)·k·d_h/t. The ring
    (ring_layer_bytes) passes 3·(c − 1) of these per layer."""
    return act_bytes * 2 * mbs * seq_len / cp * n_kv_heads * head_dim / tp


def a2a_group(kind: ContextKind, cp, cp_a2a=1):
    """c_a, the ranks of one all-to-all group: 1 for the ring, c for Ulysses, the given
    cp_a2a (Megatron's first ``--hierarchical-context-parallel-sizes`` value) for a2a+p2p."""
    if kind is ContextKind.RING:
        return 1
    if kind is ContextKind.ALL_TO_ALL:
        return cp
    return cp_a2a


def a2a_layer_bytes(seq_len, mbs, n_heads, n_kv_heads, head_dim, tp, cp, cp_a2a, act_bytes=2):
    """The all-to-all part: 2·(c_a − 1)/c_a · act·b·(s/c)·d_h·(2a + 2k)/t.

    Forward: Q (a heads), K and V (k each) go from sequence-split to head-split before the
    attention core and its output (a heads) back after it — four all-to-alls of tensors totalling
    act·b·(s/c)·d_h·(2a + 2k)/t per rank, each rank keeping 1/c_a of what it holds and sending
    the rest. Backward: the same four for the gradients. Jacobs et al. 2023 (DeepSpeed-Ulysses)
    §3.2. Zero for c_a = 1 (the ring)."""
    per_rank = act_bytes * mbs * seq_len / cp * head_dim * (2 * n_heads + 2 * n_kv_heads) / tp
    return 2 * (cp_a2a - 1) / cp_a2a * per_rank


def ring_layer_bytes(seq_len, mbs, n_kv_heads, head_dim, tp, cp, cp_a2a, act_bytes=2):
    """The ring part over the c/c_a groups: 3·(c/c_a − 1) K/V chunks (kv_chunk_bytes): c/c_a − 1
    steps forward with K and V, and backward K, V and their gradients (twice as much), as
    Megatron's p2p ring (Liu et al. 2023, Ring Attention). Zero for c_a = c (Ulysses)."""
    return 3 * (cp / cp_a2a - 1) * kv_chunk_bytes(seq_len, mbs, n_kv_heads, head_dim, tp, cp,
                                                  act_bytes)


def context_layer_bytes(seq_len, mbs, n_heads, n_kv_heads, head_dim, tp, cp, cp_a2a,
                        act_bytes=2):
    """All of it: a2a_layer_bytes + ring_layer_bytes. Hand case, Llama 3.1 70B (a = 64, k = 8,
    d_h = 128), s = 131,072, b = 1, t = 1, c = 8, 16-bit; one K/V chunk is
    2·2·16,384·8·128 B = 64 MiB and one rank's Q, K, V and output 2·16,384·128·144 B = 576 MiB:
    ring (c_a = 1): 3·7 · 64 MiB = 1,344 MiB;
    Ulysses (c_a = 8): 2·7/8 · 576 MiB = 1,008 MiB;
    a2a+p2p (c_a = 4): 2·3/4 · 576 MiB + 3·(8/4 − 1) · 64 MiB = 864 + 192 = 1,056 MiB."""
    return (a2a_layer_bytes(seq_len, mbs, n_heads, n_kv_heads, head_dim, tp, cp, cp_a2a, act_bytes)
            + ring_layer_bytes(seq_len, mbs, n_kv_heads, head_dim, tp, cp, cp_a2a, act_bytes))


def a2a_messages(cp_a2a):
    """Latency steps of the all-to-all part: eight all-to-alls (four each way), each c_a − 1
    pairwise exchanges: 8·(c_a − 1)."""
    return 8 * (cp_a2a - 1)


def ring_messages(cp, cp_a2a):
    """Latency steps of the ring part, as plan3d counts the plain ring: 3·(c/c_a − 1)."""
    return 3 * (cp / cp_a2a - 1)


def a2a_heads_fit(n_heads, n_kv_heads, tp, cp_a2a):
    """The all-to-all splits each TP rank's heads and KV heads over c_a ranks: the indicator that
    c_a divides a/t and k/t (Transformer Engine's a2a asserts it; Megatron-Bridge: "CP ≤
    num_kv_heads"), i.e. t·c_a divides a and k: 1 or 0 on any backend, for a rule of
    planner.constraints."""
    return _ops.divides(tp * cp_a2a, n_heads) * _ops.divides(tp * cp_a2a, n_kv_heads)
