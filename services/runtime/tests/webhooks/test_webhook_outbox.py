"""The webhook outbox on a real Postgres (a database of the test's own, so no runtime's delivery
loop takes its rows): rows written only with a committed event, claims bounded per endpoint and
never shared, results fenced by the claim token, dead-lettering, and the delivery loop against a
real HTTP server."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import asyncpg
import pytest
from aiohttp import web
from tether_client.webhooks import sign, verify
from tether_common.config import Settings
from tether_common.errors import UnsafeSettings
from tether_common.ids import new_id
from tether_runtime.domain import events as ev
from tether_runtime.store import event_log, outbox, webhook_endpoints
from tether_runtime.webhooks import signature
from tether_runtime.webhooks.delivery import DeliveryLoop, backoff_s, encode
from tether_runtime.webhooks.settings import WebhookSettings
from tether_testkit.processes import free_port

SECRET = "a-test-secret-of-enough-length"


async def a_run(conn: Any, status: str = "queued") -> str:
    conv, msg, run = new_id("conv"), new_id("msg"), new_id("run")
    await conn.execute("INSERT INTO conversation (id, user_id) VALUES ($1, 'alice')", conv)
    await conn.execute(
        "INSERT INTO message (id, conversation_id, role, content) VALUES ($1, $2, 'user', 'x')",
        msg,
        conv,
    )
    await conn.execute(
        "INSERT INTO run (id, conversation_id, user_id, user_message_id, agent, status) "
        "VALUES ($1, $2, 'alice', $3, 'opspilot', $4)",
        run,
        conv,
        msg,
        status,
    )
    return run


async def test_rows_exist_only_with_the_committed_event(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        failed_only = await webhook_endpoints.add(
            conn, "http://127.0.0.1:9/a", ["run.failed"], SECRET
        )
        await webhook_endpoints.add(conn, "http://127.0.0.1:9/b", ["run.completed"], SECRET)
        run = await a_run(conn)
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await event_log.append(conn, run, [ev.error("X", "boom")], statuses=["queued"])
                raise RuntimeError("the state change fails: nothing of it may be announced")
        assert await conn.fetchval("SELECT count(*) FROM webhook_delivery") == 0
        async with conn.transaction():
            await event_log.append(
                conn, run, [ev.run_started("c"), ev.error("X", "boom")], statuses=["queued"]
            )
        rows = await conn.fetch("SELECT * FROM webhook_delivery")
    assert [(r["endpoint_id"], r["event_type"]) for r in rows] == [(failed_only, "run.failed")]
    payload = rows[0]["payload"]
    assert rows[0]["event_id"] == payload["id"] == f"evt_{run}_2"
    assert payload["data"]["code"] == "X" and payload["data"]["userId"] == "alice"


async def _pending(conn: Any, endpoint: str, n: int) -> None:
    run = await a_run(conn)
    for i in range(n):
        await conn.execute(
            "INSERT INTO webhook_delivery (id, event_id, event_type, endpoint_id, run_id, payload) "
            "VALUES ($1, $2, 'run.failed', $3, $4, '{}')",
            f"d-{endpoint}-{i}",
            f"e-{endpoint}-{i}",
            endpoint,
            run,
        )


async def test_claims_are_bounded_per_endpoint_leased_and_never_shared(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        a = await webhook_endpoints.add(conn, "http://127.0.0.1:9/a", ["run.failed"], SECRET)
        b = await webhook_endpoints.add(conn, "http://127.0.0.1:9/b", ["run.failed"], SECRET)
        await _pending(conn, a, 10)
        await _pending(conn, b, 10)
        got = await outbox.claim(conn, "t1", limit=100, per_endpoint=2, free_slots={}, lease_s=60)
        assert sorted(d.endpoint_id for d in got) == sorted([a, a, b, b])
        # This process has A's two slots taken: only B's.
        more = await outbox.claim(
            conn, "t2", limit=100, per_endpoint=2, free_slots={a: 0, b: 1}, lease_s=60
        )
        assert [d.endpoint_id for d in more] == [b]
        assert not {d.id for d in got} & {d.id for d in more}  # leased rows are not due
        assert all("secret" not in repr(d) and SECRET not in repr(d) for d in got)

    async def claimer(token: str) -> list[str]:
        async with pool.acquire() as c:
            rows = await outbox.claim(
                c, token, limit=100, per_endpoint=100, free_slots={}, lease_s=60
            )
        return [d.id for d in rows]

    # Two pods at once: the 15 rows left are split, none twice.
    x, y = await asyncio.gather(claimer("p1"), claimer("p2"))
    assert len(x) + len(y) == 15 and not set(x) & set(y)


async def test_results_are_fenced_by_the_claim_and_the_last_failure_is_dead(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        a = await webhook_endpoints.add(conn, "http://127.0.0.1:9/a", ["run.failed"], SECRET)
        await _pending(conn, a, 1)
        (first,) = await outbox.claim(
            conn, "old", limit=1, per_endpoint=1, free_slots={}, lease_s=60
        )
        await conn.execute("UPDATE webhook_delivery SET next_attempt_at = now()")  # lease passed
        (second,) = await outbox.claim(
            conn, "new", limit=1, per_endpoint=1, free_slots={}, lease_s=60
        )
        assert second.attempts == 2
        # The first pod comes back late: its answer changes nothing.
        assert not await outbox.failed(conn, first, "HTTP 500", 500, 1.0)
        assert not await outbox.delivered(conn, first, 200)
        assert await outbox.failed(conn, second, "HTTP 503", 503, None)
        row = await conn.fetchrow("SELECT * FROM webhook_delivery")
        assert (row["status"], row["last_error"], row["attempts"]) == ("dead", "HTTP 503", 2)
        listed = await webhook_endpoints.list(conn)
        assert [(e.pending, e.delivered, e.dead) for e in listed] == [(0, 0, 1)]


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    s = WebhookSettings(backoff_base_s=1.0, backoff_max_s=10.0)
    for attempts, low, high in ((1, 0.5, 1.5), (2, 1.0, 3.0), (3, 2.0, 6.0), (8, 5.0, 10.0)):
        waits = {backoff_s(s, attempts) for _ in range(50)}
        assert all(low <= w <= high for w in waits), (attempts, waits)
        assert len(waits) > 1  # jittered


def test_settings_refuse_nonsense() -> None:
    for env in (
        {"TETHER_WEBHOOK_TIMEOUT_S": "0"},
        {"TETHER_WEBHOOK_MAX_ATTEMPTS": "0"},
        {"TETHER_WEBHOOK_PER_ENDPOINT": "nan"},
        {"TETHER_WEBHOOK_POLL_S": "soon"},
    ):
        with pytest.raises(UnsafeSettings, match=next(iter(env))):
            Settings.from_env(env)
    off = WebhookSettings.of(Settings.from_env({"TETHER_WEBHOOK_DELIVERY": "0"}))
    assert off.deliver is False
    assert WebhookSettings.of(Settings()) == WebhookSettings()


def test_runtime_signs_what_the_client_verifies() -> None:
    body = encode({"id": "evt_1", "type": "run.failed", "data": {"b": 1, "a": 2}})
    assert body == b'{"data":{"a":2,"b":1},"id":"evt_1","type":"run.failed"}'
    now = int(time.time())
    header = signature.header(SECRET, now, body)
    assert header == sign(SECRET, now, body)
    assert verify(body, header, SECRET)["id"] == "evt_1"


async def test_loop_retries_then_dead_letters_an_endpoint_that_always_fails(
    pool: asyncpg.Pool,
) -> None:
    seen: list[dict[str, str]] = []

    async def fail(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(status=500)

    app = web.Application()
    app.router.add_post("/h", fail)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    loop = DeliveryLoop(
        pool,
        WebhookSettings(poll_s=0.05, timeout_s=2, max_attempts=3, backoff_base_s=0.05),
    )
    try:
        async with pool.acquire() as conn:
            await webhook_endpoints.add(conn, f"http://127.0.0.1:{port}/h", ["run.failed"], SECRET)
            run = await a_run(conn)
            async with conn.transaction():
                await event_log.append(conn, run, [ev.error("X", "boom")], statuses=["queued"])
        await loop.start()
        deadline = time.monotonic() + 10
        while True:
            async with pool.acquire() as conn:
                row = await conn.fetchrow("SELECT * FROM webhook_delivery")
            if row["status"] == "dead":
                break
            assert time.monotonic() < deadline, dict(row)
            await asyncio.sleep(0.05)
    finally:
        await loop.stop()
        await runner.cleanup()
    assert (row["attempts"], row["last_error"], row["last_status_code"]) == (3, "HTTP 500", 500)
    assert [h["Tether-Delivery-Attempt"] for h in seen] == ["1", "2", "3"]
    assert len({h["Tether-Event-Id"] for h in seen}) == 1


async def test_stop_ends_the_loop_when_a_slot_frees_as_it_cancels(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt that ends (and frees its slot) in the same turn as stop() cancels the loop: on
    Python 3.11 asyncio.wait_for swallowed that cancel, and the loop claimed on after stop()
    (a make test run under load hung on stop() for 120 s)."""
    claims = 0
    claim = outbox.claim

    async def counted(*args: Any, **kwargs: Any) -> list[outbox.Claimed]:
        nonlocal claims
        claims += 1
        return await claim(*args, **kwargs)

    monkeypatch.setattr(outbox, "claim", counted)
    loop = DeliveryLoop(pool, WebhookSettings(poll_s=30))
    await loop.start()
    async with asyncio.timeout(10):
        while not loop._freed._waiters:
            await asyncio.sleep(0.01)  # until the loop has claimed nothing and waits for a slot
    before = claims
    loop._freed.set()  # what an attempt's end does, in the same turn as stop()'s cancel
    async with asyncio.timeout(5):
        await loop.stop()
    assert loop._loop_task is not None and loop._loop_task.cancelled()
    assert claims == before, "the loop claimed again after stop() cancelled it"


def _sql_words(sql: str) -> str:
    """SQL without its comments and with every run of whitespace as one space."""
    return " ".join(re.sub(r"--[^\n]*", "", sql).split())


async def test_the_fenced_append_enqueues_with_the_same_statement(pool: asyncpg.Pool) -> None:
    """The workers' fenced append (the function run_append, migration 0020, and its overload with
    the read claim's grant, 0023) holds its own copy of the outbox's insert, over the runs whose
    fence held: it must stay the statement that `deliveries_sql` builds, or a change to one would
    announce differently from the other."""
    async with pool.acquire() as conn:
        bodies = await conn.fetch(
            "SELECT pronargs, pg_get_functiondef(oid) AS body FROM pg_proc"
            " WHERE proname = 'run_append' ORDER BY pronargs"
        )
    assert [b["pronargs"] for b in bodies] == [32, 34]
    for b in bodies:
        assert _sql_words(outbox.deliveries_sql(28, "fence")) in _sql_words(b["body"])
