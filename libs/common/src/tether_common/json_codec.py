"""JSON text encoded by orjson, with the standard library's answer wherever orjson refuses a value
(integers beyond 64 bits): the same values as `json.dumps`, in a fraction of the CPU. The
runtime's Postgres json/jsonb codec and its checkpoints use it: every save of a run encodes its
whole transcript. Reading stays with `json.loads`: orjson reads an integer beyond 64 bits as a
float, which would change a value."""

from __future__ import annotations

import json
from typing import Any

import orjson

_OPTS = orjson.OPT_NON_STR_KEYS  # int or float keys become strings, as json.dumps makes them


def dumps(value: Any) -> str:
    """Compact JSON text (no spaces after separators; non-ASCII kept as is). Values orjson
    cannot encode are encoded by `json.dumps`, which also raises on what neither can encode."""
    try:
        return orjson.dumps(value, option=_OPTS).decode()
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
