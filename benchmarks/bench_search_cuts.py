"""What this version's two exact cuts of the search save, measured in one process (CPU time,
time.process_time, of planner.search.core.search alone: no start-up, no rendering), alternating
with the same code with the cuts undone, so that a shared machine's load falls on both alike:
    python benchmarks/bench_search_cuts.py [--repeat N]

- before: every rule (planner.constraints and the framework's) evaluated once per choice group,
  and all nine KEPT_COSTS kept of every candidate;
- after: each rule's mask once per distinct input (planner/search/masks.py) and only the costs
  the ranking reads (RANKED_COSTS).
The outputs are the same (tests/cli/test_corpus.py; tests/search/test_masks.py)."""

from __future__ import annotations

import argparse
import os
import statistics
import time

from planner.catalog import load_hardware, load_model
from planner.search import core, costing, evaluate, masks
from planner.search.request import PlanRequest

CASES = [("70b", 512, "h100-nvlink"), ("deepseek-v3", 16384, "gb200-nvl72")]


class EveryGroup(masks.RuleMasks):
    """The rules evaluated afresh for every group, as before masks.py."""

    def holds(self, key, rule, values):
        return rule.holds(self.model, masks._Recorder(values))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    ranked = core.RANKED_COSTS
    print(f"search() CPU time, median (min) of {repeat}, alternating; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}:")
    for name, gpus, hw_name in CASES:
        model, hw, req = load_model(name), load_hardware(hw_name), PlanRequest(gpus=gpus)
        core.search(model, hw, req)  # warm
        times: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(repeat):
            for mode in times:
                evaluate.RuleMasks = EveryGroup if mode == "before" else masks.RuleMasks
                core.RANKED_COSTS = costing.KEPT_COSTS if mode == "before" else ranked
                t0 = time.process_time()
                core.search(model, hw, req)
                times[mode].append(time.process_time() - t0)
        evaluate.RuleMasks, core.RANKED_COSTS = masks.RuleMasks, ranked
        print(f"  {name} / {gpus} / {hw_name}: " + ", ".join(
            f"{mode} {statistics.median(t):.3f} s ({min(t):.3f})" for mode, t in times.items()))


if __name__ == "__main__":
    main()
