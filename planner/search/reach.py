"""--sort gpus: the cluster sizes on which no plan can reach the target step, left unsearched.

Every plan's step is at least the model's FLOPs spread evenly over its GPUs at the fastest rate
the cost model prices a FLOP: the model prices each GEMM at the profile's peak × its GEMM
efficiency η (× a wave efficiency ≤ 1, on padded experts' FLOPs ≥ the active ones), attention
and the LM head at the 16-bit peak × η₁₆, and runs recomputation, kernels and memory-bound
work besides; the busiest GPU holds at least the average share, and a step runs its
micro-batches' compute one after the other. The FLOPs counted are the causal convention's
(formulas/flops.py: the unmasked half of the attention square, what a causal kernel runs;
the full square without one), which do not depend on the layout (the same global batch at
every size). So a size on which even MFU = 1 at that rate (formulas.timing.mfu with
R = max(peak·max(1, η), peak₁₆·max(1, η₁₆))) needs longer than the target cannot answer, and
search skips it; tests/search/test_reach.py checks the bound against every candidate of several
searches. The largest size is always searched (it names the best found when none answers)."""

from __future__ import annotations

from ..errors import PlanError
from ..formulas import timing as T
from ..model.cost import Choices, numbers, plan_costs
from ..model.numbers import attention_precision
from ..schema import HardwareProfile, ModelSpec, PlanConfig
from .request import PlanRequest, moe_settings, precision_settings


def model_flops_causal(model: ModelSpec, hw: HardwareProfile, req: PlanRequest) -> float:
    """The model FLOPs of one step at the request's global batch (causal convention), as the
    cost model counts them for every plan (k.model_flops_causal): taken of a one-GPU plan,
    since the count does not depend on the layout."""
    gbs = req.global_batch(model)
    config = PlanConfig(dp=1, tp=1, pp=1, cp=1, vpp=1, mbs=1, n_micro=gbs, gbs=gbs,
                        seq_len=req.seq(model), precision=req.precision,
                        grad_dtype=req.grad_dtype, attention=req.attention,
                        framework=req.framework, **precision_settings(req),
                        **moe_settings(req, 1, 1, 0, 0))
    return float(plan_costs(numbers(model, hw, config), Choices.of(config))["model_flops_causal"])


def fastest_flop_rate(hw: HardwareProfile, req: PlanRequest) -> float | None:
    """R: the most FLOP/s per GPU the cost model prices any FLOP at (see the module's
    docstring); None where the profile lacks the precision's figures."""
    rates = []
    for precision in (req.precision, attention_precision(req.precision)):
        peak, eff = hw.peak_flops_per_s(precision), hw.gemm_efficiency(precision)
        if peak is None or eff is None:
            return None
        rates.append(peak * max(1.0, eff))
    return max(rates)


def sizes_within_reach(model: ModelSpec, hw: HardwareProfile, req: PlanRequest,
                       sizes: list[int], target_step_s: float) -> list[int]:
    """The sizes of `sizes` (increasing) on which some plan may step in target_step_s: those
    where MFU = 1 at the fastest rate would take at most that long, and the largest. All of
    them where the bound cannot be had (search then says why)."""
    rate = fastest_flop_rate(hw, req)
    if rate is None:
        return list(sizes)
    try:
        flops = model_flops_causal(model, hw, req)
    except (PlanError, ValueError):  # a request search refuses: it says why, size by size
        return list(sizes)
    return [n for n in sizes
            if n == sizes[-1] or T.mfu(flops, target_step_s, n, rate) <= 1]
