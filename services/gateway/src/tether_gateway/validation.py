"""Request bodies: size-limited JSON objects with known fields of the right type, nothing else."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from tether_common import input_parsers
from tether_common.errors import InvalidArgument
from tether_common.input_parsers import json_document, storable


class PayloadTooLarge(web.HTTPRequestEntityTooLarge):
    def __init__(self, limit: int, actual: int) -> None:
        super().__init__(max_size=limit, actual_size=actual)


@dataclass(frozen=True)
class Field:
    required: bool = False
    max_len: int = 256
    choices: tuple[str, ...] = ()
    # A regular expression the whole value must match (e.g. a name's alphabet), when set.
    pattern: str = ""


Schema = dict[str, Field]
# The only list parameters: LangGraph's `stream_mode` on a join (`?stream_mode=a&stream_mode=b`).
REPEATABLE_PARAMS = frozenset({"stream_mode"})


@web.middleware
def storable_params(request: web.Request, handler: Handler) -> Awaitable[web.StreamResponse]:
    """Path and query parameters pass the same test as body fields, for every route at once; no
    parameter of this API is a list (but REPEATABLE_PARAMS), so one given twice is ambiguous
    and refused. A plain function handing the handler's coroutine on, as forwarding.middleware:
    no frame kept for the request's life."""
    for name, value in (*request.match_info.items(), *request.query.items()):
        if not storable(value):
            raise InvalidArgument(f"parameter {name!r} holds a character that cannot be stored")
    names = [name for name in request.query if name not in REPEATABLE_PARAMS]
    if len(set(names)) != len(names):
        raise InvalidArgument("a query parameter is given more than once")
    return handler(request)


async def read_json(request: web.Request, max_bytes: int) -> object:
    """The parsed body (`{}` when there is none); 413 past `max_bytes`, 400 for anything but JSON."""
    length = request.content_length
    if length is not None and length > max_bytes:
        raise PayloadTooLarge(max_bytes, length)
    raw = await request.read()  # the app's client_max_size stops chunked bodies at the limit
    if len(raw) > max_bytes:
        raise PayloadTooLarge(max_bytes, len(raw))
    if not raw:  # no body at all; whitespace alone is not JSON (400 below)
        return {}
    return json_document(raw, "the request body")


def validate(body: object, schema: Schema) -> dict[str, str]:
    """Check a JSON object against `schema`: every field a string; unknown fields are rejected."""
    if not isinstance(body, dict):
        raise InvalidArgument("the request body must be a JSON object")
    unknown = sorted(set(body) - set(schema))
    if unknown:
        raise InvalidArgument(f"unknown field {unknown[0]!r}")
    out: dict[str, str] = {}
    for name, spec in schema.items():
        value: Any = body.get(name)
        if value is None:
            if spec.required:
                raise InvalidArgument(f"field {name!r} is required")
            continue
        if not isinstance(value, str):
            raise InvalidArgument(f"field {name!r} must be a string")
        if not storable(value):
            raise InvalidArgument(f"field {name!r} holds a character that cannot be stored")
        if spec.required and not value.strip():
            raise InvalidArgument(f"field {name!r} must not be empty")
        if len(value) > spec.max_len:
            raise InvalidArgument(f"field {name!r} is longer than {spec.max_len} characters")
        if spec.choices and value not in spec.choices:
            raise InvalidArgument(f"field {name!r} must be one of {', '.join(spec.choices)}")
        if spec.pattern and re.fullmatch(spec.pattern, value) is None:
            raise InvalidArgument(f"field {name!r} must match {spec.pattern}")
        out[name] = value
    return out


def take(body: object, name: str) -> tuple[bool, object]:
    """(whether the JSON object `body` has `name`, its value), the field removed from `body`: a
    field of any JSON (null too) taken out before `validate` checks the string fields."""
    if isinstance(body, dict) and name in body:
        return True, body.pop(name)
    return False, None


MAX_GRAPH_JSON = 256_000  # the runtime's limit on input_json and value_json


def compact_object(value: object, name: str, max_len: int) -> str:
    """A JSON object field (e.g. a form's fill) as the compact JSON text the runtime reads; 400
    when it is not an object, too long once encoded, or holds text Postgres/protobuf cannot."""
    if not isinstance(value, dict):
        raise InvalidArgument(f"field {name!r} must be a JSON object")
    return compact_json(value, name, max_len)


def compact_json(value: object, name: str, max_len: int) -> str:
    """Any JSON value (e.g. a graph interrupt's resume value) as compact JSON text; 400 when it
    is too long once encoded or holds text Postgres/protobuf cannot."""
    _check_storable(value, name, depth=0)
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if len(text) > max_len:
        raise InvalidArgument(f"field {name!r} is longer than {max_len} characters as JSON")
    return text


_MAX_DEPTH = 32


def _check_storable(value: object, name: str, depth: int) -> None:
    # Keys and strings at any depth end up in the run's checkpoint (jsonb: no NUL either).
    if depth > _MAX_DEPTH:
        raise InvalidArgument(f"field {name!r} is nested deeper than {_MAX_DEPTH} levels")
    if isinstance(value, str):
        if not storable(value):
            raise InvalidArgument(f"field {name!r} holds a character that cannot be stored")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_storable(key, name, depth + 1)
            _check_storable(item, name, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_storable(item, name, depth + 1)


async def body(request: web.Request, schema: Schema, max_bytes: int) -> dict[str, str]:
    return validate(await read_json(request, max_bytes), schema)


def page_size(request: web.Request, default: int = 50, maximum: int = 200) -> int:
    """The query's `pageSize` (input_parsers.page_size)."""
    return input_parsers.page_size(request.query.get("pageSize"), default=default, maximum=maximum)
