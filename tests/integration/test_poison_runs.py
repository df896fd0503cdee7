"""Poison runs, with real processes: a run that takes its worker down every time it executes is
not claimed forever. Here the run's restart call is held open (TETHER_DEMO_TOOL_DELAY_S) and the
test, as a supervisor, SIGKILLs whichever worker holds the run once it is inside the call, then
starts a new worker, as a crash-looping pod would. After TETHER_MAX_RUN_ATTEMPTS such attempts the
next claim fails the run with RUN_ATTEMPTS_EXHAUSTED instead of executing it, while runs started
meanwhile complete."""

from __future__ import annotations

import asyncio
import random
import string
import time
import urllib.request
from collections.abc import AsyncIterator

import asyncpg
import pytest
from tether_testkit import stores
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.inventory import grant_service
from tether_testkit.processes import Proc, free_port, start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

USER = "alice"
MAX_ATTEMPTS = 3


@pytest.fixture
async def poison_env(base_env: dict[str, str], admin_dsn: str) -> AsyncIterator[dict[str, str]]:
    """A database of its own (the session's shared runtime must not take these runs), small
    limits so the test is quick: three attempts, a 0.2 s backoff base, 2 s leases."""
    dsn = await stores.create_fresh_database(admin_dsn)
    yield {
        **base_env,
        "DATABASE_URL": dsn,
        "TETHER_MAX_RUN_ATTEMPTS": str(MAX_ATTEMPTS),
        "TETHER_RUN_RETRY_BACKOFF_S": "0.2",
        "TETHER_LEASE_TTL_S": "2",
        "TETHER_POLL_INTERVAL_S": "0.2",
        # The restart call stays open far longer than the test waits before a kill; its write
        # to the inventory (half-way through) never happens.
        "TETHER_DEMO_TOOL_DELAY_S": "60",
    }
    await stores.drop_database(admin_dsn, dsn)


class Workers:
    """Worker processes (TETHER_RUNTIME_ROLE=worker), each serving its metrics on a port."""

    def __init__(self, env: dict[str, str], procs: list[Proc]) -> None:
        self.env = env
        self.procs = procs
        self.live: list[Proc] = []
        self.metrics: dict[int, str] = {}  # pid -> metrics URL
        self.n = 0

    async def spawn(self) -> Proc:
        self.n += 1
        port = free_port()
        env = {
            **self.env,
            "TETHER_RUNTIME_ROLE": "worker",
            "TETHER_METRICS_ADDR": f"127.0.0.1:{port}",
        }
        p = await asyncio.to_thread(start_runtime, env, name=f"poison-worker{self.n}")
        self.procs.append(p)
        self.live.append(p)
        self.metrics[p.pid] = f"http://127.0.0.1:{port}/metrics"
        return p

    def owner(self, lease_owner: str) -> Proc | None:
        """The live worker whose lease-owner id (host:pid:suffix) this is."""
        pid = int(lease_owner.split(":")[1])
        return next((p for p in self.live if p.pid == pid), None)

    async def kill(self, p: Proc) -> None:
        self.live.remove(p)
        await asyncio.to_thread(p.kill)


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


async def _target(conn: asyncpg.Connection) -> str:
    svc = "poison-" + "".join(random.choices(string.ascii_lowercase, k=8)) + "-api"
    await conn.execute("INSERT INTO inv_service (name, env, replicas) VALUES ($1, 'prod', 1)", svc)
    await conn.execute(
        "INSERT INTO inv_instance (id, service, env, status) VALUES ($1, $2, 'prod', 'abnormal')",
        f"{svc}-1",
        svc,
    )
    await grant_service(conn, USER, svc)
    return svc


async def _inside_the_call(conn: asyncpg.Connection, run_id: str) -> asyncpg.Record | None:
    """The run's row once the worker holding it is inside the restart call (this attempt's claim
    of the call), else None."""
    return await conn.fetchrow(
        "SELECT r.lease_owner, r.lease_epoch, r.attempts FROM run r JOIN tool_call c "
        "ON c.run_id = r.id AND c.tool = 'restart_instance' "
        "WHERE r.id = $1 AND r.status = 'running' AND c.status = 'executing' "
        "AND c.claimed_epoch = r.lease_epoch",
        run_id,
    )


async def _others_held(conn: asyncpg.Connection, lease_owner: str, run_id: str) -> bool:
    """Whether that worker is executing any run besides this one."""
    return bool(
        await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM run WHERE lease_owner = $1 AND status = 'running' "
            "AND id <> $2)",
            lease_owner,
            run_id,
        )
    )


async def test_a_run_that_kills_its_worker_every_time_fails_after_n_attempts_while_others_flow(
    poison_env: dict[str, str], procs: list[Proc]
) -> None:
    api = start_runtime({**poison_env, "TETHER_RUNTIME_ROLE": "api"}, name="poison-api")
    procs.append(api)
    workers = Workers(poison_env, procs)
    await workers.spawn()
    await workers.spawn()
    client = Client(api.addr, token(TEST_SECRET, USER))
    db = await asyncpg.connect(poison_env["DATABASE_URL"])
    try:
        svc = await _target(db)
        conv = await client.conversation()
        poison = (await client.start(conv, f"restart the abnormal {svc} instance")).run.id
        first = await client.events(poison, until="interrupt", timeout=30)
        assert types(first)[-1] == "interrupt"

        # Healthy runs keep arriving for as long as the poison run is being retried.
        healthy: list[str] = []
        stop = asyncio.Event()

        async def keep_starting() -> None:
            while not stop.is_set():
                c = await client.conversation("healthy")
                healthy.append((await client.start(c, "show recent errors of payment-api")).run.id)
                await asyncio.sleep(0.25)

        feeder = asyncio.create_task(keep_starting())
        await client.resume(poison, first[-1].interrupt.interrupt_id)

        # The supervisor: each time an attempt is inside the call, kill its worker, start another.
        kills: list[tuple[int, int]] = []  # (epoch, attempts) of each killed attempt
        deadline = time.monotonic() + 90
        while len(kills) < MAX_ATTEMPTS:
            assert time.monotonic() < deadline, f"only {len(kills)} attempts reached the call"
            row = await _inside_the_call(db, poison)
            victim = workers.owner(row["lease_owner"]) if row else None
            # Killed only while it holds the poison run alone (the call stays open 60 s, so such
            # a moment comes): a healthy run killed with it would be taken over together with it
            # after both leases ran out, by one claim, and killed again each time, until it too
            # was poisoned (seen under load, where healthy runs take longer).
            if row is None or victim is None or await _others_held(db, row["lease_owner"], poison):
                await asyncio.sleep(0.05)
                continue
            await workers.kill(victim)
            kills.append((row["lease_epoch"], row["attempts"]))
            await workers.spawn()
        # The attempts counted up from the approval (a pause starts them over): 1, 2, 3.
        assert [a for _, a in kills] == list(range(1, MAX_ATTEMPTS + 1)), kills

        rest = await client.events(poison, first[-1].sequence, timeout=60)
        failed_at = await db.fetchval("SELECT updated_at FROM run WHERE id = $1", poison)
        stop.set()
        await feeder

        # The poison run: failed, fenced, one terminal event, the log dense and unbroken.
        evs = await client.events(poison, 0, timeout=30)
        assert_dense(evs)
        assert [e.SerializeToString() for e in first + rest] == [e.SerializeToString() for e in evs]
        assert types(evs)[-1] == "error"
        assert sum(t in ("done", "error", "cancelled") for t in types(evs)) == 1
        error = evs[-1].error
        assert error.code == "RUN_ATTEMPTS_EXHAUSTED"
        assert f"{MAX_ATTEMPTS} times in a row" in error.message
        row = await db.fetchrow(
            "SELECT status, lease_epoch, lease_owner, attempts, last_sequence FROM run "
            "WHERE id = $1",
            poison,
        )
        assert row["status"] == "failed" and row["lease_owner"] is None and row["attempts"] == 0
        # The claim after the last killed attempt failed it; no attempt executed past the limit.
        assert row["lease_epoch"] == kills[-1][0] + 1
        assert row["last_sequence"] == len(evs)
        assert (
            await db.fetchval("SELECT count(*) FROM inv_operation WHERE target = $1", f"{svc}-1")
            == 0
        )
        # Counted once, by the worker that failed it.
        poisoned = [_metric(url, "tether_runs_poisoned_total") for url in _live_urls(workers)]
        assert sorted(poisoned) == [0.0, 1.0], poisoned

        # Meanwhile the healthy runs flowed: every one completed, many before the poison failed.
        await asyncio.gather(*(client.events(r, 0, timeout=60) for r in healthy))
        statuses = await db.fetch(
            "SELECT id, status, updated_at FROM run WHERE id = ANY($1::text[])", healthy
        )
        assert {r["status"] for r in statuses} == {"completed"}, [
            (r["id"], r["status"]) for r in statuses if r["status"] != "completed"
        ]
        done_before = sum(r["updated_at"] < failed_at for r in statuses)
        assert done_before >= 5, f"only {done_before} healthy runs completed meanwhile"
        print(
            f"\n[poison run] {MAX_ATTEMPTS} attempts killed inside the restart call "
            f"(epochs {[e for e, _ in kills]}), then failed with {error.code} at epoch "
            f"{row['lease_epoch']}; {len(healthy)} healthy runs started meanwhile, all completed "
            f"({done_before} before the poison run failed)"
        )
    finally:
        await db.close()
        await client.close()


def _live_urls(workers: Workers) -> list[str]:
    return [workers.metrics[p.pid] for p in workers.live]
