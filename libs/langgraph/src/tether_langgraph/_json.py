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


def plain(value: Any) -> Any:
    """`value` as JSON's types only (dicts, lists, strings, numbers, booleans, None)."""
    result: Any = json.loads(json.dumps(value, default=_default))
    return result


def dumps(value: Any) -> str:
    return json.dumps(value, default=_default, ensure_ascii=False, separators=(",", ":"))
