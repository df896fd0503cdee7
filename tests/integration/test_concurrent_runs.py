"""A second message while a run of the conversation is active, per agent (issue 18), with real
runtime and gateway processes and the ledger's tools: "reject" answers RUN_ACTIVE (409 over
HTTP) naming the active run and stores nothing, exactly one of two racing starts wins; "enqueue"
stores the new run `waiting`, starts it only when the active one has ended, and its context holds
that run's answer; "interrupt" cancels the active run (a pending approval at once, a running run
at its next safe point, never inside a write tool: the write completes first) and then runs the
new one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import asyncpg
import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from tether.runtime.v1 import resources_pb2
from tether_testkit import stores
from tether_testkit.client import Client, reason, token, types
from tether_testkit.ledger import AGENT_ENV, create_ledger_database
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.security import bearer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

AGENTS = ",".join(
    [
        "tether_testkit.ledger_agent:agent",
        "tether_testkit.turns_agent:rejecting",
        "tether_testkit.turns_agent:enqueuing",
        "tether_testkit.turns_agent:interrupting",
    ]
)
PEEK_S = 2.0


@pytest.fixture
async def env(base_env: dict[str, str], admin_dsn: str) -> AsyncIterator[dict[str, str]]:
    dsn = await create_ledger_database(admin_dsn)
    yield {
        **base_env,
        **AGENT_ENV,
        "TETHER_AGENTS": AGENTS,
        "DATABASE_URL": dsn,
        "PEEK_S": str(PEEK_S),
        "LEDGER_HOLD_S": "3",
    }
    await stores.drop_database(admin_dsn, dsn)


@pytest.fixture
async def runtime_proc(env: dict[str, str], procs: list[Proc]) -> Proc:
    proc = start_runtime(env, name="runtime-turns")
    procs.append(proc)
    return proc


@pytest.fixture
async def alice(runtime_proc: Proc) -> AsyncIterator[Client]:
    c = Client(runtime_proc.addr, token(TEST_SECRET, "alice"))
    yield c
    await c.close()


@pytest.fixture
async def db(env: dict[str, str]) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(env["DATABASE_URL"])
    yield conn
    await conn.close()


async def _status_becomes(
    db: asyncpg.Connection, run_id: str, want: str, timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while (got := await db.fetchval("SELECT status FROM run WHERE id = $1", run_id)) != want:
        assert time.monotonic() < deadline, f"{run_id} is {got}, never {want}"
        await asyncio.sleep(0.05)


async def _running_peek(alice: Client, db: asyncpg.Connection, agent: str) -> tuple[str, str]:
    """A conversation whose run is inside its read tool (held PEEK_S seconds)."""
    conv = await alice.conversation()
    first = (await alice.start(conv, "peek", agent=agent)).run
    evs = await alice.events(first.id, until="tool_started")
    assert types(evs)[-1] == "tool_started"
    return conv, first.id


def _error_metadata(err: grpc.aio.AioRpcError) -> dict[str, str]:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return dict(info.metadata)
    return {}


async def _answer(db: asyncpg.Connection, run_id: str) -> str:
    return str(
        await db.fetchval(
            "SELECT content FROM message WHERE run_id = $1 AND role = 'assistant'", run_id
        )
    )


async def test_reject_answers_run_active_naming_the_run_and_stores_nothing(
    alice: Client,
    db: asyncpg.Connection,
    env: dict[str, str],
    runtime_proc: Proc,
    procs: list[Proc],
) -> None:
    gw = start_gateway(env, runtime_proc.addr, name="gw-turns")
    procs.append(gw)
    conv, first = await _running_peek(alice, db, "turns-reject")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await alice.start(conv, "echo again", agent="turns-reject")
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason(info.value) == "RUN_ACTIVE"
    assert _error_metadata(info.value) == {"activeRunId": first}
    assert first in (info.value.details() or "")

    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{gw.addr}/v1/conversations/{conv}/runs",
            json={"text": "echo over http", "agent": "turns-reject"},
            headers=bearer("alice"),
        ) as r:
            body = await r.json()
            assert r.status == 409, body
    assert body["error"]["code"] == "RUN_ACTIVE"
    assert body["error"]["metadata"] == {"activeRunId": first}
    # Nothing of either refused message was stored.
    assert await db.fetchval("SELECT count(*) FROM run WHERE conversation_id = $1", conv) == 1
    assert await db.fetchval(
        "SELECT array_agg(content ORDER BY id) FROM message WHERE conversation_id = $1 "
        "AND role = 'user'",
        conv,
    ) == ["peek"]

    # Once the run has ended, the next message is taken.
    await _status_becomes(db, first, "completed")
    after = (await alice.start(conv, "echo later", agent="turns-reject")).run
    assert types(await alice.events(after.id))[-1] == "done"


async def test_reject_lets_exactly_one_of_two_racing_starts_in(
    alice: Client, db: asyncpg.Connection
) -> None:
    for _ in range(5):
        conv = await alice.conversation()
        # "peek" holds the first run open (PEEK_S): an echo could end before the second start
        # is admitted on a loaded machine, and then both are rightly let in.
        outcomes = await asyncio.gather(
            *(alice.start(conv, f"peek {n}", agent="turns-reject") for n in range(2)),
            return_exceptions=True,
        )
        started = [o for o in outcomes if not isinstance(o, BaseException)]
        refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
        assert len(started) == 1 and len(refused) == 1, outcomes
        assert reason(refused[0]) == "RUN_ACTIVE"
        assert _error_metadata(refused[0]) == {"activeRunId": started[0].run.id}
        assert await db.fetchval("SELECT count(*) FROM run WHERE conversation_id = $1", conv) == 1


async def test_enqueue_waits_for_the_active_run_and_sees_its_answer(
    alice: Client, db: asyncpg.Connection
) -> None:
    conv, first = await _running_peek(alice, db, "turns-enqueue")
    second = (await alice.start(conv, "recall", agent="turns-enqueue")).run
    assert second.status == resources_pb2.RUN_STATUS_WAITING
    # While the first is inside its tool, the second is not claimed.
    await asyncio.sleep(PEEK_S / 2)
    assert await db.fetchval("SELECT status FROM run WHERE id = $1", first) == "running"
    assert await db.fetchval("SELECT status FROM run WHERE id = $1", second.id) == "waiting"
    evs = await alice.events(second.id)
    assert types(evs)[-1] == "done", types(evs)
    first_answer = await _answer(db, first)
    assert first_answer.startswith("peek ended")
    assert await _answer(db, second.id) == f"recalled: {first_answer}"
    # It started only after the first ended: its second event is later than the first's last.
    first_end = await db.fetchval("SELECT max(created_at) FROM run_event WHERE run_id = $1", first)
    second_go = await db.fetchval(
        "SELECT created_at FROM run_event WHERE run_id = $1 AND sequence = 2", second.id
    )
    assert second_go >= first_end


async def test_enqueue_runs_racing_messages_one_at_a_time_in_order(
    alice: Client, db: asyncpg.Connection
) -> None:
    conv = await alice.conversation()
    started = await asyncio.gather(
        *(alice.start(conv, f"echo {n}", agent="turns-enqueue") for n in range(4))
    )
    ids = sorted(s.run.id for s in started)
    assert sum(s.run.status == resources_pb2.RUN_STATUS_QUEUED for s in started) == 1
    for run_id in ids:
        assert types(await alice.events(run_id))[-1] == "done"
    spans = [
        tuple(
            await db.fetchrow(
                "SELECT min(created_at) FILTER (WHERE sequence > 1), max(created_at) "
                "FROM run_event WHERE run_id = $1",
                run_id,
            )
        )
        for run_id in ids
    ]
    ordered = sorted(spans)
    assert all(a[1] <= b[0] for a, b in zip(ordered, ordered[1:], strict=False)), spans


async def test_interrupt_cancels_a_running_run_at_its_next_safe_point(
    alice: Client, db: asyncpg.Connection
) -> None:
    conv, first = await _running_peek(alice, db, "turns-interrupt")
    second = (await alice.start(conv, "recall", agent="turns-interrupt")).run
    assert second.status == resources_pb2.RUN_STATUS_WAITING
    first_evs = await alice.events(first)
    assert types(first_evs)[-1] == "cancelled", types(first_evs)
    assert first_evs[-1].cancelled.reason == f"interrupted by a new message (run {second.id})"
    # The read tool it was inside finished; no model step followed it.
    assert "tool_finished" in types(first_evs) and "text_delta" not in types(first_evs)
    assert types(await alice.events(second.id))[-1] == "done"
    assert await _answer(db, second.id) == "recalled: nothing"


async def test_interrupt_never_stops_a_write_tool_inside_it(
    alice: Client, db: asyncpg.Connection
) -> None:
    conv = await alice.conversation()
    first = (await alice.start(conv, "send to bob", agent="turns-interrupt")).run
    card = (await alice.events(first.id, until="interrupt"))[-1]
    await alice.resume(first.id, card.interrupt.interrupt_id)
    deadline = time.monotonic() + 20
    while await db.fetchval("SELECT count(*) FROM ledger_call WHERE tool = 'send_keyed'") < 1:
        assert time.monotonic() < deadline, "the write tool never started"
        await asyncio.sleep(0.05)
    assert await db.fetchval("SELECT count(*) FROM ledger_effect") == 0  # still inside it
    second = (await alice.start(conv, "echo next", agent="turns-interrupt")).run

    first_evs = await alice.events(first.id)
    assert types(first_evs)[-1] == "cancelled", types(first_evs)
    # The write ran to its end, once, and its result was recorded before the run stopped.
    assert await db.fetchval("SELECT count(*) FROM ledger_effect") == 1
    assert (
        await db.fetchval(
            "SELECT status FROM tool_call WHERE run_id = $1 AND tool = 'send_keyed'", first.id
        )
        == "succeeded"
    )
    finished = [e for e in first_evs if e.WhichOneof("event") == "tool_finished"]
    assert len(finished) == 1
    assert types(await alice.events(second.id))[-1] == "done"


async def test_interrupt_cancels_a_run_waiting_for_approval_at_once(
    alice: Client, db: asyncpg.Connection
) -> None:
    conv = await alice.conversation()
    first = (await alice.start(conv, "send to carol", agent="turns-interrupt")).run
    card = (await alice.events(first.id, until="interrupt"))[-1]
    second = (await alice.start(conv, "echo instead", agent="turns-interrupt")).run
    assert await db.fetchval("SELECT status FROM run WHERE id = $1", first.id) == "cancelled"
    assert (
        await db.fetchval("SELECT status FROM interrupt WHERE id = $1", card.interrupt.interrupt_id)
        == "cancelled"
    )
    assert types(await alice.events(second.id))[-1] == "done"
    assert await _answer(db, second.id) == "echo echo instead"
    assert await db.fetchval("SELECT count(*) FROM ledger_call") == 0
