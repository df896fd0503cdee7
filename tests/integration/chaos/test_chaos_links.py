"""Links that fail while every process lives (issue #33), on the partition cluster of
chaos/topology.py (two runtimes, a gateway, each on a network namespace of its own): a runtime
or the gateway cut off from Redis, the gateway cut off from one runtime, a one-way partition, a
slow and lossy runtime–Postgres link under load, a link that flaps, slow and narrow
gateway–runtime links whose connections are reset (RST) every few seconds, and connections to
Postgres and to Redis left half-open (no FIN, no RST). Each ends with the suite's invariants (every
browser's frames exactly the stored log, every run ends with `done`, each write once) and puts
its recovery figures in the chaos table: the longest pause a streaming browser saw, and the
window during which calls through the gateway failed or stalled."""

from __future__ import annotations

import asyncio

import pytest

from chaos.kit import Procs, size
from chaos.topology import GRPC_PORT, Cluster, FaultResult, failed_after, run_fault

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.slow(seconds=53),
    pytest.mark.timeout(size(180, 500)),
    pytest.mark.usefixtures("netns_required"),
]

# `make test` runs the faults whose fixes they guard and the one-way and half-open Postgres
# cases (each about 20 s on a quiet machine: three processes started cold in their namespaces);
# `make chaos` runs them all.
full_only = pytest.mark.chaos_full  # deselected at the fast scale (chaos/conftest.py)

N_STREAM = size(3, 12)
N_WRITE = size(2, 6)
DELTAS = size(300, 900)
HOLD_S = size(6.0, 15.0)
LEASE_TTL_S = "3"
# The gateway's keepalive (tether_client.channel: a ping every 3 s while calls are open, 2 s to
# answer) declares a silent runtime connection dead within 5 s; plus a second's slack.
DETECT_S = 6.5
HALF_OPEN_S = 8.0


def _row(chaos_table, fault: str, r: FaultResult) -> None:  # type: ignore[no-untyped-def]
    v = r.verdict
    chaos_table(
        fault, report=v.report, runs=v.runs, events=v.events, lost=v.lost,
        duplicated=v.duplicated, double_exec=v.double_exec,
        recovery=f"stream pause {r.stall:.2f}s; failing {r.window:.2f}s "
        f"({r.failed}/{len(r.seen)} calls)",
    )  # fmt: skip
    assert not v.problems, "\n".join(v.problems[:20])


async def _fault(private_env: dict[str, str], procs: Procs, **kw) -> FaultResult:  # type: ignore[no-untyped-def]
    kw.setdefault("hold_s", HOLD_S)
    kw.setdefault("n_write", N_WRITE)
    return await run_fault(
        private_env, procs, n_stream=N_STREAM, deltas=DELTAS, TETHER_LEASE_TTL_S=LEASE_TTL_S,
        **kw,
    )  # fmt: skip


def _heal_all(c: Cluster) -> None:
    for h in c.hosts.values():
        h.heal()


@full_only
async def test_runtime_cut_off_from_redis(
    private_env: dict[str, str], procs: Procs, chaos_table
) -> None:
    """Postgres is the truth: runs on the cut-off runtime go on; its browsers' events come
    from the log instead of Redis's live feed."""
    r = await _fault(
        private_env, procs,
        cut=lambda c: c.hosts["a"].partition(c.net.hub, c.redis.port), heal=_heal_all,
    )  # fmt: skip
    _row(chaos_table, f"runtime cut off from Redis {HOLD_S:.0f}s", r)


@full_only
async def test_gateway_cut_off_from_redis(
    private_env: dict[str, str], procs: Procs, chaos_table
) -> None:
    """The gateway still reaches both runtimes: streams and calls go on through them."""
    r = await _fault(
        private_env, procs,
        cut=lambda c: c.hosts["gw"].partition(c.net.hub, c.redis.port), heal=_heal_all,
    )  # fmt: skip
    _row(chaos_table, f"gateway cut off from Redis {HOLD_S:.0f}s", r)


async def test_gateway_cut_off_from_one_runtime(
    private_env: dict[str, str], procs: Procs, chaos_table
) -> None:
    """The gateway cannot reach runtime a (a still reaches the stores and keeps its runs): the
    gateway's keepalive notices the silent connection within DETECT_S, fails its calls and
    streams over to b (which reads them from the log and Redis) and sends a no new call."""
    hold = size(10.0, 20.0)
    r = await _fault(
        private_env, procs, hold_s=hold,
        cut=lambda c: c.hosts["gw"].partition(c.hosts["a"].ip, GRPC_PORT), heal=_heal_all,
    )  # fmt: skip
    _row(chaos_table, f"gateway cut off from runtime a {hold:.0f}s", r)
    late = failed_after(r.seen, r.t0 + DETECT_S)
    assert not late, (
        f"{len(late)} calls started {DETECT_S:.1f}s or more after the gateway lost runtime a "
        f"failed or stalled (statuses {sorted({a.status for a in late})}): it still sends them"
    )
    assert r.stall <= DETECT_S + 2, f"a browser's stream paused {r.stall:.1f}s"


async def test_one_way_partition_runtime_hears_postgres_not(
    private_env: dict[str, str], procs: Procs, chaos_table
) -> None:
    """Asymmetric: what runtime a sends to Postgres arrives, nothing comes back (its commits
    may land while it cannot know): fencing keeps b's takeover exact."""
    r = await _fault(
        private_env, procs,
        cut=lambda c: c.hosts["a"].partition(c.net.hub, c.pg.port, direction="in"),
        heal=_heal_all,
    )  # fmt: skip
    _row(chaos_table, f"one-way: runtime a hears nothing from Postgres {HOLD_S:.0f}s", r)
    late = failed_after(r.seen, r.t0 + 3.0)
    assert not late, f"{len(late)} calls failed or stalled after a stopped announcing"


@full_only
async def test_slow_lossy_postgres_link_under_load(
    private_env: dict[str, str], procs: Procs, chaos_table
) -> None:
    """30% loss (as retransmission stalls of 200 ms: TCP loses no byte, a lossy link stalls the
    stream) and 300 ms ± 200 ms latency each way on the runtimes' link to Postgres."""

    def slow(c: Cluster) -> None:
        c.pg.set(latency_s=0.3, jitter_s=0.2, loss=0.3, stall_s=0.2)

    r = await _fault(
        private_env, procs, cut=slow, heal=lambda c: c.pg.clear(), hold_s=size(10.0, 30.0)
    )
    _row(chaos_table, "runtime-Postgres link: 30% loss, 300±200 ms", r)


@full_only
async def test_flapping_link_to_postgres(
    private_env: dict[str, str], procs: Procs, chaos_table
) -> None:
    """Runtime a's link to Postgres goes down for 1.5 s every 3 s."""

    async def flap(c: Cluster, hold_s: float) -> None:
        a = c.hosts["a"]
        loop = asyncio.get_running_loop()
        end = loop.time() + hold_s
        while loop.time() < end:
            a.partition(c.net.hub, c.pg.port)
            await asyncio.sleep(1.5)
            a.heal()
            await asyncio.sleep(1.5)

    r = await _fault(private_env, procs, cut=lambda c: None, heal=_heal_all, during=flap)
    _row(chaos_table, f"runtime a's Postgres link flaps 1.5 s / 3 s for {HOLD_S:.0f}s", r)


@full_only
async def test_slow_narrow_gateway_links_reset_every_5s(
    private_env: dict[str, str], procs: Procs, chaos_table
) -> None:
    """The gateway's links to both runtimes: 300 ms ± 200 ms latency and 256 KiB/s each way,
    and every connection on them reset (RST) every 5 s. Calls fail over and are retried with
    their keys, streams reopen after their last sequence: the checker finds nothing lost,
    duplicated or run twice."""

    async def slow_and_reset(c: Cluster, hold_s: float) -> None:
        for link in c.links.values():
            link.set(latency_s=0.3, jitter_s=0.2, bandwidth_bps=256 * 1024)
        loop = asyncio.get_running_loop()
        end = loop.time() + hold_s
        resets = 0
        while loop.time() < end:
            await asyncio.sleep(min(5.0, max(0.0, end - loop.time())))
            resets += sum(link.reset() for link in c.links.values())
        assert resets > 0, "no connection was open on the gateway's links to reset"

    def heal(c: Cluster) -> None:
        for link in c.links.values():
            link.clear()

    r = await _fault(
        private_env, procs, cut=lambda c: None, heal=heal, during=slow_and_reset,
        gateway_links=True,
    )  # fmt: skip
    _row(chaos_table, "gateway-runtime links: 300±200 ms, 256 KiB/s, RST every 5 s", r)


@pytest.mark.parametrize("store", ["pg", pytest.param("redis", marks=full_only)])
async def test_half_open_connections(
    private_env: dict[str, str], procs: Procs, chaos_table, store: str
) -> None:
    """Runtime a's open connections to the store go dark (no bytes, no FIN, no RST, as when a
    NAT forgets them); new connections work. Nothing heals them: a must give them up."""

    def cut(c: Cluster) -> None:
        port = c.pg.port if store == "pg" else c.redis.port
        assert c.hosts["a"].silence_open(c.net.hub, port) > 0

    # Runs wait at cards at both sizes: a transaction caught on a silenced connection keeps its
    # run's row locks on Postgres's side, mid-command, until the other runtime's store watch
    # ends that session (a lease, store/stalled_sessions.py); before, its run stayed at its
    # card with its approvals refused.
    r = await _fault(
        private_env, procs, cut=cut, heal=lambda c: None, hold_s=size(11.0, 15.0),
    )  # fmt: skip
    name = "Postgres" if store == "pg" else "Redis"
    _row(chaos_table, f"half-open connections runtime a - {name}", r)
    # A's dark pool connections end after 5 s of unacknowledged data (store/db.py), calls
    # waiting on them at the gateway's 5 s deadline: those started later are answered.
    late = failed_after(r.seen, r.t0 + HALF_OPEN_S)
    assert not late, (
        f"{len(late)} calls started {HALF_OPEN_S:.0f}s or more after runtime a's connections to "
        f"{name} went dark failed or stalled (statuses {sorted({a.status for a in late})})"
    )
