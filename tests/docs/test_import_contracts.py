"""The import contracts in pyproject.toml (`make lint` runs lint-imports) hold on the code, and
fail on an import that breaks one: shown on the real import graph with one import added."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest
from importlinter import configuration
from importlinter.application import use_cases
from importlinter.application.app_config import settings

ROOT = Path(__file__).resolve().parents[2]


class _Builder:
    def __init__(self, graph: grimp.ImportGraph) -> None:
        self.graph = graph

    def build(self, **_: object) -> grimp.ImportGraph:
        return self.graph


@pytest.fixture(scope="module")
def options():  # type: ignore[no-untyped-def]
    configuration.configure()
    use_cases._register_built_in_contract_types()  # what lint-imports does before it reads them
    return use_cases.read_user_options(str(ROOT / "pyproject.toml"))


def _failures(options, extra: tuple[str, str] | None) -> list[str]:  # type: ignore[no-untyped-def]
    graph = grimp.build_graph(
        *options.session_options["root_packages"], exclude_type_checking_imports=False
    )
    if extra is not None:
        graph.add_import(importer=extra[0], imported=extra[1], line_number=1, line_contents="x")
    saved = settings.GRAPH_BUILDER
    settings.configure(GRAPH_BUILDER=_Builder(graph))
    try:
        report = use_cases.create_report(options, cache_dir=None)
    finally:
        settings.configure(GRAPH_BUILDER=saved)
    return [
        contract.name for contract, check in report.get_contracts_and_checks() if not check.kept
    ]


def test_the_code_keeps_every_contract(options) -> None:  # type: ignore[no-untyped-def]
    assert _failures(options, None) == []


@pytest.mark.parametrize(
    ("importer", "imported", "contract"),
    [
        # A library reaching up into a service.
        ("tether_common.config", "tether_runtime.store.db", "Packages in layers"),
        # The gateway and the runtime are independent of each other.
        ("tether_gateway.api", "tether_runtime.api.servicer", "Packages in layers"),
        # An agent knows the SDK, not the runtime.
        ("tether_opspilot", "tether_runtime.engine.worker", "Agents know the SDK"),
        # A cycle: the store importing the servicer that imports it.
        ("tether_runtime.store.db", "tether_runtime.api.servicer", "No import cycles"),
        # Inside the runtime: the store never reaches up into the engine, nor the domain's
        # shapes into the streams.
        ("tether_runtime.store.runs", "tether_runtime.engine.worker", "The runtime in layers"),
        (
            "tether_runtime.domain.events",
            "tether_runtime.streams.run_writer",
            "The runtime in layers",
        ),
    ],
)
def test_an_import_that_breaks_a_contract_fails(options, importer, imported, contract) -> None:  # type: ignore[no-untyped-def]
    broken = _failures(options, (importer, imported))
    assert any(name.startswith(contract) for name in broken), broken
