"""One MoE layer's terms on one GPU per micro-batch, composed from formulas/moe_layer.py and
formulas/moe_dispatch.py: the busiest rank's load, the memory-bound router and permutation, the
kernels they launch, one DeepEP dispatch (or combine) on its links, and what the
framework's overlap leaves exposed. Pure: floats, arrays and symbols alike; the dispatcher and
the overlap kind are discrete choices that pick the expression.

The kernel counts are Megatron-Core's as measured for DeepSeek-V3 (NVIDIA/Megatron-LM
docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md @ b6bf017a0f,
§2.1.4 and §2.2.1): 72 kernels in the router and the dispatch preprocessing unfused, 31 with
--moe-router-fusion, 17 with DeepEP's fused preprocessing.
"""

from __future__ import annotations

from enum import Enum

from . import _ops
from . import moe_dispatch as D
from . import moe_layer as L
from .moe_layer import Dispatcher

ROUTER_KERNELS = {(Dispatcher.ALL_TO_ALL, False): 72, (Dispatcher.ALL_TO_ALL, True): 31,
                  (Dispatcher.ALL_GATHER, False): 72, (Dispatcher.ALL_GATHER, True): 31,
                  (Dispatcher.DEEPEP, False): 17, (Dispatcher.DEEPEP, True): 17}
"""Kernels of the router and the dispatch preprocessing in one MoE layer's forward, by
dispatcher and router fusion (the module docstring's source; the all-gather dispatcher is taken
as the all-to-all's)."""

EXPERT_KERNELS = 4
"""Kernels of the routed experts around their GEMMs: permute, the activation, unpermute, and the
probabilities' multiply (megatron/core/transformer/moe/experts.py TEGroupedMLP and
moe_utils.permute/unpermute @ d98e8a64dd, fused permutation). The two grouped GEMMs add
grouped_gemm_launches each."""

GROUPED_GEMM_STREAMS = 4
"""CUDA streams Transformer Engine spreads one grouped GEMM's per-expert cuBLAS GEMMs over
(NVIDIA/TransformerEngine transformer_engine/common/util/multi_stream.cpp
`get_num_compute_streams` @ d0067d0: 4): at most this many experts' GEMMs run at once."""


def grouped_gemm_launches(n_local_experts, per_expert):
    """Kernels one grouped GEMM launches: one cuBLAS GEMM per local expert where the grouped GEMM
    is a loop of GEMMs over streams (Transformer Engine's GroupedLinear, which Megatron-Core's
    --moe-grouped-gemm runs: common/gemm/cublaslt_gemm.cu `multi_stream_cublas_gemm` @ d0067d0,
    the default unless NVTE_USE_CUTLASS_GROUPED_GEMM), one where it is a single grouped kernel
    (torch._grouped_mm in torchtitan):  per_expert·E_l + (1 − per_expert). per_expert is 0/1."""
    return per_expert * n_local_experts + (1 - per_expert)


class A2AOverlap(str, Enum):
    """What hides the expert-parallel exchange."""

    NONE = "none"
    MERGED_1F1B = "1f1b"  # Megatron --overlap-moe-expert-parallel-comm: F(i+1) merged with B(i)
    DUALPIPE = "dualpipe"  # DeepSeek-V3 §3.2.1: every chunk pair overlapped


def layer_load(max_violation, ep, n_experts, tokens, top_k, forced_balance):
    """λ of the layer: 1 with forced balance (Megatron's --moe-router-force-load-balancing, a
    benchmark setting), else moe_layer.rank_load over the EP group's ep·T tokens.
    forced_balance is 0 or 1."""
    return _ops.select(forced_balance, 1.0,
                       L.rank_load(max_violation, ep, n_experts, ep * tokens, top_k))


def memory_bound_bytes(tokens, top_k, hidden, n_experts, n_local_experts, dispatcher: Dispatcher,
                       router_passes, tp, ep, load, act_bytes=2):
    """HBM bytes one forward of a MoE layer moves outside its GEMMs: the router's and the
    permutation's (moe_layer.router_elementwise_bytes + permutation_bytes)."""
    return (L.router_elementwise_bytes(tokens, n_experts, top_k, router_passes)
            + L.permutation_bytes(tokens, top_k, hidden, n_local_experts, dispatcher, tp, ep,
                                  load, act_bytes))


def layer_kernels(dispatcher: Dispatcher, router_fused: bool, n_local_experts=1, per_expert=0):
    """Kernels one MoE layer's forward adds to a dense MLP's: the router and dispatch
    preprocessing (ROUTER_KERNELS), the experts' element-wise kernels (EXPERT_KERNELS) and the
    launches of their two grouped GEMMs (fc1, fc2; grouped_gemm_launches each):
        K_router + 4 + 2·(per_expert·E_l + 1 − per_expert)"""
    return (ROUTER_KERNELS[(dispatcher, router_fused)] + EXPERT_KERNELS
            + 2 * grouped_gemm_launches(n_local_experts, per_expert))


def ep_nodes(ep, ep_ranks_in_domain):
    """NVLink domains (nodes) one EP group spans: ep / (its ranks per domain)."""
    return ep / ep_ranks_in_domain


def node_limit(n_nodes, n_expert_groups, topk_groups):
    """M, the most nodes a token's experts may sit on under group-limited routing, when the
    expert groups are laid over the nodes (DeepSeek-V3 §2.1.2: 8 groups, 4 of them, EP64 over 8
    nodes): a token takes topk_groups of n_groups groups, each spanning N/n_groups nodes (or
    inside one node when groups outnumber nodes):  min(N, topk_groups · max(1, N/n_groups)).
    A model without groups passes n_groups = topk_groups = 1: M = N."""
    return _ops.minimum(n_nodes, topk_groups * _ops.maximum(1, n_nodes / n_expert_groups))


def deepep_call_bytes(tokens, top_k, hidden, ep, ep_in_domain, max_nodes, load=1, act_bytes=2,
                      fp8_scales=0, dispatch=1):
    """(RDMA bytes, NVLink bytes) one DeepEP normal-kernel call sends from the busiest GPU: its
    de-duplicated RDMA copies (moe_dispatch.deepep_rdma_copies: one per remote node reached,
    node-limited to M) and its NVLink forwarding (deepep_nvlink_copies), each copy a token slot
    of moe_dispatch.deepep_token_bytes (the dispatch's, dispatch = 1, or the combine's):
        rdma = slot·λ·T·nodes·(N − 1)/N,   nvl = slot·λ·T·G·(g − 1)/g"""
    slot = D.deepep_token_bytes(hidden, top_k, act_bytes, fp8_scales, dispatch)
    rdma = slot * D.deepep_rdma_copies(tokens, top_k, ep_nodes(ep, ep_in_domain), max_nodes, load)
    return rdma, slot * D.deepep_nvlink_copies(tokens, top_k, ep, ep_in_domain, load)


def deepep_call_latency_s(n_nodes, cached: bool, fast_latency_s, net_latency_s):
    """The latency of one DeepEP normal-kernel call: the data's first hop — NVLink inside one
    node, the network across — and its synchronisations (moe_dispatch.deepep_sync_latency_s;
    `cached`, a bool, for a call on a known layout):  α_first + sync latency."""
    first = _ops.select(_ops.le(n_nodes, 1), fast_latency_s, net_latency_s)
    return first + D.deepep_sync_latency_s(n_nodes, cached, net_latency_s, fast_latency_s)


def deepep_call_time_s(rdma_bytes, nvlink_bytes, n_nodes, cached: bool, rdma_bw, nvlink_bw,
                       fast_latency_s, net_latency_s):
    """One DeepEP normal-kernel call: moe_dispatch.deepep_time_s (the slower of its pipelined
    RDMA sends and NVLink forwarding, at DeepEP's measured efficiency of the links' nominal
    rates) with deepep_call_latency_s:
        max(rdma/(η_r·B_net), nvl/(η_n·B_nvl)) + α_first + sync latency"""
    return D.deepep_time_s(rdma_bytes, nvlink_bytes, rdma_bw, nvlink_bw, deepep_call_latency_s(
        n_nodes, cached, fast_latency_s, net_latency_s))


def shared_overlap_exposed_s(exposed_s, shared_forward_s, overlap, flex=0, fc1_share=1.0,
                             comm_sms=0, n_sms=1):
    """The layer's exchange left exposed when the shared experts run beside it (Megatron-Core
    --moe-shared-expert-overlap: the shared experts' GEMMs on their own stream,
    shared_experts.py `SharedExpertMLP.stream` @ d98e8a64dd). E is what the other overlaps
    left (exposed_exchange_s), S_f the shared experts' forward, half of E the forward's dispatch
    and combine, half the backward's:

    - alltoall dispatcher (flex = 0): fc1 runs beside the dispatch, fc2 beside the combine
      (token_dispatcher.py `MoEAlltoAllTokenDispatcher.token_dispatch`/`token_combine`):
      forward max(0, E/2 − S_f);
    - flex dispatcher (DeepEP, flex = 1): fc1 runs beside the dispatch alone, fc2 after the
      combine (`MoEFlexTokenDispatcher.token_dispatch` l.1972–1979, `combine_postprocess`
      l.2048–2050): forward max(0, E/4 − φ·S_f) + E/4, φ fc1's share of S_f (fc1_share:
      (n − 1)/n of an n-matrix MLP, SwiGLU's gate and up 2/3); DeepEP's kernels hold their SMs
      while hidden (moe_dispatch.sm_contention_s on the hidden part, comm_sms of n_sms);
    - the backward's under the shared experts' backward, 2·S_f (autograd runs it on their
      stream beside the exchange's backward kernels; assumed for both): max(0, E/2 − 2·S_f).

        overlap = 1:  forward + backward (+ flex's contention);  overlap = 0: E

    `overlap` and `flex` are 0 or 1."""
    half = exposed_s / 2
    forward = _ops.select(flex, _ops.maximum(0, half / 2 - fc1_share * shared_forward_s)
                          + half / 2, _ops.maximum(0, half - shared_forward_s))
    left = forward + _ops.maximum(0, half - 2 * shared_forward_s)
    left = left + flex * D.sm_contention_s(exposed_s - left, comm_sms, n_sms)
    return overlap * left + (1 - overlap) * exposed_s


def exposed_exchange_s(exchange_s, window_s, overlap: A2AOverlap, n_micro, comm_sms, n_sms,
                       vpp=1, alone=1):
    """The layer's exchange time per micro-batch left on the critical path, with the SMs a
    communication kernel takes from the compute it overlaps:
    none: all of it; 1F1B merge: the share of chunk passes merged
    (moe_dispatch.merged_pass_share: (m·v − W)/(m·v), W the `alone` warm-up chunk forwards and
    cool-down backwards; W = 1, v = 1 without a pipeline) hide up to their partner's compute;
    DualPipe: every chunk hides it (moe_dispatch.exposed_a2a_s), plus sm_contention_s on the
    hidden part."""
    if overlap is A2AOverlap.NONE:
        return exchange_s
    share = (D.merged_pass_share(n_micro, vpp, alone) if overlap is A2AOverlap.MERGED_1F1B
             else 1)
    hidden = share * _ops.minimum(exchange_s, window_s)
    return exchange_s - hidden + D.sm_contention_s(hidden, comm_sms, n_sms)
