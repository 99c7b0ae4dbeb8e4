"""The host's share of a segment of GPU work that starts from an empty launch queue (issue 23).

Eager PyTorch launches each kernel from the host (Python, the dispatcher, autograd's
recording, cudaLaunchKernel) and the GPU runs them in order, asynchronously. Where the host
waits for the device — a device-to-host copy of counts it needs as Python numbers — the queue
is empty when it resumes, and the segment up to the next wait runs as a two-stage flow line:
kernel i starts on the GPU once the host has issued it and kernel i − 1 has finished, so the
segment's makespan is max over k of (Σ_{i≤k} h_i + Σ_{i≥k} g_i) (the two-machine flow shop;
Johnson, Naval Research Logistics Quarterly 1, 1954). Its k = 1 and k = n terms bound it below:
T ≥ max(h_1 + G, H + g_n). With one host cost t_h per kernel (H = n·t_h) and g_n ≥ 0,

    T_seg ≈ max(G + t_h, n·t_h),   its excess over the GPU's own G:  max(t_h, n·t_h − G),

the lower bound (a segment whose host-heavy stretch sits before a long kernel waits longer).
Which frameworks wait where is their choice (frameworks/*.py `moe_forward_sync`); the kernel
count and G are the layer's (model/layer_time.py).
"""

from __future__ import annotations

from . import _ops

EAGER_OP_S = 3.0e-6
"""Host seconds PyTorch's eager mode spends on one operator before the device sees it — Python,
the binding, autograd's recording, the dispatcher — measured on CPU tensors of 8 elements
(the operator's own work a few dozen ns): the median over 19 operators an MoE layer's forward
runs, 2.96 µs (torch 2.13.0, one thread of an AMD EPYC; benchmarks/bench_eager_op.py, its last
run in benchmarks/results_eager_op.txt). PyTorch's maintainers gave 2 µs for `x*x` without
grad in 2020, half of it Python (pytorch/pytorch#41383). A CUDA operator adds its launch
(LAUNCH_S); the CUDA allocator's and device guard's host work is taken as the CPU path's."""

LAUNCH_S = 3.0e-6
"""Host seconds of one cuLaunchKernel, the driver call every CUDA kernel launch makes: 3.0 µs
for a kernel without arguments, 3.3 µs with 19, on GB200 (meta-pytorch/tritonbench pull request
#1017, 2026-04-14, `nop_triton_direct_culaunch`: "irreducible CUDA driver cost"; the analysis
in pull request #1016 gives ~1.3 µs for the bare driver call)."""

HOST_OP_S = EAGER_OP_S + LAUNCH_S
"""t_h, the host seconds per kernel an eager framework launches: EAGER_OP_S + LAUNCH_S = 6 µs.
A lower bound for model code: module calls, hooks, views and allocations that launch nothing
cost host time too (an eager SAM 2 forward spent ~39 µs of host time per kernel:
facebookresearch/sam2#768, 1,185 kernels in 53.7 ms with the GPU busy 7.3 ms)."""


def synced_exposed_s(gpu_s, n_kernels, host_op_s):
    """What one segment that starts from an empty launch queue adds to the GPU's own time G:
    max(t_h, n·t_h − G) (module docstring) — the first kernel's launch at least, the host's
    whole excess where it issues the segment slower than the GPU runs it."""
    return _ops.maximum(host_op_s, n_kernels * host_op_s - gpu_s)
