"""What a training process holds on the GPU beside its tensors: NCCL's buffers, library
workspaces, CUDA graph pools.

**NCCL.** Each communicator a rank uses keeps, per channel and per connection, one FIFO per
protocol (NVIDIA/nccl src/init.cc `computeBuffSizes` and src/include/device.h @ 5067397c):

    LL:     NCCL_LL_LINES_PER_THREAD · NCCL_LL_MAX_NTHREADS · NCCL_STEPS · 16 B = 8·512·8·16
            = 524,288 B
    LL128:  NCCL_LL128_ELEMS_PER_THREAD · NCCL_LL128_MAX_NTHREADS · NCCL_STEPS · 8 B
            = 120·640·8·8 = 4,915,200 B
    Simple: NCCL_BUFFSIZE, default 1 << 22 = 4,194,304 B

9,633,792 B per connection, which NCCL's cuMem allocator rounds up to its 2 MiB granularity:
10,485,760 B (the "10485760" allocations NCCL logs per channel and peer in NVIDIA/nccl#1685).
A ring (or NVLS-free all-reduce, reduce-scatter, all-gather) connects each rank to one peer per
channel in each direction, 2 connections "regardless of the scale" (NVIDIA/nccl#986); the buffer
of a connection lives on one side, so a rank holds about one connection's buffers per channel.
Point-to-point (pipeline send/recv, all-to-all) uses a Simple-only FIFO of p2pChunkSize ·
NCCL_STEPS per peer and channel: 512 KiB · 8 = 4 MiB over NVLink, 128 KiB · 8 = 1 MiB over the
network (init.cc P2pNvlChunkSize, P2pNetChunkSize).  The number of channels NCCL opens depends on
the topology (up to MAXCHANNELS = 64; 32 per pair of H100s over NVLink in NVIDIA/nccl#1685): a
plan gives it per communicator.  Communicators created by splitting with shared resources share
buffers; PyTorch creates one communicator per process group, so TP, CP, EP, DP and PP groups each
count (NVIDIA/nccl#986: "More communicators = more memory used").

**Workspaces.** Transformer Engine allocates one cuBLAS workspace of 32 MiB + 1 KiB on compute
capability ≥ 9 (4 MiB below), per stream it runs GEMMs on (TE pytorch/cpp_extensions/gemm.py
`get_cublas_workspace_size_bytes` @ d0067d0).

**CUDA graphs.** A captured graph replays into a private memory pool that holds the captured
region's activations for every micro-batch it may replay concurrently; Megatron's per-layer
graphs (`--cuda-graph-impl local`, `--cuda-graph-scope`) keep each captured layer's static
input/output buffers.  Counted as the static buffers of the captured layers
(cuda_graph_pool_bytes).
"""

from __future__ import annotations

from . import _ops

NCCL_STEPS = 8  # src/include/device.h
LL_BYTES = 8 * 512 * NCCL_STEPS * 16  # LINES_PER_THREAD · LL_MAX_NTHREADS · STEPS · sizeof(LLFifoLine)
LL128_BYTES = 120 * 640 * NCCL_STEPS * 8  # ELEMS_PER_THREAD · LL128_MAX_NTHREADS · STEPS · 8
SIMPLE_BYTES = 1 << 22  # NCCL_BUFFSIZE default, init.cc DEFAULT_BUFFSIZE
CUMEM_GRANULARITY = 2 * 2**20  # NCCL rounds its cuMem allocations to 2 MiB (NVIDIA/nccl#1685 logs)
P2P_NVL_CHUNK = 1 << 19  # init.cc P2pNvlChunkSize default (512 KiB)
P2P_NET_CHUNK = 1 << 17  # init.cc P2pNetChunkSize default (128 KiB)
CUBLAS_WORKSPACE_BYTES = 32 * 2**20 + 1024  # TE gemm.py, compute capability ≥ 9


def nccl_connection_bytes(simple_bytes=SIMPLE_BYTES, ll_bytes=LL_BYTES, ll128_bytes=LL128_BYTES,
                          granularity=CUMEM_GRANULARITY):
    """One connection's three protocol FIFOs, rounded up to the allocation granularity:
    ⌈(LL + LL128 + Simple)/g⌉·g = ⌈9,633,792 / 2 MiB⌉ · 2 MiB = 5 · 2 MiB = 10 MiB by default.
    (The ceiling is on constants, not on plan values.)"""
    total = simple_bytes + ll_bytes + ll128_bytes
    return _ops.ceil(total / granularity) * granularity


def nccl_collective_bytes(n_channels, connection_bytes, in_group):
    """A rank's buffers for one communicator that runs rings: channels × one connection,
    times in_group (1 when the group has more than one rank, else 0: a group of one never
    connects).  32 channels: 32 · 10 MiB = 320 MiB."""
    return in_group * n_channels * connection_bytes


def nccl_p2p_bytes(n_peers, channels_per_peer, chunk_bytes, steps=NCCL_STEPS):
    """A rank's point-to-point FIFOs: peers × channels per peer × chunk·NCCL_STEPS (Simple only).
    Pipeline parallelism: 2 peers (previous and next stage); all-to-all over n ranks: n − 1."""
    return n_peers * channels_per_peer * chunk_bytes * steps


def workspace_bytes(n_streams, per_stream_bytes=CUBLAS_WORKSPACE_BYTES):
    """cuBLAS workspaces: streams × 32 MiB (Transformer Engine, Hopper and later)."""
    return n_streams * per_stream_bytes


def cuda_graph_pool_bytes(n_captured_layers, layer_io_bytes, n_replays_in_flight):
    """Static buffers of captured per-layer graphs: each captured layer keeps its input and output
    for each micro-batch whose graph may be in flight: layers × io × in-flight."""
    return n_captured_layers * layer_io_bytes * n_replays_in_flight


def runtime_holdings_bytes(context_bytes, nccl_bytes, workspace, graph_bytes):
    """The fixed part of what a process holds outside its step's tensors: CUDA context +
    communicators + workspaces + graph pools (the allocator's slack on the step's tensors comes
    on top: memory.runtime_overhead_bytes)."""
    return context_bytes + nccl_bytes + workspace + graph_bytes
