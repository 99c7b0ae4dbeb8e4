"""Fixtures for the oracle tests (no torch import here: the test modules skip without it)."""

from __future__ import annotations

import contextlib

import pytest


@pytest.fixture(scope="module")
def megatron_one_rank(tmp_path_factory):
    """megatron-core 0.16 on a one-rank gloo group on the CPU (skipped when not installed).

    Two shims, because megatron-core assumes CUDA where the maths does not need it:
    `torch.cuda.current_device` (used to place its global memory buffer) answers "cpu", and the
    model-parallel CUDA RNG tracker's `fork()` is a no-op (the tests run without dropout)."""
    pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state, tensor_parallel

    class _NoRngTracker:
        def fork(self, *args, **kwargs):
            return contextlib.nullcontext()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.cuda, "current_device", lambda: "cpu")
        mp.setattr(tensor_parallel, "get_cuda_rng_tracker", lambda *a, **k: _NoRngTracker())
        if not dist.is_initialized():
            store = tmp_path_factory.mktemp("gloo") / "store"
            dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
        parallel_state.initialize_model_parallel(1, 1)
        yield
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
