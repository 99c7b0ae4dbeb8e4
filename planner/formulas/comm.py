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


def zero_microbatch_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage):
    """Data-parallel traffic each micro-batch causes, over the d = dp·cp ranks of a shard.

    ZeRO 0/1: none (gradients accumulate locally in a full buffer);
    ZeRO 2:   reduce-scatter of the micro-batch's gradients into the shards,   (d−1)/d · gΨ
              (sharded gradients cannot accumulate locally: DeepSpeed ZeRO-2, FSDP without no_sync);
    ZeRO 3:   + all-gather of the weights for the forward and again for the backward,
                                                                   (d−1)/d · (2wΨ + gΨ)."""
    per_micro = {0: 0, 1: 0, 2: bytes_per_grad, 3: 2 * bytes_per_weight + bytes_per_grad}
    return ring_gather_bytes(dp_shard, per_micro[zero_stage] * params)


ZERO_MICROBATCH_RING_PASSES = {0: 0, 1: 0, 2: 1, 3: 3}
"""Ring passes of d − 1 steps each per micro-batch (for the latency term): ZeRO-2 one
reduce-scatter; ZeRO-3 two all-gathers and one reduce-scatter."""


def zero_step_reduce_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage):
    """The gradient reduction once per step, after the last micro-batch's backward (which it
    overlaps, bucket by bucket, under overlap_grad_reduce):

    ZeRO 0: all-reduce of the gradients          2(d−1)/d · gΨ
    ZeRO 1: reduce-scatter into the shards        (d−1)/d · gΨ
    ZeRO 2, 3: none (reduced every micro-batch)."""
    if zero_stage == 0:
        return ring_allreduce_bytes(dp_shard, bytes_per_grad * params)
    return ring_gather_bytes(dp_shard, bytes_per_grad * params) if zero_stage == 1 else 0


def zero_step_gather_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage):
    """The all-gather of the updated weight shards once per step, after the optimizer step (so it
    cannot overlap the backward; Megatron's --overlap-param-gather hides it under the next step's
    forward): ZeRO 1, 2: (d−1)/d · wΨ;  ZeRO 0, 3: none."""
    return ring_gather_bytes(dp_shard, bytes_per_weight * params) if zero_stage in (1, 2) else 0


ZERO_STEP_RING_PASSES = {0: (2, 0), 1: (1, 1), 2: (0, 1), 3: (0, 0)}
"""(reduction, gather) ring passes of d − 1 steps each once per step: an all-reduce is two."""


def zero_step_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage):
    """Data-parallel traffic once per step, after the last micro-batch: the reduction and the
    weight gather above.

    ZeRO 0: all-reduce of the gradients                       2(d−1)/d · gΨ
    ZeRO 1: reduce-scatter gradients + all-gather new weights   (d−1)/d · (g + w)Ψ
    ZeRO 2: all-gather of the updated weights                   (d−1)/d · wΨ
    ZeRO 3: none (the weights stay sharded)."""
    return (zero_step_reduce_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage)
            + zero_step_gather_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard,
                                     zero_stage))


def dp_gradient_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, n_micro, zero_stage):
    """Data-parallel traffic per GPU per step: m · per-micro-batch + per-step.

    ZeRO 0: 2(d−1)/d·gΨ;  ZeRO 1: (d−1)/d·(g + w)Ψ (= ZeRO 0's at g = w);
    ZeRO 2: (d−1)/d·(m·g + w)Ψ;  ZeRO 3: (d−1)/d·m·(2w + g)Ψ — with m = 1 and g = w, 3(d−1)/d·wΨ,
    the paper's 1.5× (Rajbhandari 2020 §7.2.2)."""
    return (n_micro * zero_microbatch_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard,
                                            zero_stage)
            + zero_step_bytes(params, bytes_per_grad, bytes_per_weight, dp_shard, zero_stage))


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


def cp_step_bytes(stage_layers, n_micro, cp_layer):
    """Context-parallel traffic per GPU per step: every layer of the stage, every micro-batch."""
    return stage_layers * n_micro * cp_layer


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
    """1 when every group of consecutive ranks spanning group_span GPUs stays inside one fast
    (NVLink) domain — the span fits and tiles the domain evenly (a 48-rank span in a 72-GPU NVL72
    domain straddles two domains for every other group) — 0 when it must cross the network."""
    return _ops.le(group_span, domain_size) * _ops.divides(group_span, domain_size)


def dp_group_span(tp, cp, dp):
    """Ranks a data-parallel group spans with Megatron's rank order tp-cp-dp-pp: t·c·d."""
    return tp * cp * dp


def pp_neighbour_span(tp, cp, dp):
    """Ranks two adjacent pipeline stages span (order tp-cp-dp-pp): 2·t·c·d."""
    return 2 * tp * cp * dp


def on_link(inside, fast_value, network_value):
    """The link a group crosses: the fast domain's bandwidth or latency (NVLink) for a group
    inside it (inside = 1), the network's otherwise — then every ring has to leave the node and
    each GPU's own NIC is the bottleneck."""
    return _ops.select(inside, fast_value, network_value)
