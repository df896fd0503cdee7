"""The JS client's wire.generated.js/.d.ts are committed: they must be what the generator writes
from today's protos (`make gen`), so a proto change that is not regenerated fails here."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from tether_proto import wire, wire_js

REPO = Path(__file__).resolve().parents[3]
OUT = REPO / "clients" / "js" / "src"


@pytest.mark.parametrize("name", [wire_js.JS, wire_js.DTS])
def test_committed_file_is_what_the_generator_writes_now(name: str) -> None:
    assert (OUT / name).read_text() == wire_js.rendered()[name], (
        f"clients/js/src/{name} is stale: run `make gen` and commit it"
    )


def test_write_writes_both_files_and_main_takes_one_folder(tmp_path: Path) -> None:
    assert wire_js.main([str(tmp_path)]) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == wire_js.rendered()
    assert wire_js.main([]) == 2


@pytest.mark.process  # starts a process: not in test-fast
def test_the_js_module_holds_the_python_names() -> None:
    """Run by node: what the module exports is tether_proto.wire's, value for value."""
    node = shutil.which("node")
    assert node, "node is needed for the JS client (make setup)"
    script = f"import('{(OUT / wire_js.JS).as_uri()}').then(m => console.log(JSON.stringify(m)))"
    out = subprocess.run(
        [node, "-e", script], check=True, capture_output=True, text=True, timeout=30
    ).stdout
    exported = json.loads(out)
    assert exported["RUN_STATUSES"] == list(wire.RUN_STATUS.names)
    assert sorted(exported["TERMINAL_RUN_STATUSES"]) == sorted(wire.TERMINAL_RUN_STATUSES)
    assert sorted(exported["TERMINAL_EVENT_TYPES"]) == sorted(wire.TERMINAL_EVENT_TYPES)
    assert exported["ANSWERS"] == list(wire.ANSWERS)
    assert exported["DECISIONS"] == list(wire.DECISION.names)
    assert exported["TOOL_CALL_STATUSES"] == [s.value for s in wire.ToolCallStatus]
    assert set(exported) == {c.name for c in wire_js.constants()}
