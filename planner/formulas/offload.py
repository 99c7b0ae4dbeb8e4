"""Offload to host memory: what leaves the GPU, what the host holds, what crosses the host link
and what the CPU computes (issue 15, item 3).

Three things can be offloaded, each as the frameworks run it:

- the optimizer states of a fraction f of the GPU's parameters (their fp32 master weights and
  Adam moments), stepped by the CPU: Megatron-Core's HybridDeviceOptimizer
  (`--optimizer-cpu-offload --optimizer-offload-fraction f`, megatron/core/optimizer/
  cpu_offloading/hybrid_optimizer.py @ d98e8a64dd), DeepSpeed's ZeRO-Offload
  (`zero_optimization.offload_optimizer`, Ren et al. 2021, §4; `ratio` = f under ZeRO-3,
  deepspeed/runtime/zero/offload_config.py @ edaa72212);
- the sharded parameters with their gradients and optimizer states, stepped by the CPU: FSDP2's
  CPUOffloadPolicy (torchtitan `training.enable_cpu_offload`, torchtitan/distributed/fsdp.py @
  b5bcd76) and DeepSpeed ZeRO-3's `offload_param` (ZeRO-Infinity, Rajbhandari et al. 2021);
- the saved activations of N layers, copied out in the forward and back before their backward:
  Megatron-Core / Transformer Engine's CPU offloading (`--cpu-offloading-num-layers N`,
  megatron/core/model_parallel_config.py @ d98e8a64dd).

Symbols: M_w, M_g, M_opt the device bytes of the (sharded) weights, gradients and optimizer
states as the framework keeps them (formulas/memory.py); Ψ_o = M_opt/K the parameters whose
optimizer state the GPU holds (K bytes each); A_layer one layer's saved activations for one
micro-batch; W_host the host link's achievable bandwidth per GPU and direction; W_dram the host
DRAM bandwidth, the GPU's share. Every function runs on floats, arrays and sympy symbols.
"""

from __future__ import annotations

from . import _ops

CPU_ADAM_BYTES_PER_PARAM = 28
"""Host DRAM bytes one CPU Adam step moves per parameter: it reads the fp32 gradient (4) and reads
and writes the fp32 master weight, m and v (2 × 12). DeepSpeed's CPU-Adam is vectorised (AVX) and
multi-threaded so that it runs at memory bandwidth (Ren et al. 2021 §4.2 "Optimized CPU
Execution"); PyTorch's fused CPU AdamW, which Megatron's HybridDeviceOptimizer uses
(megatron/core/optimizer/__init__.py @ d98e8a64dd: `torch.optim.AdamW`, `fused=True`), is taken to
reach the same bound."""


def device_optimizer_bytes(optimizer_bytes, fraction):
    """Optimizer state left on the GPU: (1 − f)·M_opt. The HybridDeviceOptimizer moves whole
    parameters' master weights and moments to the host until f of the GPU's elements are there
    (hybrid_optimizer.py `_get_sub_optimizer_param_groups`); f = 0 is the plan without offload."""
    return (1 - fraction) * optimizer_bytes


def host_optimizer_bytes(optimizer_bytes, fraction, optimizer_bytes_per_param,
                         host_grad_bytes_per_param):
    """Host bytes for the offloaded optimizer: f·M_opt + f·(M_opt/K)·g_h, the states themselves and
    the pinned host copy of their gradients the CPU step reads (Megatron: an fp32 buffer per
    offloaded parameter, g_h = 4, hybrid_optimizer.py `cpu_copy_map_grad`; DeepSpeed counts its
    fp32 gradient partition in K already, g_h = 0)."""
    return fraction * optimizer_bytes * (1 + host_grad_bytes_per_param
                                         / optimizer_bytes_per_param)


def optimizer_d2h_bytes(optimizer_bytes, fraction, optimizer_bytes_per_param, grad_bytes):
    """Gradients copied to the host per step for the CPU step: f·Ψ_o·ε_g, in the dtype the GPU
    reduced them to (hybrid_optimizer.py `_set_sub_optimizer_grads`; ZeRO-Offload §4.1)."""
    return fraction * optimizer_bytes / optimizer_bytes_per_param * grad_bytes


def optimizer_h2d_bytes(optimizer_bytes, fraction, optimizer_bytes_per_param, weight_bytes):
    """Updated weights copied back per step: f·Ψ_o·ε_w, the 16-bit weights the GPU computes with
    (ZeRO-Offload §4.1: fp16 parameters back; Megatron copies the fp32 master into the 16-bit
    parameter, taken at the destination's width)."""
    return fraction * optimizer_bytes / optimizer_bytes_per_param * weight_bytes


def cpu_step_s(params, dram_bytes_per_s):
    """The CPU's Adam step over Ψ_cpu parameters, memory-bound: Ψ_cpu·28 B / W_dram
    (CPU_ADAM_BYTES_PER_PARAM)."""
    return params * CPU_ADAM_BYTES_PER_PARAM / dram_bytes_per_s


def host_dram_step_s(params, copied_bytes, conversion_bytes_per_param, dram_bytes_per_s):
    """Host DRAM time of the offloaded optimizer step, all its traffic together: the CPU's Adam
    (28 B per parameter, CPU_ADAM_BYTES_PER_PARAM), the copies to and from the GPU, which stream
    through the same DRAM (copied_bytes: gradients in, weights out), and a dtype conversion the
    host does before the copy back (c B per parameter; Megatron: 6):

        (28·Ψ_cpu + V_d2h + V_h2d + c·Ψ_cpu) / W_dram

    When the three run concurrently (Megatron's pipelined step) this bounds the step from below
    beside each copy's own link time."""
    return ((CPU_ADAM_BYTES_PER_PARAM + conversion_bytes_per_param) * params + copied_bytes) \
        / dram_bytes_per_s


def link_time_s(bytes_moved, link_bytes_per_s, dram_bytes_per_s):
    """A copy over the host link, one direction: V / min(W_host, W_dram). The copy also streams
    through host DRAM, of which this GPU has its share: with every GPU of a node copying at once
    (offload is symmetric over ranks) the DRAM can be the narrower path (8 × 52.8 GB/s of PCIe
    Gen5 is 422 GB/s against 461 GB/s of a DGX H100's DRAM). The link is full duplex: copies to
    and from the host run side by side."""
    return bytes_moved / _ops.minimum(link_bytes_per_s, dram_bytes_per_s)


def host_link_busy_s(d2h_bytes, h2d_bytes, link_bytes_per_s, dram_bytes_per_s, network_busy_s,
                     network_bytes_per_s, nic_shares_link):
    """The host link's busy time per step, which bounds the step from below:

        max(V_d2h, V_h2d) / min(W_host, W_dram) + s · T_net,busy · W_net / W_host

    the offload copies in their busier direction, plus, where the GPU's NIC reaches its memory
    over the same PCIe link (s = 1: GPUDirect RDMA through the GPU's PCIe switch, as on DGX H100
    and p5), the network traffic that crosses it in each direction (T_net,busy at the NIC's W_net
    is its volume). s = 0 where host copies have a link of their own (NVLink-C2C)."""
    copies = _ops.maximum(d2h_bytes, h2d_bytes) / _ops.minimum(link_bytes_per_s,
                                                               dram_bytes_per_s)
    return copies + nic_shares_link * network_busy_s * network_bytes_per_s / link_bytes_per_s


def optimizer_step_offload_s(d2h_s, cpu_s, h2d_s, d2h_window_s, pipelined, dram_s=0):
    """What the offloaded optimizer step adds to the step.

    pipelined = 1 (Megatron `--overlap-cpu-optimizer-d2h-h2d`, which plan3d emits): the gradient
    copies, the CPU step and the weight copies run concurrently over the CPU optimizer's parameter
    groups, a three-stage pipeline whose steady state is its slowest stage, and all three share
    the host's DRAM: max(T_d2h, T_h2d, T_dram) with T_dram = host_dram_step_s ≥ T_cpu (the fill,
    one group's worth, is left out).
    pipelined = 0 (DeepSpeed ZeRO-Offload, FSDP2): the gradients go to the host as the backward
    produces them and hide under the last micro-batch's backward (window B), then the CPU steps
    and the weights come back: max(0, T_d2h − B) + T_cpu + T_h2d (Ren et al. 2021 §4.1, Fig. 5;
    the one-step-delayed update of §4.3 is not modelled)."""
    serial = _ops.maximum(0, d2h_s - d2h_window_s) + cpu_s + h2d_s
    overlapped = _ops.maximum(d2h_s, _ops.maximum(_ops.maximum(cpu_s, dram_s), h2d_s))
    return pipelined * overlapped + (1 - pipelined) * serial


def param_offload_h2d_bytes(weights_bytes, gathers):
    """Host-to-GPU traffic per ZeRO round with the parameters on the host (FSDP2
    CPUOffloadPolicy, ZeRO-3 offload_param): the GPU's weight shard comes up for every all-gather,
    forward and backward under ZeRO-3 (gathers = 2), once with the weights kept gathered (1):
    gathers·M_w. Down goes the reduce-scattered gradient shard, M_g, each round."""
    return gathers * weights_bytes


def param_offload_exposed_s(h2d_s, d2h_s, compute_s):
    """The per-round copies with the parameters on the host run on their own streams, prefetched
    under the micro-batch's compute as the gathers are (FSDP2 prefetching); the link being full
    duplex, the longer direction is what must hide: max(0, max(T_h2d, T_d2h) − T_compute)."""
    return _ops.maximum(0, _ops.maximum(h2d_s, d2h_s) - compute_s)


def activation_offload_bytes(n_layers_offloaded, layer_activation_bytes):
    """Saved activations of N layers, one micro-batch, that move to the host in the forward and
    back in the backward: N·A_layer each way (Transformer Engine's CPU offload handler)."""
    return n_layers_offloaded * layer_activation_bytes


def activation_offload_exposed_s(copy_s, forward_s, backward_s):
    """The activation copies of N layers against the compute they hide under: each layer's
    activations go out while the next layer runs its forward and come back while the layer after
    it runs its backward (TE offloads on a side stream and waits one layer later), so the copies
    of N layers hide under N layers of forward and N of backward:
    max(0, T_copy − N·T_fwd) + max(0, T_copy − N·T_bwd), with forward_s = N·T_fwd and
    backward_s = N·T_bwd given."""
    return _ops.maximum(0, copy_s - forward_s) + _ops.maximum(0, copy_s - backward_s)


def activation_offload_saved_bytes(n_layers_offloaded, layer_activation_bytes, in_flight):
    """Device activation bytes the offload frees at the peak: n·N·A_layer, n micro-batches in
    flight. At the loss every offloaded layer's activations are on the host; they come back one
    layer ahead of the backward as the layers after them free theirs, so the peak falls by all N
    (Megatron runs it only with pp = 1, n = 1)."""
    return in_flight * n_layers_offloaded * layer_activation_bytes


def min_offload_layers(excess_bytes, layer_activation_bytes, fragmentation_fraction):
    """The fewest layers whose activations, offloaded, free excess_bytes on the device:
    ⌈excess/(A_layer·(1 + φ))⌉ — each layer takes its activations and the allocator's slack φ on
    them (formulas.memory.runtime_overhead_bytes) off the device (one micro-batch in flight)."""
    return _ops.ceil(excess_bytes / (layer_activation_bytes * (1 + fragmentation_fraction)))


def min_offload_fraction(excess_bytes, optimizer_bytes, step=0.05):
    """The smallest fraction on a grid of `step` that frees excess_bytes of optimizer state:
    ⌈(excess/M_opt)/step⌉·step (device memory is linear in f: the optimizer states are model
    states, with no allocator slack on them). Above 1, offloading the optimizer cannot suffice."""
    return _ops.ceil(excess_bytes / optimizer_bytes / step) * step
