"""How fast plan3d answers at its limits: the figures that tests/cli/test_robustness.py and
tests/search/test_calibrate.py once asserted as timed tests (the tests now assert only what is
answered; speed lives here). Run on the 2-core CI-sized machine:
    PYTHONPATH=. python benchmarks/bench_limits.py [--repeat N]

1. the CLI at its limits, in process (typer's CliRunner, as the tests run it), each the median
   (and min) of N runs after one untimed warm-up (target: < 10 s each, the bound the tests had):
   - `search -m 405b -n 1000000000`: refused at once (--gpus is at most 2²⁰);
   - `search -m 405b -n 1048576 --json` and `-n 1048575` (odd: nothing divides it usefully);
   - the absurd values of test_absurd_values_give_finite_json_or_a_clear_refusal;
   - `explain --timeline` of an 8,000,000-sequence batch: refused instead of drawn;
2. calibrate's fit: 12 synthetic runs (the model's own step times on the H100 profile with four
   factors moved), fitted from the H100 preset (target: < 10 s; it chooses its factors, up to ten
   small least-squares fits).
The last run is kept in benchmarks/results_limits.txt.
"""

from __future__ import annotations

import argparse
import statistics
import time

from typer.testing import CliRunner

from planner.calibrate import Measurement, calibrate, profile_with
from planner.catalog import load_hardware
from planner.cli import app
from planner.model.cost import Choices, numbers, plan_costs

COMMANDS = {
    "search 405b, 10⁹ GPUs (refused)": ["search", "-m", "405b", "-n", "1000000000"],
    "search 405b, 2²⁰ GPUs --json": ["search", "-m", "405b", "-n", str(2**20), "--json"],
    "search 405b, 2²⁰ − 1 GPUs": ["search", "-m", "405b", "-n", str(2**20 - 1)],
    "explain 70b, gbs 2⁴⁰": ["explain", "-m", "70b", "-n", "8", "--tp", "8", "--gbs", str(2**40),
                             "--json"],
    "explain 70b, mbs 10⁶": ["explain", "-m", "70b", "-n", "8", "--tp", "8", "--mbs", "1000000",
                             "--gbs", "1000000", "--json"],
    "explain 70b, seq 10⁹": ["explain", "-m", "70b", "-n", "8", "--tp", "8", "--seq-len",
                             "1000000000", "--json"],
    "explain 8b, seq 2³⁰ classic": ["explain", "-m", "8b", "-n", "8", "--tp", "8", "--seq-len",
                                    str(2**30), "--attention", "classic", "--recompute", "none",
                                    "--json"],
    "search 8b, gbs 2⁴⁰, 10¹⁸ tokens": ["search", "-m", "8b", "-n", "8", "--gbs", str(2**40),
                                        "--train-tokens", "1e18", "--price", "1e6",
                                        "--gpu-power-w", "1e6", "--json"],
    "search 8b, 2⁵⁰ tokens/step": ["search", "-m", "8b", "-n", "1024", "--tokens-per-step",
                                   str(2**50), "--json"],
    "search 8b, mbs 10⁶": ["search", "-m", "8b", "-n", "8", "--mbs", "1000000", "--json"],
    "search 405b, seq 2³⁰": ["search", "-m", "405b", "-n", "8", "--seq-len", str(2**30),
                             "--json"],
    "explain --timeline, gbs 8·10⁶ (refused)": ["explain", "-m", "70b", "-n", "64", "--tp", "8",
                                                "--pp", "8", "--gbs", "8000000", "--timeline"],
}

# the calibrate fit: model, dp, tp, pp, mbs, gbs (TP and DP inside and across nodes, pipelines
# across the network), and the "true" factors the synthetic runs are measured on
LAYOUTS = [
    ("8b", 1, 8, 1, 1, 32), ("8b", 2, 4, 1, 2, 64), ("8b", 1, 8, 2, 1, 64),
    ("8b", 4, 2, 1, 4, 64), ("7b", 1, 16, 1, 1, 16), ("70b", 1, 8, 4, 1, 64),
    ("70b", 2, 8, 2, 1, 64), ("8b", 8, 1, 1, 1, 64), ("8b", 16, 1, 1, 2, 128),
    ("7b", 2, 8, 1, 2, 64), ("70b", 1, 8, 8, 1, 32), ("8b", 2, 2, 2, 4, 64),
]
TRUTH = {"efficiency.gemm.bf16": 0.45, "efficiency.hbm": 0.70, "fast.busbw_gb_per_s": 300.0,
         "network.busbw_gb_per_s": 35.0}


def timed(fn, repeat: int) -> tuple[float, float, float]:
    """(first, median, min) seconds of fn(): the first run, then `repeat` more."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times), min(times)


def synthetic_runs() -> list[Measurement]:
    """The model's own step times on the H100 profile with TRUTH's factors."""
    truth = profile_with(load_hardware("h100-nvlink"), TRUTH)
    runs = []
    for i, (model, dp, tp, pp, mbs, gbs) in enumerate(LAYOUTS):
        m = Measurement.from_fields(dict(id=f"run{i}", model=model, dp=dp, tp=tp, pp=pp, mbs=mbs,
                                         gbs=gbs, seq_len=4096, step_s=1.0), where=f"run{i}")
        step = plan_costs(numbers(m.model, truth, m.config), Choices.of(m.config))["step_s"]
        runs.append(m.model_copy(update={"step_s": float(step)}))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    runner = CliRunner()
    print(f"seconds: first run, then median (min) of {repeat}; target < 10 s each")
    for name, args in COMMANDS.items():
        codes = set()

        def once(args=args, codes=codes):
            codes.add(runner.invoke(app, args).exit_code)

        first, median, least = timed(once, repeat)
        print(f"{name:42s} exit {','.join(map(str, sorted(codes))):5s} {first:6.2f} "
              f"{median:6.2f} ({least:.2f})")
    runs, h100 = synthetic_runs(), load_hardware("h100-nvlink")
    first, median, least = timed(lambda: calibrate(runs, h100), repeat)
    print(f"{'calibrate: 12 runs, 4 factors':42s} {'':10s} {first:6.2f} {median:6.2f} "
          f"({least:.2f})")


if __name__ == "__main__":
    main()
