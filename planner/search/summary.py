"""The words under the search's table: a few short lines by default (`summary`), the whole
reasoning behind `--why` (`why`). Every plan is named as the table spells it
(PlanConfig.short_label), and every comparison names the parts of the step whose differences add
up to the step difference (alternatives.step_differences)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable

from ..results import Plan
from ..units import share_text
from .alternatives import EP_OPTION, EP_PINNED, Alternative, step_differences, step_parts
from .ranking import MARGIN_MARK, TIE_MARK

GIB = 2**30


def _name(plan: Plan) -> str:
    return plan.config.short_label()


def _vs(plan: Plan, other: Plan, than: str = "", most: int | None = None) -> str:
    """'0.2% slower: exposed CP +0.017 s' — other against plan (`than`: ' than row 8'); with
    `most`, the short form: that many parts named, the rest summed, the seconds named once."""
    ratio = other.time.step_s / plan.time.step_s - 1
    diff = step_differences(plan.time, other.time, most=most, unit_once=most is not None)
    word = "slower" if ratio >= 0 else "faster"
    return f"{abs(ratio):.1%} {word}{than}" + (f": {diff}" if diff else
                                         f", the same step time; {gib(other)} GiB")


def gib(plan: Plan) -> str:
    return f"{plan.memory.total_bytes / GIB:.1f}"


def composition(plan: Plan, least: float = 0.01) -> str:
    """'compute 85%, exposed CP 9%, exposed DP/ZeRO 6%': the parts of at least `least` of the
    step, largest first."""
    t = plan.time
    parts = sorted(step_parts(t).items(), key=lambda kv: -kv[1])
    shown = [f"{name} {v / t.step_s:.0%}" for name, v in parts if v >= least * t.step_s]
    return ", ".join(shown)


SHORT_PART = 0.05
"""The parts of row 1's step the short output names, 5 % or more (--why names every part of 1 %
or more)."""
SHORT_TERMS = 3
"""The parts of a step difference the short output names at the most, the rest summed as one
(--why names every part); fewer where the line would take more than SHORT_LINES lines."""
SHORT_WIDTH = 78
"""The width the short lines are written for: 80 columns less a margin of 2, so that no line
ends in a terminal's last column (outputs.render wraps them at the console's width less 2)."""
SHORT_LINES = 2
"""How many lines at SHORT_WIDTH a short line that weighs one plan against row 1 may take."""
WHY_HINT = "--why weighs each row and option."
"""The way to the rest, which the renderer puts on the line of row 1's margin (summary's second
line), else on a line of its own; WHY_ROWS_HINT where no option was weighed (--sort memory)."""
WHY_ROWS_HINT = "--why weighs each row."


def _short(line_of: Callable[[int], str], after: str = "") -> str:
    """line_of(most), a line weighing a plan against row 1 with its `most` largest parts named
    (SHORT_TERMS, then fewer), the first that wraps, followed by `after`, into SHORT_LINES lines
    at SHORT_WIDTH; the one with a single part named where none does."""
    for most in range(SHORT_TERMS, 0, -1):
        line = line_of(most)
        if len(textwrap.wrap(line + after, SHORT_WIDTH, break_long_words=False,
                             break_on_hyphens=False)) <= SHORT_LINES:
            break
    return line


def margin_legend(headroom: float) -> str:
    """The line that says what a row marked MARGIN_MARK is (one line at 80 columns)."""
    return (f"{MARGIN_MARK}: faster than row 1, but fits only inside the {headroom:.0%} memory "
            "margin (--headroom).")


def headline(plan: Plan, headroom: float, any_safe: bool) -> str:
    """Row 1 in one sentence: the plan, its step, its memory against the margin."""
    m = plan.memory
    share = share_text(m.total_bytes, m.capacity_bytes)
    head = (f"Row 1, the plan to run: {_name(plan)}" if any_safe else
            f"No plan fits with the {headroom:.0%} memory margin (--headroom); row 1 is the "
            f"fastest that fits at all: {_name(plan)}")
    return f"{head}, {plan.time.step_s:.3g} s a step, {share} of memory."


def summary(plans: list[Plan], labels: list[str], band: float, headroom: float,
            any_safe: bool, alternatives: list[Alternative], ties: int | None = None) -> list[str]:
    """The short lines (a few at 80 columns): row 1, its memory and where its step goes; its
    margin — how many plans tie with it, or row 2 against it part by part; the legend of the rows
    that are faster but fit only inside the memory margin; and each option weighed whose plan
    beats row 1 by more than the tie band (it would change the answer), its largest SHORT_TERMS
    parts against row 1 named and the rest summed. Plans are named by their row or as the table
    spells them; the rest is behind --why. `ties`: how many layouts tie with row 1 in all, shown
    or not (by default those the labels mark)."""
    if not plans:
        return []
    best = plans[0]
    lines = [f"{headline(best, headroom, any_safe)} Its step: "
             f"{composition(best, SHORT_PART)}."]
    tied = [i for i, lab in enumerate(labels) if lab.rstrip(MARGIN_MARK) == f"1{TIE_MARK}"]
    ranked = [i for i, lab in enumerate(labels) if i and lab != MARGIN_MARK]
    ties = len(tied) if ties is None else max(ties, len(tied))
    if ties > len(tied):  # some are not in the table (--top): say how to list them
        lines.append(f"{ties} more tie with it (a step within ±{band:.0%}; --top {ties + 1} "
                     "lists them).")
    elif ties:
        lines.append(f"{ties} more tie with it (1=: a step within ±{band:.0%}).")
    elif ranked:
        i = ranked[0]  # the renderer adds WHY_HINT to this line
        lines.append(_short(lambda most: f"Row {labels[i]} is {_vs(best, plans[i], most=most)}.",
                            " " + WHY_HINT))
    if MARGIN_MARK in labels:  # the mark's legend; --why weighs each such row against row 1
        lines.append(margin_legend(headroom))
    for a in alternatives:  # an option whose plan beats row 1 beyond a tie: it changes the answer
        if (a.step_s is not None and a.step_s < best.time.step_s * (1 - band)
                and a.plan != _name(best)):
            # against row 1 part by part (the parts sum to the step difference), the seconds
            # named once, in two lines at 80 columns
            lines.append(_short(lambda most, a=a: _option_line(best, a, most)))
        elif (a.option == EP_OPTION and a.verdict == "not searched" and a.why != EP_PINNED
              and best.config.ep == 1):  # moe: the experts kept whole, and not by --ep 1
            lines.append(f"No expert parallelism in this search: {a.why}")
    return lines


def _option_line(best: Plan, a: Alternative, most: int) -> str:
    """An option weighed whose plan beats row 1: the flag that ranks it (or its name), its plan,
    how much faster, and its `most` largest parts against row 1 (the rest summed)."""
    diff = (step_differences(best.time, a._time, most=most, unit_once=True)
            if a._time is not None else "")
    faster = f"{1 - a.step_s / best.time.step_s:.1%} faster" + (f": {diff}" if diff else "")
    flag = CHANGE_FLAGS.get(a.option)
    return (f"With {flag}, {a.plan} is {faster}." if flag else
            f"{a.option[0].upper()}{a.option[1:]} would change the answer: {a.plan}, {faster} "
            "(--why says more).")


def memory_summary(plans: list[Plan]) -> list[str]:
    """--sort memory's short lines: row 1, the plan that needs the least memory, and its step."""
    if not plans:
        return []
    best = plans[0]
    share = share_text(best.memory.total_bytes, best.memory.capacity_bytes)
    return [f"Row 1, the least memory: {_name(best)}, {gib(best)} GiB ({share} of memory), "
            f"{best.time.step_s:.3g} s a step. Its step: {composition(best, SHORT_PART)}."]


CHANGE_FLAGS = {"offload to host memory": "--offload auto",
                "hybrid sharding (HSDP)": "--dp-shard auto"}
"""The flag that makes the search rank an option it weighed but did not rank."""


def why(plans: list[Plan], labels: list[str], band: float, source: str, folded: int) -> str:
    """The whole reasoning (--why): row 1 and its step, then every plan shown against it."""
    if not plans:
        return ""
    best = plans[0]
    t = best.time
    parts = [f"Row 1: {_name(best)} — step {t.step_s:.3g} s ({t.tokens_per_s:,.0f} tokens/s, "
             f"MFU {t.mfu_causal:.1%} causal, {t.mfu:.1%} full); of the step, "
             f"{composition(best)}; {gib(best)} of {best.memory.capacity_bytes / GIB:.1f} GiB."]
    leads = {lab: plan for plan, lab in zip(plans, labels) if lab.isdigit()}
    for plan, lab in zip(plans[1:], labels[1:]):
        # a tie is weighed against its group's first row, the row it ties with; the rest
        # against row 1
        group = lab.rstrip(MARGIN_MARK).removesuffix(TIE_MARK)
        ref = group if TIE_MARK in lab and group in leads else "1"
        tie = (" (within the tie band: a tie)" if TIE_MARK in lab else
               " (fits only inside the memory margin)" if lab == MARGIN_MARK else "")
        parts.append(f"Row {lab}, {_name(plan)}, is "
                     f"{_vs(leads.get(ref, best), plan, f' than row {ref}')}{tie}.")
    if band > 0:
        parts.append(f"Ties: step times within ±{band:.0%} of a row ({source}).")
    if folded:
        parts.append(f"Each row is one layout (dp, tp, pp, cp); {folded:,} variants of the "
                     "layouts shown (ZeRO stage, recompute, micro-batch size, virtual stages) are "
                     "folded into them, each into its layout's first by the same rule.")
    return " ".join(parts)
