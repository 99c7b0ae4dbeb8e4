"""A MoE layer's work besides its expert GEMMs, term by term: the router, token permutation per
dispatcher, the padding the grouped GEMM needs, and the busiest rank's and expert's load.

Notation as in formulas/moe.py: T tokens one GPU feeds into the layer per micro-batch, h hidden,
E routed experts, k experts per token, ep the expert-parallel degree, E_l = E/ep local experts,
λ the busiest expert-parallel rank's routed tokens over the mean. `act` is the bytes of one
activation value (2 for bf16), scores are fp32 (moe.ROUTER_SCORE_BYTES).

Sources (each function names its own):
- Megatron-Core @ d98e8a64dd (NVIDIA/Megatron-LM), megatron/core/transformer/moe/: router.py
  and moe_utils.py (`topk_routing_with_score_function`, `compute_routing_scores_for_aux_loss`,
  `permute`, `unpermute`, `sort_chunks_by_idxs`, `get_capacity`), token_dispatcher.py
  (`MoEAllGatherTokenDispatcher`, `MoEAlltoAllTokenDispatcher`, `MoEFlexTokenDispatcher`),
  megatron/core/fp8_utils.py (`get_fp8_align_size`).
- Wang et al. 2024, "Auxiliary-Loss-Free Load Balancing Strategy for Mixture-of-Experts"
  (arXiv:2408.15664), Table 2: MaxVio_global, the busiest expert's load over the mean minus 1.
- Raab & Steger 1998, "Balls into Bins — A Simple and Tight Analysis" (RANDOM'98), Theorem 1:
  m balls thrown at n bins, m ≥ n·ln n, fill the fullest bin to m/n + √(2·(m/n)·ln n) (1 + o(1)).
"""

from __future__ import annotations

import math
from enum import Enum

from . import _ops
from .moe import ROUTER_SCORE_BYTES


def _ln(x):
    """ln x on any backend (sympy's log for symbols, so explain prints ln, not log₂·0.693)."""
    if _ops._is_symbolic(x):
        import sympy

        return sympy.log(x)
    return _ops.log2(x) * math.log(2)


def _sqrt(x):
    """√x on any backend (sympy's sqrt for symbols: an exact square root, not a Float power)."""
    if _ops._is_symbolic(x):
        import sympy

        return sympy.sqrt(x)
    return x ** 0.5


class Dispatcher(str, Enum):
    """How the tokens reach their experts (Megatron's --moe-token-dispatcher-type; torchtitan's
    EP uses the all-to-all)."""

    ALL_TO_ALL = "alltoall"  # NCCL all-to-all over ep (token_dispatcher.MoEAlltoAllTokenDispatcher)
    ALL_GATHER = "allgather"  # all-gather + reduce-scatter over tp·ep (MoEAllGatherTokenDispatcher)
    DEEPEP = "deepep"  # DeepEP's fused kernels, node-limited (flex dispatcher, deepep backend)


class Balancing(str, Enum):
    """How the router keeps the experts' loads even."""

    AUX_LOSS = "aux_loss"  # a load-balancing loss (Switch, GShard; Megatron --moe-aux-loss-coeff)
    AUX_FREE = "aux_free"  # a per-expert bias on the scores (DeepSeek-V3 §2.1.2; Megatron
    #                        --moe-router-enable-expert-bias)


MAX_VIOLATION = {Balancing.AUX_LOSS: 0.72, Balancing.AUX_FREE: 0.04}
"""MaxVio_global = max_e load_e / mean − 1, the persistent popularity skew of the busiest expert
over a whole validation set (no sampling noise): Wang et al. 2024 Table 2, the 1B-parameter MoE
(64 experts, top-6; 0.52 and 0.04 at 3B): 0.72 with an auxiliary loss, 0.04 loss-free. Assumed
to carry over to other expert counts; the batch's sampling noise is added apart
(sampling_excess)."""


# ---------------------------------------------------------------------------------------------
# The router


ROUTER_PASSES = {(Balancing.AUX_LOSS, False): 7, (Balancing.AUX_FREE, False): 6,
                 (Balancing.AUX_LOSS, True): 3, (Balancing.AUX_FREE, True): 2}
"""Passes over the fp32 [T, E] score tensor one forward of the router makes (reads and writes),
counted in Megatron-Core's moe_utils.py @ d98e8a64dd. Unfused: the logits written by the gating
GEMM are read by the score function (softmax or sigmoid), which writes the scores (2); the top-k
reads them (1) and the probabilities are scattered into a [T, E] map (1) that the dispatcher
reads (1) — 5; the auxiliary loss recomputes its scores from the logits (read + write, 2): 7;
the bias-based balancing adds the bias to a copy of the scores instead (1 more read than the
plain 5): 6. Fused (--moe-router-fusion, TE's fused_topk_with_score_function): the logits are
read once and the map written once (2), the auxiliary loss's fused score kernel one more read
(3)."""


def router_elementwise_bytes(tokens, n_experts, top_k, passes):
    """HBM traffic of the router besides its gating GEMM (whose 2·T·h·E FLOPs the layer's
    matmuls already count), one forward, per GPU: `passes` sweeps over the fp32 [T, E] scores
    plus the top-k's output, k indices (int64) and k probabilities (fp32) per token:
        T·(4·E·passes + 12·k)
    Memory-bound; the backward moves about as much again."""
    return tokens * (ROUTER_SCORE_BYTES * n_experts * passes + (8 + 4) * top_k)


def router_kernels(fused):
    """Kernel launches one router forward makes: gating GEMM, score function, top-k, the
    probabilities' scatter and normalisation, the load count and the balancing update (9 in the
    unfused path of moe_utils.topk_routing_with_score_function and router.py @ d98e8a64dd),
    3 fused (GEMM, fused top-k with score, fused aux-loss scores). `fused` is 0 or 1."""
    return 9 - 6 * fused


# ---------------------------------------------------------------------------------------------
# Token permutation, by dispatcher


def routed_rows(tokens, top_k, load=1):
    """Token copies one expert-parallel rank's experts receive per micro-batch: the ep ranks of
    the group send T·k copies each, spread over ep ranks, the busiest getting λ times its share:
    λ·T·k (ep·T·k·λ/ep)."""
    return load * tokens * top_k


def permutation_bytes(tokens, top_k, hidden, n_local_experts, dispatcher: Dispatcher, tp=1, ep=1,
                      load=1, act_bytes=2):
    """HBM traffic of one forward's token permutation and un-permutation around the experts,
    per GPU (memory-bound gathers and scatters; the backward moves the same again). R = λ·T·k
    rows reach the rank's experts; a row is h values of act bytes.

    all-to-all (MoEAlltoAllTokenDispatcher): `permute` gathers the T·k copies by expert before
    the dispatch (read + write T·k rows), `sort_chunks_by_idxs` orders the received chunks by
    local expert when E_l > 1 (read + write R), and back: chunks sorted again (2·R), `unpermute`
    reads T·k rows, weighs them by their probabilities and scatter-adds into T (T·k + T):
        act·h·(3·T·k + T + 4·R·1[E_l > 1])
    all-gather (MoEAllGatherTokenDispatcher): the gathered tp·ep·T tokens are read only where a
    local expert wants them: permute R rows out (2·R), unpermute into a zeroed tp·ep·T buffer
    (R read, tp·ep·T written and zero-filled):  act·h·(3·R + 2·tp·ep·T)
    DeepEP (MoEFlexTokenDispatcher): the kernel delivers each token once per destination rank
    and `permute` expands the received rows to their local experts (read ≤ R, write R), the
    combine the reverse (read R, write ≤ R): bounded by act·h·4·R."""
    row = act_bytes * hidden
    r = routed_rows(tokens, top_k, load)
    if dispatcher is Dispatcher.ALL_GATHER:
        return row * (3 * r + 2 * tp * ep * tokens)
    if dispatcher is Dispatcher.DEEPEP:
        return row * 4 * r
    sort = 1 - _ops.le(n_local_experts, 1)
    return row * (3 * tokens * top_k + tokens + 4 * r * sort)


def permutation_buffer_bytes(tokens, top_k, hidden, dispatcher: Dispatcher, tp=1, ep=1, load=1,
                             act_bytes=2):
    """Live bytes the dispatcher holds while the experts run, per GPU and micro-batch: the
    permuted copies it sent (T·k rows; all-to-all only) and the R rows received for the local
    experts; the all-gather dispatcher holds the whole gathered tp·ep·T tokens instead of the
    sent copies:
        all-to-all: act·h·(T·k + R);  all-gather: act·h·(tp·ep·T + R);  DeepEP: act·h·R
    (DeepEP writes straight into its registered receive buffer, whose fixed size is counted as
    a buffer of its own, deepep_buffer_bytes)."""
    row = act_bytes * hidden
    r = routed_rows(tokens, top_k, load)
    if dispatcher is Dispatcher.ALL_GATHER:
        return row * (tp * ep * tokens + r)
    if dispatcher is Dispatcher.DEEPEP:
        return row * r
    return row * (tokens * top_k + r)


SCATTER_ADD_BYTES_PER_S = 0.25e12
"""Effective rate of PyTorch's atomic scatter-add of routed rows back onto their tokens
(`Tensor.scatter_add_`, one atomic add per element), in bytes as the benchmark counts them (the
k·T routed rows read, the T token rows written). Measured on H200 in bf16 by TileOPs'
un-permutation benchmark, its PyTorch baseline (tile-ai/TileOPs pull request #608, 2026-03-19:
`scatter_add_` with a zero-filled output, per tile-ai/TileOPs issue #730): 2,048 tokens, top-2,
h = 4,096 in 0.20 ms = 0.25 TB/s; 512 tokens 0.22 TB/s — a twentieth of H200's 4.8 TB/s,
where the fused kernels beside it reach 2–3 TB/s. H200, H100 and H800 are one die (GH100, the
same L2 whose atomic units bound this), so the figure is taken as it is for Hopper and assumed
for the other GPUs."""


def unpermute_scatter_bytes(tokens, top_k, hidden, act_bytes=2):
    """Bytes of one un-permutation as the scatter-add benchmark counts them: the T·k routed
    rows read, the T token rows written, h values of act bytes each:  act·h·(T·k + T)."""
    return act_bytes * hidden * (tokens * top_k + tokens)


def score_weighting_bytes(tokens, top_k, hidden, act_bytes=2, fp32=0, out_passes=1):
    """HBM bytes of the pass that weighs one GPU's T·k routed rows by their routing scores
    where the framework runs it apart from a fused kernel, one forward: the multiply reads and
    writes each routed row (2·act a value); with `fp32` = 1 the rows are cast to fp32 first
    and back after (the cast's fp32 write, the multiply's fp32 read and write, the cast back's
    fp32 read: 16 bytes more a value); and `out_passes` T-row passes over the output the rows
    are scatter-added into, beyond the scatter's own write (its zero-fill; an out-of-place
    scatter's copy):
        h·(T·k·(2·act + 16·fp32) + out_passes·act·T)
    Megatron-Core's un-fused un-permutation (moe_utils.unpermute @ d98e8a64dd, without
    --moe-permute-fusion): `permuted_tokens * permuted_probs` in the probabilities' dtype
    (16-bit unless --moe-router-dtype asks fp32), then `torch.zeros` of the output and
    `scatter_add_` in place: fp32 0, one out pass. torchtitan (the combine of
    models/common/token_dispatcher.py in 0.3.0): `(rows.to(torch.float32) * scores)
    .to(rows.dtype)`, `zeros_like` of the output and the out-of-place `scatter_add`: fp32 1,
    two out passes; the same multiply at the published rows' commits (MoE.forward of
    models/moe.py @ 0cfbd0b3c and models/moe/moe.py @ 176498cd4, score_before_experts False on
    the 16B flavour), scatter-added out of place onto the shared experts' output (v0.2.2
    instead un-sorts into a zero-filled T·k-row buffer and weighs by an fp32 bmm: more than
    this, not costed). Memory-bound; the layer's backward costs it twice, as the layer's other
    element-wise work (timing.backward_layer_s)."""
    elements = tokens * top_k * (2 * act_bytes + 16 * fp32) + out_passes * act_bytes * tokens
    return hidden * elements


def atomic_scatter_excess_s(moved_bytes, scatter_bytes_per_s, streaming_bytes_per_s):
    """What an atomic scatter-add takes beyond the streaming pass the permutation traffic is
    already costed at (permutation_bytes at the HBM's reached bandwidth):
        B/W_sc − B/(W_hbm·η_hbm)
    Megatron-Core's un-fused path (--moe-permute-fusion off; moe_utils.py @ d98e8a64dd):
    `unpermute` zero-fills the T rows and `scatter_add_`s the k·T expert rows onto them, and
    the backward of `permute`'s `index_select` is an `index_add_` of the same rows (atomic
    adds as well: taken at the same rate); TE's fused kernels (moe_unpermute) instead gather
    each token's k rows and reduce them in registers, a streaming pass."""
    return moved_bytes / scatter_bytes_per_s - moved_bytes / streaming_bytes_per_s


# ---------------------------------------------------------------------------------------------
# Padding and capacity


def grouped_gemm_align_rows(fp8, mxfp8=0):
    """Rows each expert's input is padded to a multiple of for the grouped GEMM: 16 for FP8,
    32 for MXFP8 (fp8_utils.get_fp8_align_size @ d98e8a64dd), none (1) in 16 bits
    (moe_utils.get_align_size_for_quantization returns 0: no padding). fp8, mxfp8 are 0/1."""
    return 1 + fp8 * (15 + 16 * mxfp8)


def padded_rows(n_local_experts, align_rows):
    """Rows the alignment adds per GPU, on average: each local expert's count is padded up to a
    multiple of `align_rows`, (align − 1)/2 rows on a uniform remainder:  E_l·(a − 1)/2."""
    return n_local_experts * (align_rows - 1) / 2


def capacity_rows(tokens, top_k, ep, n_experts, capacity_factor):
    """Rows one expert takes with token dropping at capacity factor c_f, padded to capacity
    (Megatron's --moe-pad-expert-input-to-capacity): ⌈ep·T·k/E · c_f⌉ (moe_utils.get_capacity
    over the ep·T tokens the expert sees). Every expert runs exactly this many rows; the
    busiest never exceeds it."""
    return _ops.ceil(ep * tokens * top_k / n_experts * capacity_factor)


# ---------------------------------------------------------------------------------------------
# Load imbalance, from a sourced skew and the batch's sampling noise


def sampling_excess(copies, bins):
    """Relative excess of the fullest of `bins` bins when `copies` token copies fall on them at
    random (Raab & Steger 1998, Theorem 1, m ≥ n·ln n):  √(2·ln n · n/m)  (0 for one bin).
    The routing of one micro-batch is such a throw even when the router is balanced on average.
    Tokens of one sequence are correlated, so this is a lower bound on the batch's noise."""
    return _sqrt(2 * _ln(bins) * bins / copies)


def rank_skew(max_violation, ep, n_experts):
    """The busiest expert-parallel rank's persistent excess over the mean, from the busiest
    expert's (MaxVio, measured over E experts). Model: expert loads deviate independently with
    spread σ, and the busiest of n draws sits √(2·ln n)·σ above the mean (the Gaussian extreme
    value, as in sampling_excess); a rank sums E/ep experts (spread σ/√(E/ep)) and is the busiest
    of ep:
        v_rank = MaxVio · √(ep/E) · √(ln ep / ln E)
    ep = E gives MaxVio (one expert a rank), ep = 1 gives 0 (one rank holds every expert); ln E
    is taken at E ≥ 2 (a dense row, E = 1, has ep = 1 and no skew)."""
    return max_violation * _sqrt(ep / n_experts * _ln(ep) / _ln(_ops.maximum(n_experts, 2)))


def rank_load(max_violation, ep, n_experts, group_tokens, top_k):
    """λ, the busiest expert-parallel rank's routed copies over the mean per micro-batch:
        λ = 1 + v_rank + √(2·ln ep · ep/(N·k))
    the persistent skew (rank_skew) plus the micro-batch's sampling noise over the ep ranks
    (sampling_excess of the N·k copies the group's N = ep·T tokens route). 1 for ep = 1."""
    return (1 + rank_skew(max_violation, ep, n_experts)
            + sampling_excess(group_tokens * top_k, ep))


def expert_load(max_violation, n_experts, group_tokens, top_k):
    """The busiest expert's rows over the mean, which sizes the grouped GEMM's longest row
    block:  1 + MaxVio + √(2·ln E · E/(N·k))."""
    return 1 + max_violation + sampling_excess(group_tokens * top_k, n_experts)


# ---------------------------------------------------------------------------------------------
# Shared experts


def shared_expert_flops(tokens, hidden, shared_ffn, n_shared_experts, n_mlp_matrices):
    """Forward FLOPs of the shared experts on the GPU's T tokens: every token passes through
    each of the n_s shared experts, n_mlp matrices of h × f_s:  2·T·n_s·n_mlp·h·f_s."""
    return 2 * tokens * n_shared_experts * n_mlp_matrices * hidden * shared_ffn
