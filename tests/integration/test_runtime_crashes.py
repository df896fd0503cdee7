"""Crashes, zombies and hand-overs between real runtime processes (DESIGN section 3, invariants 2,
3 and 4): kill -9 mid-stream and mid-tool-call, a SIGSTOPped zombie that wakes after its lease was
taken over, the fence at the store level, and a resume on another process than the one that
paused the run.

Every test here runs on a database of its own, so the session's shared runtime (whose worker
claims any queued or expired run of the session database) never takes a run away from the
runtime the test expects to finish it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import string
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import asyncpg
import pytest
from tether.runtime.v1 import events_pb2
from tether_testkit import stores
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.inventory import grant_service
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = [pytest.mark.slow(seconds=44), pytest.mark.timeout(180)]

USER = "alice"
STREAM_N = 400
EXPECTED_TEXT = "".join(f"t{i} " for i in range(STREAM_N))


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def crash_dsn(admin_dsn: str) -> AsyncIterator[str]:
    """A migrated, seeded database of this module's own."""
    dsn = await stores.create_fresh_database(admin_dsn)
    yield dsn
    await stores.drop_database(admin_dsn, dsn)


@pytest.fixture
def crash_env(base_env: dict[str, str], crash_dsn: str) -> dict[str, str]:
    return {**base_env, "DATABASE_URL": crash_dsn}


@pytest.fixture
async def cdb(crash_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(crash_dsn)
    yield conn
    await conn.close()


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Every runtime a test starts; whatever is still alive (or stopped) at the end is killed."""
    started: list[Proc] = []
    yield started
    for p in started:
        if p.alive():
            try:
                os.kill(p.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            p.kill()


# -- helpers ---------------------------------------------------------------------------------


def _name(prefix: str) -> str:
    return f"{prefix}-{''.join(random.choices(string.ascii_lowercase, k=8))}-api"


async def fresh_target(conn: asyncpg.Connection) -> tuple[str, str]:
    """A service of our own with one abnormal instance: restarting it is observable only here."""
    svc = _name("crash")
    inst = f"{svc}-1"
    await conn.execute("INSERT INTO inv_service (name, env, replicas) VALUES ($1, 'prod', 1)", svc)
    await conn.execute(
        "INSERT INTO inv_instance (id, service, env, status) VALUES ($1, $2, 'prod', 'abnormal')",
        inst,
        svc,
    )
    await grant_service(conn, USER, svc)
    return svc, inst


async def wait_for(
    what: str, check: Callable[[], Awaitable[object]], timeout: float, interval: float = 0.05
) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await _sleep(interval)


async def _sleep(s: float) -> None:
    await asyncio.sleep(s)


async def stored_events(conn: asyncpg.Connection, run_id: str) -> list[events_pb2.RunEvent]:
    rows = await conn.fetch(
        "SELECT data FROM run_event WHERE run_id = $1 ORDER BY sequence", run_id
    )
    return [events_pb2.RunEvent.FromString(bytes(r["data"])) for r in rows]


async def count_type(conn: asyncpg.Connection, run_id: str, kind: str) -> int:
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM run_event WHERE run_id = $1 AND type = $2", run_id, kind
        )
    )


async def run_row(conn: asyncpg.Connection, run_id: str) -> asyncpg.Record:
    row = await conn.fetchrow(
        "SELECT status, last_sequence, lease_epoch, lease_owner, updated_at FROM run WHERE id = $1",
        run_id,
    )
    assert row is not None
    return row


def text_of(evs: list[events_pb2.RunEvent]) -> str:
    return "".join(e.text_delta.delta for e in evs if e.WhichOneof("event") == "text_delta")


def assert_clean_log(evs: list[events_pb2.RunEvent]) -> None:
    """Dense 1..N, no duplicate, exactly one terminal event and it is the last, `done`."""
    assert_dense(evs)
    seqs = [e.sequence for e in evs]
    assert len(seqs) == len(set(seqs)), f"duplicate sequences: {seqs}"
    kinds = types(evs)
    assert kinds[-1] == "done", kinds
    assert sum(k in ("done", "error", "cancelled") for k in kinds) == 1, kinds


def left_worker(proc: Proc, run_id: str) -> list[str]:
    """The statuses with which `proc`'s worker let this run go (its structured log)."""
    out = []
    for line in proc.log().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("msg") == "run left worker" and rec.get("run_id") == run_id:
            out.append(str(rec.get("status")))
    return out


async def let_go(proc: Proc, run_id: str, timeout: float = 20.0) -> list[str]:
    """`left_worker` once the worker has logged letting the run go: the line is written after
    the run's last commit, so a client that saw `done` may read the log a moment before it (a
    moment that took over 5 s once, in a make test beside other work)."""
    deadline = time.monotonic() + timeout
    while not (statuses := left_worker(proc, run_id)) and time.monotonic() < deadline:
        await _sleep(0.05)
    return statuses


def log_mentions(proc: Proc, run_id: str, msg: str) -> bool:
    for line in proc.log().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("run_id") == run_id and msg in str(rec.get("msg", "")):
            return True
    return False


def tool_events(evs: list[events_pb2.RunEvent], kind: str, tool: str) -> list[events_pb2.RunEvent]:
    out = []
    for e in evs:
        if e.WhichOneof("event") != kind:
            continue
        body = getattr(e, kind)
        if body.tool == tool:
            out.append(e)
    return out


def start(procs: list[Proc], env: dict[str, str], name: str) -> Proc:
    p = start_runtime(env, name=name)
    procs.append(p)
    return p


def _stamp(e: events_pb2.RunEvent) -> float:
    return e.time.ToNanoseconds() / 1e9


# -- 1. kill -9 while streaming text ---------------------------------------------------------


@pytest.mark.slow
async def test_kill9_mid_stream_another_runtime_finishes_without_repeating_text(
    crash_env: dict[str, str], cdb: asyncpg.Connection, procs: list[Proc]
) -> None:
    a = start(procs, {**crash_env, "TETHER_SCRIPTED_DELAY_S": "0.01"}, "crash-stream-a")
    ca = Client(a.addr, token(TEST_SECRET, USER))
    conv = await ca.conversation()
    run_id = (await ca.start(conv, f"stream {STREAM_N} deltas")).run.id
    await ca.close()

    await wait_for("text deltas from A", lambda: _at_least(cdb, run_id, "text_delta", 15), 30)
    a.kill()
    t_kill = time.monotonic()
    at_kill = await run_row(cdb, run_id)
    assert at_kill["status"] == "running" and at_kill["lease_epoch"] == 1
    before = await stored_events(cdb, run_id)
    streamed_by_a = text_of(before)
    assert 0 < len(streamed_by_a) < len(EXPECTED_TEXT)
    assert EXPECTED_TEXT.startswith(streamed_by_a)

    b = start(procs, crash_env, "crash-stream-b")
    cb = Client(b.addr, token(TEST_SECRET, USER))
    evs = await cb.events(run_id, 0, timeout=90)
    t_done = time.monotonic()
    await cb.close()

    assert_clean_log(evs)
    assert text_of(evs) == EXPECTED_TEXT, "text repeated or lost across the crash"
    stored = await stored_events(cdb, run_id)
    assert [e.SerializeToString() for e in stored] == [e.SerializeToString() for e in evs]
    final = await run_row(cdb, run_id)
    assert final["status"] == "completed"
    assert final["lease_epoch"] == 2, "exactly one takeover"
    assert final["last_sequence"] == len(evs)
    assert await let_go(b, run_id) == ["completed"]
    msg = await cdb.fetchval(
        "SELECT content FROM message WHERE run_id = $1 AND role = 'assistant'", run_id
    )
    assert msg == EXPECTED_TEXT

    n_a = at_kill["last_sequence"]
    stall = _stamp(evs[n_a]) - _stamp(evs[n_a - 1])
    print(
        f"\n[kill -9 mid-stream] A wrote {n_a} events ({len(streamed_by_a)} chars) before the "
        f"kill; B wrote {len(evs) - n_a} more; total {len(evs)} events, dense; "
        f"gap between A's last and B's first event {stall:.2f}s; "
        f"kill -> done {t_done - t_kill:.2f}s (lease TTL {crash_env['TETHER_LEASE_TTL_S']}s)"
    )


async def _at_least(conn: asyncpg.Connection, run_id: str, kind: str, n: int) -> bool:
    return await count_type(conn, run_id, kind) >= n


# -- 2. kill -9 inside the restart tool call -------------------------------------------------


async def _run_to_interrupt(client: Client, text: str) -> tuple[str, list[events_pb2.RunEvent]]:
    conv = await client.conversation()
    run_id = (await client.start(conv, text)).run.id
    evs = await client.events(run_id, until="interrupt", timeout=30)
    assert types(evs)[-1] == "interrupt", types(evs)
    return run_id, evs


async def _restart_tool_started(conn: asyncpg.Connection, run_id: str) -> bool:
    evs = await stored_events(conn, run_id)
    return bool(tool_events(evs, "tool_started", "restart_instance"))


@pytest.mark.slow
@pytest.mark.parametrize("kill_point", ["before_write", "after_write"])
async def test_kill9_mid_restart_call_executes_once(
    kill_point: str, crash_env: dict[str, str], cdb: asyncpg.Connection, procs: list[Proc]
) -> None:
    svc, inst = await fresh_target(cdb)
    a = start(procs, {**crash_env, "TETHER_DEMO_TOOL_DELAY_S": "4"}, f"crash-tool-a-{kill_point}")
    ca = Client(a.addr, token(TEST_SECRET, USER))
    run_id, first = await _run_to_interrupt(ca, f"restart the abnormal {svc} instance")
    await ca.resume(run_id, first[-1].interrupt.interrupt_id)
    await ca.close()

    await wait_for(
        "tool_started(restart_instance)",
        lambda: _restart_tool_started(cdb, run_id),
        30,
        interval=0.02,
    )
    t_started = time.monotonic()
    ops = "SELECT count(*) FROM inv_operation WHERE target = $1"
    if kill_point == "after_write":
        # The write lands ~2 s after tool_started; A then holds the call open for ~2 s more.
        await _sleep(2.5)
        await wait_for("the restart's inventory write", lambda: _one_op(cdb, inst), 1.2)
    a.kill()
    t_kill = time.monotonic()
    ops_at_kill = await cdb.fetchval(ops, inst)
    assert ops_at_kill == (0 if kill_point == "before_write" else 1)
    call = await cdb.fetchrow(
        "SELECT status, claimed_epoch FROM tool_call WHERE run_id = $1 AND tool = "
        "'restart_instance'",
        run_id,
    )
    assert call["status"] == "executing", "A died inside the call"
    epoch_a = call["claimed_epoch"]

    b = start(procs, crash_env, f"crash-tool-b-{kill_point}")
    cb = Client(b.addr, token(TEST_SECRET, USER))
    evs = await cb.events(run_id, 0, timeout=90)
    t_done = time.monotonic()
    await cb.close()

    assert_clean_log(evs)
    assert await cdb.fetchval(ops, inst) == 1, "restart executed more than once (or never)"
    inst_row = await cdb.fetchrow(
        "SELECT status, restart_count FROM inv_instance WHERE id = $1", inst
    )
    assert inst_row["restart_count"] == 1 and inst_row["status"] == "healthy"
    started = tool_events(evs, "tool_started", "restart_instance")
    finished = tool_events(evs, "tool_finished", "restart_instance")
    assert len(started) == 1, "a reclaimed `executing` call must not announce a second start"
    assert len(finished) == 1
    assert finished[0].tool_finished.status == events_pb2.TOOL_STATUS_SUCCESS
    assert finished[0].tool_finished.call_id == started[0].tool_started.call_id
    call = await cdb.fetchrow(
        "SELECT status, claimed_epoch FROM tool_call WHERE run_id = $1 AND tool = "
        "'restart_instance'",
        run_id,
    )
    assert call["status"] == "succeeded" and call["claimed_epoch"] > epoch_a
    assert f"restarted {inst}" in text_of(evs)
    final = await run_row(cdb, run_id)
    assert final["status"] == "completed"
    assert await let_go(b, run_id) == ["completed"]
    print(
        f"\n[kill -9 in restart, {kill_point}] killed {t_kill - t_started:.2f}s after "
        f"tool_started; inv_operation rows at kill {ops_at_kill}, after 1; restart_count 1; "
        f"{len(evs)} events dense; tool_started(restart) x{len(started)}; "
        f"kill -> done {t_done - t_kill:.2f}s"
    )


@pytest.mark.slow
async def test_zombie_frozen_inside_the_restart_call_wakes_and_restarts_nothing(
    crash_env: dict[str, str], cdb: asyncpg.Connection, procs: list[Proc]
) -> None:
    """Fencing stops a zombie's *writes*, not its call to the outside world: a worker frozen
    inside the restart call (claimed, not yet at the inventory) wakes up after another worker
    reconciled and executed the call. Only the idempotency key passed to the tool keeps the
    instance from being restarted twice (invariant 4)."""
    svc, inst = await fresh_target(cdb)
    a = start(procs, {**crash_env, "TETHER_DEMO_TOOL_DELAY_S": "4"}, "zombie-tool-a")
    ca = Client(a.addr, token(TEST_SECRET, USER))
    run_id, first = await _run_to_interrupt(ca, f"restart the abnormal {svc} instance")
    await ca.resume(run_id, first[-1].interrupt.interrupt_id)
    await ca.close()
    await wait_for(
        "tool_started(restart_instance)",
        lambda: _restart_tool_started(cdb, run_id),
        30,
        interval=0.02,
    )
    os.kill(a.pid, signal.SIGSTOP)  # inside the call's first half: before the inventory write
    ops = "SELECT count(*) FROM inv_operation WHERE target = $1"
    assert await cdb.fetchval(ops, inst) == 0
    epoch_a = (await run_row(cdb, run_id))["lease_epoch"]

    b = start(procs, crash_env, "zombie-tool-b")
    cb = Client(b.addr, token(TEST_SECRET, USER))
    evs = await cb.events(run_id, 0, timeout=90)
    await cb.close()
    assert await cdb.fetchval(ops, inst) == 1, "B reconciled, found nothing, and executed once"
    done_row = await run_row(cdb, run_id)
    assert done_row["status"] == "completed" and done_row["lease_epoch"] == epoch_a + 1

    os.kill(a.pid, signal.SIGCONT)  # A's sleep is over: it calls the inventory with its key
    await _sleep(5)
    assert a.alive()
    inst_row = await cdb.fetchrow(
        "SELECT status, restart_count FROM inv_instance WHERE id = $1", inst
    )
    assert await cdb.fetchval(ops, inst) == 1
    assert inst_row["restart_count"] == 1, "the zombie restarted the instance a second time"
    after = await stored_events(cdb, run_id)
    assert [e.SerializeToString() for e in after] == [e.SerializeToString() for e in evs]
    assert_clean_log(after)
    assert (await run_row(cdb, run_id))["updated_at"] == done_row["updated_at"]
    assert log_mentions(a, run_id, "lease lost") or log_mentions(a, run_id, "store failure")
    assert not log_mentions(a, run_id, "run failed")
    print(
        "\n[zombie inside the restart call] B executed the restart once; A woke, called the "
        f"inventory with the same key, changed nothing; restart_count {inst_row['restart_count']}"
    )


async def _one_op(conn: asyncpg.Connection, inst: str) -> bool:
    n = await conn.fetchval("SELECT count(*) FROM inv_operation WHERE target = $1", inst)
    return bool(n == 1)


# -- 3. zombie fencing -----------------------------------------------------------------------


@pytest.fixture
async def own_dsn(admin_dsn: str) -> AsyncIterator[str]:
    """A database no runtime watches: `runs.claim` can only find the run this test makes."""
    dsn = await stores.create_fresh_database(admin_dsn)
    yield dsn
    await stores.drop_database(admin_dsn, dsn)


async def test_zombie_is_fenced_at_the_store(own_dsn: str) -> None:
    from tether_common.ids import new_id
    from tether_runtime.domain import events as ev
    from tether_runtime.store import conversations, event_log, runs
    from tether_runtime.store.db import create_pool

    pool = await create_pool(own_dsn, min_size=1, max_size=4)
    try:
        async with pool.acquire() as conn:
            conv = await conversations.create(conn, USER, "zombie")
            run_id = new_id("run")
            msg = await conversations.add_message(conn, conv.id, "user", "hi", run_id=run_id)
            await runs.create(conn, run_id, conv.id, USER, msg.id, "opspilot", {})

            claimed_a = await runs.claim_next(conn, "A", 3)
            assert claimed_a is not None and claimed_a[1] is False, "a queued run is no takeover"
            a = claimed_a[0]
            assert a.id == run_id and a.lease_epoch == 1
            async with conn.transaction():
                await event_log.append(conn, run_id, [ev.run_started(conv.id)], epoch=1)
                await runs.save_checkpoint(conn, run_id, 1, {"by": "A"}, reset_streamed=False)
            assert await runs.renew(conn, run_id, 1, 3) is False
            # A's lease runs out (a pause, a partition); B takes the run over.
            assert await runs.claim(conn, "B", 3) is None, "a live lease is not claimable"
            await conn.execute(
                "UPDATE run SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
                run_id,
            )
            claimed_b = await runs.claim_next(conn, "B", 3)
            assert claimed_b is not None and claimed_b[1] is True, "an expired lease is a takeover"
            b = claimed_b[0]
            assert b.id == run_id and b.lease_epoch == 2
            assert b.lease_owner == "B" and b.checkpoint == {"by": "A"}

            # The zombie A: every write conditional on epoch 1 is refused or changes nothing.
            with pytest.raises(event_log.Fenced):
                async with conn.transaction():
                    await event_log.append(conn, run_id, [ev.text_delta("m", "zombie")], epoch=1)
                    await runs.save_checkpoint(
                        conn, run_id, 1, {"by": "zombie"}, reset_streamed=False
                    )
            await runs.save_checkpoint(conn, run_id, 1, {"by": "zombie"}, reset_streamed=True)
            assert await runs.renew(conn, run_id, 1, 3) is None
            await runs.finish(conn, run_id, 1, "failed")
            assert await runs.release(conn, run_id, 1) is False
            row = await runs.get(conn, run_id)
            assert row is not None
            assert row.status == "running" and row.lease_owner == "B" and row.lease_epoch == 2
            assert row.checkpoint == {"by": "A"} and row.last_sequence == 1

            # B, the owner, writes on.
            async with conn.transaction():
                await event_log.append(
                    conn,
                    run_id,
                    [ev.text_delta("m", "hello "), ev.text_delta("m", "world")],
                    epoch=2,
                )
                await runs.save_checkpoint(conn, run_id, 2, {"by": "B"}, reset_streamed=False)
            assert await runs.renew(conn, run_id, 2, 3) is False
            with pytest.raises(event_log.Fenced):
                await event_log.append(conn, run_id, [ev.text_delta("m", "late")], epoch=1)
            async with conn.transaction():
                await event_log.append(conn, run_id, [ev.done("m")], epoch=2)
                await runs.finish(conn, run_id, 2, "completed")
            # Once the run left B's hands, not even B's epoch may write.
            with pytest.raises(event_log.Fenced):
                await event_log.append(conn, run_id, [ev.text_delta("m", "after")], epoch=2)

            evs = await stored_events(conn, run_id)
            row = await runs.get(conn, run_id)
    finally:
        await pool.close()
    assert row is not None and row.status == "completed" and row.checkpoint == {"by": "B"}
    assert_dense(evs)
    assert types(evs) == ["run_started", "text_delta", "text_delta", "done"]
    assert text_of(evs) == "hello world"
    print(
        f"\n[store zombie] epoch 1 refused 3 appends, checkpoint/finish/renew/release no-ops; "
        f"{len(evs)} events dense"
    )


@pytest.mark.slow
async def test_sigstopped_zombie_wakes_after_takeover_and_changes_nothing(
    crash_env: dict[str, str], cdb: asyncpg.Connection, procs: list[Proc]
) -> None:
    a = start(procs, {**crash_env, "TETHER_SCRIPTED_DELAY_S": "0.01"}, "zombie-a")
    ca = Client(a.addr, token(TEST_SECRET, USER))
    conv = await ca.conversation()
    run_id = (await ca.start(conv, f"stream {STREAM_N} deltas")).run.id
    await ca.close()

    await wait_for("text deltas from A", lambda: _at_least(cdb, run_id, "text_delta", 15), 30)
    os.kill(a.pid, signal.SIGSTOP)
    t_stop = time.monotonic()
    at_stop = await run_row(cdb, run_id)

    b = start(procs, crash_env, "zombie-b")
    cb = Client(b.addr, token(TEST_SECRET, USER))
    evs = await cb.events(run_id, 0, timeout=90)
    t_done = time.monotonic()
    done_row = await run_row(cdb, run_id)
    assert done_row["status"] == "completed" and done_row["lease_epoch"] == 2

    os.kill(a.pid, signal.SIGCONT)
    t_cont = time.monotonic()
    # A wakes with a stale lease: its next write or heartbeat finds it fenced.
    # (If the SIGSTOP happened to land inside a transaction, the server ended that session and A
    # reports a store failure instead.)
    await wait_for(
        "A noticing it lost the run",
        lambda: _async(
            log_mentions(a, run_id, "lease lost") or log_mentions(a, run_id, "store failure")
        ),
        15,
    )
    t_noticed = time.monotonic()
    assert not log_mentions(a, run_id, "run failed")
    await _sleep(3)  # more than the lease TTL: room for any late write A might still try
    assert a.alive(), "the zombie should stand down, not crash"

    after = await stored_events(cdb, run_id)
    final = await run_row(cdb, run_id)
    await cb.close()
    assert [e.SerializeToString() for e in after] == [e.SerializeToString() for e in evs]
    assert_clean_log(after)
    assert text_of(after) == EXPECTED_TEXT
    assert final["status"] == "completed" and final["lease_epoch"] == 2
    assert final["last_sequence"] == done_row["last_sequence"] == len(after)
    assert final["updated_at"] == done_row["updated_at"], "the zombie touched the run row"
    assert left_worker(a, run_id) == []
    assert await let_go(b, run_id) == ["completed"]
    print(
        f"\n[SIGSTOP zombie] A stopped after {at_stop['last_sequence']} events; B took over and "
        f"finished in {t_done - t_stop:.2f}s; A resumed and stood down within "
        f"{t_noticed - t_cont:.2f}s; after 3s more the log stayed at {len(after)} dense "
        f"events ending in done; run row unchanged"
    )


async def _async(value: object) -> object:
    return value


# -- 4. resume on another runtime ------------------------------------------------------------


@pytest.mark.slow
async def test_resume_on_a_different_runtime_than_the_one_that_paused(
    crash_env: dict[str, str], cdb: asyncpg.Connection, procs: list[Proc]
) -> None:
    svc, inst = await fresh_target(cdb)
    a = start(procs, crash_env, "resume-a")
    ca = Client(a.addr, token(TEST_SECRET, USER))
    run_id, first = await _run_to_interrupt(ca, f"restart the abnormal {svc} instance")
    await ca.close()
    t0 = time.monotonic()
    assert a.terminate() == 0
    t_term = time.monotonic() - t0
    paused = await run_row(cdb, run_id)
    assert paused["status"] == "interrupted" and paused["lease_owner"] is None

    b = start(procs, crash_env, "resume-b")
    cb = Client(b.addr, token(TEST_SECRET, USER))
    t1 = time.monotonic()
    resp = await cb.resume(run_id, first[-1].interrupt.interrupt_id)
    assert resp.run.id == run_id
    rest = await cb.events(run_id, first[-1].sequence, timeout=60)
    t_done = time.monotonic() - t1
    evs = await cb.events(run_id, 0, timeout=30)
    await cb.close()

    assert [e.SerializeToString() for e in first + rest] == [e.SerializeToString() for e in evs]
    assert_clean_log(evs)
    assert types(rest)[0] == "interrupt_resolved"
    assert len(tool_events(evs, "tool_started", "restart_instance")) == 1
    assert f"restarted {inst}" in text_of(evs)
    assert await cdb.fetchval("SELECT count(*) FROM inv_operation WHERE target = $1", inst) == 1
    assert await cdb.fetchval("SELECT restart_count FROM inv_instance WHERE id = $1", inst) == 1
    assert await let_go(a, run_id) == ["interrupted"]
    assert await let_go(b, run_id) == ["completed"]
    print(
        f"\n[resume elsewhere] A paused the run at seq {first[-1].sequence} and stopped "
        f"gracefully in {t_term:.2f}s; B resumed it and finished in {t_done:.2f}s; "
        f"{len(evs)} events dense"
    )


async def _holds_run_lock(conn: asyncpg.Connection, run_id: str) -> bool:
    """Whether another session holds the run row's lock (A, stopped inside a transaction)."""
    try:
        async with conn.transaction():
            await conn.execute("SELECT 1 FROM run WHERE id = $1 FOR UPDATE NOWAIT", run_id)
    except asyncpg.LockNotAvailableError:
        return True
    return False


@pytest.mark.slow
async def test_zombie_stopped_inside_a_transaction_does_not_block_takeover(
    crash_env: dict[str, str], cdb: asyncpg.Connection, procs: list[Proc]
) -> None:
    """A worker frozen (or partitioned) inside a transaction holds the run row's lock; `claim`
    skips locked rows, so without a server-side limit on idle transactions no worker could ever
    take the run over while the zombie stays frozen. The zombie's session is recreated exactly:
    a connection from the runtime's own pool factory, idle inside a transaction that locked the
    run row, while the worker process itself is frozen with SIGSTOP."""
    from tether_runtime.store.db import create_pool

    a = start(procs, {**crash_env, "TETHER_SCRIPTED_DELAY_S": "0.01"}, "zombie-tx-a")
    ca = Client(a.addr, token(TEST_SECRET, USER))
    conv = await ca.conversation()
    n = 2000
    run_id = (await ca.start(conv, f"stream {n} deltas")).run.id
    await ca.close()
    await wait_for("text deltas from A", lambda: _at_least(cdb, run_id, "text_delta", 5), 30)

    os.kill(a.pid, signal.SIGSTOP)
    ttl = float(crash_env["TETHER_LEASE_TTL_S"])
    zombie_pool = await create_pool(
        crash_env["DATABASE_URL"], min_size=1, max_size=1, idle_tx_timeout_s=ttl
    )
    zombie = await zombie_pool.acquire()
    tx = zombie.transaction()
    await tx.start()
    await zombie.execute("SELECT 1 FROM run WHERE id = $1 FOR UPDATE", run_id)
    assert await _holds_run_lock(cdb, run_id)
    t_stop = time.monotonic()
    at_stop = await run_row(cdb, run_id)
    assert at_stop["status"] == "running"
    tries = 1

    b = start(procs, crash_env, "zombie-tx-b")
    cb = Client(b.addr, token(TEST_SECRET, USER))
    evs = await cb.events(run_id, 0, timeout=45)
    t_done = time.monotonic()
    done_row = await run_row(cdb, run_id)
    assert done_row["status"] == "completed" and done_row["lease_epoch"] == 2
    # The server ended the idle-in-transaction session, releasing the lock.
    try:
        await zombie.fetchval("SELECT 1")
        ended = False
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
        ended = True
    assert ended, "the zombie's idle transaction was not ended by the server"
    with contextlib.suppress(Exception):
        await zombie_pool.release(zombie)
    with contextlib.suppress(Exception):
        await zombie_pool.close()

    os.kill(a.pid, signal.SIGCONT)
    await _sleep(4)
    assert a.alive()
    # A wakes up fenced: it must take that for a lost lease (or a store failure), never fail the run.
    assert log_mentions(a, run_id, "store failure") or log_mentions(a, run_id, "lease lost")
    assert not log_mentions(a, run_id, "run failed")
    after = await stored_events(cdb, run_id)
    final = await run_row(cdb, run_id)
    await cb.close()
    assert [e.SerializeToString() for e in after] == [e.SerializeToString() for e in evs]
    assert_clean_log(after)
    assert text_of(after) == "".join(f"t{i} " for i in range(n))
    assert final["updated_at"] == done_row["updated_at"]
    assert await let_go(b, run_id) == ["completed"]
    print(
        f"\n[zombie frozen mid-transaction] zombie session held the run lock ({tries} setup) "
        f"(at seq {at_stop['last_sequence']}); B took over and finished in "
        f"{t_done - t_stop:.2f}s; {len(after)} events dense, text exact, run row untouched"
    )
