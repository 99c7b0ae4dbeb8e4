"""A layout as the tables print it, read back: `explain --plan "dp128 tp2 pp1 cp2 z3 sel"`.

The tables spell a plan with PlanConfig.short_label (dp64 tp4 pp2 [hsdp8] [cp2|cp4a2a|cp8h2]
[v8] [ep8 etp2] [zbv] [mbs2] z1 [sel|full] [nosp] [offp|off0.5] [offa4]); reasons and `--json`
spell it with PlanConfig.label (… mbs1 [gbs512 s8192] z1 selective [bf16] [sp]). Both read back
to the same settings, named as `explain`'s options, so that a row can be run as printed; what a
string leaves out takes the value the table's spelling implies (no recompute word: none; no
`nosp` with tp > 1: sequence parallelism; no mbs: 1; no schedule: 1F1B, interleaved with v > 1).
A string that contradicts an option given beside it is an error naming both (`merge_layout`)."""

from __future__ import annotations

import re
from typing import Any

from .errors import PlanError
from .formulas.choices import Precision, QuantRecipe, Recompute, Schedule

_INT_TOKENS = {  # prefix → explain's option
    "dp": "dp", "hsdp": "dp_shard", "tp": "tp", "pp": "pp", "v": "vpp", "ep": "ep",
    "etp": "etp", "mbs": "mbs", "gbs": "gbs", "s": "seq_len", "z": "zero", "offa": "offload_activations",
}
_RECOMPUTE = {"sel": "selective", "selective": "selective", "full": "full", "none": "none"}
_LONG_WORDS = {"selective", "none"}  # only PlanConfig.label writes these
_SCHEDULES = {s.value: s.value for s in Schedule}
_PRECISIONS = {p.value for p in Precision}
_RECIPES = tuple(r.value for r in QuantRecipe)
_DISPATCHERS = {"deepep", "allgather", "alltoall"}  # MoE token dispatchers (layouts: `ep8 deepep`)
_FLAG = {"dp": "--dp", "dp_shard": "--dp-shard", "tp": "--tp", "pp": "--pp", "cp": "--cp",
         "cp_kind": "--cp-kind", "cp_a2a": "--cp-a2a", "vpp": "--vpp", "ep": "--ep", "etp": "--etp",
         "schedule": "--schedule", "mbs": "--mbs", "gbs": "--gbs", "seq_len": "--seq-len",
         "zero": "--zero", "recompute": "--recompute", "sp": "--sp/--no-sp",
         "precision": "--precision", "offload_optimizer": "--offload-optimizer",
         "offload_params": "--offload-params", "offload_activations": "--offload-activations",
         "moe_dispatcher": "--moe-dispatcher", "moe_a2a_overlap": "--moe-a2a-overlap",
         "recompute_layers": "--recompute-layers", "recompute_group": "--recompute-group",
         "recompute_modules": "--recompute-modules", "fp8_recipe": "--fp8-recipe",
         "fp8_param_gather": "--fp8-param-gather",
         "distribute_saved_activations": "--distribute-saved-activations"}


def _token(tok: str, out: dict[str, Any], text: str) -> None:
    """One word of a layout string into `out` (explain's option names)."""
    low = tok.lower()
    cp = re.fullmatch(r"cp(\d+)(a2a|h(\d+))?", low)
    number = re.fullmatch(r"(dp|hsdp|tp|pp|v|ep|etp|mbs|gbs|s|z|offa)(\d+)", low)
    if cp:
        out["cp"] = int(cp[1])
        if cp[2] == "a2a":
            out["cp_kind"] = "a2a"
        elif cp[3]:
            out["cp_kind"], out["cp_a2a"] = "hierarchical", int(cp[3])
    elif number and number[1] == "z" and int(number[2]) > 3:  # said here, not as --zero's
        raise PlanError(f"--plan {text!r}: {tok!r}: the ZeRO stage is z0, z1, z2 or z3")
    elif number:
        out[_INT_TOKENS[number[1]]] = int(number[2])
    elif low in _RECOMPUTE:
        out["recompute"] = _RECOMPUTE[low]
    elif re.fullmatch(r"full(\d+|/\d+)?\+dist", low):  # checkpoints split over tp (fit)
        _token(tok[:-len("+dist")], out, text)
        out["distribute_saved_activations"] = True
    elif re.fullmatch(r"full(\d+)", low):  # full4: 4 layers of each stage recomputed
        out["recompute"], out["recompute_layers"] = "full", int(low[4:])
    elif re.fullmatch(r"full/(\d+)", low):  # full/4: groups of 4 layers checkpointed (fit)
        out["recompute"], out["recompute_group"] = "full", int(low[5:])
    elif re.fullmatch(r"sel(\+[a-z_]+)+", low):  # sel+mlp: core_attn and mlp checkpointed
        out["recompute"] = "selective"
        out["recompute_modules"] = ",".join(["core_attn", *low.split("+")[1:]])
    elif re.fullmatch(r"selective\[[a-z_+]+\]", low):  # the long spelling of the same
        out["recompute"], out["recompute_modules"] = "selective", low[10:-1].replace("+", ",")
    elif re.fullmatch(rf"({'|'.join(_RECIPES)}|fp8)(-pg)?", low):  # the FP8 recipe (fit)
        recipe = low.removesuffix("-pg")
        if recipe != "fp8":
            out["fp8_recipe"] = recipe
        out["precision"] = "fp8"
        out["fp8_param_gather"] = low.endswith("-pg")
    elif low in ("sp", "nosp"):
        out["sp"] = low == "sp"
    elif low in _SCHEDULES:
        out["schedule"] = _SCHEDULES[low]
    elif low in _DISPATCHERS:
        out["moe_dispatcher"] = low
    elif low == "ovl":  # the expert all-to-all overlapped with computation (ep8 ovl)
        out["moe_a2a_overlap"] = True
    elif low in _PRECISIONS:
        out["precision"] = low
    elif low == "offp":
        out["offload_params"] = True
    elif re.fullmatch(r"off(\d*\.?\d+)", low):
        out["offload_optimizer"] = float(low[3:])
    else:
        raise PlanError(f"--plan {text!r}: {tok!r} is not part of a layout as the tables print "
                        "it (dp128 tp2 pp1 cp2 v2 mbs2 z3 sel nosp …)")


def parse_layout(text: str) -> dict[str, Any]:
    """The settings a layout string spells, keyed by explain's option names (dp, tp, pp, cp,
    cp_kind, cp_a2a, vpp, ep, etp, schedule, mbs, zero, recompute, sp, dp_shard, gbs, seq_len,
    precision, offload_*), with the values the table's spelling implies for what it leaves out."""
    words = text.replace(",", " ").split()
    if not words:
        raise PlanError("--plan was given an empty layout; give one as the table prints it, "
                        "e.g. \"dp128 tp2 pp1 cp2 z3 sel\"")
    out: dict[str, Any] = {}
    for tok in words:
        before = set(out)
        _token(tok, out, text)
        if not set(out) - before:  # a word that set nothing new (`full3 full3`): a repeat
            raise PlanError(f"--plan {text!r}: {tok!r} repeats a setting given before it")
    missing = [k for k in ("dp", "tp", "pp") if k not in out]
    if missing:
        raise PlanError(f"--plan {text!r} leaves out {', '.join(missing)}: give the whole layout "
                        "as the table prints it (dp, tp and pp at least)")
    long_form = any(w.lower() in _LONG_WORDS for w in words)
    out.setdefault("cp", 1)
    out.setdefault("vpp", 1)
    out.setdefault("mbs", 1)
    out.setdefault("recompute", Recompute.NONE.value)
    if "zero" not in out:
        raise PlanError(f"--plan {text!r} leaves out the ZeRO stage (z0 … z3): give the whole "
                        "layout as the table prints it")
    out["zero"] = str(out["zero"])
    out.setdefault("sp", out["tp"] > 1 and not long_form)
    if "schedule" not in out and out["pp"] > 1:
        out["schedule"] = (Schedule.INTERLEAVED if out["vpp"] > 1 else Schedule.ONE_F_ONE_B).value
    return out


def merge_layout(text: str, given: dict[str, Any]) -> dict[str, Any]:
    """parse_layout(text) with the options given beside it (explain's names → the values the
    user passed; None for an option not given) added; an option that contradicts the string is
    an error naming both."""
    fields = parse_layout(text)
    for key, value in given.items():
        if value is None or key not in fields:
            continue
        mine = fields[key]
        same = (bool(value) == mine if isinstance(mine, bool)
                else str(mine).lower() == str(value).strip().lower())
        if not same:
            flag = _FLAG.get(key, f"--{key.replace('_', '-')}")
            shown = value if not isinstance(value, bool) else ("on" if value else "off")
            raise PlanError(f"--plan {text!r} says {key.replace('_', '-')} {_shown(mine)} but "
                            f"{flag} {shown} was given: leave one of them out")
    return {**{k: v for k, v in given.items() if v is not None}, **fields}


def _shown(value: Any) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else f"{value}"


def explain_args(model: str, hw: str, config, framework: str | None = None,
                 seq_len_given: bool = False, headroom: float | None = None) -> list[str]:
    """The `plan3d explain` arguments that reproduce `config` (a PlanConfig the search costed):
    the model and profile as the user named them, its GPU count, the layout as the table spells
    it (`--plan`), the global batch, and each setting the layout string does not carry where it
    differs from explain's default. `framework`: the one the user asked for (None: the plan's).
    seq_len_given: whether the search was given --seq-len (then explain is given it too).
    headroom: the search's --headroom, if given (explain then judges the margin as it did)."""
    c = config
    args = ["explain", "--model", model, "--gpus", str(c.n_gpus), "--hw", hw,
            "--plan", c.short_label(), "--gbs", str(c.gbs)]
    if seq_len_given:
        args += ["--seq-len", str(c.seq_len)]
    # the framework the user named, else the plan's where it is not explain's default (one
    # implied by --emit: the command must reproduce the row without it)
    framework = framework or (c.framework if c.framework != "megatron" else None)
    if framework:
        args += ["--framework", framework]
    if headroom is not None:
        args += ["--headroom", f"{headroom:g}"]
    for flag, value, default in (("--precision", c.precision.value, "bf16"),
                                 ("--grad-dtype", c.grad_dtype, "fp32"),
                                 ("--adam-moments", c.adam_moments, "fp32"),
                                 ("--attention", c.attention.value, "flash")):
        if value != default:
            args += [flag, value]
    if not c.overlap_grad_reduce:
        args.append("--no-overlap-grad-reduce")
    if c.ep > 1 or c.etp > 1:
        if c.moe_imbalance is not None:  # None: derived from the model and the batch
            args += ["--moe-imbalance", f"{c.moe_imbalance:g}"]
        if c.moe_capacity_factor is not None:
            args += ["--moe-capacity-factor", f"{c.moe_capacity_factor:g}"]
        if c.moe_a2a_overlap and "ovl" not in c.short_label().split():
            args.append("--moe-a2a-overlap")
        if getattr(c, "moe_forced_balance", False):
            args.append("--moe-forced-balance")
        dispatcher = getattr(c, "moe_dispatcher", None)
        shared_overlap = getattr(c, "moe_shared_expert_overlap", False)
        if dispatcher is not None and dispatcher not in c.short_label().split() and not (
                shared_overlap and dispatcher == "alltoall"):  # the overlap implies alltoall
            args += ["--moe-dispatcher", dispatcher]
        if shared_overlap:
            args.append("--moe-shared-expert-overlap")
    if not getattr(c, "mtp", True):
        args.append("--no-mtp")
    if not getattr(c, "moe_permute_fusion", True):  # Megatron's un-fused permutation
        args.append("--no-moe-permute-fusion")
    if getattr(c, "contiguous_checkpoints", False):  # fit: full+dist's DeepSpeed buffers ahead
        args.append("--contiguous-checkpoints")
    if getattr(c, "compile_loss", False):  # fit: torchtitan's compiled loss
        args.append("--compile-loss")
    if getattr(c, "torchtitan_flex_ac", False):  # torchtitan < v0.2.1's flex path of op SAC
        args.append("--torchtitan-flex-ac")
    return args
