"""Parsing the CLI's text values into a PlanRequest: comma lists, `auto`, enum names. No I/O."""

from __future__ import annotations

from pydantic import ValidationError

from ..errors import PlanError, problem_text
from ..formulas.choices import (
    Attention,
    Precision,
    QuantRecipe,
    Recompute,
    RecomputeModule,
    Schedule,
    ZeroStage,
)
from ..formulas.moe_layer import Dispatcher
from .request import (
    MAX_DIM,
    MAX_GBS,
    MAX_GPUS,
    MAX_MBS,
    MAX_SEQ_LEN,
    MAX_TOKENS_PER_STEP,
    PlanRequest,
)


def _shown(text) -> str:
    text = str(text)
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _split(text: str | None, flag: str) -> list[str] | None:
    if text is None:
        return None
    items = [s.strip() for s in str(text).split(",") if s.strip()]
    if not items:
        raise PlanError(f"--{flag} was given an empty value {_shown(text)}; give a value or leave "
                        "the flag out")
    return items


def _whole(s: str, flag: str, lo: int, hi: int, example: str) -> int:
    try:
        value = int(s)
    except ValueError:
        raise PlanError(f"--{flag} takes whole numbers ({example}), got {_shown(s)}") from None
    if value < lo:
        raise PlanError(f"--{flag} must be ≥ {lo}, got {value}")
    if value > hi:
        raise PlanError(f"--{flag} must be at most {hi:,}, got {_shown(s)}")
    return value


def int_list(text: str | None, flag: str, maximum: int = MAX_DIM) -> list[int] | None:
    items = _split(text, flag)
    if items is None:
        return None
    return sorted({_whole(s, flag, 1, maximum, "e.g. 8 or 4,8") for s in items})


def enum_list(text: str | None, enum, flag: str, allow_auto: bool = True):
    """Values of an enum by name; `auto` → None (every value)."""
    items = _split(text, flag)
    if items is None or (allow_auto and [s.lower() for s in items] == ["auto"]):
        return None
    out = []
    for s in items:
        key = s.lower()
        try:
            out.append(enum(int(key)) if issubclass(enum, int) else enum(key))
        except ValueError:
            names = ", ".join(str(int(m)) if issubclass(enum, int) else m.value for m in enum)
            raise PlanError(f"--{flag}: {_shown(s)} is not one of {names}"
                            + (" or auto" if allow_auto else "")) from None
    return list(dict.fromkeys(out))


def one_enum(text: str, enum, flag: str):
    values = enum_list(text, enum, flag, allow_auto=False)
    if not values or len(values) != 1:
        raise PlanError(f"--{flag} takes one value, got {_shown(text)}")
    return values[0]


RECIPE_NAMES = {"delayed": QuantRecipe.DELAYED, "current": QuantRecipe.CURRENT,
                "tensorwise": QuantRecipe.CURRENT, "mxfp8": QuantRecipe.MXFP8,
                "blockwise": QuantRecipe.BLOCKWISE}
"""fit: --fp8-recipe's values (tensorwise: Megatron's name for current scaling)."""


def recipe_and_recompute(precision, fp8_recipe, fp8_param_gather, recompute, recompute_layers,
                         recompute_modules) -> dict:
    """fit: the PlanRequest fields of --fp8-recipe, --fp8-param-gather, --recompute-layers and
    --recompute-modules, each checked against the precision and recompute it needs."""
    low = str(precision).strip().lower()
    recipe = None
    if fp8_recipe is not None:
        recipe = RECIPE_NAMES.get(str(fp8_recipe).strip().lower())
        if recipe is None:
            raise PlanError(f"--fp8-recipe takes delayed, current (tensorwise), mxfp8 or "
                            f"blockwise, got {_shown(fp8_recipe)}")
        if low != "fp8":
            raise PlanError(f"--fp8-recipe needs --precision fp8 (nvfp4 runs its own recipe), "
                            f"got --precision {_shown(precision)}")
    if fp8_param_gather and low not in ("fp8", "nvfp4"):
        raise PlanError("--fp8-param-gather needs --precision fp8 or nvfp4")
    levels = {r.strip().lower() for r in str(recompute or "").split(",") if r.strip()}
    if recompute_layers and levels and not levels & {"full", "auto"}:
        raise PlanError(f"--recompute-layers needs --recompute full, got "
                        f"--recompute {_shown(recompute)}")
    modules = None
    if recompute_modules is not None:
        modules = tuple(enum_list(recompute_modules, RecomputeModule, "recompute-modules",
                                  allow_auto=False) or ())
        if not modules:
            raise PlanError(f"--recompute-modules takes a comma list of "
                            f"{', '.join(m.value for m in RecomputeModule)}, got "
                            f"{_shown(recompute_modules)}")
        if levels and not levels & {"selective", "auto"}:
            raise PlanError(f"--recompute-modules needs --recompute selective, got "
                            f"--recompute {_shown(recompute)}")
    return dict(fp8_recipe=recipe, fp8_param_gather=bool(fp8_param_gather),
                recompute_layers=int(recompute_layers or 0), recompute_modules=modules)


def validation_message(err: ValidationError) -> str:
    """A PlanRequest's validation errors in the flags' names."""
    parts = []
    for e in err.errors():
        loc = str(e["loc"][0]).replace("_", "-") if e["loc"] else ""
        parts.append(f"--{loc}: {problem_text(e)}" if loc else problem_text(e))
    return "; ".join(parts)


def _checked_numbers(flags: dict, gpus: int, offload: str) -> str:
    """parse_request's checks of the numbers and the offload mode, in the flags' names; the mode,
    lower-cased."""
    if flags.get("grad_dtype", "fp32") not in ("fp32", "bf16"):
        raise PlanError(f"--grad-dtype must be fp32 or bf16, got {_shown(flags['grad_dtype'])}")
    for flag, value, top in (("gpus", gpus, MAX_GPUS), ("gbs", flags.get("gbs"), MAX_GBS),
                             ("tokens-per-step", flags.get("tokens_per_step"),
                              MAX_TOKENS_PER_STEP),
                             ("seq-len", flags.get("seq_len"), MAX_SEQ_LEN)):
        if value is not None and value < 1:
            raise PlanError(f"--{flag} must be a positive whole number, got {value}")
        if value is not None and value > top:
            raise PlanError(f"--{flag} must be at most {top:,}, got {value:,} (beyond any "
                            "training run; check the number)")
    if flags.get("dp_shard") is not None and flags.get("dp_replicate") is not None:  # HSDP
        raise PlanError("give one of --dp-shard and --dp-replicate: dp = dp_shard × dp_replicate, "
                        "so one sets the other")
    mode = str(offload).strip().lower()  # offload
    if mode not in ("fit", "auto", "none"):
        raise PlanError(f"--offload takes fit (offload only when no plan fits without it), auto "
                        f"(offload may make any plan fit, to compete on speed) or none, got "
                        f"{_shown(offload)}")
    fraction, layers = flags.get("offload_optimizer"), flags.get("offload_activations")
    if fraction is not None and not 0 <= fraction <= 1:
        raise PlanError(f"--offload-optimizer is the fraction of the optimizer states on the "
                        f"host, a number in [0, 1] such as 0.5, got {fraction:g}")
    if layers is not None and layers < 0:
        raise PlanError(f"--offload-activations is a number of layers, 0 or more, got {layers}")
    return mode


def _fit_fields(flags: dict) -> dict:
    """fit: the recipe and the finer recompute levels, checked against each other."""
    recompute, layers = flags.get("recompute"), flags.get("recompute_layers", 0)
    fit = recipe_and_recompute(flags.get("precision", "bf16"), flags.get("fp8_recipe"),
                               flags.get("fp8_param_gather", False), recompute, layers,
                               flags.get("recompute_modules"))
    fit["distribute_saved_activations"] = bool(flags.get("distribute_saved_activations"))
    fit["recompute_group"] = int(flags.get("recompute_group") or 1)
    levels = {r.strip().lower() for r in str(recompute or "").split(",") if r.strip()}
    if fit["recompute_group"] > 1 and (layers or (levels and not levels & {"full"})):
        raise PlanError("--recompute-group checkpoints groups of layers under --recompute full "
                        "(Megatron's uniform method); --recompute-layers is the block method: "
                        "give one")
    return fit


def _degrees(flag: str, maximum: int = MAX_DIM):
    return lambda text: int_list(text, flag, maximum)


TEXT_FLAGS = {
    "dp": _degrees("dp"), "tp": _degrees("tp"), "pp": _degrees("pp"), "cp": _degrees("cp"),
    "vpp": _degrees("vpp"), "mbs": _degrees("mbs", MAX_MBS),
    "zero": lambda text: enum_list(text, ZeroStage, "zero"),
    "recompute": lambda text: enum_list(text, Recompute, "recompute"),
    "schedule": lambda text: enum_list(text, Schedule, "schedule", allow_auto=False),
    "sp": lambda value: None if value is None else [value],
    "precision": lambda text: one_enum(text, Precision, "precision"),
    "attention": lambda text: one_enum(text, Attention, "attention"),
    "ep": _degrees("ep"), "etp": _degrees("etp"),  # moe
    "moe_dispatcher": lambda text: (None if text is None
                                    else one_enum(text, Dispatcher, "moe-dispatcher").value),
    "dp_shard": lambda text: ("auto" if text is not None and str(text).strip().lower() == "auto"
                              else int_list(text, "dp-shard")),
    "dp_replicate": _degrees("dp-replicate"),
    "cp_kind": lambda text: cp_kind_list(text), "cp_a2a": _degrees("cp-a2a"),  # cp-kind
}
"""The plan flags given as text (comma lists, `auto`, enum names), each with its parser, in the
order their errors are reported; parse_request passes every other flag to PlanRequest as it is."""
FIT_FLAGS = ("fp8_recipe", "fp8_param_gather", "recompute_layers", "recompute_modules",
             "distribute_saved_activations", "recompute_group")
"""fit: the flags _fit_fields reads together."""


def flex_ac_refusal(model, req: PlanRequest) -> str | None:
    """fit: --torchtitan-flex-ac changes only a DeepSeek-V3-style block (MLA attention and a
    routed MoE) under torchtitan's selective recompute (model.activations
    torchtitan_sac_block_bytes; formulas.recompute.op_sac_regions = [MLA]·[flex]): given
    anywhere else it would change nothing, so it is refused, saying why. None when it applies
    (or was not given)."""
    if not req.torchtitan_flex_ac:
        return None
    lacks = [what for what, has in (("MLA attention", model.is_mla),
                                    ("routed experts", model.is_moe)) if not has]
    if lacks:
        return (f"--torchtitan-flex-ac changes only MLA + MoE blocks (torchtitan's DeepSeek-V3 "
                f"flavours) under selective recompute; {model.name} has no "
                f"{' and no '.join(lacks)}, so it would change nothing: leave it out")
    if req.recompute is not None and Recompute.SELECTIVE not in req.recompute:
        given = ",".join(r.value for r in req.recompute)
        return (f"--torchtitan-flex-ac changes torchtitan's selective recompute only; with "
                f"--recompute {given} it would change nothing: give --recompute selective (or "
                "auto), or leave --torchtitan-flex-ac out")
    return None


def _moments_checked(flags: dict, framework: str, parsed: dict, mode: str) -> str:
    """--adam-moments: checked against the framework, --offload-optimizer and --zero (bf16
    runs on Megatron's distributed optimizer only: schema.adam_moments_problem); with bf16 the
    ZeRO stage is fixed at 1 and no optimizer offload is weighed. Returns the offload mode."""
    from ..schema import adam_moments_problem

    moments = flags.get("adam_moments", "fp32")
    if moments not in ("fp32", "bf16"):
        raise PlanError(f"--adam-moments must be fp32 or bf16, got {_shown(moments)}")
    problem = adam_moments_problem(moments, framework, None, flags.get("offload_optimizer"))
    if problem is None and moments != "fp32":
        zeros = parsed["zero"]
        if zeros is not None and ZeroStage.OPTIMIZER not in zeros:
            problem = adam_moments_problem(moments, framework, int(zeros[0]))
        if problem is None and mode == "auto":
            problem = (f"--adam-moments {moments}: Megatron's optimizer offload keeps Adam's "
                       "moments in fp32, so --offload auto has nothing to weigh: leave one out")
        parsed["zero"] = [ZeroStage.OPTIMIZER]
        mode = "none"
    if problem:
        raise PlanError(problem)
    return mode


def parse_request(*, gpus, framework: str = "megatron", allow_tp_across_nodes=False,
                  offload="fit", **flags) -> PlanRequest:
    """The plan flags (cli.plan_flags.PlanFlags, by the PlanRequest field each sets), validated,
    as a PlanRequest: those in TEXT_FLAGS parsed, the fit flags checked together, every other one
    as given (pydantic checks it; validation_message names the flag). Raises PlanError or
    pydantic's ValidationError."""
    from ..frameworks.torchtitan import OWN_SETTINGS

    mode = _checked_numbers(flags, gpus, offload)
    for name, what in OWN_SETTINGS.items():  # fit: settings only torchtitan has
        if flags.get(name) and framework != "torchtitan":
            flag = "--" + name.replace("_", "-")
            raise PlanError(f"{flag} is {what}; {framework} has no such setting: plan with "
                            f"--framework torchtitan, or leave {flag} out")
    fit = _fit_fields(flags)
    parsed = {name: parse(flags.get(name)) for name, parse in TEXT_FLAGS.items()}
    mode = _moments_checked(flags, framework, parsed, mode)
    if flags.get("moe_shared_expert_overlap"):
        parsed["moe_dispatcher"] = shared_overlap_dispatcher(parsed["moe_dispatcher"])
    given = {k: v for k, v in flags.items() if k not in TEXT_FLAGS and k not in FIT_FLAGS}
    return PlanRequest(**fit, **given, **parsed, offload=mode, gpus=gpus, framework=framework,
                       allow_tp_across_nodes=allow_tp_across_nodes)


def shared_overlap_dispatcher(dispatcher: str | None) -> str | None:
    """--moe-shared-expert-overlap's dispatcher: alltoall or DeepEP (Megatron's flex), those
    Megatron-Core runs it with ("moe_shared_expert_overlap only works with alltoall or flex token
    dispatcher", transformer_config.py l.1820-1826 @ d98e8a64dd), so the search weighs both as
    it does without the overlap; the all-gather dispatcher asked for is an error. (megatron-core
    0.16.1 runs it with alltoall alone: the emitters say so where the plan dispatches by
    DeepEP.)"""
    if dispatcher == "allgather":
        raise PlanError("--moe-shared-expert-overlap runs with the alltoall or deepep dispatcher "
                        "(Megatron-Core refuses it with allgather: \"moe_shared_expert_overlap "
                        "only works with alltoall or flex token dispatcher\"); give --moe-"
                        "dispatcher alltoall or deepep, or leave --moe-shared-expert-overlap out")
    return dispatcher


CP_ALLGATHER_REFUSAL = (
    "--cp-kind: Megatron's allgather kind (all-gather of K and V over cp before attention, "
    "not overlapped) is not modelled: its saved full-sequence K/V and exposed gather are not "
    "priced; plan with ring, a2a or hierarchical")
"""cp-kind: why --cp-comm-type allgather is refused rather than priced as another kind."""


def cp_kind_list(text: str | None):
    """cp-kind: --cp-kind as kinds (ring, a2a, hierarchical or their other names, comma list),
    "auto" (search: every kind the framework runs), or None when not given (the framework's
    default kind)."""
    from ..schema import context_kind_named

    items = _split(text, "cp-kind")
    if items is None:
        return None
    if [s.lower() for s in items] == ["auto"]:
        return "auto"
    out = []
    for s in items:
        if s.lower().replace("-", "").replace("_", "") == "allgather":
            raise PlanError(CP_ALLGATHER_REFUSAL)
        try:
            out.append(context_kind_named(s))
        except ValueError:
            raise PlanError(f"--cp-kind: {_shown(s)} is not one of ring, a2a, hierarchical "
                            "or auto") from None
    return list(dict.fromkeys(out))


def resolve_framework(framework: str | None, emit: str | None, schedule: str | None = None) -> str:
    """--framework, or the framework whose settings --emit writes, or the one framework that runs
    the --schedule asked for when the default does not (schedule_framework), or the default
    (megatron); an error when --framework and --emit name different frameworks."""
    from ..frameworks import DEFAULT, get, of_format

    chosen = get(framework).name if framework is not None else None
    if emit is not None:
        fmt, writer = of_format(emit)
        if chosen is not None and chosen != writer.name:
            raise PlanError(f"--emit {fmt} writes {writer.name} settings, but --framework is "
                            f"{chosen}; drop one, or make them agree")
        return writer.name
    return chosen or schedule_framework(schedule) or DEFAULT


def schedule_framework(schedule: str | None) -> str | None:
    """The framework `--schedule` implies when `--framework` is not given: the one that runs every
    schedule named, when the default framework does not run one of them (torchtitan for zbv and
    dualpipev); None otherwise (the default then says what it runs)."""
    from ..frameworks import DEFAULT, FRAMEWORKS

    if not schedule:
        return None
    try:
        asked = enum_list(schedule, Schedule, "schedule", allow_auto=False) or []
    except PlanError:
        return None  # parse_request names the bad value
    if all(s in FRAMEWORKS[DEFAULT].schedules for s in asked):
        return None
    runners = [f.name for f in FRAMEWORKS.values() if all(s in f.schedules for s in asked)]
    return runners[0] if len(runners) == 1 else None


SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}


def token_count(text: str | None, flag: str = "train-tokens") -> float | None:
    """A count with an optional suffix: 15T, 300B, 2.5e12."""
    if text is None:
        return None
    s = str(text).strip().lower()
    scale = SUFFIXES.get(s[-1:], None)
    number = s[:-1] if scale else s
    try:
        value = float(number) * (scale or 1)
    except ValueError:
        raise PlanError(f"--{flag} takes a number with an optional K/M/B/T suffix "
                        f"(e.g. 15T or 300B), got {_shown(text)}") from None
    if not value > 0:
        raise PlanError(f"--{flag} must be a positive number of tokens, got {_shown(text)}")
    if not value <= MAX_TRAIN_TOKENS:
        raise PlanError(f"--{flag} must be at most {MAX_TRAIN_TOKENS:.0e} tokens, got "
                        f"{_shown(text)}")
    return value


MAX_TRAIN_TOKENS = 1e18
MAX_PRICE = 1e6  # per GPU-hour, in any currency
MAX_POWER_W = 1e6


def positive_number(value: float | None, flag: str, top: float, allow_zero: bool = False,
                    unit: str = "") -> float | None:
    """A finite number in (0, top] (or [0, top]); None passes through."""
    if value is None:
        return None
    ok = (value >= 0 if allow_zero else value > 0) and value <= top  # false for nan
    if not ok:
        low = "≥ 0" if allow_zero else "positive"
        raise PlanError(f"--{flag} must be {low} and at most {top:g}{unit}, got {value:g}")
    return value
