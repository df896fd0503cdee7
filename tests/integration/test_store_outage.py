"""A store outage under a running run says nothing about the run. Its writes wait the outage out
(TETHER_STORE_RIDE_OUT_S): the run goes on where it was, under the same lease. Without that window
(0) its worker hands it back (the attempt its claim counted returned) as soon as the store answers
again, instead of leaving it to a lease takeover that would count toward RUN_ATTEMPTS_EXHAUSTED.
Every connection of the run's database is cut mid-stream; either way there is no takeover, the
text is streamed once and the events stay dense."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.processes import free_port, start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = pytest.mark.timeout(120)


def counter(metrics_url: str, name: str) -> float:
    body = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    line = next(ln for ln in body.splitlines() if ln.startswith(f"{name} "))
    return float(line.rsplit(" ", 1)[1])


@pytest.mark.parametrize("ride_out", ["30", "0"], ids=["rides-out", "handed-back"])
async def test_a_run_cut_off_from_the_store_is_not_taken_over(
    private_env, private_db, procs, ride_out
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
            "TETHER_STORE_RIDE_OUT_S": ride_out,
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
        url = f"http://127.0.0.1:{port}/metrics"
        if ride_out != "0":
            # Its writes were retried, and it kept its first lease to the end.
            assert counter(url, "tether_run_write_retries_total") >= 1
            assert row["lease_epoch"] == 1, dict(row)
        else:
            # Claimed again after the hand-back (epoch 2 or more).
            assert counter(url, "tether_run_write_retries_total") == 0
            assert row["lease_epoch"] >= 2
        # Never taken over on expiry.
        assert counter(url, "tether_lease_takeovers_total") == 0
    finally:
        await c.close()
