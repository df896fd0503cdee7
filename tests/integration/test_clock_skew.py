"""Pods whose clocks differ (libfaketime, from Debian's `faketime`): a worker whose clock runs
90 s behind raises an approval card, and an API pod whose clock runs 90 s ahead takes the approve.
Which clock decides each expiry: Postgres's. A card's expiry is counted on it (cards.py) and
judged on it (resume.py, the claim, the sweeper), so the card lasts its TTL whichever pod raised
it and whichever pod is asked, and a pod ahead never expires a card that is still open; leases are
renewed and judged with Postgres's `now()` (store/runs.py). Token expiry is each pod's own clock
with TETHER_JWT_LEEWAY_S (30 s) of leeway: a skew beyond the leeway is a deployment error (NTP).

Before, the worker behind minted a card that Postgres already held expired (its `now` + 60 s was
30 s in the past), and the pod ahead judged a card minted on Postgres's clock expired 30 s early,
and recorded it so."""

from __future__ import annotations

import glob
from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg
import pytest
from tether.runtime.v1 import events_pb2
from tether_testkit import stores
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(120)]

# Debian's libfaketime (package faketime), under the machine's multiarch folder.
LIBFAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), "")
TTL_S = 60
SKEW_S = 90


def skewed(env: dict[str, str], offset_s: int) -> dict[str, str]:
    """A process whose wall clock is `offset_s` off (its monotonic clock, which timers use, is
    left alone, as NTP leaves it)."""
    return {
        **env,
        "LD_PRELOAD": LIBFAKETIME,
        "FAKETIME": f"{offset_s:+d}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


@pytest.fixture
async def skew_env(base_env: dict[str, str], admin_dsn: str) -> AsyncIterator[dict[str, str]]:
    dsn = await stores.create_fresh_database(admin_dsn)
    yield {**base_env, "DATABASE_URL": dsn, "TETHER_INTERRUPT_TTL_S": str(TTL_S)}
    await stores.drop_database(admin_dsn, dsn)


def _seconds(ts: object) -> float:
    return ts.seconds + ts.nanos / 1e9  # type: ignore[attr-defined]


async def test_a_card_lasts_its_ttl_on_postgres_clock_whatever_the_pods_clocks(
    skew_env: dict[str, str],
) -> None:
    assert LIBFAKETIME, "make test installs faketime (.ci/ensure_test_deps)"
    db = await asyncpg.connect(skew_env["DATABASE_URL"])
    procs: list[Proc] = []
    try:
        _, instance = await abnormal_service(db)
        worker = start_runtime(
            skewed({**skew_env, "TETHER_RUNTIME_ROLE": "worker"}, -SKEW_S), name="skew-worker"
        )
        procs.append(worker)
        api = start_runtime(
            skewed({**skew_env, "TETHER_RUNTIME_ROLE": "api"}, +SKEW_S), name="skew-api"
        )
        procs.append(api)
        client = Client(api.addr, token(TEST_SECRET, "alice"))
        conv = await client.conversation()
        started = await client.start(conv, f"restart {instance} in prod")
        run_id = started.run.id
        evs = await client.events(run_id, until="interrupt")
        db_now: datetime = await db.fetchval("SELECT now()")
        card = evs[-1].interrupt
        # The processes' clocks really are off: each stamps the events it writes with its own
        # (the API pod the run's start, the worker the card).
        assert _seconds(evs[0].time) > db_now.timestamp() + SKEW_S - 15, "API pod not ahead"
        assert _seconds(evs[-1].time) < db_now.timestamp() - SKEW_S + 15, "worker not behind"
        # Minted on Postgres's clock: TTL from now, not TTL from the worker's (90 s behind).
        left = _seconds(card.expire_time) - db_now.timestamp()
        assert TTL_S - 15 < left <= TTL_S + 1, f"the card expires in {left:.1f} s"
        status = await db.fetchval("SELECT status FROM interrupt WHERE id = $1", card.interrupt_id)
        assert status == "pending", "the sweeper (Postgres's clock) left it open"

        # Approved through the pod 90 s ahead: by its own clock the card expired 30 s ago.
        await client.resume(run_id, card.interrupt_id, events_pb2.DECISION_APPROVED)
        rest = await client.events(run_id, after=evs[-1].sequence)
        all_events = evs + rest
        assert_dense(all_events)
        kinds = types(all_events)
        assert kinds[-1] == "done", kinds
        assert kinds.count("tool_started") == 1
        resolved = await db.fetchrow(
            "SELECT status, decision FROM interrupt WHERE id = $1", card.interrupt_id
        )
        assert (resolved["status"], resolved["decision"]) == ("resolved", "approved")
        assert await executions(db, instance) == 1, "the restart ran, once"
    finally:
        for p in procs:
            p.kill()
        await db.close()
