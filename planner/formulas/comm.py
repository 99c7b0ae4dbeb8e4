"""Communication volume per GPU per step, and the time a collective takes on a link.

Volumes are the bytes one GPU sends. A ring all-reduce of B bytes over n ranks sends
2(n − 1)/n · B per rank (reduce-scatter then all-gather, each (n − 1)/n · B); a reduce-scatter or
an all-gather alone sends (n − 1)/n · B (Patarasuk & Yuan 2009; NCCL's "bus bandwidth" is defined
so that time = this volume / busbw).
"""

from __future__ import annotations

from . import _ops


def ring_allreduce_bytes(n_ranks, buffer_bytes):
    """2(n − 1)/n · B: what each rank sends in a ring all-reduce of a B-byte buffer."""
    return 2 * (n_ranks - 1) / n_ranks * buffer_bytes


def ring_gather_bytes(n_ranks, buffer_bytes):
    """(n − 1)/n · B: each rank's share of a ring reduce-scatter or all-gather of B bytes."""
    return (n_ranks - 1) / n_ranks * buffer_bytes


def dp_gradient_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, n_micro, zero_stage):
    """Data-parallel traffic per GPU per step over the d = dp·cp ranks holding the same shard.

    ZeRO 0:   all-reduce of the gradients         2(d−1)/d · gΨ
    ZeRO 1/2: reduce-scatter gradients + all-gather updated weights
                                                 (d−1)/d · (gΨ + wΨ)   (= 2(d−1)/d·Ψ·2 at g = w = 2)
    ZeRO 3:   all-gather weights for each micro-batch's forward and again for its backward,
              reduce-scatter gradients once        (d−1)/d · (2m·wΨ + gΨ)
              — with m = 1 and g = w, 3(d−1)/d·wΨ, the paper's 1.5× (Rajbhandari 2020 §7.2.2).
    """
    if zero_stage == 0:
        return ring_allreduce_bytes(dp_shard, bytes_per_grad * params)
    if zero_stage in (1, 2):
        return ring_gather_bytes(dp_shard, (bytes_per_grad + bytes_per_weight) * params)
    return ring_gather_bytes(dp_shard, (2 * n_micro * bytes_per_weight + bytes_per_grad) * params)


def tp_layer_bytes(seq_len, mbs, hidden, tp, cp, act_bytes=2):
    """Tensor-parallel traffic per layer per micro-batch in one direction (forward or backward):
    two all-reduces of the b·s·h activation (after attention and after the MLP; Shoeybi 2019),
    or with sequence parallelism two all-gather + reduce-scatter pairs of the same total volume:
    2 · 2(t − 1)/t · act·bsh = 8·bsh·(t − 1)/t bytes in 16-bit."""
    return 2 * ring_allreduce_bytes(tp, act_bytes * seq_len / cp * mbs * hidden)


def tp_step_bytes(layers_per_stage, n_micro, tp_layer, forward_passes):
    """Per step: each of the stage's layers, each micro-batch, forward passes (1, or 2 under full
    recompute) plus one backward: (L/p) · m · (passes + 1) · per-layer volume."""
    return layers_per_stage * n_micro * (forward_passes + 1) * tp_layer


def pp_boundary_bytes(seq_len, mbs, hidden, tp, cp, act_bytes=2):
    """One stage-boundary message: the b·s·h activation, split over the t ranks of the stage
    (Megatron's scatter/gather optimisation, Narayanan 2021 §4.1), act·bsh/(t·c)."""
    return act_bytes * seq_len / cp * mbs * hidden / tp


def pp_step_bytes(pp, n_micro, vpp, boundary_bytes):
    """Per GPU per step, averaged over the stages: v·p − 1 chunk boundaries, each crossed by every
    micro-batch forward (activation) and backward (its gradient), over p GPUs:
    2·m·(v·p − 1)/p · boundary.  Zero at p = 1, v = 1."""
    return 2 * n_micro * (vpp * pp - 1) / pp * boundary_bytes


def cp_layer_bytes(seq_len, mbs, n_kv_heads, head_dim, tp, cp, act_bytes=2):
    """Context parallelism (ring attention): per layer per micro-batch, each rank passes its K and
    V chunk, act·2·b·(s/c)·k·d_h/t bytes, around the ring c − 1 times in the forward pass, and in
    the backward pass K, V and their gradients (twice as much): 3·(c − 1) · that chunk."""
    kv_chunk = act_bytes * 2 * mbs * seq_len / cp * n_kv_heads * head_dim / tp
    return 3 * (cp - 1) * kv_chunk


def collective_time_s(volume_bytes, bandwidth_bytes_per_s, n_steps, latency_s):
    """α–β cost: volume / bandwidth + steps · latency, with bandwidth the achievable NCCL bus
    bandwidth of the link the group crosses."""
    return volume_bytes / bandwidth_bytes_per_s + n_steps * latency_s


def inside_domain(group_span, domain_size):
    """1 when a group of consecutive ranks spanning group_span GPUs stays inside one fast
    (NVLink) domain, 0 when it must cross the network."""
    return _ops.le(group_span, domain_size)


def group_bandwidth(group_span, domain_size, fast_bytes_per_s, network_bytes_per_s):
    """The link a group of GPUs crosses: the fast domain (NVLink) when the group's span of
    consecutive ranks fits in one domain, the network when it does not (then every ring has to
    leave the node, and each GPU's own NIC is the bottleneck)."""
    return _ops.select(inside_domain(group_span, domain_size), fast_bytes_per_s,
                       network_bytes_per_s)


def group_latency(group_span, domain_size, fast_latency_s, network_latency_s):
    """The per-step latency of the link chosen by `group_bandwidth`."""
    return _ops.select(inside_domain(group_span, domain_size), fast_latency_s, network_latency_s)
