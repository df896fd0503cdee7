"""A store outage under a running run says nothing about the run: its worker hands it back (the
attempt its claim counted returned) as soon as the store answers again, instead of leaving it to
a lease takeover that would count toward RUN_ATTEMPTS_EXHAUSTED. Every connection of the run's
database is cut mid-stream; the run resumes from its checkpoint without a takeover, and its
events stay dense."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.processes import free_port, start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = pytest.mark.timeout(120)


def takeovers(metrics_url: str) -> float:
    body = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    line = next(ln for ln in body.splitlines() if ln.startswith("tether_lease_takeovers_total "))
    return float(line.rsplit(" ", 1)[1])


async def test_a_run_cut_off_from_the_store_is_handed_back_not_taken_over(
    private_env, private_db, procs
):
    db = private_db
    port = free_port()
    proc = start_runtime(
        {
            **private_env,
            "TETHER_SCRIPTED_DELAY_S": "0.02",
            "TETHER_METRICS_ADDR": f"127.0.0.1:{port}",
            # A long lease: a takeover could not hide inside the test's wait.
            "TETHER_LEASE_TTL_S": "20",
        },
        name="runtime-outage",
    )
    procs.append(proc)
    c = Client(proc.addr, token(TEST_SECRET, "alice"))
    try:
        conv = await c.conversation()
        run = (await c.start(conv, "stream 300 deltas")).run
        for _ in range(200):
            if await db.fetchval("SELECT last_sequence FROM run WHERE id = $1", run.id) > 5:
                break
            await asyncio.sleep(0.05)
        # Cut every connection, again and again for a second: a pooled connection that is idle
        # reconnects unnoticed, so the outage must catch the run's writes in flight.
        cut = 0
        for _ in range(50):
            cut += await db.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            await asyncio.sleep(0.02)
        assert cut >= 1
        evs = await c.events(run.id, timeout=60)
        assert types(evs)[-1] == "done", types(evs)
        assert_dense(evs)
        text = "".join(e.text_delta.delta for e in evs if types([e]) == ["text_delta"])
        assert text == "".join(f"t{i} " for i in range(300)), "streamed once, resumed exactly"
        row = await db.fetchrow(
            "SELECT status, lease_epoch, attempts FROM run WHERE id = $1", run.id
        )
        assert row["status"] == "completed"
        # Claimed again after the hand-back (epoch 2 or more), never taken over on expiry.
        assert row["lease_epoch"] >= 2
        assert takeovers(f"http://127.0.0.1:{port}/metrics") == 0
    finally:
        await c.close()
