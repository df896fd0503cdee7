"""A langgraph.json read as LangGraph reads it (tether_langgraph._config): graphs by file or
module, relative to the json's folder, `env` and `dependencies`; what Tether refuses, and why."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tether_langgraph import GraphAgent, GraphConfigError, agents_from_config

GRAPH = """
from langgraph.graph import START, MessagesState, StateGraph
builder = StateGraph(MessagesState)
builder.add_node("noop", lambda state: {})
builder.add_edge(START, "noop")
graph = builder.compile()
def make_graph(config):
    return graph
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "one.py").write_text(GRAPH)
    (tmp_path / "lgcfg_pkg").mkdir()
    (tmp_path / "lgcfg_pkg" / "__init__.py").write_text(GRAPH)
    (tmp_path / "vars.env").write_text("export LGCFG_A='from file'\nLGCFG_B=2\n# x\n")
    before = list(sys.path)
    yield tmp_path
    sys.path[:] = before
    for key in ("LGCFG_A", "LGCFG_B", "LGCFG_C"):
        os.environ.pop(key, None)
    sys.modules.pop("lgcfg_pkg", None)


def write(project: Path, config: object) -> str:
    path = project / "langgraph.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_graphs_by_file_and_by_module_with_env_and_dependencies(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LGCFG_B", "kept")
    path = write(
        project,
        {
            "graphs": {"one": "./graphs/one.py:graph", "two": {"path": "lgcfg_pkg:builder"}},
            "env": "vars.env",
            "dependencies": ["."],
        },
    )
    found = agents_from_config(path)
    assert [a.name for a, _ in found] == ["one", "two"]
    assert all(isinstance(a, GraphAgent) and a.check() for a, _ in found)
    assert found[0][1].endswith("graphs.one = ./graphs/one.py:graph")
    assert os.environ["LGCFG_A"] == "from file" and os.environ["LGCFG_B"] == "kept"
    write(project, {"graphs": {"one": "./graphs/one.py:graph"}, "env": {"LGCFG_C": 3}})
    agents_from_config(str(project / "langgraph.json"))
    assert os.environ["LGCFG_C"] == "3"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"graphs": {"f": "./graphs/one.py:make_graph"}}, "a graph factory"),
        ({"graphs": {"m": "./graphs/one.py:nothing"}}, "no attribute 'nothing'"),
        ({"graphs": {"x": "./graphs/missing.py:graph"}}, "cannot import"),
        ({"graphs": {"y": "no_colon"}}, "'file.py:attr' or 'module:attr'"),
        ({"graph": {}}, "no `graphs` object"),
        ({"graphs": {"e": "./graphs/one.py:graph"}, "env": "absent.env"}, "cannot read env"),
    ],
)
def test_what_cannot_be_loaded_is_refused_with_its_reason(
    project: Path, config: object, message: str
) -> None:
    with pytest.raises(GraphConfigError, match=message):
        agents_from_config(write(project, config))
