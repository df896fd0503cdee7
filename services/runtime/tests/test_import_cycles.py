"""The modules that execute a run import each other in one direction only: the executor
(run_loop) knows its collaborators, and they know the run through the protocols of
run_context.py, never the executor. Counted as Python would meet them, `if TYPE_CHECKING:` and
function-level imports included."""

from __future__ import annotations

import ast
from pathlib import Path

import tether_runtime

PACKAGE = Path(tether_runtime.__file__).parent
RUN_MODULES = {
    "run_loop",
    "run_context",
    "tool_calls",
    "write_call",
    "cards",
    "tool_results",
    "model_step",
    "driven",
    "questions",
}


def _graph() -> dict[str, set[str]]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        names[".".join(p for p in parts if p != "__init__")] = path
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        deps = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            found: list[str] = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            for full in found:
                short = full.removeprefix("tether_runtime.")
                if full.startswith("tether_runtime.") and short in names and short != name:
                    deps.add(short)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycles_finds_a_cycle_through_type_checking_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]


def test_the_run_modules_import_each_other_in_one_direction() -> None:
    graph = _graph()
    assert RUN_MODULES <= graph.keys()
    assert "run_context" in graph["tool_calls"] and "run_loop" not in graph["tool_calls"]
    tangled = [sorted(c) for c in cycles(graph) if c & RUN_MODULES]
    assert tangled == []
