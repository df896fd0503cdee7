"""How a setting's text in the environment becomes its value: numbers, switches, lists, each
refused with a message naming the variable (the settings are read once, at start)."""

from __future__ import annotations

import math

from tether_common.errors import UnsafeSettings

SWITCH_ON = ("1", "true", "yes", "on")
SWITCH_OFF = ("0", "false", "no", "off")


def number(name: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError as err:
        raise UnsafeSettings(f"{name}={raw!r} is not a number") from err


def whole(name: str, raw: str) -> int:
    """A count: a number, its fraction dropped (as `int(float(raw))`); NaN and infinity refused."""
    value = number(name, raw)
    if not math.isfinite(value):
        raise UnsafeSettings(f"{name}={raw!r} is not a number")
    return int(value)


def switch(name: str, raw: str) -> bool:
    if raw.lower() in SWITCH_ON:
        return True
    if raw.lower() in SWITCH_OFF:
        return False
    raise UnsafeSettings(f"{name}={raw!r} is not a switch (1/0, true/false)")


def items(raw: str) -> tuple[str, ...]:
    """A comma-separated list, blanks dropped."""
    return tuple(s.strip() for s in raw.split(",") if s.strip())


def tool_pairs(name: str, raw: str) -> frozenset[str]:
    """Comma-separated `agent:tool` (or `agent:*`) entries; a malformed one fails the start
    (a typo would otherwise leave a tool open to everyone)."""
    pairs = frozenset(items(raw))
    for pair in pairs:
        agent, _, tool = pair.partition(":")
        if not agent.strip() or not tool.strip() or "/" in pair or ":" in tool:
            raise UnsafeSettings(f"{name}: {pair!r} is not 'agent:tool' or 'agent:*'")
    return pairs
