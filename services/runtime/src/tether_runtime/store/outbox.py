"""The webhook outbox: the events that leave Tether (interrupt raised / resolved, run completed /
failed) become one delivery row per subscribed endpoint, in the SAME transaction as the state
change and the event that announce them (invariant 1 extended outward): a state change that
commits is delivered at least once, one that rolls back is never announced.

The delivery loop (`tether_runtime.webhooks.delivery`) claims due rows with SKIP LOCKED; each
claim pushes `next_attempt_at` past the attempt's timeout (the lease) and sets a fresh
`claim_token` that fences the row's final update."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tether_common.event_json import event_json

from tether_runtime.domain.events import RunEvent, kind_of
from tether_runtime.store.db import Conn

# A run event's kind -> the webhook event type it becomes.
WEBHOOK_TYPES = {
    "interrupt": "interrupt.raised",
    "interrupt_resolved": "interrupt.resolved",
    "done": "run.completed",
    "error": "run.failed",
}
EVENT_TYPES = tuple(WEBHOOK_TYPES.values())


def announces(events: Sequence[RunEvent]) -> bool:
    """Whether any of these events leaves Tether (so must commit with a transaction's outbox)."""
    return any(kind_of(e) in WEBHOOK_TYPES for e in events)


def event_id(run_id: str, sequence: int) -> str:
    """The stable id of a webhook event: one per stored run event, the same on every attempt and
    every endpoint, so receivers deduplicate by it."""
    return f"evt_{run_id}_{sequence}"


def deliveries_sql(first: int, runs: str) -> str:
    """One delivery per subscribed endpoint for each announcing event: parameters `first` to
    `first + 4` are a `Deliveries`' arrays, `runs` a relation of run rows (id, conversation_id,
    user_id, agent) to join them with. `enqueue` joins the table; the fenced append (the
    function run_append, migration 0020, holds this statement at 28 with its fence) joins the
    runs whose fence held, so only they announce anything."""
    a, b, c, d, e = (f"${first + i}::text[]" for i in range(5))
    return f"""
INSERT INTO webhook_delivery (id, event_id, event_type, endpoint_id, run_id, payload)
SELECT v.event_id || '@' || ep.id, v.event_id, v.event_type, ep.id, r.id,
       jsonb_build_object(
           'id', v.event_id, 'type', v.event_type, 'createdAt', v.created_at,
           'data', jsonb_build_object('conversationId', r.conversation_id, 'userId', r.user_id,
                                      'agent', r.agent) || v.data::jsonb)
FROM unnest({a}, {b}, {c}, {d}, {e}) AS v(run_id, event_id, event_type, created_at, data)
JOIN webhook_endpoint ep ON ep.enabled AND v.event_type = ANY(ep.events)
JOIN {runs} r ON r.id = v.run_id
ON CONFLICT (event_id, endpoint_id) DO NOTHING
"""


_ENQUEUE = deliveries_sql(1, "run")


@dataclass(frozen=True)
class Deliveries:
    """What `deliveries_sql` takes for some runs' events: one entry per announcing event."""

    run_ids: list[str]
    event_ids: list[str]
    types: list[str]
    times: list[str]
    datas: list[str]

    def arrays(self) -> tuple[list[str], ...]:
        return (self.run_ids, self.event_ids, self.types, self.times, self.datas)

    @classmethod
    def of(cls, stamped: Sequence[tuple[str, Sequence[RunEvent]]]) -> Deliveries:
        """From (run id, stamped events) pairs: sequence and time must be set."""
        out = cls([], [], [], [], [])
        for run_id, events in stamped:
            for e in events:
                kind = kind_of(e)
                if kind not in WEBHOOK_TYPES:
                    continue
                data = event_json(e)
                out.run_ids.append(run_id)
                out.event_ids.append(event_id(run_id, e.sequence))
                out.types.append(WEBHOOK_TYPES[kind])
                out.times.append(data["time"])
                out.datas.append(json.dumps(data))
        return out


async def enqueue(conn: Conn, run_id: str, events: Sequence[RunEvent]) -> None:
    """Inside the transaction that stores `events` (stamped: sequence and time set): one delivery
    per subscribed endpoint for each event that leaves Tether. No endpoint: nothing is written."""
    d = Deliveries.of([(run_id, events)])
    if d.event_ids:
        await conn.execute(_ENQUEUE, *d.arrays())


# -- claiming and finishing (the delivery loop) -----------------------------------------------


@dataclass(frozen=True)
class Claimed:
    id: str
    event_id: str
    event_type: str
    endpoint_id: str
    url: str
    secret: str
    payload: dict[str, Any]
    attempts: int
    claim_token: str

    def __repr__(self) -> str:  # the secret never reaches a log line
        return f"Claimed(id={self.id!r}, endpoint={self.endpoint_id!r}, attempt={self.attempts})"


_CLAIM = """
WITH due AS (
    -- At most per_endpoint candidates of each endpoint, read by index: a dead endpoint's
    -- backlog costs the claim per_endpoint rows, not its length.
    SELECT c.id, c.endpoint_id, c.next_attempt_at,
           row_number() OVER (PARTITION BY c.endpoint_id ORDER BY c.next_attempt_at, c.id) AS n
    FROM webhook_endpoint ep
    CROSS JOIN LATERAL (
        SELECT d.id, d.endpoint_id, d.next_attempt_at FROM webhook_delivery d
        WHERE d.endpoint_id = ep.id AND d.status = 'pending' AND d.next_attempt_at <= now()
        ORDER BY d.next_attempt_at, d.id
        LIMIT $3
    ) c
), pick AS (
    SELECT d.id FROM webhook_delivery d
    JOIN due ON due.id = d.id
    LEFT JOIN unnest($1::text[], $2::int[]) AS f(endpoint_id, free)
           ON f.endpoint_id = due.endpoint_id
    WHERE due.n <= COALESCE(f.free, $3) AND d.status = 'pending' AND d.next_attempt_at <= now()
    ORDER BY due.n, due.next_attempt_at
    LIMIT $4
    FOR UPDATE OF d SKIP LOCKED
)
UPDATE webhook_delivery w
SET attempts = w.attempts + 1, claim_token = $5,
    next_attempt_at = now() + make_interval(secs => $6)
FROM pick, webhook_endpoint ep
WHERE w.id = pick.id AND ep.id = w.endpoint_id
RETURNING w.id, w.event_id, w.event_type, w.endpoint_id, w.payload, w.attempts, ep.url, ep.secret
"""


async def claim(
    conn: Conn,
    token: str,
    *,
    limit: int,
    per_endpoint: int,
    free_slots: dict[str, int],
    lease_s: float,
) -> list[Claimed]:
    """Take up to `limit` due deliveries, at most `per_endpoint` of one endpoint (fewer where
    `free_slots` says this process has fewer free), leased for `lease_s` under `token`."""
    rows = await conn.fetch(
        _CLAIM,
        list(free_slots),
        list(free_slots.values()),
        per_endpoint,
        limit,
        token,
        lease_s,
    )
    return [
        Claimed(
            id=r["id"],
            event_id=r["event_id"],
            event_type=r["event_type"],
            endpoint_id=r["endpoint_id"],
            url=r["url"],
            secret=r["secret"],
            payload=r["payload"],
            attempts=int(r["attempts"]),
            claim_token=token,
        )
        for r in rows
    ]


async def delivered(conn: Conn, d: Claimed, status_code: int) -> bool:
    """Fenced by the claim: False if the lease ran out and another loop claimed the row since."""
    result = await conn.execute(
        "UPDATE webhook_delivery SET status = 'delivered', delivered_at = now(), "
        "last_status_code = $3, last_error = '', claim_token = NULL "
        "WHERE id = $1 AND claim_token = $2 AND status = 'pending'",
        d.id,
        d.claim_token,
        status_code,
    )
    return str(result).endswith(" 1")


async def failed(
    conn: Conn, d: Claimed, error: str, status_code: int | None, retry_in_s: float | None
) -> bool:
    """Another attempt in `retry_in_s`, or dead-lettered when None. Fenced as `delivered`."""
    result = await conn.execute(
        "UPDATE webhook_delivery SET last_error = $3, last_status_code = $4, claim_token = NULL, "
        "status = CASE WHEN $5::float8 IS NULL THEN 'dead' ELSE 'pending' END, "
        "next_attempt_at = CASE WHEN $5::float8 IS NULL THEN next_attempt_at "
        "                  ELSE now() + make_interval(secs => $5::float8) END "
        "WHERE id = $1 AND claim_token = $2 AND status = 'pending'",
        d.id,
        d.claim_token,
        error[:500],
        status_code,
        retry_in_s,
    )
    return str(result).endswith(" 1")
