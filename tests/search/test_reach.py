"""--sort gpus leaves unsearched the sizes where even MFU = 1 at the fastest rate the cost model
prices a FLOP cannot reach the target (planner/search/reach.py): the bound holds for every
candidate of several searches, and the answer is the one searching every size gives."""

import numpy as np
import pytest

from planner.catalog import load_hardware, load_model
from planner.errors import NoFeasiblePlan
from planner.formulas import timing as T
from planner.formulas.choices import Precision
from planner.search import core, reach
from planner.search.evaluate import evaluate_space
from planner.search.request import PlanRequest


@pytest.mark.parametrize("model, gpus, hw, extra", [
    ("70b", 32, "h100-nvlink", {}),
    ("8b", 8, "h100-nvlink", {"precision": Precision.FP8}),
    ("mixtral-8x7b", 32, "h100-nvlink", {"framework": "torchtitan"}),
    ("qwen3-30b-a3b", 16, "gb200-nvl72", {"mtp": 1}),
])
def test_every_candidate_steps_no_faster_than_the_bound(model, gpus, hw, extra):
    """model_flops_causal is each candidate's own FLOPs (mfu_causal · step · n · peak, the same
    for every layout), and no candidate's step is below F / (n · R): at R, MFU ≤ 1."""
    m, h = load_model(model), load_hardware(hw)
    req = PlanRequest(gpus=gpus, **extra)
    _, costs = evaluate_space(m, h, req, keys=("mfu_causal",))
    flops = reach.model_flops_causal(m, h, req)
    own = costs["mfu_causal"] * costs["step_s"] * gpus * h.peak_flops_per_s(req.precision)
    assert np.allclose(own, flops, rtol=1e-12, atol=0)
    rate = reach.fastest_flop_rate(h, req)
    assert rate >= h.peak_flops_per_s(req.precision)
    utilisation = T.mfu(flops, costs["step_s"], gpus, rate)
    assert utilisation.max() <= 1  # the bound the skip rests on (0.36–0.59 here)


def test_the_answer_is_the_one_searching_every_size_gives(monkeypatch):
    """70B on up to 512 H100 at a 20 s step: 8 to 64 GPUs are out of reach (≈ 2,000 s·GPU of
    causal FLOPs at R = 989 TFLOP/s: 64 GPUs need ≥ 29 s), 256 answers — the same result as
    searching every size."""
    m, h = load_model("70b"), load_hardware("h100-nvlink")
    req = PlanRequest(gpus=512)
    assert reach.sizes_within_reach(m, h, req, [8, 16, 32, 64, 128, 256, 512], 20.0) == [
        128, 256, 512]
    fast = core.search(m, h, req, sort="gpus", target_step_s=20.0, top=3)
    monkeypatch.setattr(core, "sizes_within_reach", lambda m, h, r, s, t: list(s))
    slow = core.search(m, h, req, sort="gpus", target_step_s=20.0, top=3)
    # the same plans; the answer says which sizes the bound left unsearched
    assert fast.model_dump(exclude={"answer"}) == slow.model_dump(exclude={"answer"})
    assert fast.answer.startswith("256 GPUs") and slow.answer.startswith("256 GPUs")
    assert "; 8, 16, 32, 64 not searched" in fast.answer and "not searched" not in slow.answer


@pytest.mark.parametrize("fits", [{8, 16, 32, 64, 128}, {16, 32}, set()])
def test_when_none_answers_the_best_found_is_the_same(monkeypatch, fits):
    """Nothing reaches a 5 s step: the error names the largest size that fits, whether it was
    searched or ruled out by the bound (then searched for the message alone) — with each size's
    search replaced by one that fits only on `fits` (the largest, 128, never)."""
    m, h = load_model("70b"), load_hardware("h100-nvlink")
    req = PlanRequest(gpus=128)
    searched = []

    def row_one(model, hw, sized, headroom):
        searched.append(sized.gpus)
        return None if sized.gpus not in fits else (None, None, None, 100.0 + sized.gpus)

    monkeypatch.setattr(core, "_row_one", row_one)
    errors = []
    for every in (False, True):
        if every:
            monkeypatch.setattr(core, "sizes_within_reach", lambda m, h, r, s, t: list(s))
        with pytest.raises(NoFeasiblePlan) as exc:
            core.search(m, h, req, sort="gpus", target_step_s=5.0, top=1)
        errors.append(str(exc.value))
    assert errors[0] == errors[1]
    best = max(fits, default=None)
    assert (f"the best found is {100 + best:.3g} s on {best} GPUs" if best else
            "no size fits in memory") in errors[0]
    assert searched[0] == 128  # the bound rules out 8 to 64 at 5 s: the largest searched first
