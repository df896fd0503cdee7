"""README's settings table against `Settings.model_fields`: every setting documented under its
variable, every documented TETHER_ variable read by something, and the defaults the table shows
equal to the code's."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic.fields import FieldInfo
from tether_common.config import COALESCE_MS, Settings

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

# Documented TETHER_ variables that are not deployment settings, with the file that reads each:
# the CLI's own, an agent's, and the tracing setup's exporters (beside OpenTelemetry's own).
NOT_SETTINGS = {
    "TETHER_DEV_DIR": "cli/src/tether_cli/dev.py",
    "TETHER_DEMO_MAILER": "cli/src/tether_cli/demo_mailer.py",
    "TETHER_DEMO_TOOL_DELAY_S": "agents/opspilot/src/tether_opspilot/inventory.py",
    "TETHER_TRACE_FILE": "libs/common/src/tether_common/tracing.py",
    "TETHER_TRACE_CONSOLE": "libs/common/src/tether_common/tracing.py",
}
# How a default cell says "none" (the setting's default is empty).
EMPTY = ("unset", "none", "–")


def table() -> list[tuple[list[str], str]]:
    """The rows of README's "## Settings" table: (variable names, default cell)."""
    text = README.read_text()
    section = text[text.index("\n## Settings\n") :]
    section = section[: section.index("\n## ", 1)]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(cells) < 3:
            continue
        names = re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[0])
        rows.append((names, cells[1]))
    return rows


def shown_defaults(names: list[str], cell: str) -> list[str]:
    """The default the cell shows for each name ("unset" for none); [] when it shows none the
    code can be held to (a phrase, another variable, values that do not pair up with names)."""
    if re.search(r"`[A-Z][A-Z0-9_]*`", cell):
        return []  # another variable's value
    parts = [p.strip() for p in cell.split(",")]
    if len(parts) == len(names) and all(p in EMPTY or re.fullmatch(r"`[^`]*`", p) for p in parts):
        return ["unset" if p in EMPTY else p.strip("`") for p in parts]
    if re.fullmatch(r"`[^`]*` each", cell):
        return [cell.split("`")[1]] * len(names)
    if cell.lower().startswith(EMPTY):
        return ["unset"] * len(names)
    one = re.match(r"`([^`]*)`", cell)
    return [one.group(1)] if one and len(names) == 1 else []


def documented() -> dict[str, str]:
    """Each documented variable and the default the table shows for it ("" when none)."""
    out: dict[str, str] = {}
    for names, cell in table():
        shown = shown_defaults(names, cell)
        for i, name in enumerate(names):
            out[name] = shown[i] if shown else ""
    return out


def fields() -> dict[str, tuple[str, FieldInfo]]:
    return {Settings.env_name(name): (name, f) for name, f in Settings.model_fields.items()}


def test_every_setting_has_a_row() -> None:
    missing = sorted(set(fields()) - set(documented()))
    assert not missing, f"settings with no row in README's settings table: {missing}"


def test_every_documented_tether_variable_is_read() -> None:
    rows = documented()
    unknown = sorted(n for n in rows if n.startswith("TETHER_") and n not in fields())
    assert unknown == sorted(NOT_SETTINGS), f"documented but not settings: {unknown}"
    for name, path in NOT_SETTINGS.items():
        assert name in (ROOT / path).read_text(), f"{path} does not read {name}"
        assert name not in fields()


def _same(shown: str, name: str, field: FieldInfo) -> bool:
    default = field.default
    if shown == "unset":
        return not default
    if name == COALESCE_MS:
        return float(shown) / 1000 == default
    if isinstance(default, bool):
        return shown == ("1" if default else "0")
    if isinstance(default, int | float):
        return float(shown) == default
    return bool(shown == default)


def test_documented_defaults_are_the_code_defaults() -> None:
    settings = fields()
    wrong = {}
    checked = 0
    for name, shown in documented().items():
        if name not in settings or not shown:
            continue
        checked += 1
        field_name, field = settings[name]
        if not _same(shown, name, field):
            wrong[name] = (shown, field.default)
    assert not wrong, f"README default != code default: {wrong}"
    assert checked > 50  # the table's defaults are read at all


def test_the_table_names_no_agent_as_the_core_default() -> None:
    assert Settings().default_agent == ""
    assert documented()["TETHER_DEFAULT_AGENT"] == "unset"
