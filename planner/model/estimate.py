"""One plan, evaluated on floats: the scalar adapter over cost.plan_costs."""

from __future__ import annotations

from ..errors import PlanError
from ..formulas.choices import Precision, QuantRecipe, Recompute, RecomputeModule
from ..results import Comm, Goodput, Memory, ModelSummary, Plan, PlanWarning, Time
from ..schema import HardwareProfile, ModelSpec, PlanConfig
from . import constraints
from .cost import Choices, numbers, plan_costs

BUBBLE_WARN = 0.25  # a bubble above a quarter of the step is worth a look
BUBBLE_PITFALL = 0.5  # the study card's pitfall: the bubble eats half the step
MFU_CONVENTION_WARN = 1.2  # model FLOPs 20 % above what runs: attention-dominated (long sequences)


BLACKWELL_RECIPES = (QuantRecipe.MXFP8, QuantRecipe.NVFP4)
"""fit: recipes whose block formats only Blackwell's tensor cores run (TE recipe docstrings:
MXFP8BlockScaling and NVFP4BlockScaling, @ d0067d0)."""


def check_config(model: ModelSpec, hw: HardwareProfile, config: PlanConfig) -> None:
    """The divisibility and support rules every framework enforces (planner.constraints), what the
    plan's framework runs (planner.frameworks), and the profile's support of the precision; one
    clear error for the first broken."""
    from ..frameworks import get as framework_named

    c = config
    layout = constraints.of(c)
    rule = constraints.broken(model, layout) or framework_named(c.framework).broken(model, layout)
    if rule is not None:
        raise PlanError(rule.message(model, layout))
    if c.moe_a2a_overlap:  # moe: where Megatron-Core runs the all-to-all overlap
        from .moe import overlap_problem

        problem = overlap_problem(c.ep, c.pp, c.vpp, c.recompute is Recompute.FULL,
                                  c.moe_dispatcher)
        if problem:
            raise PlanError(f"--moe-a2a-overlap: {problem} (Megatron-Core "
                            "transformer_config.py)")
    if hw.peak_flops_per_s(c.precision) is None or hw.gemm_efficiency(c.precision) is None:
        raise PlanError(f"{hw.name} has no {c.precision.value} figures "
                        f"(its profile lists no peak or efficiency for it)")
    if (c.fp8_recipe in BLACKWELL_RECIPES or c.precision is Precision.NVFP4) \
            and hw.peak_tflops.fp4 is None:  # fit: the block formats of Blackwell's tensor cores
        recipe = "nvfp4" if c.precision is Precision.NVFP4 else c.fp8_recipe.value
        raise PlanError(f"{hw.name}: the {recipe} recipe runs on GPUs with MXFP8/NVFP4 tensor "
                        f"cores (Blackwell: b200-nvlink, gb200-nvl72); use --fp8-recipe delayed, "
                        f"current or blockwise here")
    fw = framework_named(c.framework)
    if ((c.recompute_layers or c.recompute_group > 1) and fw.partial_recompute == "none") or (
            (c.recompute_modules is not None or c.recompute_group > 1)
            and fw.partial_recompute != "searched"):
        flag = ("--recompute-layers" if c.recompute_layers else "--recompute-group"
                if c.recompute_group > 1 else "--recompute-modules")
        raise PlanError(f"{c.framework}: {flag} is Megatron-Core's (--recompute-method block or "
                        f"uniform, --recompute-modules); {c.framework} does not run it")
    if c.contiguous_checkpoints and not fw.memory.host_checkpoints:  # fit
        raise PlanError(f"{c.framework}: contiguous checkpoint buffers are DeepSpeed's "
                        "(activation_checkpointing.contiguous_memory_optimization); use "
                        "--framework deepspeed")
    problem = recompute_modules_problem(model, c)
    if problem:
        raise PlanError(problem)
    if c.offload and hw.host is None:  # offload
        raise PlanError(f"{hw.name} has no [host] section (host memory, link and DRAM per GPU): "
                        "add one to plan offload, or leave the --offload flags out")


def recompute_modules_problem(model: ModelSpec, c: PlanConfig) -> str | None:
    """fit: module lists Megatron-Core refuses (transformer_config.py __post_init__
    @ d98e8a64dd): moe_act only with --moe-grouped-gemm, which plan3d writes for a MoE model
    alone; mla_up_proj only with multi-latent attention; shared_experts not with
    --moe-shared-expert-overlap; moe_act or layernorm under fp8 delayed scaling. And lists that
    checkpoint nothing in the model: moe or shared_experts without experts (shared ones)."""
    modules = set(c.recompute_modules or ())
    if RecomputeModule.MOE_ACT in modules and not model.is_moe:
        return (f"--recompute-modules moe_act recomputes routed experts' activation; "
                f"{model.name} has none (Megatron-Core runs it only with --moe-grouped-gemm)")
    if RecomputeModule.MLA_UP_PROJ in modules and not model.is_mla:
        return (f"--recompute-modules mla_up_proj recomputes MLA's up-projections; "
                f"{model.name} has no multi-latent attention (Megatron-Core refuses it)")
    if RecomputeModule.MOE in modules and not model.is_moe:
        return f"--recompute-modules moe recomputes the MoE layer; {model.name} has none"
    if RecomputeModule.SHARED_EXPERTS in modules and not (model.is_moe
                                                          and model.n_shared_experts):
        return (f"--recompute-modules shared_experts recomputes a MoE layer's shared experts; "
                f"{model.name} has none")
    if RecomputeModule.SHARED_EXPERTS in modules and c.moe_shared_expert_overlap:
        return ("--recompute-modules shared_experts does not run with "
                "--moe-shared-expert-overlap (Megatron-Core transformer_config.py)")
    fine = {RecomputeModule.CORE_ATTN, RecomputeModule.MLP, RecomputeModule.MLA_UP_PROJ,
            RecomputeModule.SHARED_EXPERTS, RecomputeModule.MOE}
    if modules - fine and c.precision is Precision.FP8 and (
            c.fp8_recipe or QuantRecipe.DELAYED) is QuantRecipe.DELAYED:
        return ("--recompute-modules moe_act and layernorm do not run under fp8 delayed scaling "
                "(Megatron-Core transformer_config.py); add --fp8-recipe current")
    return None


def plan_warnings(hw: HardwareProfile, config: PlanConfig, costs: dict,
                  n_layers: int) -> list[PlanWarning]:
    """The field's known pitfalls, said plainly."""
    c, out = config, []
    if c.tp > hw.gpus_per_domain:
        out.append(PlanWarning(
            code="tp-across-domain",
            message=f"tp={c.tp} spans more than one {hw.gpus_per_domain}-GPU NVLink domain: its "
                    "per-layer all-reduces cross the network; keep TP inside the node"))
    elif c.tp * c.cp > hw.gpus_per_domain and c.cp > 1:
        from ..frameworks import a2a_ranks

        c_a = a2a_ranks(c)  # the all-to-all group: 1 for the ring, cp for Ulysses
        what = ("the context-parallel ring crosses" if c_a == 1 else
                "the context-parallel all-to-all crosses" if c_a == c.cp else
                f"the context-parallel ring between its all-to-all groups of {c_a} crosses")
        out.append(PlanWarning(
            code="cp-across-domain",
            message=f"tp·cp = {c.tp * c.cp} exceeds the {hw.gpus_per_domain}-GPU domain: "
                    f"{what} the network"))
    # the bubble as every command shows it: its share of the step time, T_bubble / T_step (the
    # schedule's own idle share, bubble_fraction, leaves out the DP tail and the optimizer)
    bubble = float(costs["bubble_s"]) / float(costs["step_s"])
    if bubble >= BUBBLE_PITFALL:
        out.append(PlanWarning(
            code="bubble-half",
            message=f"the pipeline bubble is {bubble:.0%} of the step: raise n_micro (smaller mbs "
                    "or larger gbs), use the interleaved schedule, or lower pp"))
    elif bubble > BUBBLE_WARN:
        out.append(PlanWarning(
            code="bubble-high",
            message=f"the pipeline bubble is {bubble:.0%} of the step (above {BUBBLE_WARN:.0%})"))
    if config.pp > 1 and costs["stage_layers"] * config.pp != float(n_layers):
        out.append(PlanWarning(
            code="uneven-stages",
            message=f"{n_layers} layers do not split evenly over pp·vpp = "
                    f"{c.pp}·{c.vpp}: the fullest stage holds {costs['stage_layers']:g} layers "
                    "and sets the pace (torchtitan: pipeline_parallel_layers_per_stage; Megatron "
                    "places layers freely with --pipeline-model-parallel-layout)"))
    if c.pp > 1 and c.n_micro < c.pp:
        out.append(PlanWarning(
            code="m-less-than-p",
            message=f"n_micro={c.n_micro} < pp={c.pp}: the pipeline never fills"))
    if costs["model_flops"] > MFU_CONVENTION_WARN * costs["hardware_flops"]:
        out.append(PlanWarning(
            code="mfu-convention",
            message=f"MFU {costs['mfu']:.0%} counts the whole s×s attention square "
                    "(Megatron/PaLM convention) but the causal kernel runs half of it; at this "
                    f"sequence length that overstates the useful work — HFU {costs['hfu']:.0%} "
                    "counts what runs"))
    if costs["total_bytes"] > costs["capacity_bytes"]:
        out.append(PlanWarning(
            code="does-not-fit",
            message=f"needs {costs['total_bytes'] / 2**30:.1f} GiB per GPU of "
                    f"{costs['capacity_bytes'] / 2**30:.1f} GiB"))
    if costs["host_bytes"] > costs["host_capacity_bytes"]:  # offload
        out.append(PlanWarning(
            code="host-does-not-fit",
            message=f"offload needs {costs['host_bytes'] / 2**30:.1f} GiB of host memory per GPU "
                    f"of {costs['host_capacity_bytes'] / 2**30:.1f} GiB"))
    return out


def _link(degree: int, inside: float) -> str:
    if degree <= 1:
        return "none"
    return "nvlink" if inside >= 0.5 else "network"


def link_fields(f: dict) -> dict:
    """The Comm fields of the link model (bandwidth per group, share, utilisation) from the cost
    dictionary of one plan."""
    out = {f"{k}_busbw_bytes_per_s": f[f"{k}_busbw"] for k in ("dp", "tp", "pp", "cp")}
    out.update({f"{k}_share": f[f"{k}_share"] for k in ("dp", "tp", "pp", "cp")})
    out.update({f"{k}_ranks_per_domain": f[f"{k}_ranks_per_domain"] for k in ("dp", "tp", "cp")})
    out.update({k: f[k] for k in ("nvlink_busy_s", "network_busy_s", "nvlink_utilisation",
                                  "network_utilisation")})
    busiest = max(("nvlink", "network"), key=lambda k: f[f"{k}_busy_s"])
    out["busiest_link"] = busiest if f[f"{busiest}_busy_s"] > 0 else "none"
    return out


def peak_moment(config: PlanConfig, stage: str, costs: dict) -> str:
    """When the most loaded GPU peaks: the loss of a single stage (its micro-batch's activations
    and the loss at its peak), the first stage's or a middle rank's first backward (its warm-up
    micro-batches' activations), or the last stage's loss."""
    if config.pp == 1:
        return "the loss (one micro-batch's activations and the loss at its peak)"
    n = float(costs["inflight_peak"])
    if stage == "first":
        return f"the first stage's first backward ({n:.3g} micro-batches' activations in flight)"
    if stage == "middle":
        return (f"pipeline rank {costs['peak_rank']:.0f}'s first backward ({n:.3g} "
                "micro-batches' activations in flight)")
    return f"the last stage's loss ({n:.3g} micro-batches' activations in flight)"


STAGE_KINDS = ("first", "last", "middle")
"""Memory.stage by the cost model's peak_stage (0, 1, 2)."""


def plan_from_costs(model: ModelSpec, hw: HardwareProfile, config: PlanConfig,
                    costs: dict) -> Plan:
    """The typed result from the cost dictionary of one plan (floats)."""
    f = {k: float(v) for k, v in costs.items()}
    stage = STAGE_KINDS[round(f["peak_stage"])]
    memory = Memory(
        weights_bytes=f["weights_bytes"], gradients_bytes=f["gradients_bytes"],
        optimizer_bytes=f["optimizer_bytes"], activations_bytes=f["activations_bytes"],
        overhead_bytes=f["overhead_bytes"], total_bytes=f["total_bytes"],
        capacity_bytes=f["capacity_bytes"],
        fits=f["total_bytes"] <= f["capacity_bytes"] and f["host_bytes"] <= f["host_capacity_bytes"],
        stage=stage, stage_rank=round(f["peak_rank"]), params_per_gpu=f["stage_params"],
        stage_layers=f["stage_layers"], allocated_bytes=f["allocated_bytes"],
        reserved_bytes=f["reserved_bytes"], margin_bytes=f["capacity_bytes"] - f["total_bytes"],
        peak_at=peak_moment(config, stage, f), framework=config.framework,
        host_bytes=f["host_bytes"], host_capacity_bytes=f["host_capacity_bytes"])  # offload
    time = Time(**{k: f[k] for k in Time.model_fields})
    return Plan(
        config=config, model=ModelSummary(name=model.name, n_params=f["n_params"],
                                          source=model.source),
        hardware=hw.name, memory=memory,
        comm=Comm(**{k: f[k] for k in ("dp_bytes", "tp_bytes", "pp_bytes", "cp_bytes",
                                       "ep_bytes")},
                  **{f"{k}_link": _link(group, f[f"{k}_inside"]) for k, group in (
                      ("dp", config.dp * config.cp), ("tp", config.tp), ("pp", config.pp),
                      ("cp", config.cp), ("ep", config.ep if f["ep_bytes"] else 1))},
                  **link_fields(f)),
        bubble_fraction=f["bubble_fraction"], time=time,
        warnings=plan_warnings(hw, config, f, model.n_layers),
        goodput=Goodput(failures_per_gpu_hour=hw.reliability.failures_per_gpu_hour,
                        fraction=f["goodput"],
                        **{k: f[k] for k in Goodput.model_fields
                           if k not in ("failures_per_gpu_hour", "fraction")}))


def estimate(model: ModelSpec, hw: HardwareProfile, config: PlanConfig) -> Plan:
    """Evaluate one plan: memory, communication, bubble, time, warnings."""
    check_config(model, hw, config)
    costs = plan_costs(numbers(model, hw, config), Choices.of(config))
    return plan_from_costs(model, hw, config, costs)


def check_goodput(goodput: float | None) -> float | None:
    """A goodput given by --goodput, refused unless in (0, 1] (NaN too); None: the model's."""
    if goodput is not None and not 0 < goodput <= 1:
        raise PlanError(f"--goodput is the share of the wall-clock time that trains: a number in "
                        f"(0, 1] such as 0.9, got {goodput:g} (leave it out for the goodput "
                        "plan3d derives from failures and checkpoints)")
    return goodput


def plan_goodput(plan: Plan, goodput: float | None = None) -> float:
    """The goodput a plan's budget uses: --goodput where given, else the plan's own
    (model/goodput.py), refused where interruptions leave no time to train."""
    if check_goodput(goodput) is not None:
        return goodput
    g = plan.goodput
    if g is None:
        return 1.0
    if not g.fraction > 0:
        raise PlanError(
            f"at {plan.config.n_gpus:,} GPUs the job is interrupted every {g.mtbf_s:,.0f} s on "
            f"average, which its restart ({g.restart_s:,.0f} s) and checkpoints "
            f"({g.checkpoint_write_s:,.0f} s each) leave no time to train: fewer GPUs, or "
            "--failures-per-gpu-hour / --restart-s for a more reliable cluster")
    return g.fraction


def with_budget(plan: Plan, train_tokens: float | None, gpu_hour_price: float | None = None,
                gpu_power_w: float | None = None, goodput: float | None = None) -> Plan:
    """The plan with what training on train_tokens costs (days, GPU-hours, money, energy), over
    the wall-clock time when only a share of it trains: `goodput` where given (--goodput), else
    the plan's own from failures and checkpoints (formulas.budget, model/goodput.py)."""
    from ..formulas import budget as B
    from ..results import Budget

    if train_tokens is None:
        return plan
    if train_tokens <= 0:
        raise PlanError(f"--train-tokens must be positive, got {train_tokens:g}")
    g = plan_goodput(plan, goodput)
    n, tau = plan.config.n_gpus, plan.time.tokens_per_s
    hours = B.gpu_hours(n, train_tokens, tau, g)
    energy = (None if gpu_power_w is None
              else B.energy_j(n, train_tokens, tau, gpu_power_w, g) / 3.6e9)  # J → MWh
    return plan.model_copy(update={"budget": Budget(
        train_tokens=train_tokens,
        days=B.wall_clock_s(train_tokens, tau, g) / B.SECONDS_PER_DAY,
        gpu_hours=hours, cost=None if gpu_hour_price is None else hours * gpu_hour_price,
        gpu_hour_price=gpu_hour_price, energy_mwh=energy, gpu_power_w=gpu_power_w,
        goodput=g, goodput_from="model" if goodput is None else "--goodput")})
