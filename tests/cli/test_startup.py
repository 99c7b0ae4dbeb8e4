"""What start-up imports (not how long it takes: timings live in benchmarks/bench_search.py)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

HEAVY = ("numpy", "rich", "pydantic", "sympy", "scipy", "matplotlib", "markdown_it")


def imported(*args: str) -> set[str]:
    """The top-level modules `python -m planner ARGS` imports (via -X importtime)."""
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "planner", *args],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip().split(".")[0]
            for line in run.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_import_none_of_the_heavy_libraries(flag):
    mods = imported(flag)
    assert "planner" in mods and "typer" in mods
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))


def test_search_imports_neither_scipy_sympy_nor_matplotlib():
    mods = imported("search", "--model", "8b", "--gpus", "8", "--top", "1")
    assert {"numpy", "pydantic", "rich"} <= mods
    assert not mods & {"scipy", "sympy", "matplotlib"}


def test_entry_point_switches_the_collector_off_and_freezes():
    code = ("import gc, sys; from planner import entry; sys.argv = ['plan3d', '--version'];\n"
            "try:\n    entry.main()\nexcept SystemExit:\n    pass\n"
            "print(gc.isenabled(), gc.get_freeze_count() > 0)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.split()[-2:] == ["False", "True"]
    # importing the command line (tests, scripts) leaves the collector alone
    import planner.cli  # noqa: F401

    assert gc.isenabled()


@pytest.mark.parametrize("argv, built", [
    (["models"], ["models"]),  # only the command being run
    (["--version"], []),  # none
    (["--help"], None),  # all: the root help lists them
    (["serch"], None),  # all: "No such command 'serch'. Did you mean 'search'?"
])
def test_main_builds_only_the_command_it_runs(argv, built):
    code = (f"import sys; sys.argv = ['plan3d'] + {argv!r}\n"
            "from planner import cli\nn = len(cli.app.registered_commands)\n"
            "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
            "names = [c.callback.__name__ for c in cli.app.registered_commands]\n"
            "sys.stderr.write('BUILT ' + ','.join(names) + ' OF ' + str(n) + '\\n')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    names, total = run.stderr.rsplit("BUILT ", 1)[1].split(" OF ")
    names = [n for n in names.split(",") if n]
    assert names == (built if built is not None else names) and int(total) >= 8
    if built is None:
        assert len(names) == int(total)
    if argv == ["serch"]:
        assert "Did you mean 'search'?" in run.stderr
