"""Fit a hardware profile's efficiency factors to measured training runs.

`plan3d calibrate runs.csv --hw h100-nvlink -o my-cluster.toml` reads a CSV or JSON file of
measured step times (`load_measurements`), fits the factors of the profile that a cost model can
get wrong on a particular cluster — the GEMM efficiency of the precisions the runs use, the HBM
efficiency, and the achievable bus bandwidths of the fast (NVLink) domain and of the network —
by least squares on log step time (`calibrate`), and writes the fitted profile as a TOML file
that `load_hardware` reads back (`profile_to_toml`, `calibration_toml`).

Every prediction goes through `cost.plan_costs`: the fit perturbs the numbers `cost.numbers`
builds (gemm_eff, hbm_eff, fast_bw, net_bw), never a second copy of a formula. The optimiser is
`scipy.optimize.least_squares` (trust-region reflective, bounded) in log-parameter space with a
central-difference Jacobian (each run one vectorised `plan_costs` call per evaluation); scipy is
imported by this fit alone, never at start-up.

It fits only what the runs constrain: a factor no run depends on (no run crosses the network),
one the runs cannot tell from a factor already fitted (its Jacobian column inside their span),
or one that lowers the error by less than the model's own uncertainty explains, stays at the
profile's value with the reason (forward selection, `_forward`). Each fitted value carries its
1σ uncertainty; `check_writable` refuses to write a fit that did not converge, ended on a bound,
or whose uncertainty exceeds a value.
"""

from __future__ import annotations

import csv
import difflib
import json
import math
import statistics
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from .catalog import load_model
from .errors import PlanError
from .formulas.choices import Attention, Precision, Recompute, Schedule, ZeroStage
from .model.cost import Choices, numbers, plan_costs
from .model.estimate import check_config
from .model.numbers import FALLS_BACK_ON_GEMM_16, attention_precision
from .schema import HardwareProfile, ModelSpec, PlanConfig
from .tomltext import toml_value
from .units import GB, GIB

# --------------------------------------------------------------------------------------------
# Measurements

REQUIRED_COLUMNS = ("model", "dp", "tp", "pp", "mbs", "gbs", "step_s")
OPTIONAL_COLUMNS = ("id", "gpus", "cp", "vpp", "seq_len", "zero", "recompute", "sp", "precision",
                    "framework", "schedule", "attention", "overlap", "grad_dtype", "peak_mem_gib",
                    "cp_kind", "cp_a2a", "dp_shard")
COLUMN_ALIASES = {"zero_stage": "zero", "sequence_parallel": "sp", "overlap_grad_reduce": "overlap",
                  "name": "id", "n_gpus": "gpus"}
KNOWN_COLUMNS = REQUIRED_COLUMNS + OPTIONAL_COLUMNS

_TRUE = {"true", "yes", "y", "1", "on"}
_FALSE = {"false", "no", "n", "0", "off"}


class Measurement(BaseModel):
    """One measured training run: the model, its layout, and what was measured."""

    model_config = ConfigDict(frozen=True)

    id: str
    model: ModelSpec
    config: PlanConfig
    step_s: float
    peak_mem_gib: float | None = None
    where: str = ""  # "runs.csv row 3", for messages

    @property
    def layout(self) -> str:
        return self.config.label(precision=True)

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any], where: str = "",
                    base_dir: Path | None = None) -> Measurement:
        """A measurement from one row's fields (strings from a CSV, or JSON values), with the
        documented defaults; a PlanError names `where` and the field on bad input. `model` may be
        a preset name/alias, a path (tried relative to `base_dir` too), a ModelSpec or a dict of
        ModelSpec fields."""
        return _measurement(fields, where or "measurement", base_dir)


def _prefix(where: str, field: str | None) -> str:
    return f"{where}, field '{field}'" if field else where


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _get(fields: Mapping[str, Any], key: str, where: str, required: bool = False) -> Any:
    value = fields.get(key)
    if _blank(value):
        if required:
            raise PlanError(f"{_prefix(where, key)}: missing value (required)")
        return None
    return value.strip() if isinstance(value, str) else value


def _int(fields, key, where, default=None, required=False, lo=1, hi=None) -> int:
    value = _get(fields, key, where, required)
    if value is None:
        return default
    if isinstance(value, bool):
        raise PlanError(f"{_prefix(where, key)}: expected a whole number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PlanError(f"{_prefix(where, key)}: expected a whole number, got {value!r}") from None
    if not math.isfinite(number) or number != int(number):
        raise PlanError(f"{_prefix(where, key)}: expected a whole number, got {value!r}")
    number = int(number)
    if number < lo or (hi is not None and number > hi):
        span = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise PlanError(f"{_prefix(where, key)}: must be {span}, got {number}")
    return number


def _positive(fields, key, where, required=False) -> float | None:
    value = _get(fields, key, where, required)
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PlanError(f"{_prefix(where, key)}: expected a number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or number <= 0:
        raise PlanError(f"{_prefix(where, key)}: must be a positive number, got {value!r}")
    return number


def _bool(fields, key, where, default: bool) -> bool:
    value = _get(fields, key, where)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise PlanError(f"{_prefix(where, key)}: expected true or false, got {value!r}")


def _choice(fields, key, where, enum, default):
    value = _get(fields, key, where)
    if value is None:
        return default
    try:
        return enum(str(value).lower())
    except ValueError:
        known = ", ".join(e.value for e in enum)
        raise PlanError(f"{_prefix(where, key)}: expected one of {known}, got {value!r}") from None


def _resolve_model(value: Any, where: str, base_dir: Path | None) -> ModelSpec:
    if isinstance(value, ModelSpec):
        return value
    if isinstance(value, Mapping):
        try:
            return ModelSpec(**{"name": "inline", **value})
        except ValidationError as err:
            msgs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
            raise PlanError(f"{_prefix(where, 'model')}: {msgs}") from None
    name = str(value).strip()
    if base_dir is not None and not Path(name).expanduser().is_absolute():
        beside = base_dir / name
        if beside.exists() and not Path(name).exists():  # a file, or a model folder
            name = str(beside)
    try:
        return load_model(name)
    except PlanError as err:
        raise PlanError(f"{_prefix(where, 'model')}: {err}") from None


def _measurement(fields: Mapping[str, Any], where: str, base_dir: Path | None,
                 default_id: str | None = None, framework: str = "megatron") -> Measurement:
    fields = {COLUMN_ALIASES.get(k, k): v for k, v in fields.items()}
    unknown = sorted(set(fields) - set(KNOWN_COLUMNS))
    if unknown:
        raise PlanError(f"{where}: {_unknown_columns(unknown)}")
    model_value = _get(fields, "model", where, required=True)
    model = _resolve_model(model_value, where, base_dir)
    dp = _int(fields, "dp", where, required=True)
    tp = _int(fields, "tp", where, required=True)
    pp = _int(fields, "pp", where, required=True)
    cp = _int(fields, "cp", where, 1)
    vpp = _int(fields, "vpp", where, 1)
    mbs = _int(fields, "mbs", where, required=True)
    gbs = _int(fields, "gbs", where, required=True)
    step_s = _positive(fields, "step_s", where, required=True)
    peak_mem = _positive(fields, "peak_mem_gib", where)
    gpus = _int(fields, "gpus", where)
    if gpus is not None and gpus != dp * tp * pp * cp:
        raise PlanError(f"{_prefix(where, 'gpus')}: {gpus} GPUs, but dp·tp·pp·cp = "
                        f"{dp}·{tp}·{pp}·{cp} = {dp * tp * pp * cp}")
    if gbs % (mbs * dp):
        raise PlanError(f"{_prefix(where, 'gbs')}: global batch {gbs} must be mbs·n_micro·dp with "
                        f"n_micro a whole number, but {gbs} / (mbs·dp = {mbs}·{dp}) = "
                        f"{gbs / (mbs * dp):g}")
    seq_len = _int(fields, "seq_len", where, model.seq_len)
    zero = _int(fields, "zero", where, 1, lo=0, hi=3)
    default_schedule = Schedule.INTERLEAVED if vpp > 1 else Schedule.ONE_F_ONE_B
    values = dict(
        dp=dp, tp=tp, pp=pp, cp=cp, vpp=vpp, mbs=mbs, n_micro=gbs // (mbs * dp), gbs=gbs,
        seq_len=seq_len, zero_stage=ZeroStage(zero),
        recompute=_choice(fields, "recompute", where, Recompute, Recompute.SELECTIVE),
        sequence_parallel=_bool(fields, "sp", where, tp > 1),
        schedule=_choice(fields, "schedule", where, Schedule, default_schedule),
        precision=_choice(fields, "precision", where, Precision, Precision.BF16),
        attention=_choice(fields, "attention", where, Attention, Attention.FLASH),
        overlap_grad_reduce=_bool(fields, "overlap", where, True),
        grad_dtype=str(_get(fields, "grad_dtype", where) or "fp32").lower(),
        framework=str(_get(fields, "framework", where) or framework).lower(),
        # the run's context-parallel kind and hybrid sharding, when it used them
        cp_kind=_get(fields, "cp_kind", where) or None, cp_a2a=_int(fields, "cp_a2a", where),
        dp_shard=_int(fields, "dp_shard", where),
    )
    try:
        config = PlanConfig(**values)
    except ValidationError as err:
        e = err.errors()[0]
        field = str(e["loc"][0]) if e["loc"] else None
        raise PlanError(f"{_prefix(where, field)}: {e['msg']}") from None
    run_id = _get(fields, "id", where)
    return Measurement(id=str(run_id) if run_id is not None else default_id or where, model=model,
                       config=config, step_s=step_s, peak_mem_gib=peak_mem, where=where)


def _unknown_columns(unknown: list[str]) -> str:
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, KNOWN_COLUMNS, n=1, cutoff=0.6)
        hints.append(f"'{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    return (f"unknown column{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; known: "
            f"{', '.join(KNOWN_COLUMNS)}")


def _csv_rows(path: Path, text: str) -> list[tuple[int, dict]]:
    reader = csv.reader(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    try:
        header = next(reader)
    except StopIteration:
        raise PlanError(f"{path}: empty file (expected a header row: "
                        f"{', '.join(REQUIRED_COLUMNS)}, ...)") from None
    header = [COLUMN_ALIASES.get(h.strip().lower(), h.strip().lower()) for h in header]
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise PlanError(f"{path}: column {', '.join(repr(d) for d in dupes)} appears twice")
    unknown = sorted(set(header) - set(KNOWN_COLUMNS))
    if unknown:
        raise PlanError(f"{path}: {_unknown_columns(unknown)}")
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise PlanError(f"{path}: missing column{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(repr(m) for m in missing)} (required: "
                        f"{', '.join(REQUIRED_COLUMNS)})")
    rows = []
    for n, cells in enumerate((r for r in reader if any(c.strip() for c in r)), start=1):
        if len(cells) != len(header):
            raise PlanError(f"{path} row {n}: {len(cells)} cells, but the header has "
                            f"{len(header)} columns")
        rows.append((n, dict(zip(header, cells, strict=True))))
    return rows


def _json_rows(path: Path, text: str) -> list[tuple[int, dict]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"{path}: not valid JSON ({exc})") from None
    if isinstance(data, dict):
        for key in ("runs", "measurements"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
    if not isinstance(data, list):
        raise PlanError(f"{path}: expected a list of runs (or an object with a 'runs' list)")
    rows = []
    for n, item in enumerate(data, start=1):
        where = f"{path} row {n}"
        if not isinstance(item, dict):
            raise PlanError(f"{where}: expected an object of column: value, got {item!r}")
        item = {COLUMN_ALIASES.get(str(k).lower(), str(k).lower()): v for k, v in item.items()}
        missing = [c for c in REQUIRED_COLUMNS if c not in item]
        if missing:
            raise PlanError(f"{where}: missing field{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(repr(m) for m in missing)}")
        rows.append((n, item))
    return rows


def load_measurements(path: str | Path, hw: HardwareProfile | None = None,
                      framework: str = "megatron") -> list[Measurement]:
    """The measured runs of a CSV (header row; `#` lines are comments) or JSON file (a list of
    objects, or {"runs": [...]}). Columns: model, dp, tp, pp, mbs, gbs, step_s (required); id,
    gpus, cp, vpp, seq_len, zero, recompute, sp, precision, schedule, attention, overlap,
    grad_dtype, peak_mem_gib, framework (optional; default: the `framework` argument). With `hw`,
    each layout is also checked against the profile (divisibility, precision support)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise PlanError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    is_json = path.suffix.lower() == ".json" or text.lstrip().startswith(("[", "{"))
    rows = _json_rows(path, text) if is_json else _csv_rows(path, text)
    if not rows:
        raise PlanError(f"{path}: no runs (the file has a header but no data rows)")
    out = [_measurement(fields, f"{path} row {n}", path.parent, f"row {n}", framework)
           for n, fields in rows]
    if hw is not None:
        for m in out:
            _check(m, hw)
    return out


def _check(m: Measurement, hw: HardwareProfile) -> None:
    try:
        check_config(m.model, hw, m.config)
    except PlanError as err:
        raise PlanError(f"{m.where or m.id}: {err}") from None


# --------------------------------------------------------------------------------------------
# The factors a calibration can fit

FACTORS = ("gemm", "hbm", "fast_busbw", "net_busbw")
SENSITIVITY_MIN = 1e-3  # max |d log step / d log factor| below which a factor is unidentifiable
SIGNIFICANT_DIGITS = 5  # fitted values are rounded to this many before they enter the profile


@dataclass(frozen=True)
class _Factor:
    key: str  # "gemm.bf16", "hbm", "fast_busbw", "net_busbw"
    path: str  # where it sits in the profile file
    attr: str  # the name cost.numbers gives it
    scale: float  # profile unit → base unit
    lower: float
    upper: float
    precision: Precision | None = None
    # what else the factor carries, in proportion: (the name cost.numbers gives it, its path in
    # the profile, its profile value) — the NVLS figure beside the NVLink ring's
    follows: tuple[tuple[str, str, float], ...] = ()
    start: float = 1.0  # the profile's value of the factor itself


def _factors(hw: HardwareProfile) -> list[_Factor]:
    """The profile's factors a calibration can fit. The fast domain's factor is its ring bus
    bandwidth, and NCCL's tuner reads the NVLink fabric through two figures (formulas/
    collectives.py): the ring's W and NVLS's all-reduce figure, which it takes instead where it
    is faster. A fabric slower or faster than the profile's is so for both (the same NVLinks and
    switches carry them), so the NVLS figure moves with W in proportion; fitting W alone would
    leave NVLS at the profile's value, and the tuner would move its collectives onto NVLS
    wherever W fell below it — the step no longer depending on the factor being fitted."""
    out = [_Factor(f"gemm.{p.value}", f"efficiency.gemm.{p.value}", "gemm_eff", 1.0, 0.05, 1.0, p)
           for p in Precision if hw.gemm_efficiency(p) is not None]
    out.append(_Factor("hbm", "efficiency.hbm", "hbm_eff", 1.0, 0.05, 1.0))
    nvls = hw.fast.nvls_busbw_gb_per_s
    out.append(_Factor("fast_busbw", "fast.busbw_gb_per_s", "fast_bw", GB,
                       0.01 * hw.fast.gb_per_s, hw.fast.gb_per_s,
                       follows=(() if nvls is None
                                else (("nvls_bw", "fast.nvls_busbw_gb_per_s", nvls),)),
                       start=hw.fast.busbw_gb_per_s))
    out.append(_Factor("net_busbw", "network.busbw_gb_per_s", "net_bw", GB,
                       0.01 * hw.network.gb_per_s, hw.network.gb_per_s))
    return out


def factor_paths(factor: _Factor, value: float) -> dict[str, float]:
    """The profile paths a factor set to `value` writes: its own, and those that follow it in
    proportion (rounded as fitted values are)."""
    return {factor.path: value, **{path: _round(start * value / factor.start)
                                   for _, path, start in factor.follows}}


def profile_with_factors(hw: HardwareProfile, values: Mapping[str, float], **top
                         ) -> HardwareProfile:
    """A copy of the profile with the factors named by key (gemm.bf16, hbm, fast_busbw,
    net_busbw) set to `values`, each with what follows it (_factors): the profile a calibration
    that found these values writes."""
    by_key = {f.key: f for f in _factors(hw)}
    paths: dict[str, float] = {}
    for key, value in values.items():
        paths.update(factor_paths(by_key[key], value))
    return profile_with(hw, paths, **top)


def _profile_value(hw: HardwareProfile, path: str) -> float:
    value: Any = hw
    for part in path.split("."):
        value = getattr(value, part)
    return float(value)


def profile_with(hw: HardwareProfile, values: Mapping[str, float], **top) -> HardwareProfile:
    """A copy of the profile with the values at the dotted paths (e.g. efficiency.hbm) replaced."""
    data = hw.model_dump()
    for path, value in values.items():
        *parents, leaf = path.split(".")
        node = data
        for part in parents:
            node = node[part]
        node[leaf] = value
    data.update(top)
    return HardwareProfile(**data)


def _round(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


# --------------------------------------------------------------------------------------------
# Results


class FactorFit(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str  # gemm.bf16, hbm, fast_busbw, net_busbw
    path: str  # efficiency.gemm.bf16, efficiency.hbm, fast.busbw_gb_per_s, network.busbw_gb_per_s
    unit: str  # "" (a fraction) or "GB/s"
    before: float
    after: float
    lower: float
    upper: float
    fitted: bool
    status: Literal["fitted", "at-bound", "left"]
    reason: str  # why it was left, or how well it is determined
    sensitivity: float | None = None  # max over runs of |d log step / d log factor| at the start
    rel_std: float | None = None  # ~1σ relative uncertainty of a fitted value
    # the profile values that moved with it in proportion: path → (before, after)
    carried: dict[str, tuple[float, float]] = {}


class RunFit(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    model: str
    layout: str
    gpus: int
    measured_s: float
    predicted_before_s: float
    predicted_after_s: float
    error_before: float  # predicted / measured − 1
    error_after: float
    measured_mem_gib: float | None = None
    predicted_mem_gib: float
    mem_error: float | None = None  # predicted / measured − 1, reported only (not fitted)


class CalibrationResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    hardware: str  # the starting profile's name
    profile: HardwareProfile  # the fitted profile
    factors: list[FactorFit]
    runs: list[RunFit]
    median_abs_error_before: float
    max_abs_error_before: float
    median_abs_error_after: float
    max_abs_error_after: float
    rms_log_error_before: float  # √(mean of log(predicted / measured)²): what the fit minimises
    rms_log_error_after: float
    iterations: int
    converged: bool
    warnings: list[str] = []
    # runs − fitted factors (those on a bound not counted: the data did not set them): how many
    # runs are left to check the fit (0: exactly determined)
    degrees_of_freedom: int = 0

    @property
    def fitted(self) -> list[FactorFit]:
        return [f for f in self.factors if f.fitted]

    @property
    def left(self) -> list[FactorFit]:
        return [f for f in self.factors if not f.fitted]


# --------------------------------------------------------------------------------------------
# The fit


@dataclass
class _Run:
    m: Measurement
    x: SimpleNamespace
    choices: Choices


def _predict(runs: list[_Run], factors: list[_Factor], values: np.ndarray) -> np.ndarray:
    """Step times (runs × K) with the factors set to `values` (K × factors, profile units),
    each run one vectorised plan_costs call."""
    k = values.shape[0]
    out = np.empty((len(runs), k))
    for i, run in enumerate(runs):
        x = SimpleNamespace(**vars(run.x))
        run_precision = run.m.config.precision
        sixteen = attention_precision(run_precision)  # the precision behind x.*_16
        for j, f in enumerate(factors):
            if f.precision is None or f.precision is run_precision:
                setattr(x, f.attr, values[:, j] * f.scale)
            for attr, _, start in f.follows:  # in proportion to the factor (_factors)
                setattr(x, attr, values[:, j] / f.start * start * f.scale)
            if f.precision is not None and f.precision is sixteen:
                setattr(x, f"{f.attr}_16", values[:, j] * f.scale)
                # the kernels the profile has not measured run at the 16-bit GEMM figure
                # (model.numbers.FALLS_BACK_ON_GEMM_16), so they move with it
                for attr in FALLS_BACK_ON_GEMM_16:
                    if getattr(run.x, attr) == run.x.gemm_eff_16:
                        setattr(x, attr, values[:, j] * f.scale)
        out[i] = np.broadcast_to(np.asarray(plan_costs(x, run.choices)["step_s"], float), (k,))
    return out


class _Problem:
    """Residuals log(predicted / measured) and their Jacobian in θ = log(factor)."""

    H = 1e-5  # central-difference step in log space

    def __init__(self, runs: list[_Run], factors: list[_Factor]):
        self.runs, self.factors = runs, factors
        self.log_measured = np.log([r.m.step_s for r in runs])

    def residuals(self, theta: np.ndarray) -> np.ndarray:
        return np.log(_predict(self.runs, self.factors, np.exp(theta)[None, :])[:, 0]) \
            - self.log_measured

    def jacobian(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(theta)
        thetas = np.repeat(theta[None, :], 1 + 2 * n, axis=0)
        for j in range(n):
            thetas[1 + 2 * j, j] += self.H
            thetas[2 + 2 * j, j] -= self.H
        logs = np.log(_predict(self.runs, self.factors, np.exp(thetas)))
        r = logs[:, 0] - self.log_measured
        jac = (logs[:, 1::2] - logs[:, 2::2]) / (2 * self.H)
        return r, jac


def _least_squares(problem: _Problem, theta0: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                   max_nfev: int = 200) -> tuple[np.ndarray, int, bool, np.ndarray]:
    """scipy's bounded trust-region reflective least squares on the log residuals, with the
    problem's own central-difference Jacobian (one vectorised plan_costs batch per run). Returns
    θ, the Jacobian evaluations (the iterations), whether it converged, and which bound each
    factor ended on (−1 lower, +1 upper, 0 free; scipy's active_mask), a factor on its bound
    placed exactly there."""
    from scipy.optimize import least_squares  # only calibrate pays for importing scipy

    start = np.clip(theta0, lo, hi)
    fit = least_squares(problem.residuals, start, jac=lambda t: problem.jacobian(t)[1],
                        bounds=(lo, hi), method="trf", ftol=1e-12, xtol=1e-12, gtol=1e-12,
                        max_nfev=max_nfev)
    theta = np.where(fit.active_mask < 0, lo, np.where(fit.active_mask > 0, hi, fit.x))
    return theta, int(fit.njev or 0), bool(fit.status > 0), fit.active_mask


def _selected(fit: Iterable[str]) -> set[str]:
    if isinstance(fit, str):
        fit = [fit]
    chosen = {f.strip().lower() for f in fit}
    bad = sorted(chosen - set(FACTORS))
    if bad:
        raise PlanError(f"cannot fit {', '.join(repr(b) for b in bad)}; the factors are "
                        f"{', '.join(FACTORS)}")
    return chosen


# What the runs must show before a factor moves. A prediction for a run carries the model's own
# error, ~σ = its median |error| on published runs (planner.model.validation.model_uncertainty: 5.3 % of
# a step on H100, 3.6 % on A100 when written), however clean the measurement; so a factor enters the fit only
# when it lowers the sum of squared log errors by more than that error explains: by ≥ χ²₁(95 %)·σ²
# (a likelihood-ratio test with one degree of freedom and the noise σ; χ²₁(0.95) = 3.841, any
# table). A uniform 10 % slowdown is then one factor — the GEMM efficiency, which moves most of
# every step — not four that each absorb a part of what the model cannot tell apart.
CHI2_95_ONE_DOF = 3.841
# A factor whose column of the Jacobian (d log step / d log factor over the runs) has less than
# this share of its length outside the span of the factors already fitted moves the runs as they
# do: the runs cannot tell it from them (condition number ≳ 1 / COLLINEAR_MIN).
COLLINEAR_MIN = 0.05


def _asked(all_factors: list[_Factor], chosen: set[str], used: set[Precision]
           ) -> tuple[list[_Factor], dict[str, str]]:
    """The factors --fit names for which some run could say something, and why the others stay."""
    reasons: dict[str, str] = {}
    candidates = []
    for f in all_factors:
        kind = f.key.split(".")[0]
        if kind not in chosen:
            reasons[f.key] = f"not asked for (fit = {', '.join(sorted(chosen)) or 'nothing'})"
        elif f.precision is not None and f.precision not in used:
            reasons[f.key] = f"no run uses {f.precision.value}"
        else:
            candidates.append(f)
    return candidates, reasons


def _sensitive(runs: list[_Run], candidates: list[_Factor], before: dict[str, float]
               ) -> tuple[list[_Factor], dict[str, str], dict[str, float]]:
    """The candidates some run's step time depends on (max |d log step / d log factor| at the
    profile's values ≥ SENSITIVITY_MIN), the reasons for the others, and every sensitivity."""
    if not candidates:
        return [], {}, {}
    _, jac0 = _Problem(runs, candidates).jacobian(np.log([before[f.key] for f in candidates]))
    what = {"fast_busbw": " (no run's exposed communication uses the fast domain)",
            "net_busbw": " (no run's exposed communication crosses the network)"}
    sensitivity = {f.key: float(np.max(np.abs(jac0[:, j]))) for j, f in enumerate(candidates)}
    reasons = {f.key: ("no run's step time depends on it" + what.get(f.key, "")
                       + f": max |d log step / d log factor| = {sensitivity[f.key]:.1e}")
               for f in candidates if sensitivity[f.key] < SENSITIVITY_MIN}
    return [f for f in candidates if f.key not in reasons], reasons, sensitivity


@dataclass
class _Fit:
    """One least-squares fit of some factors (the others at the profile's values)."""

    factors: list[_Factor]
    theta: np.ndarray  # log factor values
    iterations: int
    converged: bool
    active: np.ndarray  # scipy's active_mask: −1 on the lower bound, +1 on the upper, 0 free
    sum_squares: float  # Σ log(predicted / measured)²

    @staticmethod
    def of(runs: list[_Run], factors: list[_Factor], before: dict[str, float],
           start: _Fit | None = None) -> _Fit:
        """Fit `factors`, each starting from the profile's value or, where `start` fitted it,
        from there."""
        problem = _Problem(runs, factors)
        lo = np.log([f.lower for f in factors])
        hi = np.log([f.upper for f in factors])
        known = dict(zip((f.key for f in start.factors), start.theta)) if start else {}
        theta0 = np.array([known.get(f.key, math.log(before[f.key])) for f in factors])
        theta, iterations, converged, active = _least_squares(problem, theta0, lo, hi)
        r = problem.residuals(theta)
        return _Fit(factors, theta, iterations, converged, active, float(r @ r))


def _outside_span(jac: np.ndarray, j: int, span: list[int]) -> float:
    """The share of column j's length outside the span of the columns `span` (1 with none)."""
    col = jac[:, j]
    norm = float(np.linalg.norm(col))
    if norm == 0:
        return 0.0
    if not span:
        return 1.0
    basis = jac[:, span]
    coef, *_ = np.linalg.lstsq(basis, col, rcond=None)
    return float(np.linalg.norm(col - basis @ coef)) / norm


def _forward(runs: list[_Run], candidates: list[_Factor], before: dict[str, float], sigma: float
             ) -> tuple[_Fit | None, dict[str, str]]:
    """Forward selection: from no factor, add the one that lowers the squared log error most, while
    it lowers it by ≥ CHI2_95_ONE_DOF·σ² and the runs can tell it from those already in (its
    Jacobian column outside their span by ≥ COLLINEAR_MIN). Returns the last fit (None if no
    factor entered) and why each candidate left out stays."""
    theta0 = np.log([before[f.key] for f in candidates])
    r0 = _Problem(runs, candidates).residuals(theta0)
    best: _Fit | None = None
    current, reasons = float(r0 @ r0), {}
    left = list(candidates)
    while left:
        chosen = best.factors if best else []
        trial = chosen + left
        theta = np.concatenate([best.theta if best else [], np.log([before[f.key] for f in left])])
        _, jac = _Problem(runs, trial).jacobian(theta)
        span = list(range(len(chosen)))
        for j, f in enumerate(left, len(chosen)):
            share = _outside_span(jac, j, span)
            if share < COLLINEAR_MIN:
                names = ", ".join(c.key for c in chosen)
                reasons[f.key] = (f"the runs cannot tell it from {names}: they move the runs "
                                  f"alike (only {share:.1%} of its effect is its own)")
        left = [f for f in left if f.key not in reasons]
        fits = [_Fit.of(runs, chosen + [f], before, best) for f in left]
        if not fits:
            break
        fit = _likeliest(fits, before, CHI2_95_ONE_DOF * sigma**2)
        gain = current - fit.sum_squares
        if gain < CHI2_95_ONE_DOF * sigma**2:
            for f in left:
                reasons[f.key] = (
                    f"the runs do not need it: no factor left lowers the squared log error by "
                    f"more than {CHI2_95_ONE_DOF:g}·σ² (σ = {sigma:.1%}, the model's own "
                    f"uncertainty; the best, {fit.factors[-1].key}, by {gain:.2g})")
            break
        best, current = fit, fit.sum_squares
        left = [f for f in left if f is not fit.factors[-1]]
    return _backward(runs, best, before, sigma, reasons), reasons


def _likeliest(fits: list[_Fit], before: dict[str, float], tell: float) -> _Fit:
    """The fit whose added factor (its last) explains the runs best; of those the runs cannot
    tell apart from the best (squared log error within `tell` of it), the one whose added factor
    moves least from the profile's value: a uniform slowdown is put on the factor that explains it
    with the smallest change."""
    low = min(f.sum_squares for f in fits)
    near = [f for f in fits if f.sum_squares <= low + tell]
    return min(near, key=lambda f: (abs(f.theta[-1] - math.log(before[f.factors[-1].key])),
                                    f.sum_squares))


def _backward(runs: list[_Run], best: _Fit | None, before: dict[str, float], sigma: float,
              reasons: dict[str, str]) -> _Fit | None:
    """Drop again each factor that a later one made unneeded: while leaving one out raises the
    squared log error by less than CHI2_95_ONE_DOF·σ², refit without it (its reason into
    `reasons`)."""
    tell = CHI2_95_ONE_DOF * sigma**2
    while best is not None and len(best.factors) > 1:
        trials = [(f, _Fit.of(runs, [g for g in best.factors if g is not f], before, best))
                  for f in best.factors]
        f, fit = min(trials, key=lambda t: t[1].sum_squares)
        if fit.sum_squares - best.sum_squares >= tell:
            break
        reasons[f.key] = (f"the runs do not need it once {', '.join(g.key for g in fit.factors)} "
                          f"are fitted: leaving it out raises the squared log error by "
                          f"{fit.sum_squares - best.sum_squares:.2g}, less than "
                          f"{CHI2_95_ONE_DOF:g}·σ² (σ = {sigma:.1%}, the model's own uncertainty)")
        best = fit
    return best


def _bounds_hit(fit: _Fit) -> dict[str, str]:
    """The fitted factors that ended on a bound: key → "lower" or "upper"."""
    out = {}
    for j, f in enumerate(fit.factors):
        if fit.active[j] < 0 or fit.theta[j] <= math.log(f.lower) + 1e-6:
            out[f.key] = "lower"
        elif fit.active[j] > 0 or fit.theta[j] >= math.log(f.upper) - 1e-6:
            out[f.key] = "upper"
    return out


def _fit_warnings(fit: _Fit, bound_of: dict[str, str]) -> list[str]:
    warnings = []
    if not fit.converged:
        warnings.append(f"the fit stopped after {fit.iterations} iterations without converging")
    for f in fit.factors:
        if f.key in bound_of:
            bound = f.lower if bound_of[f.key] == "lower" else f.upper
            warnings.append(f"{f.path} ran into its {bound_of[f.key]} bound ({bound:g}): no "
                            "physical value explains the runs; check the measurements and "
                            "the layouts they were taken with")
    return warnings


def _factor_rows(all_factors: list[_Factor], fit: _Fit | None, before: dict[str, float],
                 after: dict[str, float], reasons: dict[str, str], sensitivity: dict[str, float],
                 rel_std: dict[str, float], bound_of: dict[str, str]) -> list[FactorFit]:
    rows = []
    fitted = fit.factors if fit else []
    for f in all_factors:
        is_fitted = f in fitted
        unit = "GB/s" if f.scale == GB else ""
        if not is_fitted:
            reason = reasons[f.key]
        elif f.key in bound_of:
            reason = f"at its {bound_of[f.key]} bound"
        else:
            spread = _round(after[f.key] * rel_std[f.key], 2)
            reason = f"1σ ±{spread:g}{' ' + unit if unit else ''}"
        rows.append(FactorFit(
            key=f.key, path=f.path, unit=unit, before=before[f.key], after=after[f.key],
            lower=f.lower, upper=f.upper, fitted=is_fitted,
            status=("at-bound" if f.key in bound_of else "fitted") if is_fitted else "left",
            reason=reason, sensitivity=sensitivity.get(f.key),
            rel_std=rel_std.get(f.key) if is_fitted else None,
            carried={path: (start, value) for (_, path, start), value in zip(
                f.follows, list(factor_paths(f, after[f.key]).values())[1:])}
            if is_fitted else {}))
    return rows


def calibrate(measurements: Sequence[Measurement], hw: HardwareProfile,
              fit: Iterable[str] = FACTORS, name: str | None = None) -> CalibrationResult:
    """Fit the profile's factors named in `fit` (of gemm, hbm, fast_busbw, net_busbw) that the
    measured step times constrain, by least squares on log(predicted / measured), within physical
    bounds: efficiencies in [0.05, 1], bus bandwidths in [1 %, 100 %] of the link's nominal
    gb_per_s. A factor stays at the profile's value, with the reason, when no run uses it (a
    precision), no run's step depends on it, the runs cannot tell it from a factor already fitted,
    or fitting it lowers the error by less than the model's own uncertainty explains (_forward).
    Returns the fitted profile (named `name`, default "<hw>-calibrated") with the before/after of
    every factor, each fitted value's 1σ uncertainty, and every run."""
    from .model.validation import model_uncertainty

    if not measurements:
        raise PlanError("no measurements to calibrate against")
    chosen = _selected(fit)
    for m in measurements:
        _check(m, hw)
    runs = [_Run(m, numbers(m.model, hw, m.config), Choices.of(m.config)) for m in measurements]
    all_factors = _factors(hw)
    before = {f.key: _profile_value(hw, f.path) for f in all_factors}
    candidates, reasons = _asked(all_factors, chosen, {m.config.precision for m in measurements})
    candidates, more, sensitivity = _sensitive(runs, candidates, before)
    reasons.update(more)
    sigma = model_uncertainty(hw)[0]
    best, more = _forward(runs, candidates, before, sigma) if candidates else (None, {})
    reasons.update(more)

    after, rel_std, bound_of, warnings = dict(before), {}, {}, []
    if best is not None:
        bound_of = _bounds_hit(best)
        for j, f in enumerate(best.factors):
            after[f.key] = _round(float(np.exp(best.theta[j])))
        rel_std = _uncertainty(_Problem(runs, best.factors), best.theta,
                               [f.key not in bound_of for f in best.factors], sigma)
        warnings = _fit_warnings(best, bound_of)
    fitted = best.factors if best else []
    n = len(measurements)
    description = (f"{hw.description} — calibrated to {n} measured run"
                   f"{'s' if n != 1 else ''}").strip(" —")
    profile = profile_with_factors(hw, {f.key: after[f.key] for f in fitted},
                                   name=name or f"{hw.name}-calibrated", description=description)
    result = _result(hw, profile, _factor_rows(all_factors, best, before, after, reasons,
                                               sensitivity, rel_std, bound_of),
                     _run_rows(measurements, hw, profile), best, warnings)
    exact = exactly_determined(result)
    if exact:  # said at once; check_writable refuses to write it
        result = result.model_copy(update={"warnings": [
            *result.warnings, f"{exact}; -o writes it only with --force"]})
    return result


def _result(hw: HardwareProfile, profile: HardwareProfile, factors: list[FactorFit],
            rows: list[RunFit], best: _Fit | None, warnings: list[str]) -> CalibrationResult:
    err_before = [abs(r.error_before) for r in rows]
    err_after = [abs(r.error_after) for r in rows]

    def rms_log(errors):
        return math.sqrt(statistics.fmean(math.log1p(e) ** 2 for e in errors))

    return CalibrationResult(
        hardware=hw.name, profile=profile, factors=factors, runs=rows,
        median_abs_error_before=statistics.median(err_before),
        max_abs_error_before=max(err_before),
        median_abs_error_after=statistics.median(err_after), max_abs_error_after=max(err_after),
        rms_log_error_before=rms_log(r.error_before for r in rows),
        rms_log_error_after=rms_log(r.error_after for r in rows),
        iterations=best.iterations if best else 0,
        converged=best.converged if best else True, warnings=warnings,
        degrees_of_freedom=len(rows) - sum(f.status == "fitted" for f in factors))


WORSE_TOLERANCE = 1e-4
"""How much larger the fitted profile's rms log error may be than the starting profile's before
calibrate calls it worse: 10⁻⁴ (0.01 % of a step time, far below what a measurement resolves),
so that rounding the fitted values to SIGNIFICANT_DIGITS never counts as worse."""


def check_not_worse(result: CalibrationResult) -> None:
    """Refuse (PlanError) a fitted profile that predicts the runs worse than the profile it
    started from, by the measure the fit minimises (rms of log(predicted / measured)). It happens
    when a starting value lies outside the fit's physical bounds (the fit starts from the bound),
    or when a factor stops on a bound."""
    if result.rms_log_error_after > result.rms_log_error_before + WORSE_TOLERANCE:
        raise PlanError(
            f"the calibrated profile fits the runs worse than {result.hardware} did (rms log "
            f"error {result.rms_log_error_after:.4f} against {result.rms_log_error_before:.4f}, "
            f"median |error| {result.median_abs_error_after:.1%} against "
            f"{result.median_abs_error_before:.1%}); not written — check the runs and --fit, or "
            "give --force to write it anyway")


def exactly_determined(result: CalibrationResult) -> str:
    """What an exactly determined fit is, in one clause: one with a fitted factor and no more
    runs than fitted factors (degrees_of_freedom ≤ 0); '' for any other."""
    free = [f for f in result.fitted if f.status == "fitted"]
    if not free or result.degrees_of_freedom > 0:
        return ""
    n, k = len(result.runs), len(free)
    moved = ", ".join(f"{f.path} {f.before:g} → {f.after:g}" for f in free)
    return (f"exactly determined: {n} run{'s' if n != 1 else ''} for {k} fitted "
            f"factor{'s' if k != 1 else ''} ({moved}) leave{'s' if n == 1 else ''} no run to "
            "check it, so the model's own error goes into the fit unseen")


def check_writable(result: CalibrationResult) -> None:
    """Refuse (PlanError) to write a profile the runs do not support: a fit that did not converge,
    one in which no factor moved, an exactly determined one (no more runs than fitted factors:
    zero residual degrees of freedom, so the fitted values reproduce the runs exactly whatever
    the model's own error and nothing in the data checks them — one run 15 % slower than
    predicted, fitted with --fit hbm, takes the HBM efficiency from 0.89 to 0.30), a fitted value
    on its bound (non-physical: no value inside the bounds explains the runs), or a fitted value
    whose 1σ uncertainty exceeds the value itself (σ of log value > 1); then check_not_worse.
    --force writes it anyway."""
    problems = []
    if not result.converged:
        problems.append(f"the fit did not converge in {result.iterations} iterations")
    if not result.fitted:
        problems.append("the runs moved no factor (each one's reason is in the table)")
    elif exactly_determined(result):
        problems.append(exactly_determined(result))
    for f in result.fitted:
        if f.status == "at-bound":  # no physical value explains the runs: nothing to write
            problems.append(f"{f.path} ran into its bound ({f.after:g}): no physical value "
                            "explains the runs")
        elif f.rel_std is not None and f.rel_std > 1:
            problems.append(f"{f.path} = {f.after:g} is uncertain by more than its value "
                            f"(1σ ×{math.exp(f.rel_std):.3g})")
    if problems:
        raise PlanError(f"not written: {'; '.join(problems)} — add runs with other layouts, or "
                        "give --force to write it anyway")
    check_not_worse(result)


def _uncertainty(problem: _Problem, theta: np.ndarray, free: list[bool], sigma: float
                 ) -> dict[str, float]:
    """~1σ relative uncertainty of each fitted factor (σ of log factor) from the Jacobian at the
    optimum: cov = s²·(JᵀJ)⁻¹, with s² the residual variance but never below σ² (the model's own
    uncertainty on one run's step, which every prediction carries however clean the runs); a
    factor on a bound gets none. Factors the runs cannot tell apart never reach here (_forward)."""
    keys = [f.key for f in problem.factors]
    idx = [j for j, ok in enumerate(free) if ok]
    if not idx:
        return {}
    r, jac = problem.jacobian(theta)
    n, k = len(problem.runs), len(idx)
    s2 = max(float(r @ r) / (n - k) if n > k else 0.0, sigma**2)
    cov = s2 * np.linalg.pinv(jac[:, idx].T @ jac[:, idx])
    return {keys[j]: float(math.sqrt(max(cov[i, i], 0.0))) for i, j in enumerate(idx)}


def _run_rows(measurements: Sequence[Measurement], hw: HardwareProfile,
              fitted: HardwareProfile) -> list[RunFit]:
    rows = []
    for m in measurements:
        old = plan_costs(numbers(m.model, hw, m.config), Choices.of(m.config))
        new = plan_costs(numbers(m.model, fitted, m.config), Choices.of(m.config))
        mem = float(new["total_bytes"]) / GIB
        rows.append(RunFit(
            id=m.id, model=m.model.name, layout=m.layout, gpus=m.config.n_gpus,
            measured_s=m.step_s, predicted_before_s=float(old["step_s"]),
            predicted_after_s=float(new["step_s"]),
            error_before=float(old["step_s"]) / m.step_s - 1,
            error_after=float(new["step_s"]) / m.step_s - 1,
            measured_mem_gib=m.peak_mem_gib, predicted_mem_gib=mem,
            mem_error=mem / m.peak_mem_gib - 1 if m.peak_mem_gib else None))
    return rows


# --------------------------------------------------------------------------------------------
# Writing the profile


def _comment(text: str) -> list[str]:
    return [f"# {line}".rstrip() for line in text.splitlines()]


def profile_to_toml(profile: HardwareProfile, note: str = "",
                    field_notes: Mapping[str, str] | None = None) -> str:
    """The profile as a TOML file `load_hardware` reads: `note` as a header comment, each table of
    the profile ([peak_tflops], [fast], [network], [efficiency], [efficiency.gemm], [runtime]) in
    order, None fields left out. `field_notes` adds a trailing comment to a value by its dotted
    path (e.g. "efficiency.gemm.bf16")."""
    field_notes = field_notes or {}
    lines = _comment(note)

    def table(path: str, data: dict) -> None:
        scalars = [(k, v) for k, v in data.items() if v is not None and not isinstance(v, dict)]
        tables = [(k, v) for k, v in data.items() if isinstance(v, dict)]
        if path and (scalars or not tables):
            if lines:
                lines.append("")
            lines.append(f"[{path}]")
        for key, value in scalars:
            full = f"{path}.{key}" if path else key
            line = f"{key} = {toml_value(value)}"
            if full in field_notes:
                line += "  # " + " ".join(field_notes[full].split())
            lines.append(line)
        for key, sub in tables:
            table(f"{path}.{key}" if path else key, sub)

    table("", profile.model_dump(mode="json"))
    return "\n".join(lines) + "\n"


def _fmt(value: float, unit: str) -> str:
    return f"{value:g} {unit}".strip()


def calibration_note(result: CalibrationResult, source: str | Path,
                     when: datetime | None = None) -> str:
    """The header of a calibrated profile: from what, when, and each factor before → after."""
    when = when or datetime.now().astimezone()
    n = len(result.runs)
    lines = [
        f"{result.profile.name}: calibrated by plan3d calibrate",
        f"from {source} ({n} measured run{'s' if n != 1 else ''}) on "
        f"{when.isoformat(timespec='seconds')},",
        f"starting from the profile '{result.hardware}'; least squares on log step time.",
        "",
        "Fitted:",
    ]
    for f in result.fitted:
        lines.append(f"  {f.path}: {_fmt(f.before, f.unit)} -> {_fmt(f.after, f.unit)} "
                     f"({f.reason})")
        lines += [f"  {path}: {_fmt(was, f.unit)} -> {_fmt(now, f.unit)} (with {f.key}, in "
                  "proportion: the same NVLink fabric)" for path, (was, now) in f.carried.items()]
    if not result.fitted:
        lines.append("  (nothing)")
    lines.append("Left unchanged:")
    for f in result.left:
        lines.append(f"  {f.path} = {_fmt(f.before, f.unit)}: {f.reason}")
    lines += [
        "",
        f"Step-time error |predicted / measured - 1|: median {result.median_abs_error_before:.1%}"
        f" -> {result.median_abs_error_after:.1%}, max {result.max_abs_error_before:.1%} -> "
        f"{result.max_abs_error_after:.1%}; rms of log error {result.rms_log_error_before:.3f} "
        f"-> {result.rms_log_error_after:.3f}.",
    ]
    lines += [f"Warning: {w}" for w in result.warnings]
    return "\n".join(textwrap.fill(line, 96, subsequent_indent="    ", break_long_words=False)
                     if len(line) > 96 else line for line in lines)


def calibration_toml(result: CalibrationResult, source: str | Path,
                     when: datetime | None = None) -> str:
    """The fitted profile as TOML, with the calibration header and each fitted value's former
    value beside it."""
    notes = {f.path: f"calibrated; was {f.before:g}" for f in result.fitted}
    notes.update({path: f"with {f.key}; was {was:g}" for f in result.fitted
                  for path, (was, _) in f.carried.items()})
    return profile_to_toml(result.profile, calibration_note(result, source, when), notes)
