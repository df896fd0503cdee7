"""The CLI is an application of the runtime, not a part of it: it reaches the database through
`tether_runtime.api.admin`, never `tether_runtime.store` (whose SQL and checks stay the runtime's).
Every Python file under cli/ is parsed and each import (and import_module call) is checked."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tether_cli import webhooks_cmd
from tether_runtime.api import admin
from tether_testkit.source_ast import parse_file

CLI = Path(__file__).resolve().parents[1]
SRC = CLI / "src"

# What the CLI's own code may import of the runtime: the admin API, loading agents (to list
# them and report a bad one as the runtime would), and the server that `tether runtime` runs.
ALLOWED = {
    "tether_runtime.api.admin",
    "tether_runtime.engine.agents",
    "tether_runtime.engine.loaded_agent",
    "tether_runtime.server",
}


def imported(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, module) for every module a file imports: `import a.b`, `from a import b` (as a.b,
    since b may be a module) and importlib.import_module("a.b")."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def runtime_imports(root: Path) -> Iterator[tuple[str, str]]:
    for path in sorted(root.rglob("*.py")):
        if ".venv" in path.parts:
            continue
        for line, module in imported(parse_file(path)):
            if module == "tether_runtime" or module.startswith("tether_runtime."):
                yield f"{path.relative_to(CLI)}:{line}", module


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_nothing_under_cli_imports_the_store() -> None:
    found = list(runtime_imports(CLI))
    assert found, "the walk found no runtime import at all: is it looking in the right place?"
    offenders = [f"{where} imports {m}" for where, m in found if _under(m, "tether_runtime.store")]
    assert not offenders, "use tether_runtime.api.admin instead:\n" + "\n".join(offenders)


def test_the_cli_reaches_the_runtime_only_through_its_public_modules() -> None:
    offenders = [
        f"{where} imports {m}"
        for where, m in runtime_imports(SRC)
        if not any(_under(m, allowed) for allowed in ALLOWED)
    ]
    assert not offenders, f"the CLI may import only {sorted(ALLOWED)}:\n" + "\n".join(offenders)


def test_the_walk_sees_every_kind_of_import() -> None:
    source = (
        "import tether_runtime.store.db\n"
        "from tether_runtime import store\n"
        "from tether_runtime.store.grants import add\n"
        "def f():\n"
        "    import importlib\n"
        "    importlib.import_module('tether_runtime.store.audit')\n"
    )
    modules = [m for _, m in imported(ast.parse(source))]
    assert [m for m in modules if _under(m, "tether_runtime.store")] == [
        "tether_runtime.store.db",
        "tether_runtime.store",
        "tether_runtime.store.grants.add",
        "tether_runtime.store.audit",
    ]


def test_the_webhook_events_offered_are_the_runtime_s() -> None:
    # The CLI names them without importing the runtime (its parser is built for every verb).
    assert webhooks_cmd.OUTBOX_EVENTS == admin.WEBHOOK_EVENTS
