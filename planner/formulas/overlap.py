"""What of a data-parallel collective the compute beside it hides, as frameworks issue it: in
pieces (buckets, blocks, modules, pipeline chunks) that become ready one after another through
the backward, or are fetched one ahead of the forward that needs them, on one serial
communication stream. One piece is always exposed: the last bucket reduced after the last
gradient is ready, or the first gather before any compute has started.

The framework picks the pieces and the compute they run beside (planner/frameworks); the model
composes them (planner/model/data_parallel.py)."""

from __future__ import annotations

from . import _ops


def pipelined_exposed_s(comm_s, compute_s, pieces):
    """The part of a collective of C seconds, issued as n equal pieces beside W seconds of
    compute, that the compute does not hide:

        T_exp = max(C/n, C − W·(n − 1)/n)

    Reduction (buckets launched as their gradients complete): piece i is ready at i·W/n and
    the stream runs them in order, so the last finishes at max over i of
    (i·W/n + (n − i + 1)·C/n); the largest term is i = n (W + C/n, compute-bound) or i = 1
    (W/n + C, communication-bound), and T_exp is that finish less W.
    Gather fetched ahead (each piece issued while an earlier piece's compute runs): the first
    piece waits C/n with nothing to hide under; after it each of the n − 1 others shows
    max(0, C/n − W/n); their sum is C/n + (n − 1)·max(0, (C − W)/n), the same T_exp. The depth of
    the prefetch (one piece ahead or a bucket of several) does not change it for equal pieces.

    n = 1 gives C (nothing overlaps: one bucket after the backward, or a gather before the
    forward); n → ∞ gives max(0, C − W), the perfect overlap. W = 0 gives C.

    Assumptions: equal pieces, readiness (or need) evenly spread through W, one serial stream
    (NCCL runs one communicator's collectives in order), the compute not slowed here (the
    slowdown of the hidden part is comm.overlap_slowdown_s).
    Sources: Megatron-Core's buckets (megatron/core/distributed/param_and_grad_buffer.py
    @ d98e8a64dd: register_grad_ready launches a bucket once every parameter in it has its
    gradient in the last micro-batch; finish_param_sync dispatches the next bucket's gather as
    it waits for this one's); PyTorch FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_state.py
    @ 01c9f4fcc3ff: _pre_forward prefetches the next unit's all-gather, _pre_backward the next
    backward unit's; the last reduce-scatter is waited on in the root's post-backward
    callback); DeepSpeed ZeRO-3 (deepspeed/runtime/zero/partitioned_param_coordinator.py
    @ edaa72212: fetch_sub_module gathers the module it is about to run, then prefetches the
    next modules in trace order up to stage3_prefetch_bucket_size elements)."""
    return exposed_piece_s(comm_s, compute_s, comm_s / pieces, pieces)


def exposed_piece_s(comm_s, compute_s, piece_s, pieces):
    """pipelined_exposed_s when the piece nothing hides is not C/n: C seconds of collectives on
    one stream beside W seconds of compute, of which one piece of t₁ seconds waits with no
    compute beside it (the first gather, or the last bucket reduced after the backward) and
    the compute is cut into n pieces, the exposed piece's W/n beside nothing:

        T_exp = max(t₁, C − W·(n − 1)/n)

    t₁ = C/n gives pipelined_exposed_s. Used where the exposed piece differs from the others:
    a backward whose stream carries gathers fetched ahead (none exposed) and gradient buckets
    (the last exposed), t₁ = T_rs/n_rs with n = n_rs. Same assumptions as pipelined_exposed_s;
    C = 0 gives max(t₁, 0)."""
    return _ops.maximum(piece_s, comm_s - compute_s * (pieces - 1) / pieces)


def inline_gathers_s(gather_s, stages):
    """The weight gathers of pipeline stages after the first, each run whole in line before
    its stage's first forward:  (p − 1)·T_ag.

    Megatron-Core with --overlap-param-gather and a non-interleaved pipeline: only the first
    pipeline stage splits its buffers into buckets (later stages keep one bucket, bucket_size
    None for pp_rank > 0: megatron/training/training.py @ d98e8a64dd), and the gather is not
    started by the optimizer step but by the first forward pre-hook (finish_param_sync
    dispatches it there; distrib_optimizer.py skips start_param_sync under
    overlap_param_gather); align_param_gather, which would start every stage's gather at once,
    is turned off without a virtual pipeline (megatron/training/arguments.py). Stage s's first
    forward then waits for its activations and then its whole gather, so the warm-up's chain
    from the first stage to the last grows by one stage's gather per later stage.
    Assumes equal stages (T_ag, the fullest stage's gather) and a gather longer than nothing
    (it is on the warm-up's critical path whatever its length)."""
    return (stages - 1) * gather_s
