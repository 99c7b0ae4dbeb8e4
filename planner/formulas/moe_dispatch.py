"""The expert-parallel token exchange by dispatcher, on the links it crosses, and the share of it
each framework's overlap hides.

Notation as in formulas/moe.py and moe_layer.py: T tokens per GPU and micro-batch, h hidden, k
experts per token, ep the expert-parallel degree, g GPUs per NVLink domain (node), N = ep/g the
nodes an EP group spans, M the most nodes a token may reach (node-limited routing), act the bytes
of a dispatched value (1 for FP8 dispatch, 2 for bf16).

Sources:
- DeepSeek-AI 2024, DeepSeek-V3 Technical Report (arXiv:2412.19437): §2.1.2 node-limited routing
  (each token to at most M = 4 nodes), §3.2.1 DualPipe (all-to-all hidden under the paired
  chunk's compute), §3.2.2 the dispatch kernels: a token crosses InfiniBand once per target node,
  to the GPU of the same in-node index, which forwards it over NVLink to its experts' GPUs
  (de-duplicated), on 20 SMs.
- deepseek-ai/DeepEP @ dd758caf45: README.md (V2: 4–6 SMs for V3-like training) and
  docs/legacy.md (V1 on H800, CX7 400 Gb/s ≈ 50 GB/s, NVLink ≈ 160 GB/s: normal kernels 153 GB/s
  intranode, 43–58 GB/s RDMA internode; low-latency kernels 39–98 GB/s).
- NVIDIA/Megatron-LM @ d98e8a64dd: megatron/core/transformer/moe/README.md (EP A2A overlap
  "merging FWD-BWD passes of adjacent microbatches", --overlap-moe-expert-parallel-comm;
  --moe-shared-expert-overlap runs the shared experts beside the dispatch),
  token_dispatcher.py (the all-gather dispatcher gathers over tp·ep and reduce-scatters back).
"""

from __future__ import annotations

from enum import Enum

from . import _ops

DEEPEP_RDMA_EFFICIENCY = 43 / 50
"""DeepEP V1 normal kernels' measured RDMA bottleneck bandwidth over the NIC's ~50 GB/s, the
lowest of its internode rows (EP16: 43 GB/s dispatch and combine; EP32: 58, EP64: 51, which count
forwarded local traffic as well): DeepEP docs/legacy.md @ dd758caf45, H800 + CX7."""

DEEPEP_NVLINK_EFFICIENCY = 153 / 160
"""DeepEP V1 intranode (EP8) dispatch bottleneck bandwidth over H800's ~160 GB/s NVLink:
153 GB/s (combine 158): DeepEP docs/legacy.md @ dd758caf45."""

DEEPEP_SMS = {"v1": 24, "v2": 6}
"""SMs DeepEP's normal kernels occupy in DeepSeek-V3-like training: 24 for V1 (DeepEP legacy
tests' default; DeepSeek-V3 §3.2.2 reports 20 for its own kernels), 4–6 for V2 (README @
dd758caf45, "SM usage reduced from 24 to 4 - 6"); the upper end is taken."""

# ---------------------------------------------------------------------------------------------
# Where the copies go


def distinct_reached(top_k, n_bins):
    """Expected distinct bins (nodes, GPUs) k experts chosen uniformly fall in:
    n·(1 − (1 − 1/n)^k)  (the complement of a bin missed by all k). 1 for one bin."""
    return n_bins * (1 - (1 - 1 / n_bins) ** top_k)


def nodes_reached(top_k, n_nodes, max_nodes):
    """Nodes one token's k experts sit on, under node-limited routing to at most M nodes:
    min(M, N·(1 − (1 − 1/N)^k)). M ≥ N leaves it unlimited."""
    return _ops.minimum(max_nodes, distinct_reached(top_k, n_nodes))


# ---------------------------------------------------------------------------------------------
# Bytes one GPU sends in one dispatch (the combine returns as many)


def nccl_a2a_copies(tokens, top_k, ep, load=1):
    """Token copies an NCCL all-to-all sends off the GPU: every copy for an expert on another
    rank, none de-duplicated:  λ·T·k·(ep − 1)/ep."""
    return load * tokens * top_k * (ep - 1) / ep


def deepep_rdma_copies(tokens, top_k, n_nodes, max_nodes, load=1):
    """Token copies DeepEP's normal kernels send over the network: one per remote node reached
    (de-duplicated within a node, DeepSeek-V3 §3.2.2):  λ·T·nodes·(N − 1)/N."""
    return load * tokens * nodes_reached(top_k, n_nodes, max_nodes) * (n_nodes - 1) / n_nodes


def deepep_nvlink_copies(tokens, top_k, ep, gpus_per_node, load=1):
    """Token copies DeepEP moves over NVLink: each distinct destination GPU (de-duplicated per
    GPU) that is not the GPU the token lands on in its node, forwarded from there:
    λ·T·G·(g − 1)/g, with G = distinct_reached(k, ep) GPUs."""
    return load * tokens * distinct_reached(top_k, ep) * (gpus_per_node - 1) / gpus_per_node


# ---------------------------------------------------------------------------------------------
# Time of one dispatch (or combine)


DEEPEP_SOURCE_META_BYTES = 8
"""Bytes of the routing metadata each token carries across nodes in DeepEP's normal kernels:
`SourceMeta` (its source node and a bit per NVLink peer it goes to, two int32), in every token
slot of the dispatch and the combine (csrc/kernels/legacy/internode.cu
`get_num_bytes_per_token` @ dd758caf45)."""

DEEPEP_SCALE_BLOCK = 128
"""Values per FP8 scale in a dispatched token: one fp32 scale per 128 hidden values
(DeepEP's FP8 dispatch, docs/legacy.md @ dd758caf45: `x` as (FP8 data, scales of h/128))."""


def deepep_token_bytes(hidden, top_k, act_bytes, fp8_scales, dispatch):
    """Bytes one token copy occupies in a DeepEP normal kernel's RDMA and NVLink buffers, each
    slot sent whole (internode.cu `get_num_bytes_per_token` @ dd758caf45), rounded up to 16 B:
      dispatch:  h·act + 8 (SourceMeta) + fp8·4·h/128 (scales) + 4k (top-k indices, int32)
                 + 4k (top-k probabilities, fp32)
      combine:   h·2 (BF16) + 8 + 4k (the probabilities' gradient rides back with it)
    So the probabilities and the routing metadata travel with the tokens: DeepEP issues no
    separate collective for them (Megatron's NCCL dispatcher does: EXCHANGE_CALLS).
    `fp8_scales` and `dispatch` are 0 or 1."""
    payload = (dispatch * (hidden * act_bytes + fp8_scales * 4 * hidden / DEEPEP_SCALE_BLOCK
                           + 8 * top_k)
               + (1 - dispatch) * (hidden * 2 + 4 * top_k))
    return 16 * _ops.ceil((payload + DEEPEP_SOURCE_META_BYTES) / 16)


DEEPEP_NOTIFY_SYNCS = {False: (3, 1, 3), True: (2, 0, 2)}
"""DeepEP's synchronisations before a normal kernel moves data, by whether the call reuses a
layout (a `handle`: the combine, and the backward's dispatch), as (network barriers, network
count puts, NVLink barriers) (csrc/kernels/legacy/internode.cu @ dd758caf45):
`notify_dispatch` — the forward dispatch, which must learn how many tokens each rank will
receive — runs three `nvshmem_sync` barriers over the GPUs of the same index on every node, one
round of puts of each node's token counts (8 + E/N + 1 int32 a node) and three NVLink
`barrier_block`s; `cached_notify` two of each barrier and no put. Inside one node
(intranode.cu: `notify_dispatch`, `cached_notify_dispatch`, `cached_notify_combine`) the
NVLink barriers alone, three and two. The host then waits for the received counts
(buffer.hpp `dispatch`, the README's "implicit CPU wait"): not priced — plan3d does not model the
host."""


def deepep_sync_latency_s(n_nodes, cached: bool, net_latency_s, nvlink_latency_s):
    """Latency of DeepEP's synchronisations before one normal-kernel call (DEEPEP_NOTIFY_SYNCS):
    each network barrier and count put one network latency, each NVLink barrier one NVLink
    latency, the network's only when the EP group spans more than one node:
        [N > 1]·(b_net + puts)·α_net + b_nvl·α_nvl
    `cached` is a bool (it picks the expression)."""
    b_net, puts, b_nvl = DEEPEP_NOTIFY_SYNCS[cached]
    return (1 - _ops.le(n_nodes, 1)) * (b_net + puts) * net_latency_s + b_nvl * nvlink_latency_s


def deepep_time_s(rdma_bytes, nvlink_bytes, rdma_bw, nvlink_bw, latency_s):
    """DeepEP's normal kernels run the RDMA sends and the NVLink forwarding at once, pipelined
    (DeepSeek-V3 §3.2.2), so the slower link governs, each at DeepEP's measured efficiency:
        max(rdma / (η_rdma·B_net), nvlink / (η_nvl·B_nvl)) + latency"""
    return _ops.maximum(rdma_bytes / (DEEPEP_RDMA_EFFICIENCY * rdma_bw),
                        nvlink_bytes / (DEEPEP_NVLINK_EFFICIENCY * nvlink_bw)) + latency_s


def allgather_dispatch_bytes(tokens, hidden, group, act_bytes=2):
    """Bytes each GPU receives in the all-gather dispatcher's gather over the tp·ep ranks (and
    sends back in its reduce-scatter): the other ranks' T tokens of h values, (n − 1)·T·h·act.
    Megatron's combine reduce-scatters in the probabilities' dtype (fp32 with
    --moe-router-dtype fp32): pass act = 4 for it."""
    return (group - 1) * tokens * hidden * act_bytes


# ---------------------------------------------------------------------------------------------
# Overlap


def merged_pass_share(n_micro, vpp=1, alone=1):
    """Share of a stage's chunk passes whose all-to-all Megatron's EP A2A overlap
    (--overlap-moe-expert-parallel-comm) can hide. Only the steady state's passes are merged, the
    forward of one chunk with the backward of another (schedules.py
    forward_backward_helper_wrapper → combined_1f1b_schedule_for_interleaved_pipelining, and
    combined_1f1b.py combined_1f1b_schedule_for_no_pipelining @ d98e8a64dd); the W `alone`
    warm-up chunk forwards and as many cool-down backwards run by themselves. Of the m·v chunk
    forwards (and as many backwards) a GPU runs:

        max(0, m·v − W) / (m·v)

    pp = 1 (no pipeline, v = 1): W = 1, the first forward and the last backward: (m − 1)/m.
    Interleaved: W = pipeline.warmup_chunk_forwards with the overlap's extra forward, at
    p = 4, v = 8, m = 16 on rank 0: (128 − 35)/128. All in the warm-up (W ≥ m·v): 0."""
    passes = n_micro * vpp
    return _ops.maximum(passes - alone, 0) / passes


def exposed_a2a_s(a2a_s, window_s, share):
    """All-to-all time left on the critical path when a `share` of it runs under `window_s` of
    independent compute (another micro-batch's pass, or the shared experts):
        a2a − share·min(a2a, window)
    share = 0 exposes it all; share = 1 with a window at least as long hides it all."""
    return a2a_s - share * _ops.minimum(a2a_s, window_s)


def sm_contention_s(overlapped_s, comm_sms, n_sms):
    """Compute slowed by the SMs a communication kernel holds while it overlaps: for the
    overlapped time the compute runs on n − c of n SMs, so it stretches by
    overlapped · c/(n − c)."""
    return overlapped_s * comm_sms / (n_sms - comm_sms)


# ---------------------------------------------------------------------------------------------
# The collectives a dispatcher issues per MoE layer and micro-batch

class Row(str, Enum):
    """What one row of an expert-parallel call carries (exchange_row_bytes)."""

    HIDDEN = "hidden"  # a token's hidden state, act bytes a value
    HIDDEN_FP32 = "hidden_fp32"  # the same in fp32 (the all-gather dispatcher's combine)
    PROBS = "probs"  # one routed copy's probability (fp32)
    PROBS_ALL = "probs_all"  # a token's E probabilities (fp32)
    MAP = "map"  # a token's boolean routing map over E experts
    COUNTS = "counts"  # a rank's tokens per expert (E int64)


class Group(str, Enum):
    """The ranks an expert-parallel call runs over."""

    EP = "ep"  # the expert-parallel group (an all-to-all)
    TP_EP = "tp_ep"  # the etp·ep ranks of Megatron's tp_ep group
    ETP = "etp"  # the expert tensor-parallel ranks


EXCHANGE_CALLS = {
    "alltoall": (
        # (name, collective, group, row, forward calls, backward calls)
        ("EP all-to-all", "all-to-all", Group.EP, Row.HIDDEN, 2, 2),
        ("EP probs all-to-all", "all-to-all", Group.EP, Row.PROBS, 1, 1),
        ("EP counts all-gather", "all-gather", Group.TP_EP, Row.COUNTS, 1, 0),
        ("ETP all-gather", "all-gather", Group.ETP, Row.HIDDEN, 1, 1),
        ("ETP reduce-scatter", "reduce-scatter", Group.ETP, Row.HIDDEN, 1, 1),
        ("ETP probs all-gather", "all-gather", Group.ETP, Row.PROBS, 1, 0),
        ("ETP probs reduce-scatter", "reduce-scatter", Group.ETP, Row.PROBS, 0, 1)),
    "allgather": (
        ("EP all-gather", "all-gather", Group.TP_EP, Row.HIDDEN, 1, 0),
        ("EP reduce-scatter", "reduce-scatter", Group.TP_EP, Row.HIDDEN, 0, 1),
        ("EP combine reduce-scatter", "reduce-scatter", Group.TP_EP, Row.HIDDEN_FP32, 1, 0),
        ("EP combine all-gather", "all-gather", Group.TP_EP, Row.HIDDEN_FP32, 0, 1),
        ("EP probs all-gather", "all-gather", Group.TP_EP, Row.PROBS_ALL, 1, 0),
        ("EP probs reduce-scatter", "reduce-scatter", Group.TP_EP, Row.PROBS_ALL, 0, 1),
        ("EP routing-map all-gather", "all-gather", Group.TP_EP, Row.MAP, 1, 0)),
}
"""The collectives Megatron-Core's token dispatchers issue in one MoE layer per micro-batch,
read in megatron/core/transformer/moe/token_dispatcher.py @ d98e8a64dd (with
tensor_parallel/mappings.py, whose all_to_all, gather_from_sequence_parallel_region and
reduce_scatter_to_sequence_parallel_region run the transposed collective backward):
- alltoall (MoEAlltoAllTokenDispatcher): preprocess all-gathers each rank's tokens per expert
  over the tp·ep group (int64, forward only, no gradient); token_dispatch sends the permuted
  tokens and then their probabilities by two all-to-alls over ep, token_combine sends the
  expert outputs back by one; backward, each all-to-all runs again transposed (the tokens'
  two, the probabilities' one). With expert tensor parallelism (etp > 1) dispatch_postprocess
  all-gathers tokens and probabilities over etp and combine_preprocess reduce-scatters the
  outputs; backward the transposes.
- allgather (MoEAllGatherTokenDispatcher): token_dispatch all-gathers the routing map, the
  probabilities and the tokens over tp·ep; token_combine reduce-scatters the outputs in the
  probabilities' dtype (fp32); backward the probabilities' and tokens' gathers reduce-scatter
  their gradients and the combine's reduce-scatter all-gathers its.
A forward call runs again under full recomputation (the layer's forward reruns whole)."""


def exchange_row_bytes(row: Row, hidden, n_experts, act_bytes=2, score_bytes=4):
    """Bytes of one row (token) of each kind a dispatcher moves: the hidden state (h·act), in
    fp32 for the all-gather dispatcher's combine (h·4), one routed copy's probability (4) after
    permutation, a token's E probabilities (E·4) or its boolean routing map (E) before it, and a
    rank's per-expert token counts (E int64: a whole rank's, one 'row')."""
    return {Row.HIDDEN: hidden * act_bytes, Row.HIDDEN_FP32: hidden * score_bytes,
            Row.PROBS: score_bytes, Row.PROBS_ALL: n_experts * score_bytes, Row.MAP: n_experts,
            Row.COUNTS: 8 * n_experts}[row]


def exchange_rows(row: Row, group: Group, tokens, top_k, ep, load=1):
    """Rows behind one call, per rank: an all-to-all's rows sent to other ranks,
    λ·T·k·(ep − 1)/ep (nccl_a2a_copies); the etp gathers' rows (the λ·T·k the rank received);
    the tp·ep gathers' T (the rank's own tokens; 1 for the counts)."""
    if group is Group.EP:
        return nccl_a2a_copies(tokens, top_k, ep, load)
    if group is Group.ETP:
        return load * tokens * top_k
    return 1 if row is Row.COUNTS else tokens
