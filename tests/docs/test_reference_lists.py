"""The reference pages list what the code has, and the lists cannot drift: the SDK's public names
(docs/sdk.md) are `tether_sdk.__all__`, and the audit actions (docs/DESIGN.md "Audit" and
openapi.json's `AuditRecord.action`) are `tether_runtime.store.audit.ACTIONS`, the one list the
runtime writes from (an action outside it fails at the write); the event tables of the README
("HTTP and SSE") and docs/DESIGN.md are `tether_proto.wire.EVENT_TYPES`, the proto's oneof."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import tether_sdk
from tether_proto import wire
from tether_runtime.store import audit

REPO = Path(__file__).resolve().parents[2]


def _section(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end > 0 else None]


def _first_cells(section: str) -> list[str]:
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [line.split("|")[1].strip() for line in rows]


def test_sdk_reference_lists_exactly_the_public_names() -> None:
    cells = _first_cells(_section(REPO / "docs" / "sdk.md", "## Public names"))
    documented = [c.strip("`") for c in cells]
    assert sorted(documented) == sorted(tether_sdk.__all__)
    assert len(documented) == len(set(documented)), "a name is documented twice"


def _expand(cell: str) -> list[str]:
    """ "`interrupt.approved`, `.rejected`" -> interrupt.approved, interrupt.rejected."""
    names = re.findall(r"`([a-z_.]+)`", cell)
    out: list[str] = []
    for name in names:
        if name.startswith(".") and out:
            name = out[-1].split(".")[0] + name
        out.append(name)
    return out


def test_design_audit_table_lists_exactly_the_actions() -> None:
    section = _section(REPO / "docs" / "DESIGN.md", "## Audit")
    documented = [a for cell in _first_cells(section) for a in _expand(cell)]
    assert sorted(documented) == sorted(audit.ACTIONS)


def test_openapi_audit_action_lists_exactly_the_actions() -> None:
    spec = json.loads((REPO / "services/gateway/src/tether_gateway/openapi.json").read_text())
    text = spec["components"]["schemas"]["AuditRecord"]["properties"]["action"]["description"]
    assert sorted(text.split(", ")) == sorted(audit.ACTIONS)


@pytest.mark.parametrize("action", ["interrupt.made_up", "tool.retried", ""])
def test_an_action_outside_the_list_fails_at_the_write(action: str) -> None:
    with pytest.raises(ValueError, match="unknown audit action"):
        audit._known(action)


def _event_table(path: Path, heading: str) -> list[str]:
    section = _section(path, heading)
    start = section.index("| event |")
    rows = section[start:].split("\n\n")[0]
    return [c.strip("`") for c in _first_cells(rows)]


@pytest.mark.parametrize(
    ("path", "heading"),
    [("README.md", "## HTTP and SSE"), ("docs/DESIGN.md", "| event | fields besides")],
)
def test_event_tables_list_exactly_the_event_types(path: str, heading: str) -> None:
    documented = _event_table(REPO / path, heading)
    assert sorted(documented) == sorted(wire.EVENT_TYPES)
    assert len(documented) == len(set(documented)), "an event is documented twice"
