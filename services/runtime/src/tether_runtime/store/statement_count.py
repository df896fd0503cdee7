"""Counts the statements the runtime's pool sends to Postgres, by kind (the statement's first
keyword: select, insert, update, begin, commit, ...): `tether_db_statements_total`.

A statement here is one round trip asyncpg makes for `execute`, `fetch*` or `executemany` (a
batch is one), including a transaction's BEGIN and COMMIT. The count is a plain dict bumped by
a connection subclass and read only when Prometheus scrapes: a labelled prometheus Counter's
lock and lookup would cost more than the bump itself on the hottest path there is."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import asyncpg
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

COUNTS: dict[str, int] = {}
# Query text -> kind: the runtime's statements are a few dozen constant strings, so the kind is
# worked out once per string and then found by the string's cached hash.
_KINDS: dict[str, str] = {}
_KNOWN = frozenset(
    ("select", "insert", "update", "delete", "with", "begin", "commit", "rollback", "copy")
)
_KINDS_CAP = 4096  # statements built per call (none today) must not grow the cache forever


def kind_of(query: str) -> str:
    """The statement's first keyword, lower case; `other` for anything else (SET, LISTEN, ...)."""
    kind = _KINDS.get(query)
    if kind is None:
        words = query.lstrip(" \t\r\n(").split(None, 1)
        first = words[0].rstrip(";").lower() if words else ""
        kind = first if first in _KNOWN else "other"
        if len(_KINDS) < _KINDS_CAP:
            _KINDS[query] = kind
    return kind


def _count(query: str) -> None:
    kind = kind_of(query)
    COUNTS[kind] = COUNTS.get(kind, 0) + 1


class CountingConnection(asyncpg.Connection):  # type: ignore[misc]
    """asyncpg's connection, counting each statement it sends. `fetch`, `fetchrow`, `fetchval`
    and `execute` with arguments all go through `_execute`; `execute` without arguments (BEGIN,
    COMMIT, plain text) goes straight to the protocol, so it is counted at `execute`."""

    # Arguments pass through untouched (asyncpg's own signatures, `timeout` included).
    async def execute(self, query: str, *args: Any, **kw: Any) -> str:
        if not args:
            _count(query)
        return str(await super().execute(query, *args, **kw))

    async def _execute(self, query: str, *args: Any, **kw: Any) -> Any:
        _count(query)
        return await super()._execute(query, *args, **kw)

    async def _executemany(self, query: str, *args: Any, **kw: Any) -> Any:
        _count(query)
        return await super()._executemany(query, *args, **kw)


class StatementCollector(Collector):
    """Exposes COUNTS at scrape time."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "tether_db_statements",
            "Statements the runtime sent to Postgres (round trips), by first keyword",
            labels=["kind"],
        )
        for kind, n in sorted(COUNTS.items()):
            family.add_metric([kind], n)
        yield family
