"""The functions the CLI calls, one per command: names in, typed results out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from .catalog import MODEL_ALIASES, hardware_presets, load_hardware, load_model, model_presets
from .errors import PlanError
from .model.estimate import check_config, estimate
from .results import Plan
from .schema import HardwareProfile, PlanConfig
from .search.request import PlanRequest, explain_configs

if TYPE_CHECKING:  # the search (numpy arrays, ranking) is imported by the commands that search
    from .search.core import SearchResult


def _check_model_flags(model, req: PlanRequest) -> None:
    """The flags that mean something for some models only, refused where they would change
    nothing (search.options.flex_ac_refusal)."""
    from .search.options import flex_ac_refusal

    refusal = flex_ac_refusal(model, req)
    if refusal:
        raise PlanError(refusal)


def explain_request(model_name: str, hw_name: str, req: PlanRequest) -> Plan:
    """explain: one plan; with --zero/--recompute auto, the fastest setting that fits (or, if none
    fits, the one that needs least memory)."""
    from .model.explain import explain

    model, hw = load_model(model_name), req.cluster(load_hardware(hw_name))
    _check_model_flags(model, req)
    configs = explain_configs(model, hw, req)
    if len(configs) > 1:
        plans = [estimate(model, hw, c) for c in configs]
        fitting = [p for p in plans if p.memory.fits]
        chosen = (min(fitting, key=lambda p: p.time.step_s) if fitting
                  else min(plans, key=lambda p: p.memory.total_bytes))
        config = chosen.config
    else:
        config = configs[0]
    return explain(model, hw, config)


def launch_settings(model_name: str, plan: Plan, framework: str):
    """--emit: the plan's settings in a framework's own option names (planner.emit)."""
    from .frameworks.emit import emit

    return emit(framework, plan.config, load_model(model_name))


def plan_timeline(model_name: str, hw_name: str, plan: Plan):
    """--timeline: the plan's schedule simulated with its own per-micro-batch stage times."""
    from .model.cost import Choices, numbers, plan_costs
    from .outputs.timeline import simulate

    model, hw, config = load_model(model_name), load_hardware(hw_name), plan.config
    terms: dict = {}

    def keep(name, value):
        terms[name] = value
        return value

    costs = plan_costs(numbers(model, hw, config), Choices.of(config), keep)
    fwd_s = float(costs["stage_layers"] * costs["layer_forward_total_s"])
    bwd_s = float(costs["stage_microbatch_s"]) - fwd_s
    # the split-backward schedules run the weight-gradient GEMMs as their own W blocks
    return simulate(config.schedule, config.pp, config.n_micro, config.vpp, fwd_s, bwd_s,
                    float(terms["wgrad_microbatch_s"]))


def profiles_that_fit(model_name: str, hw_name: str, plan: Plan, limit: int = 2) -> list[str]:
    """A plan that does not fit: the other hardware profiles it fits on, the smallest memory
    first (at most `limit`), the plan estimated on each; a profile without the plan's precision
    is passed over."""
    current = load_hardware(hw_name)
    model, found = load_model(model_name), []
    for name in hardware_presets():
        hw = load_hardware(name)
        precision = plan.config.precision
        if (hw.name == current.name or hw.capacity_bytes <= current.capacity_bytes
                or hw.peak_flops_per_s(precision) is None or hw.gemm_efficiency(precision) is None):
            continue
        if estimate(model, hw, plan.config).memory.fits:
            found.append((hw.capacity_bytes, name))
    return [name for _, name in sorted(found)[:limit]]


def runs_with(model_name: str, hw_name: str, config: PlanConfig, **update) -> bool:
    """Whether the plan's framework runs `config` changed by `update` (the rules check_config
    enforces: Megatron runs no ZeRO-3 with pp > 1, …), so that a hint offers only what runs."""
    from pydantic import ValidationError

    try:
        changed = PlanConfig.model_validate({**config.model_dump(), **update})
        check_config(load_model(model_name), load_hardware(hw_name), changed)
    except (PlanError, ValidationError):
        return False
    return True


def budgeted(plan: Plan, hw_name: str, train_tokens: float | None, gpu_hour_price: float | None,
             gpu_power_w: float | None, goodput: float | None = None) -> Plan:
    """--train-tokens: days, GPU-hours, cost and energy (power defaults to the profile's TDP,
    goodput to the plan's own, from failures and checkpoints: model/goodput.py)."""
    from .model.estimate import with_budget

    if train_tokens is None:
        return plan
    power = gpu_power_w if gpu_power_w is not None else load_hardware(hw_name).tdp_w
    return with_budget(plan, train_tokens, gpu_hour_price, power, goodput)


def explain_constants(model_name: str, hw_name: str, plan: Plan,
                      req: PlanRequest | None = None) -> list[tuple]:
    """The profile's constants explain's formulas name: (symbol, value, unit, meaning), with
    the request's cluster figures (goodput) where it gives them."""
    from .model.explain import constants, named_in

    hw = load_hardware(hw_name)
    listed = constants(load_model(model_name), hw if req is None else req.cluster(hw), plan.config)
    return named_in(listed, [t.formula for t in plan.terms])


def batch_rounding(model_name: str, req: PlanRequest) -> str | None:
    """What --tokens-per-step became, when it is not a whole number of sequences (the global
    batch is whole sequences): a sentence for stderr, else None."""
    if req.gbs is not None or req.tokens_per_step is None:
        return None
    model = load_model(model_name)
    seq, gbs = req.seq(model), req.global_batch(model)
    if gbs * seq == req.tokens_per_step:
        return None
    return (f"--tokens-per-step {req.tokens_per_step:,} is not a whole number of {seq:,}-token "
            f"sequences: the global batch is {gbs:,} sequence{'s' if gbs != 1 else ''} = "
            f"{gbs * seq:,} tokens per step")


def search_request(model_name: str, hw_name: str, req: PlanRequest, **kwargs) -> SearchResult:
    """search: the ranked plans that fit."""
    from .search.core import search

    model = load_model(model_name)
    _check_model_flags(model, req)
    return search(model, req.cluster(load_hardware(hw_name)), req, **kwargs)


class ModelListing(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    aliases: list[str]
    n_params: float
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    ffn: int
    vocab: int
    seq_len: int
    mlp: str
    n_experts: int
    source: str


def list_models() -> list[ModelListing]:
    out = []
    for name in model_presets():
        m = load_model(name)
        out.append(ModelListing(
            name=name, aliases=[a for a, target in MODEL_ALIASES.items() if target == name],
            n_params=m.n_params, n_layers=m.n_layers, hidden=m.hidden, n_heads=m.n_heads,
            n_kv_heads=m.kv_heads, ffn=m.ffn, vocab=m.vocab, seq_len=m.seq_len,
            mlp=m.mlp.value, n_experts=m.n_experts, source=m.source))
    return out


def list_hardware() -> list[HardwareProfile]:
    return [load_hardware(name) for name in hardware_presets()]


__all__ = ["explain_request", "search_request", "list_models", "list_hardware", "PlanError"]


def compare_request(model_name: str, hw_names: list[str], gpus: list[int], req: PlanRequest,
                    train_tokens: float, price: str | None = None, gpu_power_w: str | None = None,
                    goodput: float | None = None, deadline_days: float | None = None,
                    headroom: float | None = None):
    """compare: the best plan of each (profile, GPU count), budgeted; price and gpu_power_w as
    the CLI takes them (one number, or NAME=NUMBER pairs keyed by the names in hw_names)."""
    from .compare import compare, per_profile
    from .search.options import MAX_POWER_W, MAX_PRICE

    if len(set(hw_names)) != len(hw_names):
        raise PlanError(f"--hw names a profile twice ({', '.join(hw_names)})")
    profiles = [(name, req.cluster(load_hardware(name))) for name in hw_names]
    model = load_model(model_name)
    _check_model_flags(model, req)
    return compare(model, profiles, gpus, req, train_tokens,
                   prices=per_profile(price, "price", hw_names, MAX_PRICE, allow_zero=True),
                   powers_w=per_profile(gpu_power_w, "gpu-power-w", hw_names, MAX_POWER_W),
                   goodput=goodput, deadline_days=deadline_days, headroom=headroom)


def deadline_target_step_s(model_name: str, hw_name: str, req: PlanRequest,
                           train_tokens: float | None, deadline_days: float,
                           goodput: float | None = None) -> float:
    """search --deadline-days: the step time a plan must reach to train train_tokens within
    deadline_days (formulas.budget.deadline_step_s) at the request's global batch — the batch
    `search --sort gpus` keeps at every size; the goodput --goodput's, else the model's at
    --gpus, the largest size tried (its lowest: fewer GPUs fail less, so the target is safe)."""
    from .formulas import budget as B

    if train_tokens is None:
        raise PlanError("--deadline-days needs --train-tokens (the tokens to train by then)")
    if not 0 < deadline_days < float("inf"):
        raise PlanError(f"--deadline-days must be a positive number of days, got "
                        f"{deadline_days:g}")
    from .model.estimate import check_goodput
    from .model.goodput import goodput_at

    model = load_model(model_name)
    g = check_goodput(goodput)
    if g is None:
        g = goodput_at(model, req.cluster(load_hardware(hw_name)), req.framework, req.gpus)
        if not g > 0:
            raise PlanError(f"at {req.gpus:,} GPUs interruptions leave no time to train "
                            "(goodput 0): fewer --gpus, or give --goodput")
    tokens_per_step = req.global_batch(model) * req.seq(model)
    return B.deadline_step_s(deadline_days * B.SECONDS_PER_DAY, train_tokens, tokens_per_step, g)
