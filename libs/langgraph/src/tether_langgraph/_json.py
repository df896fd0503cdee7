"""A graph's values as plain JSON, the way LangGraph's Agent Server sends them: a LangChain
message (any pydantic model) as its fields (`model_dump()`: `type`, `content`, `id`,
`tool_calls`, ...), never LangChain's own `lc`/`constructor` form (`langchain_core.load.dumpd`);
a dataclass as its fields, a set as a list, a date as ISO text, anything else as its text."""

from __future__ import annotations

import dataclasses
import enum
import json
from datetime import date, datetime, time
from typing import Any


def _default(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "_asdict"):  # a NamedTuple (LangGraph's Interrupt was one)
        return obj._asdict()
    if isinstance(obj, set | frozenset):
        return list(obj)
    if isinstance(obj, datetime | date | time):
        return obj.isoformat()
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    if isinstance(obj, BaseException):
        return {"error": type(obj).__name__, "message": str(obj)}
    return str(obj)


def _key(key: Any) -> str:
    """A dict key as json.dumps writes it."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    if isinstance(key, int | float):
        return json.dumps(key)
    return str(key)


def plain(value: Any) -> Any:
    """`value` as JSON's types only (dicts, lists, strings, numbers, booleans, None), in one walk:
    the event builder encodes it once, after masking (it was encoded, decoded and encoded again
    for every graph event)."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, dict):
        return {_key(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return plain(_default(value))


def dumps(value: Any) -> str:
    return json.dumps(value, default=_default, ensure_ascii=False, separators=(",", ":"))
