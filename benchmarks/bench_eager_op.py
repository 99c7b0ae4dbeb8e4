"""The host (CPU) time PyTorch's eager mode spends on one operator before any device runs it:
Python, the binding, autograd's recording and the dispatcher (formulas/host.py EAGER_OP_S). A
micro-benchmark on CPU tensors of 8 elements, so that the operator's own kernel is a few dozen
nanoseconds; what a CUDA operator adds on the host — cudaLaunchKernel — is not measurable on a
machine without a GPU and is taken from a public figure (formulas/host.py LAUNCH_S).

The operators are those an MoE layer's forward runs between its GEMMs (the router's score
function, top-k and normalisation, the permutation's gather and index, the scatter-add,
element-wise products, casts, views and allocations; torchtitan models/moe.py @ 99fee810b),
each on inputs that require grad, as in training. Each is timed as the median of `--repeat`
runs of 20,000 calls after 2,000 untimed ones, on one thread. The figure kept is the median
over the operators. Run with a CPU build of PyTorch (the project does not depend on it):
    PYTHONPATH=. /work/venv-launch/bin/python benchmarks/bench_eager_op.py [--repeat N]
The last run is kept in benchmarks/results_eager_op.txt.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time


def per_call_s(fn, calls: int = 20_000, repeat: int = 7) -> float:
    """Median seconds per call of fn over `repeat` timed loops of `calls` calls."""
    for _ in range(2_000):
        fn()
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) / calls)
    return statistics.median(runs)


def operators():
    """(name, zero-argument call) for each operator timed."""
    import torch
    import torch.nn.functional as F

    x = torch.ones(8, requires_grad=True)
    y = torch.ones(8, requires_grad=True)
    w = torch.ones(8, 8, requires_grad=True)
    rows = torch.ones(8, 8, requires_grad=True)
    idx = torch.arange(8)
    idx2 = torch.zeros(8, 8, dtype=torch.long)
    return [
        ("add", lambda: x + y), ("mul", lambda: x * y), ("silu", lambda: F.silu(x)),
        ("sigmoid", lambda: torch.sigmoid(x)), ("softmax", lambda: torch.softmax(x, 0)),
        ("mm", lambda: torch.mm(w, w)), ("topk", lambda: torch.topk(x, 2)),
        ("sum", lambda: x.sum()), ("cumsum", lambda: torch.cumsum(idx, 0)),
        ("gather", lambda: torch.gather(rows, 0, idx2)), ("index", lambda: rows[idx]),
        ("scatter_add", lambda: rows.scatter_add(0, idx2, rows)),
        ("argsort", lambda: torch.argsort(idx)), ("to(bf16)", lambda: x.to(torch.bfloat16)),
        ("view", lambda: rows.view(-1)), ("reshape", lambda: rows.reshape(4, 16)),
        ("empty", lambda: torch.empty(8)), ("zeros_like", lambda: torch.zeros_like(x)),
        ("cat", lambda: torch.cat((x, y))),
    ]


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    times = {name: per_call_s(fn, repeat=args.repeat) for name, fn in operators()}
    print(f"torch {torch.__version__}, Python {platform.python_version()}, "
          f"{platform.processor() or platform.machine()}, one thread")
    for name, t in times.items():
        print(f"{name:12s} {t * 1e6:6.2f} µs")
    print(f"{'median':12s} {statistics.median(times.values()) * 1e6:6.2f} µs over "
          f"{len(times)} operators")


if __name__ == "__main__":
    main()
