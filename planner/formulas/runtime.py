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

**NVLS.** A communicator that runs NVLink SHARP keeps, per head, 2 · nvlsChannels buffers of
NCCL_NVLS_CHUNKSIZE · NCCL_STEPS (src/transport/nvls.cc `ncclNvlsBufferSetup` @ 5067397c:
nvlsPerRankSize = nChannels · 2 · chunk · 8, nvlsTotalSize = that · nHeads), chunk 128 KiB,
16 channels on Hopper (NVLS_NCHANNELS_SM90), 24 on Blackwell inside one NVLink domain
(NVLS_NCHANNELS_SM100_NVL); a single-domain NVLS graph has one head per GPU of the group, at most
NCCL_MAX_NVLS_ARITY = 32 (src/graph/search.cc: "NVLS ... search must have ngpus heads at most").
Per head: 16 · 2 · 1 MiB = 32 MiB on Hopper, 48 MiB on Blackwell; 8 GPUs of an H100 node: 256 MiB.

**Workspaces.** PyTorch gives every (cuBLAS handle, stream) pair a cuBLAS workspace from its
caching allocator — 4096 KiB · 8 = 32 MiB on sm90 exactly, 4096 KiB · 2 + 16 KiB · 8 = 8,519,680 B
on other NVIDIA GPUs, 128 MiB on gfx94x/gfx95x (CUBLAS_WORKSPACE_CONFIG's defaults) — and a
cuBLASLt workspace of 1024 KiB (76 MiB hipBLASLt on ROCm) beside it (pytorch/pytorch
aten/src/ATen/cuda/CublasHandlePool.cpp @ 26a39059 `parseChosenWorkspaceSize`,
`parseCUDABlasLtWorkspaceSize`).  Handles are per thread: the main thread's and autograd's
device thread's.  Transformer Engine keeps its own cuBLAS workspace of 32 MiB + 1 KiB on compute
capability ≥ 9 (4 MiB below), per stream it runs GEMMs on (TE pytorch/cpp_extensions/gemm.py
`get_cublas_workspace_size_bytes` @ d0067d0; 4 more for grouped GEMMs, common/util/
multi_stream.cpp `num_compute_streams`).

**CUDA context.** The driver's context with the kernels a process loads: "around 400MB" with
CUDA ≥ 11.7's lazy module loading (PyTorch's maintainer ptrblck, pytorch/pytorch#109888, 2023),
426 MiB measured by nvidia-smi for PyTorch 2.10 + CUDA 13.0 after `torch.cuda.mem_get_info`
(unsloth-zoo PR #1053, 2026, RTX 6000 Ada).  No figure per GPU generation was found: 426 MiB is
taken for every GPU (and for ROCm's HIP context), and kernels a training step loads lazily later
are not counted (an assumption, said here).

**CUDA graphs.** Not composed into a plan: none of the launch settings plan3d writes captures
graphs (torchtitan's are turned off, Megatron's `--cuda-graph-impl` is not written).  A captured
graph replays into a private memory pool that holds the captured region's activations for every
micro-batch it may replay concurrently; Megatron's per-layer graphs (`--cuda-graph-impl local`,
`--cuda-graph-scope`) keep each captured layer's static input/output buffers: counted as the
static buffers of the captured layers (cuda_graph_pool_bytes), for when a recipe captures them.
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
TE_WORKSPACE_PRE_HOPPER_BYTES = 4_194_304  # TE gemm.py, compute capability < 9
TE_GROUPED_GEMM_STREAMS = 4  # TE common/util/multi_stream.cpp num_compute_streams
# PyTorch CublasHandlePool.cpp @ 26a39059: cuBLAS workspace per (handle, stream) ...
TORCH_CUBLAS_SM90_BYTES = 4096 * 8 * 1024  # ... on sm90 (H100, H200, H800)
TORCH_CUBLAS_OTHER_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8  # ... other NVIDIA GPUs (":4096:2:16:8")
TORCH_HIPBLAS_GFX94_BYTES = 1024 * 128 * 1024  # ... ROCm gfx94x/gfx95x (MI300X, MI325X, MI355X)
TORCH_CUBLASLT_BYTES = 1024 * 1024  # cuBLASLt workspace per (handle, stream), 1024 KiB
TORCH_HIPBLASLT_BYTES = 76 * 1024 * 1024  # hipBLASLt's, 76 MiB
TORCH_BLAS_THREADS = 2  # handles are per thread: the main thread and autograd's device thread
NVLS_CHUNK = 128 * 1024  # nvls.cc NCCL_NVLS_CHUNKSIZE default
NVLS_CHANNELS = {"hopper": 16, "blackwell": 24}  # nvls.cc NVLS_NCHANNELS_SM90, _SM100_NVL
NVLS_MAX_HEADS = 32  # NCCL_MAX_NVLS_ARITY
RING_CHANNELS = 32  # coll channels NCCL opens between H100s over NVLink (NVIDIA/nccl#1685 logs)
P2P_PER_CHANNEL_NET_GBPS = 14  # paths.cc NCCL_P2P_PER_CHANNEL_NET_BW (GB/s)
CUDA_CONTEXT_BYTES = 426 * 2**20  # unsloth-zoo#1053's nvidia-smi reading; ~400 MB, pytorch#109888


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


def nvls_bytes(n_heads, n_channels, chunk_bytes=NVLS_CHUNK, steps=NCCL_STEPS):
    """A rank's NVLS buffers for one communicator: heads × channels × 2 (reduce and broadcast) ×
    chunk·NCCL_STEPS.  Hopper, 8 heads: 8 · 16 · 2 · 128 KiB · 8 = 256 MiB."""
    return n_heads * n_channels * 2 * chunk_bytes * steps


def p2p_channels_per_net_peer(nics, nic_gb_per_s, per_channel_gb_per_s=P2P_PER_CHANNEL_NET_GBPS):
    """NCCL's channels to a peer across the network: one per NIC at least, more to reach the
    NICs' bandwidth at 14 GB/s a channel: max(n, ⌈n·W/14⌉) (paths.cc ncclTopoGetNchannels).
    One 400 Gb/s NIC (50 GB/s): max(1, ⌈3.57⌉) = 4.  (On profile constants, not plan values.)"""
    return _ops.maximum(nics, _ops.ceil(nics * nic_gb_per_s / per_channel_gb_per_s))


def torch_blas_workspace_bytes(cublas_bytes, cublaslt_bytes, n_threads=TORCH_BLAS_THREADS,
                               n_streams=1):
    """PyTorch's GEMM workspaces: (cuBLAS + cuBLASLt) per handle and stream, a handle per thread
    that runs GEMMs.  H100, 2 threads, 1 stream: 2 · (32 MiB + 1 MiB) = 66 MiB."""
    return n_threads * n_streams * (cublas_bytes + cublaslt_bytes)


def runtime_holdings_bytes(context_bytes, nccl_bytes, workspace, graph_bytes):
    """The fixed part of what a process holds outside its step's tensors: CUDA context +
    communicators + workspaces + graph pools (the allocator's slack on the step's tensors comes
    on top: memory.runtime_overhead_bytes)."""
    return context_bytes + nccl_bytes + workspace + graph_bytes
