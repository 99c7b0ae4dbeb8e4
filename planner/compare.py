"""The same training job over several hardware profiles and GPU counts: the recommended plan
(search's row 1) of each cell, what it costs to train, and which cell is cheapest and which
fastest (`plan3d compare`).

Every cell trains the same job: the same model, tokens and global batch (in sequences), so that
the cells differ only in the hardware and the number of GPUs. Each cell's plan is the search's
row 1 (`search.search`: the recommendation rule of planner.ranking, the same as `search` shows
for that profile and GPU count) and its days, GPU-hours, cost and energy come from
`estimate.with_budget` (formulas/budget.py), at the goodput each cell's size leaves after
failures, checkpoints and restarts (model/goodput.py; one --goodput for all). With a deadline,
each profile is sized instead: the fewest GPUs whose row 1 trains the tokens in time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from .errors import PlanError
from .model.estimate import check_goodput, with_budget
from .results import Plan
from .schema import HardwareProfile, ModelSpec
from .search.core import search
from .search.ranking import DEFAULT_HEADROOM, check_headroom
from .search.request import PlanRequest
from .search.space import gpu_counts
from .units import token_text

MAX_CELLS = 256  # profiles × GPU counts: each cell is a whole search


class CompareCell(BaseModel):
    """One (profile, GPU count): its recommended plan (row 1) with the budget, or why there is none."""

    model_config = ConfigDict(frozen=True)

    hardware: str
    gpus: int
    plan: Plan | None = None  # the search's row 1 for this cell, with `budget` filled in
    reason: str = ""  # why no plan: nothing fits, or no layout satisfies the rules
    meets_deadline: bool | None = None  # None without --deadline-days
    chosen: bool = False  # with --deadline-days: the fewest GPUs of its profile that finish


class Pick(BaseModel):
    """A cell the answer names (the cheapest, the fastest)."""

    model_config = ConfigDict(frozen=True)

    hardware: str
    gpus: int
    days: float
    gpu_hours: float
    cost: float | None = None


class CompareResult(BaseModel):
    """plan3d compare: every cell, and the answer."""

    model_config = ConfigDict(frozen=True)

    model: str
    train_tokens: float
    gbs: int  # sequences per step, the same in every cell
    seq_len: int
    goodput: float | None = None  # --goodput, for every cell; None: each cell's own (its plan's)
    deadline_days: float | None = None
    cells: list[CompareCell]
    cheapest: Pick | None = None  # by cost where the cells have prices, else by GPU-hours
    cheapest_by: str = "cost"  # "cost" or "gpu_hours"
    fastest: Pick | None = None  # fewest days (ties: fewer GPUs)
    notes: list[str] = []

    @property
    def shown(self) -> list[CompareCell]:
        """The cells a table shows: with a deadline, the chosen size of each profile and the
        profiles that found none (their largest size); else every cell."""
        if self.deadline_days is None:
            return list(self.cells)
        out = []
        for name in dict.fromkeys(c.hardware for c in self.cells):
            mine = [c for c in self.cells if c.hardware == name]
            chosen = [c for c in mine if c.chosen]
            out.append(chosen[0] if chosen else mine[-1])
        return out


def _per_profile(values: Mapping[str, float] | float | None, hw: HardwareProfile,
                 given_as: str) -> float | None:
    if values is None or isinstance(values, int | float):
        return values
    return values.get(given_as, values.get(hw.name))


def _cell(model: ModelSpec, hw: HardwareProfile, req: PlanRequest, gpus: int,
          train_tokens: float, price: float | None, power_w: float, goodput: float | None,
          headroom: float) -> CompareCell:
    try:  # row 1: the plan `search` recommends for this profile and GPU count
        best = search(model, hw, req.model_copy(update={"gpus": gpus}), top=1, sort="time",
                      headroom=headroom).plans[0]
        # its budget at the cell's goodput; refused where interruptions leave no time to train
        plan = with_budget(best, train_tokens, price, power_w, goodput)
    except PlanError as exc:  # nothing fits; or, e.g., a precision the profile has no figures for
        return CompareCell(hardware=hw.name, gpus=gpus, reason=str(exc))
    return CompareCell(hardware=hw.name, gpus=gpus, plan=plan)


def _pick(cell: CompareCell) -> Pick:
    b = cell.plan.budget
    return Pick(hardware=cell.hardware, gpus=cell.gpus, days=b.days, gpu_hours=b.gpu_hours,
                cost=b.cost)


def _answer(ranked: list[CompareCell], notes: list[str]
            ) -> tuple[CompareCell | None, str, CompareCell | None]:
    """The cheapest cell (by cost where the cells have prices, else by GPU-hours; a note names
    the profiles left out for want of a price), how it was judged, and the fastest cell."""
    if not ranked:
        return None, "cost", None
    fastest = min(ranked, key=lambda c: (c.plan.budget.days, c.gpus))
    priced = [c for c in ranked if c.plan.budget.cost is not None]
    if not priced:
        return (min(ranked, key=lambda c: (c.plan.budget.gpu_hours, c.plan.budget.days)),
                "gpu_hours", fastest)
    unpriced = sorted({c.hardware for c in ranked} - {c.hardware for c in priced})
    if unpriced:
        notes.append(f"no price for {', '.join(unpriced)}: left out of the cheapest "
                     "(give --price NAME=PRICE)")
    return min(priced, key=lambda c: (c.plan.budget.cost, c.plan.budget.days)), "cost", fastest


def compare(model: ModelSpec, profiles: Sequence[tuple[str, HardwareProfile]],
            gpus: Sequence[int], req: PlanRequest, train_tokens: float,
            prices: Mapping[str, float] | float | None = None,
            powers_w: Mapping[str, float] | float | None = None,
            goodput: float | None = None, deadline_days: float | None = None,
            headroom: float | None = None) -> CompareResult:
    """The recommended plan (search's row 1) of `model` on each (profile, GPU count), budgeted
    for train_tokens.

    profiles: (the name the user gave, the profile) pairs; prices and powers_w: one number for
    all, or a mapping keyed by either name (power defaults to the profile's TDP). The global
    batch is req's (--gbs or --tokens-per-step), else the default batch of the largest GPU count
    considered, the same in every cell. With deadline_days, each profile is sized: its counts
    are tried in increasing order (one count given: whole NVLink domains, doubling up to it, as
    `search --sort gpus`) and the first whose row 1 trains in at most deadline_days is
    chosen; the answer then ranks the chosen cells."""
    if not profiles:
        raise PlanError("--hw named no profile; give one or more, e.g. h100-nvlink,b200-nvlink")
    if not gpus:
        raise PlanError("--gpus named no count; give one or more, e.g. 1024,2048")
    check_goodput(goodput)
    headroom = DEFAULT_HEADROOM if headroom is None else headroom
    check_headroom(headroom)
    if deadline_days is not None and not 0 < deadline_days < float("inf"):
        raise PlanError(f"--deadline-days must be a positive number of days, got "
                        f"{deadline_days:g}")
    counts = sorted(set(gpus))
    sizes = {given: (gpu_counts(counts[0], hw.gpus_per_domain)
                     if deadline_days is not None and len(counts) == 1 else counts)
             for given, hw in profiles}
    n_cells = sum(len(s) for s in sizes.values())
    if n_cells > MAX_CELLS:
        raise PlanError(f"{n_cells} cells (profiles × GPU counts) is more than {MAX_CELLS}: "
                        "compare fewer profiles or counts")
    largest = max(max(s) for s in sizes.values())
    gbs = req.model_copy(update={"gpus": largest}).global_batch(model)
    req = req.model_copy(update={"gbs": gbs, "tokens_per_step": None})

    cells: list[CompareCell] = []
    notes: list[str] = []
    for given, hw in profiles:
        price = _per_profile(prices, hw, given)
        power = _per_profile(powers_w, hw, given)
        power = hw.tdp_w if power is None else power
        for n in sizes[given]:
            cell = _cell(model, hw, req, n, train_tokens, price, power, goodput, headroom)
            if deadline_days is not None:
                meets = cell.plan is not None and cell.plan.budget.days <= deadline_days
                cell = cell.model_copy(update={"meets_deadline": meets, "chosen": meets})
            cells.append(cell)
            if cell.chosen:
                break  # the fewest GPUs of this profile that finish in time
        if deadline_days is not None and not any(c.chosen for c in cells
                                                 if c.hardware == hw.name):
            tried = [c for c in cells if c.hardware == hw.name and c.plan is not None]
            best = min(tried, key=lambda c: c.plan.budget.days) if tried else None
            seen = (f"; the best is {best.plan.budget.days:,.1f} days on {best.gpus:,} GPUs"
                    if best else "; no size fits in memory")
            notes.append(f"{hw.name}: no size tried ({', '.join(f'{n:,}' for n in sizes[given])}"
                         f" GPUs) trains {token_text(train_tokens)} tokens in "
                         f"{deadline_days:g} days{seen}")

    ranked = [c for c in cells if c.plan is not None
              and (deadline_days is None or c.chosen)]
    cheapest, cheapest_by, fastest = _answer(ranked, notes)
    return CompareResult(
        model=model.name, train_tokens=train_tokens, gbs=gbs, seq_len=req.seq(model),
        goodput=goodput, deadline_days=deadline_days, cells=cells,
        cheapest=_pick(cheapest) if cheapest else None, cheapest_by=cheapest_by,
        fastest=_pick(fastest) if fastest else None, notes=notes)


def check_chart() -> None:
    """Raise PlanError unless matplotlib (the chart extra) can be imported: `compare --chart`
    asks before it computes anything."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlanError("--chart draws with matplotlib, which is not installed: "
                        "pip install 'plan3d[chart]'") from None


def chart_image(result: CompareResult, fmt: str) -> bytes:
    """Scaling and cost curves of a comparison as SVG or PNG bytes, drawn with matplotlib (an
    optional extra: `pip install 'plan3d[chart]'`), one line per profile: days to train against
    GPUs (with the deadline, if any), and cost (or GPU-hours, without prices) against GPUs; one
    legend for both, numbers on every axis."""
    try:
        from matplotlib import rc_context
        from matplotlib.figure import Figure
    except ImportError:
        raise PlanError("--chart draws with matplotlib, which is not installed: "
                        "pip install 'plan3d[chart]'") from None
    import io

    by_cost = result.cheapest_by == "cost"
    fig = Figure(figsize=(10, 4.6), layout="constrained")
    days_ax, cost_ax = fig.subplots(1, 2)
    _chart_lines(result, days_ax, cost_ax, by_cost)
    _chart_axes(result, days_ax, cost_ax, by_cost)
    # one legend for the figure (each profile's colour is the same in both panels)
    handles, labels = days_ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4),
                   fontsize="small", frameon=False)
    buf = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else None  # an SVG that does not change per run
    # text stays text (searchable, selectable); fixed ids: the same SVG every run
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "plan3d"}):
        fig.savefig(buf, format=fmt, metadata=metadata)
    return buf.getvalue()


def _chart_lines(result: CompareResult, days_ax, cost_ax, by_cost: bool) -> None:
    """One line per profile in each panel, the same colour in both; the deadline, if any."""
    for k, name in enumerate(dict.fromkeys(c.hardware for c in result.cells)):
        done = [c for c in result.cells if c.hardware == name and c.plan is not None]
        if not done:
            continue
        x = [c.gpus for c in done]
        colour = f"C{k}"
        days_ax.plot(x, [c.plan.budget.days for c in done], marker="o", color=colour, label=name)
        money = [c.plan.budget.cost if by_cost else c.plan.budget.gpu_hours for c in done]
        if all(m is not None for m in money):
            cost_ax.plot(x, money, marker="o", color=colour)
    if result.deadline_days is not None:
        days_ax.axhline(result.deadline_days, color="0.4", linestyle="--", linewidth=1,
                        label=f"deadline {result.deadline_days:g} days")


def _chart_axes(result: CompareResult, days_ax, cost_ax, by_cost: bool) -> None:
    """Log-2 GPU axes labelled with the counts; numbers on both value axes (1-2-5 steps on the
    logarithmic days axis, so that a range inside one decade still carries labels)."""
    from matplotlib.ticker import EngFormatter, FuncFormatter, LogLocator, NullFormatter, NullLocator

    counts = sorted({c.gpus for c in result.cells})
    for ax in (days_ax, cost_ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [f"{n:,}" for n in counts])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("GPUs")
        ax.grid(True, which="both", alpha=0.3)
    days_ax.set_yscale("log")
    days_ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    days_ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.3g}"))
    days_ax.yaxis.set_minor_formatter(NullFormatter())
    days_ax.set_ylabel("days to train (wall clock, " + (
        "each size's goodput)" if result.goodput is None else f"goodput {result.goodput:.0%})"))
    cost_ax.yaxis.set_major_formatter(EngFormatter(sep=""))
    cost_ax.set_ylabel("cost (at --price)" if by_cost else "GPU-hours")
    tokens = EngFormatter(sep="")(result.train_tokens)
    days_ax.figure.suptitle(f"{result.model}: {tokens} tokens, global batch {result.gbs:,} × "
                            f"{result.seq_len:,} tokens; the recommended plan per point")


def per_profile(text: str | None, flag: str, names: Sequence[str], top: float,
                allow_zero: bool = False) -> float | dict[str, float] | None:
    """A per-profile option's text: one number for every profile (`2.5`), or NAME=NUMBER pairs
    keyed by the names given to --hw (`h100-nvlink=2.5,b200-nvlink=4.1`); each finite, positive
    (or ≥ 0 with allow_zero) and at most `top`."""
    if text is None:
        return None

    def number(s: str, what: str) -> float:
        try:
            value = float(s)
        except ValueError:
            raise PlanError(f"--{flag}: {what} {s.strip()!r} is not a number; give one number "
                            f"for all profiles or NAME=NUMBER pairs ({', '.join(names)})"
                            ) from None
        ok = (value >= 0 if allow_zero else value > 0) and value <= top  # false for nan
        if not ok:
            low = "≥ 0" if allow_zero else "positive"
            raise PlanError(f"--{flag}: {what} must be {low} and at most {top:g}, got {s.strip()}")
        return value

    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise PlanError(f"--{flag} was given an empty value; give a number, or NAME=NUMBER pairs")
    if len(items) == 1 and "=" not in items[0]:
        return number(items[0], "the value")
    out: dict[str, float] = {}
    for item in items:
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq:
            raise PlanError(f"--{flag}: {item!r} has no '='; give NAME=NUMBER for each profile "
                            f"({', '.join(names)}), or one number for all")
        if name not in names:
            raise PlanError(f"--{flag}: {name!r} is not one of the profiles given to --hw "
                            f"({', '.join(names)})")
        if name in out:
            raise PlanError(f"--{flag}: {name} is given twice")
        out[name] = number(value, f"the value for {name}")
    return out
