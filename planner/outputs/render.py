"""All terminal output: the only module that imports rich. Library results in, text out."""

from __future__ import annotations

import json
import math
import os
import re
import sys

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..results import Plan
from ..units import GB, GIB, share_text, token_text

MEMORY_PARTS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                "overhead_bytes")
TIME_PARTS = ("compute_s", "tp_exposed_s", "cp_exposed_s", "pp_exposed_s", "dp_exposed_s",
              "ep_exposed_s", "bubble_s", "optimizer_s", "offload_s", "straggler_s")
"""The terms that are parts of the step (search.alternatives.step_parts: they add up to it), each
shown with its share of T_step."""


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
PLAIN_MIN_WIDTH = 40
PROSE_MARGIN = 2
"""The words around a table (search's short lines, explain's verdict, calibrate's reasons, the
warnings) wrap this many columns short of the console's width, so that no line of them ends in a
terminal's last column (at 80 columns: 78, search.summary.SHORT_WIDTH)."""


def prose_width(out: Console) -> int:
    """The width the words under a table wrap at: the console's less PROSE_MARGIN."""
    return max(PLAIN_MIN_WIDTH, out.width - PROSE_MARGIN)


def options_panel(out: Console, title: str, rows: list[tuple]) -> None:
    """--help: one panel of options, each row (required, long names, negative names, type,
    help) with its names whole: the name and its short form on one line, the --no- form and the
    type under it, the help wrapping beside them, so that no flag is cut at 80 columns."""
    from rich.panel import Panel

    if not rows:
        return
    table = Table(show_header=False, box=None, expand=True, padding=(0, 1), pad_edge=False)
    marked = any(row[0] for row in rows)
    if marked:
        table.add_column(no_wrap=True, width=1)
    table.add_column(no_wrap=True)
    table.add_column(ratio=1)
    for required, names, negatives, kind, help_text in rows:
        cell = Text(", ".join(names), style="bold cyan")
        for negative in negatives:
            cell.append("\n" + negative, style="bold magenta")
        if kind:
            cell.append("\n" + kind, style="yellow")
        for part in getattr(help_text, "renderables", [help_text]):  # typer's Columns of Text
            if isinstance(part, Text):
                part.overflow = "fold"  # a long word (a framework's key) folds, not cut
        mark = [Text("*" if required else "", style="red")] if marked else []
        table.add_row(*mark, cell, help_text)
    out.print(Panel(table, border_style="dim", title=title, title_align="left"))


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


SECTIONS = {
    "model": "Model",
    "memory": "Memory per GPU, GiB = 2³⁰ bytes, MiB = 2²⁰ bytes (most loaded: {stage} pipeline "
              "stage)",
    "pipeline": "Pipeline",
    "comm": "Communication per GPU per step (GB = 10⁹ bytes, MB = 10⁶ bytes)",
    "time": "Time per step (s; ms = 10⁻³ s)",
    "constants": "Constants the formulas name (the profile's, in base units)",
}
WIDE_EXPLAIN = 110  # from this width the reason gets a column of its own


FORMULA_BREAKS = " ·/+,"
"""A formula line may end after these: a space, a product dot, a division, a plus, a comma."""


def formula_lines(formula: str, width: int) -> str:
    """The formula in lines of at most `width` cells, each broken after one of FORMULA_BREAKS,
    never inside a name or a number (rich alone breaks only at spaces, and folds a longer run
    mid-word: 'sqrt(c)·sqrt(t)/(sq' + 'rt(b)'); a run longer than `width` stays whole."""
    if width <= 0 or len(formula) <= width:
        return formula
    pieces = [p for p in re.findall(rf"[^{FORMULA_BREAKS}]*[{FORMULA_BREAKS}]?", formula) if p]
    lines = [""]
    for piece in pieces:
        if lines[-1] and len(lines[-1]) + len(piece.rstrip()) > width:
            lines.append("")
        lines[-1] += piece
    return "\n".join(line.rstrip() for line in lines)


def _terms_table(title: str, rows: list[tuple[str, ...]], wide: bool, out: Console) -> Table:
    """A section of explain's terms: (symbol, formula, value, share, why) per row, the reason in
    its own column when `wide`, else dim under the formula. The table is laid out once to learn
    the formula column's width, then built with each formula broken to it (formula_lines)."""

    def build(width: int | None) -> Table:
        table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", expand=False,
                      pad_edge=False)
        table.add_column("term", no_wrap=True)
        # the second time, the formula column's width fixed at what rich gave it the first time
        table.add_column("formula", overflow="fold", max_width=70 if wide else None, width=width)
        table.add_column("value", justify="right", no_wrap=True)
        table.add_column("share", justify="right", no_wrap=True)
        if wide:
            table.add_column("why", overflow="fold", max_width=44)
        for symbol, formula, value, share, why in rows:
            text = formula if width is None else formula_lines(formula, width)
            # Text cells: rich parses no markup in them (a third of the rendering time)
            if wide:
                table.add_row(Text(symbol), Text(text), Text(value), Text(share), Text(why))
            else:
                cell = Text(text)
                cell.append("\n" + why, style="dim")
                table.add_row(Text(symbol), cell, Text(value), Text(share))
        return table

    table = build(None)
    try:  # rich's own layout of the columns, as it prints the table (private methods: without
        # them, rich's own breaks); less the formula column's padding, 1 a side
        inner = out.options.update_width(out.width - table._extra_width)
        width = table._calculate_column_widths(out, inner)[1] - 2
    except (AttributeError, TypeError, IndexError):
        return table
    if all(len(formula) <= width for _, formula, *_ in rows):
        return table
    return build(width)


def verdict_lines(plan: Plan, mfu_convention: str = "causal",
                  headroom: float | None = None) -> list[Text]:
    """The answer, first: what runs where, whether it fits and with what margin (`headroom`, the
    search's memory margin; None: its default), the step, the throughput and MFU (its convention
    said), where the step goes, and days and cost if asked."""
    c, m, t = plan.config, plan.memory, plan.time
    other = "full" if mfu_convention == "causal" else "causal"
    lines = [Text(f"{plan.model.name} ({plan.model.n_params / 1e9:,.2f} billion parameters) on "
                  f"{c.n_gpus:,} × {plan.hardware} under {c.framework}: {layout_cell(plan)}, "
                  f"global batch {c.gbs:,} × {c.seq_len:,} tokens", style="bold")]
    spare = m.capacity_bytes - m.total_bytes
    if m.fits:
        from ..search.ranking import DEFAULT_HEADROOM, in_margin

        # a plan search would mark m: fits, but only inside the memory margin
        headroom = DEFAULT_HEADROOM if headroom is None else headroom
        inside = bool(in_margin(m.total_bytes, m.capacity_bytes, headroom))
        lines.append(Text(f"Fits: {gib(m.total_bytes)} of {gib(m.capacity_bytes)} GiB per GPU "
                          f"({share_of_capacity(m)}), {gib(spare)} GiB to spare "
                          + (f"on the most loaded ({m.stage}) pipeline stage"
                             if m.stage != "middle" else
                             f"on the most loaded pipeline stage, {m.stage_name}")
                          + (f", inside the {headroom:.0%} memory margin (search "
                             "marks it m, never row 1)." if inside else "."),
                          style="yellow" if inside else "green"))
    else:
        lines.append(Text(f"DOES NOT FIT: {gib(m.total_bytes)} GiB per GPU needed of "
                          f"{gib(m.capacity_bytes)} GiB ({gib(-spare)} GiB over) on the {m.stage_name} "
                          "pipeline stage.", style="bold red"))
    if m.peak_at:
        lines.append(Text(f"Peak at {m.peak_at}: {gib(m.allocated_bytes)} GiB of tensors, "
                          f"{gib(m.reserved_bytes)} GiB reserved by PyTorch's allocator, the rest "
                          "runtime (CUDA context, NCCL)."))
    if m.host_bytes > 0:  # offload
        lines.append(Text(f"Offloaded to host memory: {gib(m.host_bytes)} of "
                          f"{gib(m.host_capacity_bytes)} GiB per GPU; it adds "
                          f"{seconds(t.offload_s)} to the step (host-link copies and the CPU "
                          "optimizer step).",
                          style="" if m.host_bytes <= m.host_capacity_bytes else "bold red"))
    lines.append(Text(f"Step {seconds(t.step_s)} · {t.tokens_per_s:,.0f} tokens/s · MFU "
                      f"{mfu_of(plan, mfu_convention):.1%} ({mfu_convention}; "
                      f"{mfu_of(plan, other):.1%} {other}) · HFU {t.hfu:.1%}"))
    parts = [("compute", t.compute_s), ("bubble", t.bubble_s),
             ("exposed communication", t.exposed_comm_s), ("optimizer", t.optimizer_s),
             ("offload", t.offload_s), ("stragglers", t.straggler_s)]
    # every part of the step (they add up to it), offload and stragglers where there are any
    lines.append(Text("Of the step: " + ", ".join(
        f"{name} {v / t.step_s:.0%}" for name, v in parts
        if v > 0 or name not in ("offload", "stragglers")) + "."))
    if plan.budget is not None:
        lines.append(Text(budget_line(plan)))
    return lines


def render_explain(plan: Plan, out: Console, *, sections=None, brief: bool = False,
                   mfu_convention: str = "causal", constants=None,
                   headroom: float | None = None) -> None:
    """The answer first (verdict_lines and the warnings), then the breakdown a person can check by
    hand, section by section (`sections`: names of SECTIONS, default all; `brief`: none)."""
    for line in verdict_lines(plan, mfu_convention, headroom):
        out.print(line, width=prose_width(out))
    render_warnings(plan, out, mfu_convention)
    if brief:
        return
    wanted = list(SECTIONS) if sections is None else list(sections)
    total_mem, step = plan.memory.total_bytes, plan.time.step_s
    wide = out.width >= WIDE_EXPLAIN
    for group in wanted:
        title = SECTIONS[group].format(stage=plan.memory.stage_name)
        out.print()
        if group == "constants":
            _render_constants(constants or [], out, title)
            continue
        rows = [(t.symbol, t.formula, value_text(t.value, t.unit, t.group),
                 f"{t.value / total_mem:.1%}" if t.key in MEMORY_PARTS else
                 f"{t.value / step:.1%}" if t.key in TIME_PARTS else "", t.why)
                for t in plan.terms if t.group == group]
        table = _terms_table(title, rows, wide, out)
        out.print(table)
        if group == "pipeline":
            values = {t.key: t.value for t in plan.terms}
            if "inflight_first" in values:
                n_f = values["inflight_first"]
                out.print(f"In flight on the first stage: {n_f:g} micro-batch"
                          f"{'' if n_f == 1 else 'es'} (schedule {plan.config.schedule.value}). "
                          f"β is the schedule's idle share; the bubble's share of the whole step "
                          f"is T_bubble/T_step = {bubble_share(plan):.1%}.")
        if group == "comm":
            out.print(layout_line(plan))
            out.print(links_line(plan))  # comm: link model (see links_line)
            if plan.comm.collectives:
                out.print()
                out.print(collectives_table(plan, out))


def _render_constants(constants, out: Console, title: str) -> None:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    table.add_column("symbol", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("unit", no_wrap=True)
    table.add_column("what", overflow="fold")
    for symbol, value, unit, meaning in constants:
        table.add_row(symbol, f"{value:.4g}", unit, meaning)
    out.print(table)


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


def _short_time(x: float) -> str:
    """A call's part, in µs below a millisecond, else ms or s."""
    if x < 1e-3:
        return f"{x * 1e6:,.1f} µs"
    return seconds(x)


def _message(x: float) -> str:
    return f"{x / 1e6:,.2f} MB" if x >= 1e5 else f"{x / 1e3:,.1f} kB"


def collectives_table(plan: Plan, out: Console) -> Table:
    """Each collective of the step as NCCL's tuner runs one call: the algorithm and protocol it
    picks, the call's latency and transfer parts, the calls per step and the message, and the
    step's total before overlap (Comm.collectives)."""
    calls = plan.comm.collectives
    columns = [
        Column("collective", [c.name for c in calls], justify="left"),
        Column("algorithm", [f"{c.algorithm}/{c.protocol}" for c in calls], justify="left"),
        Column("ranks", [f"{c.ranks:,.0f}" for c in calls], priority=2),
        Column("message", [_message(c.message_bytes) for c in calls], priority=1),
        Column("latency", [_short_time(c.latency_s) for c in calls]),
        Column("transfer", [_short_time(c.transfer_s) for c in calls]),
        Column("calls", [f"{c.calls_per_step:,.0f}" for c in calls]),
        Column("per step", [seconds(c.step_s) for c in calls])]
    return fitted_table(out, columns, "Collectives per step, each call as NCCL's tuner picks it "
                                      "(before overlap)")


def budget_line(plan: Plan) -> str:
    b = plan.budget
    source = "--goodput" if b.goodput_from == "--goodput" else "failures and checkpoints"
    parts = [f"Training {token_text(b.train_tokens)} tokens: {b.days:,.1f} days on {plan.config.n_gpus:,} "
             f"GPUs at goodput {b.goodput:.1%} ({source}), {b.gpu_hours:,.0f} GPU-hours"]
    if b.cost is not None:
        parts.append(f"cost {b.cost:,.0f} at {b.gpu_hour_price:g} per GPU-hour")
    if b.energy_mwh is not None:
        parts.append(f"GPU energy {b.energy_mwh:,.1f} MWh at {b.gpu_power_w:g} W")
    return ", ".join(parts) + "."


def render_launch(launch, out: Console) -> None:
    """--emit: the settings, then what they follow and what was assumed."""
    out.print(Text(f"Launch settings for {launch.framework} ({launch.format}):", style="bold"))
    out.print(launch.text, markup=False, highlight=False)
    render_launch_notes(launch, out, header=False)


def write_settings(launch) -> None:
    """--emit's settings alone on stdout, exactly as the framework reads them (no wrapping), so
    that `> args.txt` or `> job.toml` keeps them."""
    sys.stdout.write(launch.text.rstrip("\n") + "\n")
    sys.stdout.flush()


def render_launch_notes(launch, out: Console, header: bool = True) -> None:
    """What the settings follow and what was assumed (on stderr beside write_settings)."""
    if header:
        out.print(Text(f"Launch settings for {launch.framework} ({launch.format}) are on stdout.",
                       style="bold"))
    out.print(f"Option names follow: {launch.version_note}", markup=False, highlight=False)
    for note in launch.notes:
        out.print(f"note: {note}", markup=False, highlight=False)


TIMELINE_STYLES = {"F": "black on cyan", "B": "black on magenta", "W": "black on green",
                   "head": "black on yellow",
                   "idle": "dim"}
TIMELINE_LABEL = 9  # "stage 12 "


def render_timeline(timeline, out: Console, width: int | None = None, head_s: float = 0.0,
                    step_bubble: float | None = None) -> None:
    """The schedule as the terminal sees it, as wide as the terminal: one row per stage, forward
    (F3---) and backward (B3===) blocks with their micro-batch numbers, readable without colour
    (colour is added on a terminal), the bubble as dots, the last stage's LM head as h, the time
    axis to scale."""
    from .timeline import to_text_cells

    width = width or max(20, out.width - TIMELINE_LABEL - 1)
    rows = to_text_cells(timeline, width, head_s)
    share = ("" if step_bubble is None else
             f"; of the whole step (with the DP tail and optimizer) {step_bubble:.1%}")
    out.print(Text(f"Pipeline schedule ({timeline.schedule.value}, p={timeline.pp}, "
                   f"m={timeline.n_micro}, v={timeline.vpp}); one column = "
                   f"{seconds(timeline.makespan_s / width)}; idle share of the schedule "
                   f"β = {timeline.bubble_fraction:.1%}{share}", style="bold"))
    for k, row in enumerate(rows):
        line = Text(f"stage {k:<3d}"[:TIMELINE_LABEL - 1] + " ")
        for char, kind in row:
            line.append(char, style=TIMELINE_STYLES.get(kind, ""))
        out.print(line, no_wrap=True, overflow="crop")
    end = seconds(timeline.makespan_s)
    out.print(" " * TIMELINE_LABEL + "0" + " " * max(1, width - 1 - len(end)) + end,
              no_wrap=True, overflow="crop")
    legend = "F3--- forward, B3=== backward of micro-batch 3"
    if timeline.wgrad_s > 0:
        legend += " (its input gradient), W3~~~ its weight gradient"
    legend += "; · idle"
    if head_s > 0:
        legend += (f"; h = the last stage's LM head and loss, {seconds(head_s)} per micro-batch "
                   "(it sets the stage time)")
    out.print(legend)


def render_warnings(plan: Plan, out: Console, mfu_convention: str = "causal") -> None:
    for w in _shown_warnings(plan, mfu_convention):
        out.print(Text(f"warning [{w.code}]: {w.message}", style="yellow"),
                  width=prose_width(out))


# ---------------------------------------------------------------------------------------------
# tables that fit the terminal: the decisive columns always, more as the width allows


class Column:
    """One column: its header (may be two lines), alignment, cells, and its priority (0: always
    shown; then 1, 2, … added in that order while the table still fits)."""

    def __init__(self, header: str, cells: list[str], priority: int = 0, justify: str = "right",
                 fold: bool = False):
        self.header, self.cells, self.priority, self.justify, self.fold = (
            header, cells, priority, justify, fold)


def _table(columns: list[Column], title: str | None) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False,
                  padding=(0, 1), collapse_padding=True)
    for col in columns:
        table.add_column(col.header, justify=col.justify, no_wrap=not col.fold,
                         overflow="fold" if col.fold else "ellipsis")
    for i in range(len(columns[0].cells) if columns else 0):
        table.add_row(*(col.cells[i] for col in columns))
    return table


def _width(out: Console, table: Table) -> int:
    from rich.measure import Measurement

    return Measurement.get(out, out.options.update(max_width=100_000), table).maximum


def fitted_table(out: Console, columns: list[Column], title: str | None = None) -> Table:
    """The columns of priority 0 and as many of the others, in priority order, as fit out.width
    (in their given order); a column that never truncates (no cell wider than shown).

    A table's width is the sum of its columns' widths and a fixed gap between neighbours, so
    each column is measured once, alone, and the gap once from the first two (rather than
    measuring every trial table whole)."""
    if not columns:
        return _table(columns, title)
    alone = {id(c): _width(out, _table([c], None)) for c in columns}
    gap = (_width(out, _table(columns[:2], None)) - alone[id(columns[0])] - alone[id(columns[1])]
           if len(columns) > 1 else 0)

    def width(cols: list[Column]) -> int:
        return sum(alone[id(c)] for c in cols) + gap * (len(cols) - 1)

    shown = [c for c in columns if c.priority == 0]
    for col in sorted((c for c in columns if c.priority > 0), key=lambda c: c.priority):
        trial = [c for c in columns if c in shown or c is col]
        if width(trial) <= out.width:
            shown.append(col)
    return _table([c for c in columns if c in shown], title)


# ---------------------------------------------------------------------------------------------
# search

RECOMPUTE_SHORT = {"none": "", "selective": "sel", "full": "full"}


def layout_cell(plan: Plan) -> str:
    """The layout in a few characters (PlanConfig.short_label)."""
    return plan.config.short_label()


RANK_LEGEND = "# 1= a tie with its group's first row, m inside the memory margin, ! a warning"
LAYOUT_LEGEND = (RANK_LEGEND + "; layout: z = ZeRO stage, v = virtual stages, sel/full = "
                 "recompute (none when absent), nosp = no sequence parallelism")


def bubble_share(plan: Plan) -> float:
    """The bubble as every command shows it: the share of the step time the pipeline's fill and
    drain leave idle, T_bubble / T_step (the schedule's own idle share, (p − 1)/(v·m + p − 1), is
    `bubble_fraction` in --json and β in explain)."""
    t = plan.time
    return t.bubble_s / t.step_s if t.step_s > 0 else 0.0


def mfu_of(plan: Plan, convention: str) -> float:
    """MFU under a convention: "causal" (the unmasked half of attention, as Megatron-Core logs it)
    or "full" (the whole s×s square)."""
    return plan.time.mfu_causal if convention == "causal" else plan.time.mfu


def render_search(result, out: Console, mfu_convention: str = "causal", why: bool = False,
                  footer: list[tuple[str, list[str]]] | None = None) -> None:
    """The answer (--sort gpus: the size) first, the ranked table, a few lines on row 1 and the
    warnings of the plans shown, then `footer` (the command that runs row 1); with `why`, the
    whole reasoning and every option weighed."""
    from ..search.summary import WHY_HINT, WHY_ROWS_HINT

    if result.answer:
        out.print(result.answer)
    plans = result.plans
    budget = bool(plans) and plans[0].budget is not None
    ranks = result.ranks or [str(i) for i in range(1, len(plans) + 1)]
    warn = ["!" if any(w.code not in QUIET_WARNINGS for w in p.warnings) else "" for p in plans]
    mfu_label = "MFU\n" + mfu_convention
    columns = [
        Column("#", [f"{r}{w}" for r, w in zip(ranks, warn)]),
        Column("layout", [layout_cell(p) for p in plans], justify="left", fold=True),
        Column("step\ns", [step_seconds(p.time.step_s) for p in plans]),
        Column("tokens/s", [f"{p.time.tokens_per_s:,.0f}" for p in plans]),
        Column(mfu_label, [f"{mfu_of(p, mfu_convention):.1%}" for p in plans]),
        Column("mem", [share_of_capacity(p.memory) for p in plans]),
        Column("bubble", [f"{bubble_share(p):.1%}" for p in plans]),
    ]
    if budget:
        columns.append(Column("days", [f"{p.budget.days:,.1f}" for p in plans]))
    columns += [
        Column("mem GiB", [f"{gib(p.memory.total_bytes)}/{gib(p.memory.capacity_bytes)}"
                           for p in plans], priority=1),
        Column("exp.\ncomm", [f"{p.time.exposed_comm_s / p.time.step_s:.1%}" for p in plans],
               priority=2),
        Column("n_micro", [str(p.config.n_micro) for p in plans], priority=3),
    ]
    if result.variants:
        columns.append(Column("variants", [f"+{v}" if v else "" for v in result.variants],
                              priority=4))
    columns.append(Column("MFU\n" + ("full" if mfu_convention == "causal" else "causal"),
                          [f"{mfu_of(p, 'full' if mfu_convention == 'causal' else 'causal'):.1%}"
                           for p in plans], priority=5))
    title = (f"{len(plans)} of {result.feasible:,} plans that fit "
             f"({result.considered:,} considered)")
    out.print(fitted_table(out, columns, title))
    if why:  # by default the lines below say what the marks mean (1= ties, m, ! warnings)
        out.print(LAYOUT_LEGEND + f"; mem = of capacity; MFU counts {MFU_WORDS[mfu_convention]}; "
                  "bubble = T_bubble/T_step, the step's idle fill and drain.")
    elif not result.summary:
        out.print(RANK_LEGEND + ".")
    lines = list(result.summary) if result.summary else ([] if why else [result.reason])
    if not why:  # the way to the rest: on the line of row 1's margin, else its own line
        hint = WHY_HINT if result.alternatives else WHY_ROWS_HINT  # --sort memory: no options
        if len(lines) >= 2:
            lines[1] += " " + hint
        else:
            lines.append(hint)
    if why:
        lines += [result.reason] if result.reason else []
        lines += ["Also weighed:"] + [f"- {a.option}: {a.verdict} — {a.why}"
                                      for a in result.alternatives] if result.alternatives else []
    width = prose_width(out)
    if lines:  # one print: rich's per-call cost is most of a short line's
        out.print(Text("\n".join(line for line in lines if line)), width=width)
    if budget:
        out.print(("Plan 1: " + budget_line(plans[0])) if why else budget_brief(plans[0]),
                  width=width)
    for line in _search_warnings(plans, mfu_convention, why):
        out.print(Text(line, style="yellow"), width=width)
    for label, words in footer or []:
        out.print(Text("\n".join(command_lines(label, words, width))), no_wrap=True,
                  overflow="ignore", crop=False)


def _search_warnings(plans: list[Plan], mfu_convention: str, why: bool) -> list[str]:
    """One line per kind of warning among the plans shown: its first plan's message (by default
    its first clause, and only the kinds the `!` marks), and which other plans share it."""
    by_code: dict[str, tuple[str, list[int]]] = {}
    for i, p in enumerate(plans, 1):
        for w in _shown_warnings(p, mfu_convention):
            first = by_code.setdefault(w.code, (w.message, []))
            first[1].append(i)
    lines = []
    for code, (message, which_plans) in by_code.items():
        if why:
            which = (f"plan {which_plans[0]}" if len(which_plans) == 1 else
                     f"plans {numbers_text(which_plans)}; shown for plan {which_plans[0]}")
            lines.append(f"warning ({which}) [{code}]: {message}")
        elif code not in QUIET_WARNINGS:  # by default the warnings the `!` marks, one line each
            which = "plan" + ("s" if len(which_plans) > 1 else "")
            lines.append(f"! {which} {numbers_text(which_plans)}: {_warning_clause(message)} "
                         f"[{code}]")
    return lines


def command_lines(label: str, words: list[str], width: int) -> list[str]:
    """A shell command under a label, broken only between its (already quoted) words, each line
    but the last ending in ` \\`, so that pasting the lines runs the same command; a word longer
    than a line stays whole on its own line."""
    lines = [label]
    for word in words:
        if len(lines[-1]) + 1 + len(word) + 2 <= width or lines[-1] == label:
            lines[-1] += " " + word
        else:
            lines[-1] += " \\"
            lines.append("  " + word)
    return lines


def numbers_text(numbers: list[int]) -> str:
    """Row numbers with runs collapsed: [1, 2, 3, 5] → '1–3, 5'."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def _warning_clause(message: str) -> str:
    """A warning's first clause (up to its first colon or semicolon), for the short output."""
    return re.split(r": |; ", one_line(message), maxsplit=1)[0].rstrip(".")


def budget_brief(plan: Plan) -> str:
    """Row 1's training budget in one line: 'Row 1 trains 15T tokens in 74.9 days: 29.5M
    GPU-hours, cost 73.7M, 20.6k MWh.' (--why: budget_line, every figure in full)."""
    b = plan.budget
    parts = [f"{_short_number(b.gpu_hours)} GPU-hours"]
    if b.cost is not None:
        parts.append(f"cost {_short_number(b.cost)}")
    if b.energy_mwh is not None:
        parts.append(f"{_short_number(b.energy_mwh)} MWh")
    return (f"Row 1 trains {token_text(b.train_tokens)} tokens in {b.days:,.1f} days: "
            + ", ".join(parts) + ".")


def share_of_capacity(memory) -> str:
    """The memory a plan needs as a share of the GPU's, rounded down below 100 % so that a plan
    that fits never reads "100%"."""
    return share_text(memory.total_bytes, memory.capacity_bytes)


QUIET_WARNINGS = ("uneven-stages", "mfu-convention")
MFU_WORDS = {"causal": "the causal half of attention (as Megatron-Core logs it)",
             "full": "attention's whole s×s square (Narayanan 2021, PaLM)"}


def _shown_warnings(plan: Plan, mfu_convention: str):
    """The plan's warnings; the full-square convention's warning only under that convention."""
    return [w for w in plan.warnings
            if not (w.code == "mfu-convention" and mfu_convention == "causal")]


def render_models(listing, out: Console) -> None:
    rows = list(listing)
    columns = [
        Column("name", [m.name for m in rows], justify="left"),
        Column("params\n(10⁹)", [f"{m.n_params / 1e9:,.1f}" for m in rows]),
        Column("L", [str(m.n_layers) for m in rows]),
        Column("h", [str(m.hidden) for m in rows]),
        Column("a/kv", [f"{m.n_heads}/{m.n_kv_heads}" for m in rows]),
        Column("seq", [str(m.seq_len) for m in rows]),
        Column("aliases", [",".join(m.aliases) for m in rows], priority=2, justify="left"),
        Column("ffn", [str(m.ffn) for m in rows], priority=3),
        Column("V", [str(m.vocab) for m in rows], priority=4),
        # the experts (×E) say which models are MoE: the last optional column to go
        Column("mlp", [m.mlp + (f" ×{m.n_experts}" if m.n_experts > 1 else "") for m in rows],
               priority=1, justify="left"),
    ]
    out.print(fitted_table(out, columns))


def render_hardware(listing, out: Console) -> None:
    rows = list(listing)
    columns = [
        Column("name", [h.name for h in rows], justify="left"),
        Column("HBM\nGiB", [f"{h.hbm_gib:g}" for h in rows]),
        Column("bf16\nTFLOP/s", [f"{h.peak_tflops.bf16:g}" for h in rows]),
        Column("domain", [str(h.gpus_per_domain) for h in rows]),
        Column("fast\nGB/s", [f"{h.fast.busbw_gb_per_s:g}" for h in rows]),
        Column("net\nGB/s", [f"{h.network.busbw_gb_per_s:g}" for h in rows]),
        Column("fp8\nTFLOP/s", ["-" if h.peak_tflops.fp8 is None else f"{h.peak_tflops.fp8:g}"
                                for h in rows], priority=1),
        Column("HBM\nTB/s", [f"{h.hbm_tb_per_s:g}" for h in rows], priority=2),
        Column("GPU", [h.gpu for h in rows], priority=3, justify="left"),
    ]
    out.print(fitted_table(out, columns))


def render_validation(report, out: Console) -> None:
    cases = report.cases
    columns = [
        Column("case", [c.id for c in cases], justify="left", fold=True),
        Column("GPUs", [str(c.gpus) for c in cases]),
        Column("measured\ns", [step_seconds(c.measured_s) for c in cases]),
        Column("model\ns", [step_seconds(c.predicted_s) for c in cases]),
        Column("error", [f"{c.error:+.1%}" for c in cases]),
        Column("layout", [c.layout for c in cases], priority=1, justify="left"),
        Column("assumed", [c.assumed for c in cases], priority=2, justify="left"),
    ]
    title = (f"Published runs measured on {report.gpu}, through {report.hardware}: predicted vs "
             "measured step time")
    out.print(fitted_table(out, columns, title))
    ok = report.median_abs_error <= report.target_median and \
        report.max_abs_error <= report.target_max
    out.print(f"median |error| {report.median_abs_error:.1%} (target ≤ {report.target_median:.0%}),"
              f" max |error| {report.max_abs_error:.1%} (target ≤ {report.target_max:.0%}): "
              + ("targets met" if ok else "TARGETS MISSED"))


def render_calibration(result, out: Console, output: str | None) -> None:
    """The fit, answer first: the runs' error before and after; each factor before and after
    with its status, then each one's reason in a line of words (a reason runs to a few sentences:
    in a column it would fold into a narrow strip, or widen the table past 80 columns); each
    run's error before and after, its model and layout where the width allows them."""
    out.print(f"Calibration of {result.hardware}: median |error| "
              f"{result.median_abs_error_before:.1%} → {result.median_abs_error_after:.1%}, max "
              f"{result.max_abs_error_before:.1%} → {result.max_abs_error_after:.1%}",
              width=prose_width(out))
    factors = result.factors
    out.print(fitted_table(out, [
        Column("factor", [f.path for f in factors], justify="left"),
        Column("before", [f"{f.before:.4g} {f.unit}".strip() for f in factors]),
        Column("after", [f"{f.after:.4g} {f.unit}".strip() for f in factors]),
        Column("status", [f.status for f in factors], justify="left")]))
    out.print(Text("\n".join(f"{f.path}: {f.reason}" for f in factors)),
              width=prose_width(out))
    out.print()
    runs = result.runs
    out.print(fitted_table(out, [
        Column("run", [r.id for r in runs], justify="left", fold=True),
        Column("measured\ns", [step_seconds(r.measured_s) for r in runs]),
        Column("before\ns", [step_seconds(r.predicted_before_s) for r in runs]),
        Column("error", [f"{r.error_before:+.1%}" for r in runs]),
        Column("after\ns", [step_seconds(r.predicted_after_s) for r in runs]),
        Column("error", [f"{r.error_after:+.1%}" for r in runs]),
        Column("model", [r.model for r in runs], priority=1, justify="left"),
        Column("layout", [r.layout for r in runs], priority=2, justify="left"),
    ], "Runs: predicted vs measured step time"))
    for w in result.warnings:
        out.print(Text(f"warning: {w}", style="yellow"), width=prose_width(out))
    if output:
        out.print(f"wrote {output}: use it with --hw {output}")
    else:
        out.print("(pass -o FILE.toml to write the calibrated profile)")


# =============================================================================================
# plan3d compare (the compare helper's block: render_compare and its formatting helpers)


COMPARE_WIDTH = 80  # the comparison fits any terminal


def _short_number(x: float) -> str:
    """A count or amount in at most ~5 characters: 987, 12.3k, 4.45M, 1.2B, 15T."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            v = x / scale
            return f"{v:.3g}{suffix}" if v < 100 else f"{v:,.0f}{suffix}"
    return f"{x:.3g}" if abs(x) < 100 else f"{x:,.0f}"


def compact_layout(plan: Plan) -> str:
    """dp16 tp8 pp16 v2 z1 sel: the layout as the search's table spells it, dp included, so that
    `explain --plan` takes it back as printed."""
    return plan.config.short_label()


def _first_clause(text: str) -> str:
    return one_line(text).split("; ")[0]


def _pick_line(label: str, pick, days_first: bool) -> str:
    money = f"cost {_short_number(pick.cost)}" if pick.cost is not None \
        else f"{_short_number(pick.gpu_hours)} GPU-hours"
    days = f"{pick.days:,.1f} days"
    first, second = (days, money) if days_first else (money, days)
    return f"{label}: {pick.hardware} × {pick.gpus:,} GPUs — {first}, {second}"


def render_compare(result, out: Console) -> None:
    """The answer (cheapest, fastest), then one row per cell: its best plan's layout, step time,
    days, GPU-hours, cost and energy; then the cells without a plan and the notes. Fits 80
    columns."""
    width = min(out.width, COMPARE_WIDTH)

    def say(text: str) -> None:
        out.print(text, width=width)

    by_cost = result.cheapest_by == "cost"
    within = f" within {result.deadline_days:g} days" if result.deadline_days is not None else ""
    given = "" if result.goodput is None else f", goodput {result.goodput:.0%}"
    say(f"{result.model}, {_short_number(result.train_tokens)} tokens, batch {result.gbs:,} × "
        f"{result.seq_len:,} tokens (all cells){given}")
    if result.cheapest is None:
        say("No size tried finishes" + within + "." if within else "No cell has a plan.")
    else:
        say(_pick_line(("Cheapest" if by_cost else "Fewest GPU-hours") + within,
                       result.cheapest, days_first=False))
        say(_pick_line("Fastest" + within, result.fastest, days_first=True))
    cells = result.shown
    priced = any(c.plan is not None and c.plan.budget.cost is not None for c in cells)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    # each cell's own goodput (none to show when --goodput sets one for all), whole percent
    # rounded down so that it stays two digits and the table 80 columns
    own = result.goodput is None
    columns = ["hardware", "GPUs", "layout", "step"] + (["G%"] if own else [])
    columns += ["days", "GPU-h"]
    columns += ["cost"] if priced else []
    columns += ["MWh"]
    for col in columns:
        table.add_column(col, justify="left" if col in ("hardware", "layout") else "right",
                         no_wrap=col != "layout", overflow="fold")
    missing = []
    for c in cells:
        if c.plan is None:
            table.add_row(c.hardware, f"{c.gpus:,}", "no plan", *[""] * (len(columns) - 3))
            missing.append(c)
            continue
        p, b = c.plan, c.plan.budget
        late = "" if c.meets_deadline is not False else " >"
        row = [c.hardware, f"{c.gpus:,}", compact_layout(p), f"{p.time.step_s:,.2f}"]
        row += [f"{math.floor(100 * b.goodput):d}"] if own else []
        row += [f"{b.days:,.1f}{late}", _short_number(b.gpu_hours)]
        if priced:
            row.append("—" if b.cost is None else _short_number(b.cost))
        row.append("—" if b.energy_mwh is None else _short_number(b.energy_mwh))
        table.add_row(*row)
    # two spaces between columns where the table then fits 80 columns, else one (the box's
    # own): the README's widest row, a priced 16,384-GPU cell with a context-parallel
    # interleaved layout, is then 77 columns, not 85
    if out.measure(table, options=out.options.update_width(10 * COMPARE_WIDTH)).maximum > width:
        table.padding = 0
    out.print(table, width=out.width)  # the layout folds between words only where it must
    for c in missing:
        say(f"{c.hardware} × {c.gpus:,}: {_first_clause(c.reason)}")
    if result.deadline_days is not None and any(c.meets_deadline is False for c in cells):
        say(f"> misses the {result.deadline_days:g}-day deadline (its largest size tried)")
    for note in result.notes:
        say(note)
    at = (f"at goodput {result.goodput:.0%} (--goodput)" if result.goodput is not None else
          "at each cell's goodput (G%: the share of the wall clock that trains after failures, "
          "checkpoints and restarts at that size, rounded down)")
    say(f"Days and GPU-hours are wall-clock {at}; energy is GPU board power (TDP unless "
        "--gpu-power-w) over those days.")
