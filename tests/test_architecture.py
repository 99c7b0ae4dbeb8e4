"""The shape of the code, checked with the standard library's `ast` alone: no import cycle among
planner's modules, and no function longer than ~80 lines outside a short, named list.

Import edges: every `import` and `from ... import` in a module counts, at module level and inside
functions alike (a function-level import that closes a circle is a circle all the same, only
postponed), and so do imports under `if TYPE_CHECKING:`. `from package import name` is an edge to
the module `package.name` when there is one, else to the package's `__init__`. The implicit import
of a package's `__init__` when one of its modules is imported is not an edge: an `__init__` that
re-exports its modules would otherwise close a circle with each of them."""

from __future__ import annotations

import ast
from pathlib import Path

PLANNER = Path(__file__).resolve().parents[1] / "planner"
MAX_LINES = 80

# Functions longer than MAX_LINES, each with who splits it (issue 24). Take a function off the list
# when it is split; the test fails on a name that is no longer long, so the list cannot go stale.
LONG_FUNCTIONS: dict[str, str] = {
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PLANNER.rglob("*.py"):
        parts = list(path.relative_to(PLANNER.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _target(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                target = _target(name, path.name == "__init__.py", node)
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    edges.add(sub if sub in mods else target)
            elif isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
        graph[name] = {e for e in edges if e in mods and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def long_in(source: str) -> dict[str, int]:
    """The functions (methods and nested ones too) of `source` longer than MAX_LINES: their
    lines from `def` to the last line of the body, docstring and comments included."""
    out = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_LINES:
                out[node.name] = n
    return out


def long_functions() -> dict[str, int]:
    return {f"{name}.{fn}": n for name, path in _modules().items()
            for fn, n in long_in(path.read_text(encoding="utf-8")).items()}


def test_long_functions_are_found():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))  # def + 80 lines = 81
    assert long_in(f"def f():\n{body}\ndef g():\n    pass\n") == {"f": MAX_LINES + 1}
    assert long_in(f"class C:\n    def m(self):\n    {body.replace(chr(10), chr(10) + '    ')}") \
        == {"m": MAX_LINES + 1}


def test_the_import_graph_is_read_whole():
    """The graph the cycle test reads is the real one: known edges are in it."""
    graph = import_graph()
    assert "planner.formulas._ops" in graph["planner.formulas.pipeline"]
    assert "planner.model.numbers" in graph["planner.model.cost"]
    assert "planner.frameworks" in graph["planner.model.constraints"]
    assert len(graph) >= 40


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_planner_modules():
    assert cycles(import_graph()) == []


def test_no_function_over_80_lines_but_the_listed_ones():
    found = long_functions()
    too_long = {k: found[k] for k in set(found) - set(LONG_FUNCTIONS)}
    assert too_long == {}, f"split these (or, for a data table only, list them): {too_long}"
    assert set(LONG_FUNCTIONS) - set(found) == set(), "split: take it off the list"
