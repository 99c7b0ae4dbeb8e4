"""How the oracle counts bytes: saved-for-backward tensors and live storages.

Imported only by the oracle tests, after `pytest.importorskip("torch")`.

Two counters, both deduplicated by storage (a view shares its base's bytes):
- `saved_bytes`: every tensor autograd packs for backward, seen through
  `torch.autograd.graph.saved_tensors_hooks`. Exact for plain autograd and custom Functions.
- `LiveStorages`: a TorchDispatchMode that keeps a weak reference to the storage of every op's
  output; `live_bytes()` sums those still alive. Under `torch.utils.checkpoint` the hooks only
  see placeholders, so checkpointed (SAC, full AC) layers are measured this way; `peak_bytes`
  records the largest live total seen after any op, forward or backward.
Storages that existed before the measurement (parameters, the batch) are never counted.
"""

from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def saved_bytes(fn, *args, exclude=()):
    """Run fn(*args) and return (output, bytes autograd saved for backward, dedup by storage)."""
    excluded = {_key(t) for t in exclude}
    seen: dict[int, int] = {}

    def pack(t):
        k = _key(t)
        if k not in excluded:
            seen[k] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return out, sum(seen.values())


class LiveStorages(TorchDispatchMode):
    """Weak references to the storages every op creates; live and peak bytes at op boundaries."""

    def __init__(self, exclude=()):
        super().__init__()
        self.excluded = {_key(t) for t in exclude}
        self.refs: dict[int, tuple[StorageWeakRef, int]] = {}
        self.peak_bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                k = st._cdata
                old = self.refs.get(k)
                if k not in self.excluded and (old is None or old[0].expired()):
                    self.refs[k] = (StorageWeakRef(st), st.nbytes())
        self.peak_bytes = max(self.peak_bytes, self.live_bytes())
        return out

    def live_bytes(self) -> int:
        return sum(n for ref, n in self.refs.values() if not ref.expired())
