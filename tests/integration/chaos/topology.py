"""The partition tests' cluster: two runtimes and a gateway, each a host of its own network
(tether_testkit.netns), reaching the machine's Postgres and Redis through forwarders on the hub;
a workload of streaming runs and runs with a write tool behind a card, followed by browsers
through the gateway; and the checks every partition test ends with (each client's frames are
exactly the stored log, every run ends with `done`, each write ran once)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import asyncpg
from tether_proto import wire
from tether_testkit.fault_proxy import FaultProxy
from tether_testkit.history import History, Report
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.netns import Host, Net
from tether_testkit.processes import Proc, start_gateway, start_runtime

from chaos.kit import (
    CHAOS_ENV,
    Procs,
    SseResult,
    approver,
    check_histories,
    check_log,
    expected_frames,
    follow_sse,
    headers,
    http_new_run,
    http_session,
    size,
    stored_events,
    wait_for,
)

GRPC_PORT = 50051
HTTP_PORT = 8080


def _via(url: str, proxy: FaultProxy) -> str:
    """`url` with its host and port replaced by the proxy's."""
    parts = urllib.parse.urlsplit(url)
    netloc = f"{parts.username}@" if parts.username else ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{netloc}{proxy.addr}"))


@dataclass
class Cluster:
    net: Net
    pg: FaultProxy
    redis: FaultProxy
    env: dict[str, str]
    hosts: dict[str, Host] = field(default_factory=dict)
    procs: dict[str, Proc] = field(default_factory=dict)
    # With gateway_links: the gateway reaches each runtime through a proxy of its own, where
    # that link can be slowed, narrowed or reset.
    links: dict[str, FaultProxy] = field(default_factory=dict)

    @property
    def gw_url(self) -> str:
        return self.procs["gw"].addr

    def owner_of(self, name: str) -> str:
        """The lease owner's mark of runtime `name` (worker owners are host:pid:id)."""
        return f":{self.procs[name].pid}:"


@contextlib.asynccontextmanager
async def cluster(
    env0: dict[str, str], procs: Procs, *, gateway_links: bool = False, **extra: str
) -> AsyncIterator[Cluster]:
    with Net() as net:
        pg_url = urllib.parse.urlsplit(env0["DATABASE_URL"])
        redis_url = urllib.parse.urlsplit(env0["REDIS_URL"])
        pg = net.forward((pg_url.hostname or "127.0.0.1", pg_url.port or 5432))
        redis = net.forward((redis_url.hostname or "127.0.0.1", redis_url.port or 6379))
        env = {
            **env0,
            **CHAOS_ENV,
            "DATABASE_URL": _via(env0["DATABASE_URL"], pg),
            "REDIS_URL": _via(env0["REDIS_URL"], redis),
            "TETHER_SCRIPTED_DELAY_S": "0.02",
            **extra,
        }
        c = Cluster(net, pg, redis, env)
        for name in ("a", "b", "gw"):
            c.hosts[name] = net.host(name)
        targets = []
        for name in ("a", "b"):
            h = c.hosts[name]
            addr = f"{h.ip}:{GRPC_PORT}"
            if gateway_links:
                c.links[name] = net.forward((h.ip, GRPC_PORT))
            targets.append(c.links[name].addr if gateway_links else addr)
            c.procs[name] = procs.add(
                await asyncio.to_thread(
                    start_runtime, env, name=f"part-{name}", addr=addr, prefix=h.prefix,
                    timeout=60,
                )
            )  # fmt: skip
        gw = c.hosts["gw"]
        c.procs["gw"] = procs.add(
            await asyncio.to_thread(
                start_gateway, env, "ipv4:" + ",".join(targets), name="part-gw", port=HTTP_PORT,
                host=gw.ip, prefix=gw.prefix, timeout=60,
            )
        )  # fmt: skip
        try:
            yield c
        finally:
            procs.cleanup()


@dataclass
class Workload:
    run_ids: list[str]
    instances: list[str]  # the write runs' targets: run_ids[-len(instances):], in order
    streams: list[asyncio.Task[SseResult]]
    histories: list[History]  # each browser's, for the history checker


async def start_workload(
    http: aiohttp.ClientSession, db: asyncpg.Pool, c: Cluster, n_stream: int, n_write: int,
    deltas: int,
) -> Workload:  # fmt: skip
    """Streaming runs and runs that restart an instance behind a card (approved as it shows),
    each followed by a browser through the gateway that reconnects with Last-Event-ID."""
    texts = [f"stream {deltas} deltas"] * n_stream
    instances = []
    for _ in range(n_write):
        service, inst = await abnormal_service(db, prefix="part")
        instances.append(inst)
        texts.append(f"restart the abnormal {service} instance")
    run_ids = [await http_new_run(http, c.gw_url, t) for t in texts]
    histories = [History(f"browser-{r}") for r in run_ids]
    streams = [
        asyncio.create_task(
            follow_sse(
                http,
                lambda _: c.gw_url,
                r,
                deadline_s=size(120, 300),
                max_reconnects=200,
                on_event=approver(http, lambda: c.gw_url, r, record=h),
                record=h,
            )
        )  # fmt: skip
        for r, h in zip(run_ids, histories, strict=True)
    ]
    return Workload(run_ids, instances, streams, histories)


async def events_of(db: asyncpg.Pool, run_ids: list[str]) -> int:
    return int(
        await db.fetchval("SELECT count(*) FROM run_event WHERE run_id = ANY($1::text[])", run_ids)
    )


async def leases(db: asyncpg.Pool, run_ids: list[str]) -> dict[str, tuple[str, str, int]]:
    """run id -> (status, lease owner, lease epoch)."""
    rows = await db.fetch(
        "SELECT id, status, coalesce(lease_owner, '') AS owner, lease_epoch FROM run "
        "WHERE id = ANY($1::text[])",
        run_ids,
    )
    return {r["id"]: (r["status"], r["owner"], r["lease_epoch"]) for r in rows}


@dataclass
class Verdict:
    runs: int = 0
    events: int = 0
    lost: int = 0
    duplicated: int = 0
    double_exec: int = 0
    problems: list[str] = field(default_factory=list)
    reconnects: list[int] = field(default_factory=list)
    report: Report | None = None  # the history checker's, over every browser and write


async def verdict(db: asyncpg.Pool, w: Workload) -> Verdict:
    """Wait for every browser, then hold each against the Postgres log."""
    results = await asyncio.gather(*w.streams)
    v = Verdict(runs=len(w.run_ids))
    for res in results:
        stored = await stored_events(db, res.run_id)
        gaps, dups = check_log(stored)
        truth = expected_frames(stored)
        got_ids = [f[0] for f in res.frames]
        v.events += len(truth)
        v.duplicated += dups + len(got_ids) - len(set(got_ids))
        v.lost += gaps + len({f[0] for f in truth} - set(got_ids))
        v.reconnects.append(res.reconnects)
        if not res.finished or not stored or stored[-1].WhichOneof("event") != "done":
            v.problems.append(f"{res.run_id}: did not end with done ({res.error})")
        elif res.frames != truth:
            v.problems.append(f"{res.run_id}: the browser's frames differ from the stored log")
    effects = History("inventory")
    for run_id, inst in zip(
        w.run_ids[len(w.run_ids) - len(w.instances) :], w.instances, strict=True
    ):
        n = await executions(db, inst)
        effects.effect(run_id, inst, n)
        v.double_exec += n > 1
        if n != 1:
            calls = await db.fetch(
                "SELECT tool, status, left(result_summary, 160) AS summary FROM tool_call "
                "WHERE run_id = $1 ORDER BY created_at",
                run_id,
            )
            trail = "; ".join(f"{c['tool']} {c['status']}: {c['summary']}" for c in calls)
            v.problems.append(f"{inst}: restarted {n} times (run {run_id}: {trail or 'no call'})")
    v.report = await check_histories(db, [*w.histories, effects], w.run_ids)
    if not v.report.ok:
        v.problems.append(f"history checker: {v.report.explain()}")
    if v.problems:
        v.problems += await what_holds_unfinished(db, w.run_ids)
    return v


async def what_holds_unfinished(db: asyncpg.Pool, run_ids: list[str]) -> list[str]:
    """For a failed verdict: each run not ended, its lease as Postgres sees it, the other
    sessions of the database that hold a lock on the `run` table (a row lock shows there as the
    table's lock of the transaction that took it), and every other session inside a transaction
    or waiting on a lock: their client, state, what they wait for and their last statement, so
    that a run left stuck says what kept it."""
    rows = await db.fetch(
        "SELECT id, status, lease_owner, lease_epoch, attempts, lease_expires_at - now() AS left "
        "FROM run WHERE id = ANY($1::text[]) AND NOT status = ANY($2::text[])",
        run_ids,
        sorted(wire.TERMINAL_RUN_STATUSES),
    )
    if not rows:
        return []
    out = [
        f"{r['id']}: {r['status']}, lease {r['lease_owner']} epoch {r['lease_epoch']}, "
        f"attempts {r['attempts']}, lease left {r['left']}"
        for r in rows
    ]
    holders = await db.fetch(
        """SELECT DISTINCT a.pid, host(a.client_addr) AS client, a.state, a.wait_event_type,
                  a.wait_event, now() - a.xact_start AS xact_age, left(a.query, 120) AS query
           FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
           JOIN pg_class c ON c.oid = l.relation
           WHERE c.relname = 'run' AND l.granted AND a.pid <> pg_backend_pid()
             AND a.datname = current_database()"""
    )
    out += [f"a session holding a lock on run: {dict(h)}" for h in holders] or [
        "no other session holds a lock on run"
    ]
    others = await db.fetch(
        """SELECT pid, application_name AS app, host(client_addr) AS client, state,
                  wait_event_type, wait_event, now() - xact_start AS xact_age,
                  now() - state_change AS in_state, left(query, 120) AS query
           FROM pg_stat_activity
           WHERE datname = current_database() AND pid <> pg_backend_pid()
             AND (xact_start IS NOT NULL OR wait_event_type = 'Lock')"""
    )
    out += [f"a session in a transaction or waiting on a lock: {dict(o)}" for o in others]
    return out


async def poll_gateway(
    http: aiohttp.ClientSession, url: str, seen: list[Answer], stop: asyncio.Event
) -> None:
    """Clients calling the gateway, one call every 50 ms whether or not earlier ones answered
    (each answer's start, end and status; -1: no answer within 10 s): the 503 window of a fault.
    Calls a gateway sends to a runtime that hangs keep waiting; the next ones go on."""

    async def one() -> None:
        t = time.monotonic()
        try:
            async with http.get(
                f"{url}/v1/conversations", headers=headers(),
                timeout=aiohttp.ClientTimeout(total=10),
            ) as r:  # fmt: skip
                await r.read()
                seen.append(Answer(t, time.monotonic(), r.status))
        except (aiohttp.ClientError, TimeoutError):
            seen.append(Answer(t, time.monotonic(), -1))

    calls: set[asyncio.Task[None]] = set()
    while not stop.is_set():
        task = asyncio.create_task(one())
        calls.add(task)
        task.add_done_callback(calls.discard)
        await asyncio.sleep(0.05)
    await asyncio.gather(*calls)


@dataclass
class Answer:
    start: float
    end: float
    status: int


# A call the gateway answers later than this was held by a runtime that could not serve it: for
# a client, a stall as bad as a refusal (the gateway's own deadline is 5 s).
SLOW_S = 2.0


def failed(a: Answer) -> bool:
    return a.status != 200 or a.end - a.start > SLOW_S


def failed_after(seen: list[Answer], t: float) -> list[Answer]:
    """The calls started at or after `t` that failed or stalled."""
    return [a for a in seen if a.start >= t and failed(a)]


def failing_window(seen: list[Answer], t0: float) -> tuple[float, int]:
    """(seconds from t0 to the end of the last call that failed, how many failed) for calls
    made after t0: how long clients of the gateway were refused or kept waiting."""
    bad = failed_after(seen, t0)
    return (max(a.end for a in bad) - t0 if bad else 0.0), len(bad)


@dataclass
class FaultResult:
    verdict: Verdict
    seen: list[Answer]
    t0: float  # monotonic, when the fault began
    stall: float  # the longest pause between two frames of a streaming run's browser, in it
    window: float  # from the fault's start to the end of the last failed or stalled call
    failed: int


def longest_stall(res: SseResult, start: float, end: float) -> float:
    """The longest gap between frames (wall clock) that overlaps [start, end]."""
    times = res.arrived
    gaps = [b - a for a, b in zip(times, times[1:], strict=False) if b >= start and a <= end]
    return max(gaps, default=0.0)


async def run_fault(
    env0: dict[str, str],
    procs: Procs,
    *,
    cut: Callable[[Cluster], object],
    heal: Callable[[Cluster], object],
    hold_s: float,
    n_stream: int,
    n_write: int,
    deltas: int,
    during: Callable[[Cluster, float], Awaitable[None]] | None = None,
    gateway_links: bool = False,
    **extra: str,
) -> FaultResult:
    """Start the cluster and the workload, wait until runs stream, `cut`, keep the fault for
    `hold_s` (or run `during(cluster, hold_s)`), `heal`, and hold every client against the log."""
    db = await asyncpg.create_pool(env0["DATABASE_URL"], min_size=1, max_size=4)
    try:
        async with (
            cluster(env0, procs, gateway_links=gateway_links, **extra) as c,
            http_session() as http,
        ):
            w = await start_workload(http, db, c, n_stream, n_write, deltas)

            async def streaming() -> bool:
                return await events_of(db, w.run_ids) >= 5 * len(w.run_ids)

            await wait_for("runs streaming", streaming, 60)
            seen: list[Answer] = []
            stop = asyncio.Event()
            poller = asyncio.create_task(poll_gateway(http, c.gw_url, seen, stop))
            await asyncio.sleep(0.5)
            t0, wall0 = time.monotonic(), time.time()
            cut(c)
            if during is None:
                await asyncio.sleep(hold_s)
            else:
                await during(c, hold_s)
            heal(c)
            stop.set()
            await poller
            window, failed_n = failing_window(seen, t0)
            v = await verdict(db, w)
            results = [t.result() for t in w.streams[:n_stream]]
            stall = max((longest_stall(r, wall0, wall0 + hold_s) for r in results), default=0.0)
    finally:
        await db.close()
    return FaultResult(v, seen, t0, stall, window, failed_n)
