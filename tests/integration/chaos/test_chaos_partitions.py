"""Partitions between live hosts (issue #33): two runtimes and a gateway, each on a network
namespace of its own (tether_testkit.netns), while runs stream and wait at cards. A link is cut
with nftables drops, so both ends keep running and hear nothing (no FIN, no RST), then healed.
Each fault ends with the invariants of the fault suite (every browser's frames exactly the stored
log, every run ends with `done`, each write once) and its recovery time in the chaos table."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from chaos.kit import Procs, http_session, size, wait_for
from chaos.topology import (
    Answer,
    cluster,
    failed_after,
    failing_window,
    leases,
    poll_gateway,
    start_workload,
    verdict,
)

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.slow,
    pytest.mark.timeout(size(150, 400)),
    pytest.mark.usefixtures("netns_required"),
]

N_STREAM = size(3, 12)
N_WRITE = size(2, 6)
DELTAS = size(300, 900)  # at 20 ms a delta: 6 s (fast) of streaming per run
HOLD_S = size(6.0, 15.0)  # how long a partition lasts
LEASE_TTL_S = 3.0
# A runtime that has not reached Postgres for half a lease (at least 1.5 s) stops announcing
# itself (health NOT_SERVING) and gateways send it no new call; calls it holds then end at the
# gateway's deadline. Calls started this long after the cut must all be answered.
STOP_ANNOUNCING_S = max(1.5, LEASE_TTL_S / 2) + 1.5


def _held_by(state: dict[str, tuple[str, str, int]], mark: str) -> list[str]:
    return [r for r, (status, owner, _) in state.items() if status == "running" and mark in owner]


async def test_runtime_cut_off_from_postgres_loses_its_runs_to_the_other(
    private_env: dict[str, str], procs: Procs, chaos_table
) -> None:
    """Runtime a is cut off from Postgres only: it still reaches Redis and the gateway still
    reaches it. It cannot renew its leases, so they expire and runtime b takes its runs over
    (fenced: a's late writes after the heal are refused); a must stop work it no longer owns."""
    env = {"TETHER_LEASE_TTL_S": str(LEASE_TTL_S)}
    db = await asyncpg.create_pool(private_env["DATABASE_URL"], min_size=1, max_size=4)
    try:
        async with cluster(private_env, procs, **env) as c, http_session() as http:
            w = await start_workload(http, db, c, N_STREAM, N_WRITE, DELTAS)
            mark_a = c.owner_of("a")

            async def a_holds_runs() -> list[str]:
                return _held_by(await leases(db, w.run_ids), mark_a)

            held = await wait_for("runtime a to hold runs", a_holds_runs, 60)
            assert isinstance(held, list)
            seen: list[Answer] = []
            stop = asyncio.Event()
            poller = asyncio.create_task(poll_gateway(http, c.gw_url, seen, stop))
            await asyncio.sleep(0.5)
            t0 = time.monotonic()
            c.hosts["a"].partition(c.net.hub, c.pg.port)

            async def taken_over() -> bool:
                state = await leases(db, held)
                return all(mark_a not in owner for _, owner, _ in state.values())

            await wait_for("runtime b to take a's runs over", taken_over, 60)
            takeover = time.monotonic() - t0
            remaining = HOLD_S - (time.monotonic() - t0)
            if remaining > 0:
                await asyncio.sleep(remaining)
            c.hosts["a"].heal()
            stop.set()
            await poller
            window, failed = failing_window(seen, t0)
            late = failed_after(seen, t0 + STOP_ANNOUNCING_S)
            v = await verdict(db, w)
            print(
                f"\n[partition] healed to verdict {time.monotonic() - t0 - HOLD_S:.1f}s; "
                f"browser reconnects {v.reconnects}"
            )
    finally:
        await db.close()
    chaos_table(
        f"runtime cut off from Postgres {HOLD_S:.0f}s (takeover / 503 window)",
        report=v.report, runs=v.runs, events=v.events, lost=v.lost, duplicated=v.duplicated,
        double_exec=v.double_exec, recovery=f"takeover {takeover:.2f}s; failing {window:.2f}s ({failed}/{len(seen)} calls)",
    )  # fmt: skip
    assert not v.problems, "\n".join(v.problems[:20])
    assert not late, (
        f"{len(late)} calls started {STOP_ANNOUNCING_S:.1f}s or more after runtime a lost "
        f"Postgres failed or stalled over 2 s (statuses {sorted({a.status for a in late})}, "
        f"longest {max(a.end - a.start for a in late):.1f}s): it still takes calls"
    )
    assert takeover <= 3 * LEASE_TTL_S + 5, f"takeover took {takeover:.1f}s"
