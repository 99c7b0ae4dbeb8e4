"""A new user's walk at 80 columns (issue 19 review): the table and the text under it agree."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.units import share_text

runner = CliRunner()


def test_memory_share_rounds_down_everywhere():
    # 96.6 % of memory reads 96 % (the safe side for memory), 99.99 % reads 99 %, a full GPU 100 %
    assert (share_text(96.6, 100), share_text(99.99, 100), share_text(100, 100)) == (
        "96%", "99%", "100%")
    r = runner.invoke(app, ["search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink",
                            "--headroom", "0", "--top", "3"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    row1 = next(x for x in r.stdout.splitlines() if re.match(r"\s+1\S*\s+dp", x))
    table = re.findall(r"(\d+)%", row1)[1]  # MFU, then mem
    text = re.search(r"Row 1, the plan to run: .*?, (\d+)% of memory", r.stdout).group(1)
    assert table == text


def test_a_tie_is_weighed_against_the_row_it_ties_with():
    # DeepSeek-V3 on 2,048 H100: rows 4= tie with row 4, not row 1 (row 4, 7.4 % slower than
    # row 1, is outside the band); each tie statement names its reference and lies within the band
    r = runner.invoke(app, ["search", "--model", "deepseek-v3", "--gpus", "2048", "--why"],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    found = re.findall(r"Row (\d+)=, [^,]+, is ([\d.]+)% slower than row (\d+)", text)
    assert {g for g, _, _ in found} >= {"1", "4"}
    for group, pct, ref in found:
        assert group == ref and float(pct) <= 5.0


def test_top_1_still_says_row_1_has_ties_and_no_orphan_hint():
    r = runner.invoke(app, ["search", "--model", "deepseek-v3", "--gpus", "2048", "--top", "1"],
                      env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    full = runner.invoke(app, ["search", "--model", "deepseek-v3", "--gpus", "2048", "--json"])
    n = sum(lab == "1=" for lab in __import__("json").loads(full.stdout)["ranks"])
    assert n >= 1
    text = " ".join(r.stdout.split())
    assert f"{n} more tie with it" in text and f"--top {n + 1} lists them" in text
    # the --why hint sits with the summary, never after the command
    lines = r.stdout.rstrip().splitlines()
    assert "--why" not in "\n".join(lines[lines.index(next(x for x in lines
                                                           if x.startswith("Run row 1"))):])


def test_compare_prints_layouts_explain_takes_back():
    # compare's layout column spells dp too, so each cell's layout runs as printed
    import json

    r = runner.invoke(app, ["compare", "--model", "70b", "--hw", "h100-nvlink", "--gpus",
                            "256,512", "--train-tokens", "1T"], env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.output
    rows = re.findall(r"^h100-nvlink\s+(\d+)\s+(dp\d+ .+?)\s+([\d.]+)\s+\d+\s", r.stdout, re.M)
    assert len(rows) == 2
    for gpus, layout, step in rows:
        e = runner.invoke(app, ["explain", "--model", "70b", "--hw", "h100-nvlink", "--gpus",
                                gpus, "--plan", layout, "--json"])
        assert e.exit_code == 0, e.output
        assert f"{json.loads(e.stdout)['time']['step_s']:.2f}" == step


def test_layout_strings_refuse_every_repeat_and_name_flags():
    base = ["explain", "--model", "70b", "--gpus", "512", "--plan"]
    for layout, word in (("dp32 tp4 pp4 v8 z1 full3 full3", "full3"),
                         ("dp32 tp4 pp4 tp4", "tp4")):
        r = runner.invoke(app, [*base, layout])
        assert r.exit_code == 2
        assert r.stderr.strip() == (f"plan3d: error: --plan {layout!r}: {word!r} repeats a "
                                    "setting given before it")
    r = runner.invoke(app, [*base, "dp32 tp4 pp4 v8 z1 full3", "--recompute-layers", "5"])
    assert r.exit_code == 2
    assert r.stderr.strip() == ("plan3d: error: --plan 'dp32 tp4 pp4 v8 z1 full3' says "
                                "recompute-layers 3 but --recompute-layers 5 was given: leave "
                                "one of them out")


def test_the_no_fit_error_spells_the_layout_as_the_table():
    r = runner.invoke(app, ["search", "--model", "405b", "--gpus", "8", "--hw", "h100-nvlink"])
    assert r.exit_code == 1
    layout = re.search(r"GiB per GPU \(([^)]+)\)", r.stderr).group(1)
    assert layout.startswith("dp1 tp8 pp1 ") and "zero" not in layout and "mbs1" not in layout
    e = runner.invoke(app, ["explain", "--model", "405b", "--gpus", "8", "--hw", "h100-nvlink",
                            "--plan", layout, "--json"])
    # explain takes it back as that plan (and says it does not fit)
    assert "--plan" not in e.stderr, e.stderr
    c = __import__("json").loads(e.stdout)["config"]
    assert (c["dp"], c["tp"], c["pp"], c["recompute"]) == (1, 8, 1, "full")


def test_the_deadline_answer_rounds_like_the_table():
    r = runner.invoke(app, ["search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink",
                            "--train-tokens", "1T", "--deadline-days", "30", "--top", "2"],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    answer = r.stdout.splitlines()[0]
    target, step = re.search(r"≤ ([\d.,]+) s \(([\d.,]+) s\)", answer).groups()
    assert len(target.replace(",", "").replace(".", "")) <= 4  # 4 significant digits at most
    row1 = next(x for x in r.stdout.splitlines() if re.match(r"\s+1\S*\s+dp", x))
    assert step in row1.split()  # the step exactly as the table prints it


def test_the_readme_states_the_rule_once_with_the_current_validate_figures():
    from pathlib import Path

    from planner.catalog import load_hardware
    from planner.model.validation import validate

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    item = readme[readme.index("- **Row 1, the plan to run.**"):readme.index("- **Short by")]
    text = " ".join(item.split())
    assert text.count("measured peaks") == 1 and "are marked measured" not in text
    assert "The rule, in two sentences:" in text
    a100, h100 = re.search(r"median \|error\|, ([\d.]+) % on A100 and ([\d.]+) % on H100",
                           text).groups()
    for figure, hw in ((a100, "a100-nvlink"), (h100, "h100-nvlink")):
        assert f"{validate(load_hardware(hw)).median_abs_error:.1%}" == f"{figure}%"


def _terms_total(text: str) -> tuple[float, float]:
    """(the sum of the printed parts, the printed total) of 'name ±x.xxx s, … = ±y.yyy s'."""
    def seconds(v: str) -> float:
        return float(v.replace("−", "-"))

    head, _, total = text.rpartition(" = ")
    if not head:  # one part alone is the whole difference ('exposed CP +0.062 s')
        head = total
    parts = re.findall(r"([−+]\d+\.\d{3}) s", head)
    assert parts, text
    return sum(seconds(v) for v in parts), seconds(re.match(r".*?([−+]\d+\.\d{3}) s$",
                                                           total)[1])


def test_every_weighed_option_names_the_parts_that_sum_to_its_difference():
    import json

    verdicts = set()
    for args in (["--model", "deepseek-v3", "--gpus", "2048"],
                 ["--model", "70b", "--gpus", "512", "--hw", "h100-nvlink"]):
        data = json.loads(runner.invoke(app, ["search", *args, "--json"]).stdout)
        weighed = [a for a in data["alternatives"] if a["verdict"] in ("wins", "ties", "loses")
                   and a["versus"] is not None]
        verdicts |= {a["verdict"] for a in weighed}
        for a in weighed:
            parts, total = _terms_total(a["why"].split(": ", 1)[1].rstrip("."))
            assert abs(total - (a["step_s"] - a["versus_step_s"])) <= 5e-4, a
            assert abs(parts - total) <= 5e-4 * (parts != total) * 12 + 5e-4, a
    # every verdict is exercised across the two searches (which of them ties moves with the
    # model's numbers; asserting it per search only restated them)
    assert verdicts == {"wins", "ties", "loses"}


def test_the_short_line_of_an_option_that_changes_the_answer_names_its_parts():
    import json

    data = json.loads(runner.invoke(app, ["search", "--model", "70b", "--gpus", "64",
                                          "--framework", "torchtitan", "--json"]).stdout)
    line = next(s for s in data["summary"] if s.startswith("With --offload auto, "))
    alt = next(a for a in data["alternatives"] if a["option"] == "offload to host memory")
    assert line.startswith(f"With --offload auto, {alt['plan']} is ")
    # the seconds named once, after the sum: 'exposed DP/ZeRO −5.038, compute −0.735, 4 others
    # +0.407 = −5.366 s'
    words = line.split("faster: ", 1)[1].rstrip(".")
    head, _, total = words.rpartition(" = ")
    parts = [float(v.replace("−", "-")) for v in re.findall(r"([−+]\d+\.\d{3})", head)]
    assert len(parts) == 3 and re.fullmatch(r"[−+]\d+\.\d{3} s", total)
    total = float(total[:-2].replace("−", "-"))
    assert abs(total - (alt["step_s"] - data["plans"][0]["time"]["step_s"])) <= 5e-4
    assert abs(sum(parts) - total) <= 5e-3


def test_an_nccl_calls_sub_term_is_a_time_with_its_unit():
    import json

    args = ["explain", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink", "--plan",
            "dp32 tp4 pp4 v8 z1 full3"]
    terms = {t["symbol"]: t for t in json.loads(runner.invoke(app, [*args, "--json"]).stdout)
             ["terms"]}
    one = terms["T_tp₁"]
    assert one["unit"] == "s" and one["formula"].startswith("one call as NCCL's tuner")
    assert terms["T_tp"]["formula"] == "4·T_tp₁"  # so T_tp is 4 calls of T_tp₁ seconds
    assert terms["T_tp"]["value"] == pytest.approx(4 * one["value"], rel=1e-9)
    text = runner.invoke(app, args, env={"COLUMNS": "200"}).stdout
    row = next(x for x in text.splitlines() if x.split()[:1] == ["T_tp₁"])
    assert f"{one['value'] * 1e3:.2f} ms" in row


def test_explain_writes_powers_as_powers_and_one_symbol_per_quantity():
    import json

    args = ["explain", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink", "--plan",
            "dp32 tp4 pp4 v8 z1 full3", "--json"]
    terms = json.loads(runner.invoke(app, args).stdout)["terms"]
    assert not any("··" in t["formula"] or "**" in t["formula"] for t in terms)
    strag = next(t for t in terms if t["key"] == "straggler_s")
    assert "max(0, z(c·d·p·t) - z(8))" in strag["formula"]  # z by name, not its expansion
    # M is the memory a GPU needs; the mean time between interruptions has its own symbol
    main = [t for t in terms if ":" not in t["key"]]
    symbols = [t["symbol"] for t in main]
    assert len(symbols) == len(set(symbols)), sorted(s for s in symbols if symbols.count(s) > 1)
    assert next(t for t in terms if t["key"] == "mtbf_s")["symbol"] == "T_MTBF"


def test_explain_shows_the_straggler_term_by_name():
    # T_strag as reliability.straggler_s states it, κ_g·max(0, z(N) − z(8)) with N = c·d·p·t,
    # not z's Gumbel form expanded in sympy floats; the value is the step's own
    import json

    from planner.formulas import reliability as R

    args = ["explain", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink", "--plan",
            "dp32 tp4 pp4 v8 z1 full3", "--json"]
    data = json.loads(runner.invoke(app, args).stdout)
    terms = {t["symbol"]: t for t in data["terms"]}
    strag = terms["T_strag"]
    assert strag["formula"] == "T_mb·κ_g·(m + (p - 1)/v)·max(0, z(c·d·p·t) - z(8))"
    assert "log" not in strag["formula"]
    spread = R.expected_max_normal(512.0) - R.expected_max_normal(8.0)
    assert spread == pytest.approx(1.5559, abs=1e-4)
    # the value is the formula's: κ_g = 0.08/5.4 = 1.48 %, z(512) − z(8) = 3.0782 − 1.5223 =
    # 1.5559, over the slots' compute T_mb·(m + (p − 1)/v) (m = 16 micro-batches at gbs 512 over
    # dp 32, mbs 1; p = 4, v = 8)
    slots = terms["T_mb"]["value"] * (16 + 3 / 8)
    assert strag["value"] == pytest.approx(slots * R.GPU_SPEED_CV * spread, rel=1e-9)
    assert 0.15 < strag["value"] < 0.2
