"""All terminal output: the only module that imports rich. Library results in, text out."""

from __future__ import annotations

import json
import math
import os
import sys

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .results import Plan
from .units import GB, GIB

MEMORY_PARTS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                "overhead_bytes")
TIME_PARTS = ("compute_s", "tp_exposed_s", "cp_exposed_s", "pp_exposed_s", "dp_exposed_s",
              "bubble_s", "optimizer_s")


class _Console(Console):
    """rich's console, but a closed pipe is the CLI's to handle (rich would exit 1, the code for
    "no plan fits")."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(32, "Broken pipe")


def console(stderr: bool = False) -> Console:
    """A console that writes plain text (no colour codes, a fixed width) when not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        tty = False
    if tty:
        return _Console(file=stream, stderr=stderr)
    try:
        width = max(PLAIN_MIN_WIDTH, int(os.environ.get("COLUMNS", PLAIN_WIDTH)))
    except ValueError:
        width = PLAIN_WIDTH
    return _Console(file=stream, stderr=stderr, width=width, color_system=None,
                   force_terminal=False, no_color=True, soft_wrap=False, emoji=False,
                   highlight=False)


PLAIN_WIDTH = 160  # not a terminal: wide enough that no table wraps a row
PLAIN_MIN_WIDTH = 120


def non_finite(data, path: str = "") -> str | None:
    """The path of the first NaN or infinite number in a JSON-like value, or None."""
    if isinstance(data, float):
        return None if math.isfinite(data) else (path or "(value)")
    if isinstance(data, dict):
        items = data.items()
    elif isinstance(data, (list, tuple)):
        items = ((f"[{i}]", v) for i, v in enumerate(data))
    else:
        return None
    for key, value in items:
        sub = f"{path}{key}" if str(key).startswith("[") else f"{path}.{key}" if path else key
        found = non_finite(value, sub)
        if found:
            return found
    return None


def json_text(data) -> str:
    """Strict JSON (no NaN or Infinity, which JSON does not have)."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def print_json(data) -> None:
    """Clean JSON on stdout, whatever the terminal."""
    sys.stdout.write(json_text(data))
    sys.stdout.flush()


def one_line(message: str) -> str:
    return " ".join(str(message).split())


def error(message: str) -> None:
    """One line on stderr."""
    sys.stderr.write(f"plan3d: error: {one_line(message)}\n")
    sys.stderr.flush()


def notice(message: str) -> None:
    sys.stderr.write(f"plan3d: {one_line(message)}\n")
    sys.stderr.flush()


# ---------------------------------------------------------------------------------------------
# Units, the same in every command: memory in GiB (2³⁰ bytes), traffic in GB (10⁹ bytes),
# time in s (ms below one second), rates per second. Summaries and tables round memory to 0.1 GiB
# and step times to 1 ms; explain's term table gives one more digit, for checking by hand.


def gib(x: float) -> str:
    """Memory, in GiB to 0.1 (the unit is the caller's to print)."""
    return f"{x / GIB:,.1f}"


def gb(x: float) -> str:
    """Traffic, in GB to 0.01."""
    return f"{x / GB:,.2f}"


def step_seconds(x: float) -> str:
    """A step time in seconds to the millisecond, for tables whose header says `s`."""
    return f"{x:,.3f}"


def seconds(x: float) -> str:
    if x == 0:
        return "0 s"
    if abs(x) < 1:
        return f"{x * 1e3:,.2f} ms"
    return f"{x:,.3f} s"


def value_text(value: float, unit: str, group: str = "") -> str:
    """A term's value with its unit: GB/MB (10⁹/10⁶) for traffic, GiB/MiB (2³⁰/2²⁰) for memory."""
    if unit == "bytes" and group == "comm":
        return f"{value / GB:,.3f} GB" if value >= GB / 10 else f"{value / 1e6:,.2f} MB"
    if unit == "bytes":
        return f"{value / GIB:,.3f} GiB" if value >= GIB / 10 else f"{value / 2**20:,.2f} MiB"
    if unit == "s":
        return seconds(value)
    if unit == "fraction":
        return f"{value:.2%}"
    if unit == "params":
        return f"{value / 1e9:,.3f} × 10⁹"
    if unit == "FLOPs":
        return f"{value:.4g} FLOP"
    if unit == "tokens/s":
        return f"{value:,.0f} tokens/s"
    return f"{value:,.6g}"


def config_line(plan: Plan) -> str:
    c = plan.config
    parts = [f"dp={c.dp}", f"tp={c.tp}", f"pp={c.pp}", f"cp={c.cp}"]
    if c.vpp > 1:
        parts.append(f"vpp={c.vpp}")
    parts += [f"mbs={c.mbs}", f"n_micro={c.n_micro}", f"gbs={c.gbs}", f"seq={c.seq_len}",
              f"zero={int(c.zero_stage)}", f"recompute={c.recompute.value}",
              f"sp={'on' if c.sequence_parallel else 'off'}", f"schedule={c.schedule.value}",
              f"{c.precision.value}", f"grads={c.grad_dtype}", f"attention={c.attention.value}"]
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------
# explain


def render_explain(plan: Plan, out: Console) -> None:
    """The breakdown a person can check by hand."""
    c = plan.config
    out.print(Text(f"{plan.model.name} ({plan.model.n_params / 1e9:,.2f} billion parameters) on "
                   f"{c.n_gpus} × {plan.hardware}", style="bold"))
    out.print(config_line(plan))
    values = {t.key: t.value for t in plan.terms}
    groups = [("model", "Model"), ("memory", "Memory per GPU, GiB = 2³⁰ bytes, MiB = 2²⁰ bytes (most loaded: "
                                            f"{plan.memory.stage} pipeline stage)"),
              ("pipeline", "Pipeline"), ("comm", "Communication per GPU per step (GB = 10⁹ bytes, "
                                            "MB = 10⁶ bytes)"),
              ("time", "Time per step (s; ms = 10⁻³ s)")]
    total_mem, step = plan.memory.total_bytes, plan.time.step_s
    for group, title in groups:
        table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", expand=False)
        table.add_column("term", no_wrap=True)
        table.add_column("formula", overflow="fold", max_width=70)
        table.add_column("value", justify="right", no_wrap=True)
        table.add_column("share", justify="right", no_wrap=True)
        table.add_column("why", overflow="fold", max_width=44)
        for t in plan.terms:
            if t.group != group:
                continue
            share = ""
            if t.key in MEMORY_PARTS:
                share = f"{t.value / total_mem:.1%}"
            elif t.key in TIME_PARTS:
                share = f"{t.value / step:.1%}"
            table.add_row(t.symbol, t.formula, value_text(t.value, t.unit, t.group), share, t.why)
        out.print(table)
    out.print(layout_line(plan))
    out.print(links_line(plan))  # comm: link model (see links_line)
    m = plan.memory
    verdict = "fits" if m.fits else "DOES NOT FIT"
    style = "green" if m.fits else "bold red"
    out.print(Text(f"Memory: {gib(m.total_bytes)} GiB of {gib(m.capacity_bytes)} GiB "
                   f"({m.total_bytes / m.capacity_bytes:.0%}) — {verdict}", style=style))
    tm = plan.time
    out.print(f"Step {seconds(tm.step_s)}: compute {tm.compute_s / step:.0%}, bubble "
              f"{tm.bubble_s / step:.0%}, exposed communication {tm.exposed_comm_s / step:.0%}, "
              f"optimizer {tm.optimizer_s / step:.0%} · {tm.tokens_per_s:,.0f} tokens/s · "
              f"MFU {tm.mfu:.1%} (HFU {tm.hfu:.1%})")
    if plan.budget is not None:
        out.print(budget_line(plan))
    if "inflight_first" in values:
        n_f = values["inflight_first"]
        out.print(f"In flight on the first stage: {n_f:g} micro-batch{'' if n_f == 1 else 'es'} "
                  f"(schedule {c.schedule.value}).")
    render_warnings(plan, out)


LINK_NAMES = {"nvlink": "inside the NVLink domain", "network": "across the network"}


def layout_line(plan: Plan) -> str:
    """Which link each parallel group's traffic crosses (innermost first: tp, cp, dp, pp)."""
    c, comm = plan.config, plan.comm
    parts = []
    for name, degree, link in (("TP", c.tp, comm.tp_link), ("CP", c.cp, comm.cp_link),
                               ("DP", c.dp, comm.dp_link), ("PP", c.pp, comm.pp_link)):
        if link != "none":
            parts.append(f"{name} {degree} {LINK_NAMES[link]}")
    return "Layout: " + ("; ".join(parts) if parts else "one GPU, no communication") + "."


# ---- comm helper: the link model's line (bandwidth, share, busiest link) -----------------------

def links_line(plan: Plan) -> str:
    """Each group's bus bandwidth per GPU and its share of the link, and the busiest link."""
    c, comm = plan.config, plan.comm
    parts = []
    for name, degree, link, bw, share in (
            ("TP", c.tp, comm.tp_link, comm.tp_busbw_bytes_per_s, comm.tp_share),
            ("CP", c.cp, comm.cp_link, comm.cp_busbw_bytes_per_s, comm.cp_share),
            ("DP", c.dp * c.cp, comm.dp_link, comm.dp_busbw_bytes_per_s, comm.dp_share),
            ("PP", c.pp, comm.pp_link, comm.pp_busbw_bytes_per_s, comm.pp_share)):
        if link != "none" and degree > 1:
            parts.append(f"{name} {bw / 1e9:,.0f} GB/s ({share:.0%} share)")
    if not parts:
        return "Links: none used."
    busiest = comm.busiest_link
    busy = (comm.nvlink_utilisation if busiest == "nvlink" else comm.network_utilisation)
    return (f"Links: {'; '.join(parts)}. Busiest: "
            f"{'NVLink' if busiest == 'nvlink' else 'network'}, {busy:.0%} of the step.")


def budget_line(plan: Plan) -> str:
    b = plan.budget
    parts = [f"Training {b.train_tokens:.3g} tokens: {b.days:,.1f} days on {plan.config.n_gpus:,} "
             f"GPUs, {b.gpu_hours:,.0f} GPU-hours"]
    if b.cost is not None:
        parts.append(f"cost {b.cost:,.0f} at {b.gpu_hour_price:g} per GPU-hour")
    if b.energy_mwh is not None:
        parts.append(f"GPU energy {b.energy_mwh:,.1f} MWh at {b.gpu_power_w:g} W")
    return ", ".join(parts) + "."


def render_launch(launch, out: Console) -> None:
    """--emit: the settings, then what they follow and what was assumed."""
    out.print(Text(f"Launch settings for {launch.framework} ({launch.format}):", style="bold"))
    out.print(launch.text, markup=False, highlight=False)
    out.print(f"Option names follow: {launch.version_note}", markup=False, highlight=False)
    for note in launch.notes:
        out.print(f"note: {note}", markup=False, highlight=False)


TIMELINE_STYLES = {"F": "black on cyan", "B": "black on magenta", "idle": "dim"}


def render_timeline(timeline, out: Console, width: int | None = None) -> None:
    """The schedule as the terminal sees it: one row per stage, forward and backward blocks in
    colour (F cyan, B magenta), the bubble as dots, the time axis to scale."""
    from .timeline import to_text_rows

    width = width or max(40, min(out.width - 12, 200))
    rows = to_text_rows(timeline, width)
    out.print(Text(f"Pipeline schedule ({timeline.schedule.value}, p={timeline.pp}, "
                   f"m={timeline.n_micro}, v={timeline.vpp}); one column = "
                   f"{seconds(timeline.makespan_s / width)}; bubble "
                   f"{timeline.bubble_fraction:.1%}", style="bold"))
    for k, row in enumerate(rows):
        line = Text(f"stage {k:<3d} ")
        for char, kind in row:
            line.append(char, style=TIMELINE_STYLES.get(kind, ""))
        out.print(line, no_wrap=True, overflow="crop")
    out.print(f"{'':10s}0{'':{max(0, width - 12)}s}{seconds(timeline.makespan_s):>10s}")
    out.print("F = forward, B = backward (digit = micro-batch number mod 10), · = idle")


def render_warnings(plan: Plan, out: Console) -> None:
    for w in plan.warnings:
        out.print(Text(f"warning [{w.code}]: {w.message}", style="yellow"))


# ---------------------------------------------------------------------------------------------
# search


def render_search(result, out: Console) -> None:
    """The ranked table, the reason for the winner, the warnings of the plans shown."""
    table = Table(box=box.SIMPLE_HEAD, title=f"{len(result.plans)} of {result.feasible:,} plans "
                  f"that fit ({result.considered:,} considered)", title_justify="left")
    budget = bool(result.plans) and result.plans[0].budget is not None
    columns = ["#", "dp", "tp", "pp", "cp", "vpp", "mbs", "M", "ZeRO", "recompute", "SP",
               "mem GiB", "bubble", "exp. comm", "step s", "tokens/s", "MFU"]
    if budget:
        columns.append("days")
    for col in columns:
        table.add_column(col, justify="right" if col not in ("recompute",) else "left",
                         no_wrap=True)
    for i, p in enumerate(result.plans, 1):
        c, m, t = p.config, p.memory, p.time
        warn = "!" if any(w.code != "uneven-stages" for w in p.warnings) else ""
        cells = [
            f"{i}{warn}", str(c.dp), str(c.tp), str(c.pp), str(c.cp), str(c.vpp), str(c.mbs),
            str(c.n_micro), str(int(c.zero_stage)), c.recompute.value,
            "on" if c.sequence_parallel else "off",
            f"{gib(m.total_bytes)}/{gib(m.capacity_bytes)}",
            f"{p.bubble_fraction:.1%}", f"{t.exposed_comm_s / t.step_s:.1%}",
            step_seconds(t.step_s), f"{t.tokens_per_s:,.0f}", f"{t.mfu:.1%}"]
        if budget:
            cells.append(f"{p.budget.days:,.1f}")
        table.add_row(*cells)
    out.print(table)
    if result.reason:
        out.print(result.reason)
    if budget:
        out.print("Plan 1: " + budget_line(result.plans[0]))
    # one line per kind of warning: its first plan's message, and which other plans share it
    by_code: dict[str, tuple[str, list[int]]] = {}
    for i, p in enumerate(result.plans, 1):
        for w in p.warnings:
            first = by_code.setdefault(w.code, (w.message, []))
            first[1].append(i)
    for code, (message, plans) in by_code.items():
        which = f"plan {plans[0]}" if len(plans) == 1 else \
            f"plans {', '.join(map(str, plans))}; shown for plan {plans[0]}"
        out.print(Text(f"warning ({which}) [{code}]: {message}", style="yellow"))


def render_models(listing, out: Console) -> None:
    table = Table(box=box.SIMPLE_HEAD)
    for col in ("name", "aliases", "params (10⁹)", "L", "h", "a", "kv", "ffn", "V", "seq", "mlp"):
        table.add_column(col, no_wrap=True)
    for m in listing:
        table.add_row(m.name, ",".join(m.aliases), f"{m.n_params / 1e9:,.1f}", str(m.n_layers),
                      str(m.hidden), str(m.n_heads), str(m.n_kv_heads), str(m.ffn), str(m.vocab),
                      str(m.seq_len), m.mlp + (f" ×{m.n_experts}" if m.n_experts > 1 else ""))
    out.print(table)


def render_hardware(listing, out: Console) -> None:
    table = Table(box=box.SIMPLE_HEAD)
    for col in ("name", "GPU", "HBM GiB", "HBM TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s",
                "domain", "fast GB/s", "net GB/s"):
        table.add_column(col, no_wrap=True)
    for h in listing:
        fp8 = h.peak_tflops.fp8
        table.add_row(h.name, h.gpu, f"{h.hbm_gib:g}", f"{h.hbm_tb_per_s:g}",
                      f"{h.peak_tflops.bf16:g}", "-" if fp8 is None else f"{fp8:g}",
                      str(h.gpus_per_domain), f"{h.fast.busbw_gb_per_s:g}",
                      f"{h.network.busbw_gb_per_s:g}")
    out.print(table)


def render_validation(report, out: Console) -> None:
    table = Table(box=box.SIMPLE_HEAD, title=f"Published runs on {report.hardware}: predicted vs "
                  "measured step time", title_justify="left")
    for col in ("case", "GPUs", "layout", "measured s", "model s", "error", "assumed"):
        table.add_column(col, no_wrap=col != "assumed",
                         justify="right" if col in ("GPUs", "measured s", "model s", "error")
                         else "left")
    for c in report.cases:
        table.add_row(c.id, str(c.gpus), c.layout, step_seconds(c.measured_s),
                      step_seconds(c.predicted_s),
                      f"{c.error:+.1%}", c.assumed)
    out.print(table)
    ok = report.median_abs_error <= report.target_median and \
        report.max_abs_error <= report.target_max
    out.print(f"median |error| {report.median_abs_error:.1%} (target ≤ {report.target_median:.0%}),"
              f" max |error| {report.max_abs_error:.1%} (target ≤ {report.target_max:.0%}): "
              + ("targets met" if ok else "TARGETS MISSED"))


def render_calibration(result, out: Console, output: str | None) -> None:
    """The fit: each factor before and after, each run's error before and after."""
    table = Table(box=box.SIMPLE_HEAD, title=f"Calibration of {result.hardware}",
                  title_justify="left")
    for col in ("factor", "before", "after", "status", "why"):
        table.add_column(col, overflow="fold", max_width=60 if col == "why" else None)
    for f in result.factors:
        table.add_row(f.path, f"{f.before:.4g} {f.unit}".strip(), f"{f.after:.4g} {f.unit}".strip(),
                      f.status, f.reason)
    out.print(table)
    runs = Table(box=box.SIMPLE_HEAD, title="Runs: predicted vs measured step time",
                 title_justify="left")
    for col in ("run", "layout", "measured s", "before s", "error", "after s", "error"):
        runs.add_column(col, justify="left" if col in ("run", "layout") else "right")
    for r in result.runs:
        runs.add_row(r.id, r.layout, step_seconds(r.measured_s),
                     step_seconds(r.predicted_before_s), f"{r.error_before:+.1%}",
                     step_seconds(r.predicted_after_s),
                     f"{r.error_after:+.1%}")
    out.print(runs)
    out.print(f"median |error| {result.median_abs_error_before:.1%} → "
              f"{result.median_abs_error_after:.1%}, max {result.max_abs_error_before:.1%} → "
              f"{result.max_abs_error_after:.1%}")
    for w in result.warnings:
        out.print(Text(f"warning: {w}", style="yellow"))
    if output:
        out.print(f"wrote {output}: use it with --hw {output}")
    else:
        out.print("(pass -o FILE.toml to write the calibrated profile)")
