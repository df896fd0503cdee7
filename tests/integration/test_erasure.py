"""Deleting a conversation (`DELETE /v1/conversations/{id}`) and erasing a user (`tether
erase-user`) with real runtime and gateway processes on a database of the test's own: every
table with a column naming a run, a conversation (LangGraph's thread_id too) or the user, read
from information_schema so a table added later is checked too, holds no row of them afterwards;
idempotency keys and webhook deliveries of their runs are gone; the audit records stay, their
content masked (and the erased user pseudonymised), through the one UPDATE the audit trigger
allows; other users' data is untouched; a conversation whose run is running is refused (409
RUN_ACTIVE) and nothing changes."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import aiohttp
import asyncpg
import pytest
from tether_testkit.processes import Proc, start_gateway, start_runtime, tether_cli
from tether_testkit.security import bearer, new_user, owned_interrupted_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ID_COLUMNS = ("run_id", "tether_run_id", "conversation_id", "thread_id", "user_id")


@pytest.fixture
async def stack(private_env: dict[str, str], procs: list[Proc]) -> AsyncIterator[str]:
    runtime = start_runtime(private_env, name="rt-erasure")
    procs.append(runtime)
    gw = start_gateway(private_env, runtime.addr, name="gw-erasure")
    procs.append(gw)
    yield gw.addr


async def _leftovers(
    db: asyncpg.Connection, runs: list[str], convs: list[str], user: str | None
) -> dict[str, int]:
    """Rows naming these runs, conversations or user, per table (audit_record apart)."""
    tables = await db.fetch(
        "SELECT c.table_name, array_agg(c.column_name::text) AS cols "
        "FROM information_schema.columns c JOIN information_schema.tables t "
        "USING (table_schema, table_name) WHERE c.table_schema = 'public' "
        "AND t.table_type = 'BASE TABLE' AND c.column_name = ANY($1::text[]) "
        "GROUP BY c.table_name",
        list(ID_COLUMNS),
    )
    found: dict[str, int] = {}
    for t in tables:
        if t["table_name"] == "audit_record":
            continue
        where = []
        for col in t["cols"]:
            if col in ("run_id", "tether_run_id"):
                where.append(f'"{col}" = ANY($1::text[])')
            elif col in ("conversation_id", "thread_id"):
                where.append(f'"{col}" = ANY($2::text[])')
            else:
                where.append(f'"{col}" = $3::text')
        n = await db.fetchval(
            f'SELECT count(*) FROM "{t["table_name"]}" WHERE ({" OR ".join(where)}) '
            "AND $1::text[] IS NOT NULL AND $2::text[] IS NOT NULL "
            "AND ($3::text IS NULL OR true)",
            runs,
            convs,
            user if user is not None else "\x01never",
        )
        if n:
            found[t["table_name"]] = n
    n = await db.fetchval("SELECT count(*) FROM conversation WHERE id = ANY($1::text[])", convs)
    if n:
        found["conversation(id)"] = n
    n = await db.fetchval(
        "SELECT count(*) FROM idempotency_key WHERE response -> 'run' ->> 'id' = ANY($1::text[]) "
        "OR scope = ANY($2::text[])",
        runs,
        [f"start:{user}", f"resume:{user}"] if user else [],
    )
    if n:
        found["idempotency_key(response/scope)"] = n
    return found


async def _start(
    http: aiohttp.ClientSession, gw: str, user: str, conv: str, text: str, key: str = ""
) -> str:
    body = {"text": text, **({"idempotencyKey": key} if key else {})}
    async with http.post(
        f"{gw}/v1/conversations/{conv}/runs", json=body, headers=bearer(user)
    ) as r:
        assert r.status == 201, await r.text()
        return str((await r.json())["run"]["id"])


async def _until(db: asyncpg.Connection, run_id: str, statuses: tuple[str, ...]) -> None:
    import asyncio
    import time

    deadline = time.monotonic() + 30
    while await db.fetchval("SELECT status FROM run WHERE id = $1", run_id) not in statuses:
        assert time.monotonic() < deadline, f"{run_id} never {statuses}"
        await asyncio.sleep(0.05)


async def _conversation(http: aiohttp.ClientSession, gw: str, user: str) -> str:
    async with http.post(f"{gw}/v1/conversations", json={"title": "t"}, headers=bearer(user)) as r:
        return str((await r.json())["conversation"]["id"])


async def _langgraph_rows(db: asyncpg.Connection, conv: str, run_id: str) -> None:
    """What a LangGraph agent's checkpointer keeps for the conversation (thread_id)."""
    await db.execute(
        "INSERT INTO langgraph_checkpoint (thread_id, checkpoint_id, checkpoint, tether_run_id) "
        "VALUES ($1, 'c1', '{}'::jsonb, $2)",
        conv,
        run_id,
    )
    await db.execute(
        "INSERT INTO langgraph_checkpoint_blob (thread_id, channel, version, type, blob) "
        "VALUES ($1, 'messages', '1', 'json', 'x')",
        conv,
    )
    await db.execute(
        "INSERT INTO langgraph_checkpoint_write "
        "(thread_id, checkpoint_id, task_id, idx, channel, type, blob) "
        "VALUES ($1, 'c1', 't1', 0, 'messages', 'json', 'x')",
        conv,
    )


async def test_delete_conversation_and_erase_user_leave_no_row_behind(
    stack: str, private_env: dict[str, str]
) -> None:
    gw = stack
    db = await asyncpg.connect(private_env["DATABASE_URL"])
    await db.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    user, other = new_user("erased"), new_user("kept")
    # Deliveries for every run from here on (to an address nothing listens on: they stay queued).
    await db.execute(
        "INSERT INTO webhook_endpoint (id, url, events, secret) VALUES ($1, $2, $3, $4)",
        f"whe_{uuid.uuid4().hex[:12]}",
        "http://127.0.0.1:9/hook",
        ["interrupt.raised", "interrupt.resolved", "run.completed", "run.failed"],
        "s" * 32,
    )
    try:
        async with aiohttp.ClientSession() as http:
            # The user's first conversation: a run started with a key, and an approved restart.
            approved = await owned_interrupted_run(db, gw, http, user)
            conv1 = approved["conv"]
            async with http.post(
                f"{gw}/v1/runs/{approved['run']}/resume",
                json={
                    "interruptId": approved["interrupt"],
                    "decision": "approve",
                    "idempotencyKey": uuid.uuid4().hex,
                },
                headers={**bearer(user), "X-Forwarded-For": "203.0.113.9"},
            ) as r:
                assert r.status == 202, await r.text()
            await _until(db, approved["run"], ("completed",))
            keyed = await _start(http, gw, user, conv1, "stream 3 deltas", uuid.uuid4().hex)
            await _until(db, keyed, ("completed",))
            await _langgraph_rows(db, conv1, keyed)
            runs1 = [approved["run"], keyed]
            # A second conversation, its run paused at a confirmation (interrupted).
            paused = await owned_interrupted_run(db, gw, http, user)
            conv2 = paused["conv"]
            # Another user's conversation, which nothing here may touch.
            conv3 = await _conversation(http, gw, other)
            kept_run = await _start(http, gw, other, conv3, "stream 2 deltas", uuid.uuid4().hex)
            await _until(db, kept_run, ("completed",))

            before = await _leftovers(db, runs1, [conv1], None)
            for table in (
                "message",
                "run",
                "run_event",
                "tool_call",
                "interrupt",
                "webhook_delivery",
                "langgraph_checkpoint",
                "langgraph_checkpoint_blob",
                "langgraph_checkpoint_write",
                "conversation(id)",
                "idempotency_key(response/scope)",
            ):
                assert before.get(table), f"the set-up left nothing in {table}: {before}"
            audit_before = await db.fetch(
                "SELECT * FROM audit_record WHERE run_id = ANY($1::text[]) ORDER BY id", runs1
            )
            assert audit_before and any(a["client_address"] for a in audit_before)
            kept_before = await _leftovers(db, [kept_run], [conv3], other)

            # Somebody else may not delete it; nothing changes.
            async with http.delete(f"{gw}/v1/conversations/{conv1}", headers=bearer(other)) as r:
                assert r.status == 404
            assert await _leftovers(db, runs1, [conv1], None) == before

            async with http.delete(f"{gw}/v1/conversations/{conv1}", headers=bearer(user)) as r:
                assert r.status == 204, await r.text()
            assert await _leftovers(db, runs1, [conv1], None) == {}
            audit_after = await db.fetch(
                "SELECT * FROM audit_record WHERE run_id = ANY($1::text[]) ORDER BY id", runs1
            )
            assert [a["id"] for a in audit_after] == [a["id"] for a in audit_before]
            for was, now in zip(audit_before, audit_after, strict=True):
                assert now["details"] == {"erased": True} and now["client_address"] == ""
                assert {k: now[k] for k in ("actor", "action", "run_id", "decision", "at")} == {
                    k: was[k] for k in ("actor", "action", "run_id", "decision", "at")
                }
            async with http.delete(f"{gw}/v1/conversations/{conv1}", headers=bearer(user)) as r:
                assert r.status == 404  # gone
            async with http.get(f"{gw}/v1/runs/{keyed}", headers=bearer(user)) as r:
                assert r.status == 404

            # A run a worker executes: refused, naming it, and nothing is deleted.
            await db.execute("UPDATE run SET status = 'running' WHERE id = $1", paused["run"])
            conv2_before = await _leftovers(db, [paused["run"]], [conv2], None)
            async with http.delete(f"{gw}/v1/conversations/{conv2}", headers=bearer(user)) as r:
                body = await r.json()
                assert r.status == 409, body
            assert body["error"]["code"] == "RUN_ACTIVE"
            assert body["error"]["metadata"] == {"activeRunId": paused["run"]}
            assert await _leftovers(db, [paused["run"]], [conv2], None) == conv2_before
            await db.execute("UPDATE run SET status = 'interrupted' WHERE id = $1", paused["run"])

        # The user erased: the paused conversation, their grant, every row naming them.
        done = tether_cli("erase-user", user, env=private_env)
        assert done.returncode == 2 and "--yes" in done.stderr  # never by accident
        done = tether_cli("erase-user", user, "--yes", env=private_env)
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["conversations"] == 1 and summary["runs"] == 1
        assert await _leftovers(db, [paused["run"], *runs1], [conv1, conv2], user) == {}
        assert (
            await db.fetchval(
                "SELECT count(*) FROM audit_record WHERE actor = $1 OR approver = $1", user
            )
            == 0
        )
        pseudonyms = await db.fetch(
            "SELECT DISTINCT actor FROM audit_record WHERE run_id = ANY($1::text[])", runs1
        )
        assert [p["actor"] for p in pseudonyms] == [
            await db.fetchval("SELECT audit_pseudonym($1)", user)
        ]
        # The other user's data is all still there.
        assert await _leftovers(db, [kept_run], [conv3], other) == kept_before

        # The audit table still refuses every change outside audit_mask(), and audit_mask's own
        # flag lets through nothing but the masking.
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await db.execute("UPDATE audit_record SET details = '{\"erased\": true}'::jsonb")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await db.execute("DELETE FROM audit_record WHERE run_id = $1", runs1[0])
        async with db.transaction():
            await db.execute("SELECT set_config('tether.audit_masking', 'on', true)")
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await db.execute(
                    "UPDATE audit_record SET action = 'forged', details = "
                    "'{\"erased\": true}'::jsonb, client_address = '' WHERE run_id = $1",
                    runs1[0],
                )
    finally:
        await db.execute("DELETE FROM webhook_endpoint")
        await db.close()
