"""The load generator: a process of its own that drives a running gateway (and, for one figure, the
runtime's gRPC API) over real HTTP/SSE from 127.0.0.1, runs ONE scenario and prints its result as
JSON on stdout. `python -m tether_bench.loadgen < config.json` (main.py writes the config).

Every loop is bounded by a count and every scenario by a deadline (`deadline_s`)."""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import re
import resource
import secrets
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import asyncpg
import psutil
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from tether_common import redis_conn

from tether_bench.sse import Event, Reader, parse_time
from tether_bench.stats import p50_p99

_DELTA = re.compile(r"t\d+ ")
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10)


def note(msg: str) -> None:
    print(f"[loadgen {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else 1 << 20
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _local_only(url_or_addr: str) -> None:
    host = urlsplit(url_or_addr if "//" in url_or_addr else f"//{url_or_addr}").hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"refusing to load a non-local target: {url_or_addr}")


@dataclass
class Ctx:
    gateway: str
    runtime: str
    token: str
    dsn: str
    redis: str
    gateway_pid: int
    runtime_pids: list[int]  # every runtime process (an API and a worker process when split)
    params: dict[str, Any]
    session: aiohttp.ClientSession

    @property
    def runtime_pid(self) -> int:
        """The process serving the gRPC API (the only runtime process unless split)."""
        return self.runtime_pids[0]

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def create_conversation(self) -> str:
        async with self.session.post(
            f"{self.gateway}/v1/conversations", json={"title": "bench"}, headers=self.auth
        ) as resp:
            body = await _ok(resp, 201)
        return str(body["conversation"]["id"])

    async def conversations(self, n: int, concurrency: int = 32) -> list[str]:
        sem = asyncio.Semaphore(concurrency)

        async def one() -> str:
            async with sem:
                return await self.create_conversation()

        return list(await asyncio.gather(*(one() for _ in range(n))))

    async def start_run_json(self, conv: str, text: str) -> str:
        async with self.session.post(
            f"{self.gateway}/v1/conversations/{conv}/runs", json={"text": text}, headers=self.auth
        ) as resp:
            body = await _ok(resp, 201)
        return str(body["run"]["id"])

    async def start_run_stream(
        self, conv: str, text: str, agent: str = ""
    ) -> aiohttp.ClientResponse:
        """POST start run with `Accept: text/event-stream`: the response is the run's SSE stream
        (`agent`: the agent to run; the default agent when empty)."""
        resp = await self.session.post(
            f"{self.gateway}/v1/conversations/{conv}/runs",
            json={"text": text, **({"agent": agent} if agent else {})},
            headers={**self.auth, "Accept": "text/event-stream"},
        )
        if resp.status != 201:
            text_body = await resp.text()
            resp.release()
            raise RuntimeError(f"start run: HTTP {resp.status}: {text_body[:300]}")
        return resp

    async def events(self, run_id: str, last_event_id: int | None) -> aiohttp.ClientResponse:
        headers = {**self.auth, "Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        return await self.session.get(f"{self.gateway}/v1/runs/{run_id}/events", headers=headers)

    async def resume(self, run_id: str, interrupt_id: str, decision: str) -> None:
        body = {
            "interruptId": interrupt_id,
            "decision": decision,
            "idempotencyKey": secrets.token_hex(8),
        }
        async with self.session.post(
            f"{self.gateway}/v1/runs/{run_id}/resume", json=body, headers=self.auth
        ) as resp:
            await _ok(resp, 202)

    async def get_run(self, run_id: str) -> dict[str, Any]:
        async with self.session.get(f"{self.gateway}/v1/runs/{run_id}", headers=self.auth) as resp:
            body = await _ok(resp, 200)
        return dict(body["run"])


async def _ok(resp: aiohttp.ClientResponse, status: int) -> dict[str, Any]:
    body = await resp.text()
    if resp.status != status:
        raise RuntimeError(f"{resp.method} {resp.url.path}: HTTP {resp.status}: {body[:300]}")
    return dict(json.loads(body))


def _deltas(events: list[Event]) -> int:
    return sum(len(_DELTA.findall(e.json()["delta"])) for e in events if e.type == "text_delta")


def _cpu_s(pid: int) -> float:
    """CPU seconds so far of the process and its live children (a pod's supervisor: its
    processes)."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return math.nan
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return float(total)


def _cpu_by_name(name: str) -> dict[int, float]:
    """CPU seconds so far of every process of this name, by pid."""
    out: dict[int, float] = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        if p.info["name"] == name and p.info["cpu_times"] is not None:
            out[p.pid] = float(p.info["cpu_times"].user + p.info["cpu_times"].system)
    return out


class StoresCpu:
    """Where the rest of the machine's CPU goes during a scenario: every Postgres process
    (backends and background workers), every redis-server and pgbouncer on the box, so other
    load on them counts too, and this load generator itself. A process started meanwhile counts
    from zero."""

    NAMES = ("postgres", "redis-server", "pgbouncer")

    def __init__(self) -> None:
        self._before = {n: _cpu_by_name(n) for n in self.NAMES}
        self._own = _cpu_s(os.getpid())
        self._spent: dict[str, float] = {}

    def stop(self) -> None:
        for n in self.NAMES:
            after = _cpu_by_name(n)
            self._spent[n] = sum(t - self._before[n].get(pid, 0.0) for pid, t in after.items())
        self._spent["loadgen"] = _cpu_s(os.getpid()) - self._own

    def per_run(self, runs: int) -> dict[str, float]:
        key = {"postgres": "postgres", "redis-server": "redis", "loadgen": "loadgen"}
        return {
            f"{key.get(n, n)}_cpu_ms_per_run": round(s * 1000 / runs, 3)
            for n, s in self._spent.items()
            if n != "pgbouncer" or s > 0  # only when the run goes through one (--pgbouncer)
        }


def _rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


# What the bench's user holds on a service it made (the demo grants are per service).
OWNER_ACTIONS = ("logs.read", "instance.restart", "service.scale")


async def abnormal_service(dsn: str, owner: str = "alice") -> str:
    """A service of our own with exactly one abnormal instance: a restart target, granted to
    `owner` as the demo grants payment-api to alice."""
    name = f"bench-s{secrets.token_hex(4)}-api"
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "INSERT INTO inv_service (name, env, replicas) VALUES ($1, 'prod', 1)", name
        )
        await conn.execute(
            "INSERT INTO inv_instance (id, service, env, status) "
            "VALUES ($1, $2, 'prod', 'abnormal')",
            f"{name}-1",
            name,
        )
        await conn.executemany(
            'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3) '
            "ON CONFLICT DO NOTHING",
            [(owner, action, f"{name}/*") for action in OWNER_ACTIONS],
        )
    finally:
        await conn.close()
    return name


async def read_run(
    ctx: Ctx, conv: str, text: str, *, keep: bool = True, lazy: bool = False, agent: str = ""
) -> tuple[float, Reader]:
    """Start a run streaming its events; returns (monotonic time the POST was sent, reader)."""
    t0 = time.perf_counter()
    resp = await ctx.start_run_stream(conv, text, agent)
    reader = Reader(resp, keep=keep, lazy=lazy)
    try:
        await reader.read()
    finally:
        resp.release()
    return t0, reader


# -- scenarios ------------------------------------------------------------------------------


async def first_event(ctx: Ctx) -> dict[str, Any]:
    """POST start run (streaming) -> the first SSE event at the client: idle, then with
    `in_flight` other runs executing and streaming (closed loop: each background client starts
    its next run as soon as the previous one ended)."""
    p = ctx.params
    samples, in_flight = int(p["samples"]), int(p["in_flight"])
    bg_text = f"stream {int(p['background_deltas'])} deltas"

    async def sample_once() -> float:
        conv = await ctx.create_conversation()
        t0 = time.perf_counter()
        resp = await ctx.start_run_stream(conv, "stream 5 deltas")
        reader = Reader(resp, keep=True)
        try:
            await reader.read()
        finally:
            resp.release()
        return (reader.events[0].mono - t0) * 1000

    idle = [await sample_once() for _ in range(samples)]

    stop = asyncio.Event()
    completed = [0]
    started = [0]

    async def background() -> None:
        conv = ""
        for i in range(100_000):
            if stop.is_set():
                return
            if i % 10 == 0:
                conv = await ctx.create_conversation()
            started[0] += 1
            await read_run(ctx, conv, bg_text, keep=False)
            completed[0] += 1

    tasks = [asyncio.create_task(background()) for _ in range(in_flight)]
    try:
        for _ in range(200):  # warm-up: until every background client has a run going
            if started[0] >= in_flight and completed[0] >= in_flight:
                break
            await asyncio.sleep(0.05)
        bg_before = completed[0]
        t_loaded = time.perf_counter()
        loaded = [await sample_once() for _ in range(samples)]
        loaded_s = time.perf_counter() - t_loaded
        bg_runs = completed[0] - bg_before
    finally:
        stop.set()
        done, pending = await asyncio.wait(tasks, timeout=30)
        for t in pending:
            t.cancel()
        for t in done:
            if t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
    return {
        "idle": p50_p99(idle),
        "loaded": p50_p99(loaded),
        "in_flight_runs": in_flight,
        "background_runs_per_s": round(bg_runs / loaded_s, 1),
        "samples": samples,
    }


async def resume_to_tool_started(ctx: Ctx) -> dict[str, Any]:
    """Runs that restart an abnormal instance: wait for the interrupt on the open stream, POST
    resume (approve), time until `tool_started` (of restart_instance) arrives on the same stream."""
    samples = int(ctx.params["samples"])
    out: list[float] = []
    for _ in range(samples):
        service = await abnormal_service(ctx.dsn)
        conv = await ctx.create_conversation()
        resp = await ctx.start_run_stream(conv, f"restart the abnormal {service} instance")
        loop = asyncio.get_running_loop()
        interrupted: asyncio.Future[Event] = loop.create_future()
        tool: asyncio.Future[Event] = loop.create_future()

        def on_event(
            e: Event,
            interrupted: asyncio.Future[Event] = interrupted,
            tool: asyncio.Future[Event] = tool,
        ) -> bool:
            if e.type == "interrupt" and not interrupted.done():
                interrupted.set_result(e)
            elif e.type == "tool_started" and interrupted.done() and not tool.done():
                tool.set_result(e)
            return False

        reader = Reader(resp, on_event=on_event, keep=False)
        task = asyncio.create_task(reader.read())
        try:
            intr = await asyncio.wait_for(asyncio.shield(interrupted), 15)
            run_id = intr.json()["runId"]
            t0 = time.perf_counter()
            await ctx.resume(run_id, intr.json()["interruptId"], "approve")
            started = await asyncio.wait_for(asyncio.shield(tool), 15)
            out.append((started.mono - t0) * 1000)
            await asyncio.wait_for(task, 15)
        finally:
            task.cancel()
            resp.release()
    return {**p50_p99(out), "samples": samples}


async def single_run(ctx: Ctx) -> dict[str, Any]:
    """One run emitting N text deltas as fast as the model can (delay 0), read over SSE."""
    n, samples = int(ctx.params["deltas"]), int(ctx.params["samples"])
    rows = []
    for _ in range(samples):
        conv = await ctx.create_conversation()
        t0, reader = await read_run(ctx, conv, f"stream {n} deltas")
        assert reader.last is not None and reader.last.type == "done", "run did not complete"
        dur = reader.last.mono - t0
        text_events = sum(1 for e in reader.events if e.type == "text_delta")
        rows.append(
            {
                "duration_ms": dur * 1000,
                "events_delivered": reader.count,
                "text_delta_events": text_events,
                "deltas_produced": _deltas(reader.events),
                "events_per_s": reader.count / dur,
                "deltas_per_s": _deltas(reader.events) / dur,
            }
        )
    return {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}


async def synthetic_finished_run(ctx: Ctx, n_events: int) -> str:
    """A finished run of exactly `n_events` events: a real run (API, so ownership and conversation
    are real) whose event log is then replaced, in one transaction, by `run_started`, n-2
    `text_delta`s and `done`, encoded by the runtime's own encoder and inserted by its event log."""
    from tether_runtime.domain import events as ev
    from tether_runtime.store import event_log

    conv = await ctx.create_conversation()
    run_id = await ctx.start_run_json(conv, "stream 1 deltas")
    for _ in range(200):
        if (await ctx.get_run(run_id))["status"] == "completed":
            break
        await asyncio.sleep(0.05)
    else:
        raise RuntimeError(f"run {run_id} did not complete")
    events = [ev.run_started(conv)]
    events += [ev.text_delta("msg_bench", f"t{i} ") for i in range(n_events - 2)]
    events.append(ev.done("msg_bench"))
    conn = await asyncpg.connect(ctx.dsn)
    try:
        async with conn.transaction():
            await conn.execute("DELETE FROM run_event WHERE run_id = $1", run_id)
            await event_log.insert(conn, run_id, 1, events)  # type: ignore[arg-type]
            await conn.execute("UPDATE run SET last_sequence = $2 WHERE id = $1", run_id, n_events)
    finally:
        await conn.close()
    return run_id


async def replay(ctx: Ctx) -> dict[str, Any]:
    """Reconnect with `Last-Event-ID: 0` to a finished run of N events; time until the last."""
    n, samples = int(ctx.params["events"]), int(ctx.params["samples"])
    run_id = await synthetic_finished_run(ctx, n)
    ms = []
    for _ in range(samples):
        t0 = time.perf_counter()
        resp = await ctx.events(run_id, 0)
        reader = Reader(resp, keep=False)
        try:
            await reader.read()
        finally:
            resp.release()
        assert reader.count == n and reader.last is not None and reader.last.id == str(n), (
            f"replay delivered {reader.count} events, last {reader.last and reader.last.id}"
        )
        ms.append((reader.last.mono - t0) * 1000)
    med = statistics.median(ms)
    return {"ms": round(med, 3), "events": n, "events_per_s": round(n / (med / 1000), 1)}


async def grpc_stream(ctx: Ctx) -> dict[str, Any]:
    """The single-run figure read directly over StreamRunEvents (grpc.aio), plus a replay of a
    finished N-event run over the same RPC."""
    import grpc
    from tether.runtime.v1 import runtime_service_pb2 as rs
    from tether.runtime.v1 import runtime_service_pb2_grpc as rs_grpc

    n, samples = int(ctx.params["deltas"]), int(ctx.params["samples"])
    md = (("authorization", f"Bearer {ctx.token}"),)
    rows = []
    async with grpc.aio.insecure_channel(ctx.runtime) as channel:
        stub = rs_grpc.RuntimeServiceStub(channel)

        async def read(run_id: str) -> tuple[int, int, int, float]:
            """(events, messages, deltas, monotonic time of the terminal event)"""
            events = messages = deltas = 0
            end = 0.0
            call = stub.StreamRunEvents(
                rs.StreamRunEventsRequest(run_id=run_id, after_sequence=0), metadata=md
            )
            async for batch in call:
                messages += 1
                events += len(batch.events)
                for e in batch.events:
                    if e.WhichOneof("event") == "text_delta":
                        deltas += len(_DELTA.findall(e.text_delta.delta))
                end = time.perf_counter()
            return events, messages, deltas, end

        for _ in range(samples):
            conv = await ctx.create_conversation()
            t0 = time.perf_counter()
            run_id = await ctx.start_run_json(conv, f"stream {n} deltas")
            events, _, deltas, end = await asyncio.wait_for(read(run_id), 60)
            dur = end - t0
            rows.append(
                {"events": events, "events_per_s": events / dur, "deltas_per_s": deltas / dur}
            )
        big = int(ctx.params["replay_events"])
        run_id = await synthetic_finished_run(ctx, big)
        t0 = time.perf_counter()
        events, messages, _, end = await asyncio.wait_for(read(run_id), 60)
        assert events == big, f"gRPC replay delivered {events} of {big}"
    out = {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}
    out["replay_events"] = big
    out["replay_messages"] = messages
    out["replay_events_per_s"] = round(big / (end - t0), 1)
    return out


async def _pg_counts(dsn: str) -> dict[str, tuple[int, int]]:
    conn = await asyncpg.connect(dsn)
    try:
        # A partitioned table's rows are counted in its partitions (run_event, migration 0019).
        rows = await conn.fetch(
            "SELECT coalesce(p.relname, s.relname) AS relname, sum(s.n_tup_ins) AS n_tup_ins, "
            "sum(s.n_tup_upd) AS n_tup_upd FROM pg_stat_user_tables s "
            "LEFT JOIN pg_inherits i ON i.inhrelid = s.relid "
            "LEFT JOIN pg_class p ON p.oid = i.inhparent GROUP BY 1"
        )
    finally:
        await conn.close()
    return {r["relname"]: (int(r["n_tup_ins"]), int(r["n_tup_upd"])) for r in rows}


async def _pg_wait(
    dsn: str, table: str, inserted: int, limit_s: float = 15
) -> dict[str, tuple[int, int]]:
    """pg_stat_user_tables once `table` shows at least `inserted` inserts: backends flush their
    pending statistics when idle, up to ~10 s (PGSTAT_IDLE_INTERVAL) after their last
    transaction, all tables at once; then one more second for the other backends."""
    deadline = time.monotonic() + limit_s
    while True:
        cur = await _pg_counts(dsn)
        if cur.get(table, (0, 0))[0] >= inserted or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.25)
    await asyncio.sleep(1.0)
    return await _pg_counts(dsn)


async def _fetchval(dsn: str, sql: str, *args: Any) -> Any:
    """One value from a connection of its own (the harness's reads, outside the system's pools)."""
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


async def _stored_events(dsn: str, run_ids: list[str]) -> int:
    sql = "SELECT count(*) FROM run_event WHERE run_id = ANY($1::text[])"
    return int(await _fetchval(dsn, sql, run_ids))


async def _wal_lsn(dsn: str) -> str:
    """The server's current WAL position: the difference of two is the WAL written between them
    by every database on the server (the bench's own dominates on a quiet machine)."""
    return str(await _fetchval(dsn, "SELECT pg_current_wal_lsn()::text"))


async def _wal_since(dsn: str, lsn: str) -> int:
    sql = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)"
    return int(await _fetchval(dsn, sql, lsn))


def _row_deltas(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], per: int
) -> dict[str, Any]:
    """Rows inserted and updated between two snapshots, per `per` (runs or events), in all and
    by table (the tables that changed)."""
    by_table = {
        t: (n[0] - before.get(t, (0, 0))[0], n[1] - before.get(t, (0, 0))[1])
        for t, n in sorted(after.items())
    }
    return {
        "inserted": round(sum(i for i, _ in by_table.values()) / per, 3),
        "updated": round(sum(u for _, u in by_table.values()) / per, 3),
        "by_table": {
            t: {"inserted": round(i / per, 3), "updated": round(u / per, 3)}
            for t, (i, u) in by_table.items()
            if i or u
        },
    }


async def _redis_stats(r: Any) -> tuple[int, int]:
    """(publish calls, commands) so far: PUBLISH on a plain Redis, SPUBLISH summed over a
    cluster's masters (where the runtime's channels live)."""
    if not isinstance(r, RedisCluster):
        cmd = await r.info("commandstats")
        stats = await r.info("stats")
        publish = int(cmd.get("cmdstat_publish", {}).get("calls", 0))
        return publish, int(stats.get("total_commands_processed", 0))
    cmds = await r.info("commandstats", target_nodes=RedisCluster.PRIMARIES)
    stats = await r.info("stats", target_nodes=RedisCluster.PRIMARIES)
    publish = sum(int(c.get("cmdstat_spublish", {}).get("calls", 0)) for c in cmds.values())
    return publish, sum(int(s.get("total_commands_processed", 0)) for s in stats.values())


async def fanout(ctx: Ctx) -> dict[str, Any]:
    """R concurrent runs x D deltas each, every run streamed over its own SSE connection: the
    aggregate rate and commit->arrival latency (arrival wall clock minus the event's `time`,
    stamped by the runtime as it writes the event). Also counts Postgres rows inserted/updated
    (pg_stat_user_tables) and Redis messages (a PSUBSCRIBE counter and INFO) per event."""
    runs, deltas = int(ctx.params["runs"]), int(ctx.params["deltas"])
    # Row counts need Postgres' table statistics to settle (backends flush them when idle, up
    # to ~10 s later); a variant that only compares rates and latencies skips them.
    count_rows = bool(ctx.params.get("count_rows", True))
    base = await _pg_counts(ctx.dsn)
    convs = await ctx.conversations(runs)
    if count_rows:  # the conversations' inserts must show before the "before" snapshot
        await _pg_wait(ctx.dsn, "conversation", base.get("conversation", (0, 0))[0] + runs)
    r = redis_conn.connect(ctx.redis)
    await redis_conn.ready(r)
    # A cluster's sharded channels cannot be pattern-subscribed: there the message count is
    # left out (publish_calls still counts SPUBLISH on every master).
    sharded = redis_conn.is_cluster(ctx.redis)
    pubsub = aioredis.Redis.from_url(ctx.redis).pubsub() if not sharded else None
    if pubsub is not None:
        await pubsub.psubscribe("tether:run:*")
    per_channel: dict[str, int] = {}

    async def count_messages() -> None:
        while pubsub is not None:
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if msg is not None:
                ch = msg["channel"].decode()
                per_channel[ch] = per_channel.get(ch, 0) + 1

    counter = asyncio.create_task(count_messages())
    pg_before = await _pg_counts(ctx.dsn)
    wal_before = await _wal_lsn(ctx.dsn)
    redis_before = await _redis_stats(r)
    cpu_before = (sum(map(_cpu_s, ctx.runtime_pids)), _cpu_s(ctx.gateway_pid))
    stores_cpu = StoresCpu()
    # The load generator's own collector must not pause it mid-burst: arrival times would
    # carry the client's pause (a full collection here took 130 ms). The burst's garbage is
    # collected after it.
    gc.collect()
    gc.disable()
    t0 = time.perf_counter()
    try:
        results = await asyncio.gather(
            # lazy: 200 clients parsing 40,000 events would take CPU from the system under test
            # on this shared 2-core box; the arrival times are those of the chunks either way.
            *(read_run(ctx, c, f"stream {deltas} deltas", lazy=True) for c in convs),
            return_exceptions=True,
        )
    finally:
        gc.enable()
    wall_s = time.perf_counter() - t0
    cpu_after = (sum(map(_cpu_s, ctx.runtime_pids)), _cpu_s(ctx.gateway_pid))
    stores_cpu.stop()
    wal_bytes = await _wal_since(ctx.dsn, wal_before)
    failures = [x for x in results if isinstance(x, BaseException)]
    if failures:
        raise RuntimeError(f"{len(failures)} of {runs} fan-out runs failed: {failures[0]!r}")
    readers = [rd for _, rd in results]  # type: ignore[misc]
    await asyncio.sleep(0.3)  # let the counter see the last publishes
    counter.cancel()
    run_ids = {rd.events[0].json()["runId"] for rd in readers if rd.events}
    stored = await _stored_events(ctx.dsn, sorted(run_ids))
    pg_after = (
        await _pg_wait(ctx.dsn, "run_event", pg_before.get("run_event", (0, 0))[0] + stored)
        if count_rows
        else pg_before
    )
    redis_after = await _redis_stats(r)
    if pubsub is not None:
        await pubsub.aclose()
    await r.aclose()

    events = [e for rd in readers for e in rd.events]
    n_events = len(events)
    last = max(rd.last.mono for rd in readers if rd.last is not None)
    lat = [(e.wall - parse_time(e.json()["time"])) * 1000 for e in events]
    messages = sum(per_channel.get(f"tether:run:{rid}", 0) for rid in run_ids)
    ins = sum(pg_after.get(t, (0, 0))[0] - pg_before.get(t, (0, 0))[0] for t in pg_after)
    upd = sum(pg_after.get(t, (0, 0))[1] - pg_before.get(t, (0, 0))[1] for t in pg_after)
    ev_ins = pg_after.get("run_event", (0, 0))[0] - pg_before.get("run_event", (0, 0))[0]
    lat_q = p50_p99(lat)
    by_type: dict[str, list[float]] = {}
    for e, x in zip(events, lat, strict=True):
        by_type.setdefault(e.type, []).append(x)
    first_ms = [
        (rd.events[0].mono - t0) * 1000 for rd in readers if rd.events
    ]  # all runs were started at t0: how long until each run's first event arrived
    return {
        "fanout": {
            "runs": runs,
            "deltas_per_run": deltas,
            "events": n_events,
            "deltas_delivered": _deltas(events),
            "duration_ms": round((last - t0) * 1000, 1),
            "events_per_s": round(n_events / (last - t0), 1),
            "deltas_per_s": round(_deltas(events) / (last - t0), 1),
            "commit_to_arrival_p50_ms": lat_q["p50"],
            "commit_to_arrival_p99_ms": lat_q["p99"],
            "commit_to_arrival_max_ms": round(max(lat), 3),
            "events_over_500ms_pct": round(100 * sum(1 for x in lat if x > 500) / len(lat), 2),
            **{
                f"commit_to_arrival_{kind}_{q}_ms": v
                for kind in ("run_started", "text_delta", "done")
                for q, v in p50_p99(by_type.get(kind, [])).items()
            },
            "first_event_after_start_p50_ms": p50_p99(first_ms)["p50"],
            "first_event_after_start_p99_ms": p50_p99(first_ms)["p99"],
            "runtime_cpu_ms_per_run": round((cpu_after[0] - cpu_before[0]) * 1000 / runs, 3),
            "gateway_cpu_ms_per_run": round((cpu_after[1] - cpu_before[1]) * 1000 / runs, 3),
            **stores_cpu.per_run(runs),
            "runtime_cpu_pct": round(100 * (cpu_after[0] - cpu_before[0]) / wall_s, 1),
            "gateway_cpu_pct": round(100 * (cpu_after[1] - cpu_before[1]) / wall_s, 1),
        },
        **(
            {
                "db_rows_per_event": {
                    "inserted": round(ins / n_events, 3),
                    "updated": round(upd / n_events, 3),
                    "run_event_inserted": round(ev_ins / n_events, 3),
                }
            }
            if count_rows
            else {}
        ),
        "wal_bytes_per_event": round(wal_bytes / n_events, 1),
        "redis_messages_per_event": {
            "pubsub_received": None if sharded else round(messages / n_events, 3),
            "publish_calls": round((redis_after[0] - redis_before[0]) / n_events, 3),
            "commands": round((redis_after[1] - redis_before[1]) / n_events, 3),
        },
    }


async def idle_sse(ctx: Ctx) -> dict[str, Any]:
    """N SSE connections to one run that is interrupted and waiting: gateway RSS growth per
    connection, and whether all stay connected through heartbeats while held. Then the run is
    resumed (rejected) and the time until every connection got `done` is measured."""
    p = ctx.params
    n, hold_s, heartbeat_s = int(p["connections"]), float(p["hold_s"]), float(p["heartbeat_s"])
    note("idle_sse: starting")
    service = await abnormal_service(ctx.dsn)
    conv = await ctx.create_conversation()
    resp = await ctx.start_run_stream(conv, f"restart the abnormal {service} instance")
    holder = Reader(resp, on_event=lambda e: e.type == "interrupt", keep=False)
    try:
        await asyncio.wait_for(holder.read(), 20)
    finally:
        resp.release()
    assert holder.last is not None and holder.last.type == "interrupt"
    run_id, interrupt_id = holder.last.json()["runId"], holder.last.json()["interruptId"]
    note(f"idle_sse: run {run_id} is waiting on interrupt {interrupt_id}")
    position = int(holder.last.id)

    await asyncio.sleep(0.5)
    rss_before, rt_rss_before = _rss(ctx.gateway_pid), _rss(ctx.runtime_pid)
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    session = aiohttp.ClientSession(connector=connector, timeout=HTTP_TIMEOUT)
    readers: dict[int, Reader] = {}
    open_sem = asyncio.Semaphore(int(p.get("open_concurrency", 100)))
    opened = asyncio.Event()

    async def hold_one(i: int) -> None:
        async with open_sem:
            resp = await session.get(
                f"{ctx.gateway}/v1/runs/{run_id}/events",
                headers={**ctx.auth, "Last-Event-ID": str(position)},
            )
            if resp.status != 200:
                body = await resp.text()
                raise RuntimeError(f"SSE open: HTTP {resp.status}: {body[:200]}")
            reader = Reader(resp, keep=False)
            readers[i] = reader
            if len(readers) == n:
                opened.set()
        try:
            await reader.read()
        finally:
            resp.release()

    t_open = time.perf_counter()
    tasks = [asyncio.create_task(hold_one(i)) for i in range(n)]
    first_error = ""
    try:
        waiter = asyncio.create_task(opened.wait())
        open_deadline = time.monotonic() + float(p.get("open_timeout_s", 120))
        while not opened.is_set() and time.monotonic() < open_deadline:
            await asyncio.wait(
                [waiter, *tasks],
                timeout=open_deadline - time.monotonic(),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if all(t.done() or i in readers for i, t in enumerate(tasks)):
                break  # every connection is open or failed
        waiter.cancel()
        open_s = time.perf_counter() - t_open
        failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception()]
        if failed:
            first_error = repr(failed[0].exception())
        live = [i for i in readers if not tasks[i].done()]
        note(
            f"idle_sse: {len(live)} of {n} connections open in {open_s:.1f}s "
            f"({len(failed)} failed{': ' + first_error if failed else ''}); holding {hold_s}s"
        )
        await asyncio.sleep(1.0)  # let the retry hints and first buffers settle
        beats_before = {i: readers[i].heartbeats for i in live}
        cpu_before = (_cpu_s(ctx.runtime_pid), _cpu_s(ctx.gateway_pid))
        await asyncio.sleep(hold_s)
        cpu_after = (_cpu_s(ctx.runtime_pid), _cpu_s(ctx.gateway_pid))
        rss_after, rt_rss_after = _rss(ctx.gateway_pid), _rss(ctx.runtime_pid)
        beats = [readers[i].heartbeats - beats_before[i] for i in live] or [0]
        expected = max(1, math.floor(hold_s / heartbeat_s) - 1)
        alive = sum(1 for t in tasks if not t.done())
        connected = sum(
            1 for i in live if not tasks[i].done() and readers[i].heartbeats - beats_before[i] >= 1
        )

        # Resolve the interrupt: the run ends and every connection should receive `done`.
        note(f"idle_sse: {connected}/{n} connected after the hold; resuming the run")
        t_resume = time.perf_counter()
        resumed = False
        for attempt in range(5):  # an overloaded runtime answers 503; bounded retries
            try:
                await ctx.resume(run_id, interrupt_id, "reject")
                resumed = True
                break
            except RuntimeError as err:
                first_error = first_error or f"resume: {err}"
                note(f"idle_sse: resume attempt {attempt + 1} failed: {err}")
                await asyncio.sleep(1.0)
        end_limit = float(p.get("end_timeout_s", 60)) if resumed else 0.1
        done, pending = await asyncio.wait(tasks, timeout=end_limit)
        end_s = time.perf_counter() - t_resume
        note(f"idle_sse: {len(done)}/{n} streams ended {end_s:.1f}s after the resume")
        ended = sum(1 for rd in readers.values() if rd.ended_by_terminal)
        last_done = max(
            (rd.last.mono for rd in readers.values() if rd.ended_by_terminal and rd.last),
            default=math.nan,
        )
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await session.close()
    opened_n = max(1, len(live))
    return {
        "kib_per_connection": round((rss_after - rss_before) / opened_n / 1024, 3),
        "connections": n,
        "connections_opened": len(live),
        "open_failures": n - len(readers),
        "opened_per_s": round(len(live) / open_s, 1),
        "connected_after_hold": connected,
        "alive_after_hold": alive,
        "all_connected": int(connected == n),
        "hold_s": hold_s,
        "heartbeat_s": heartbeat_s,
        "heartbeats_min": min(beats),
        "heartbeats_expected_min": expected,
        "gateway_rss_before_mib": round(rss_before / 2**20, 1),
        "gateway_rss_after_mib": round(rss_after / 2**20, 1),
        "runtime_kib_per_connection": round((rt_rss_after - rt_rss_before) / opened_n / 1024, 3),
        "runtime_cpu_pct_idle_hold": round(100 * (cpu_after[0] - cpu_before[0]) / hold_s, 1),
        "gateway_cpu_pct_idle_hold": round(100 * (cpu_after[1] - cpu_before[1]) / hold_s, 1),
        "resume_to_all_done_ms": round((last_done - t_resume) * 1000, 1) if last_done > 0 else -1,
        "resume_failed": int(not resumed),
        "ended_with_done": ended,
        "end_wait_s": round(end_s, 3),
        "_error": first_error,
    }


async def provider_stream(ctx: Ctx) -> dict[str, Any]:
    """A run whose model is a streaming OpenAI-compatible server (fake_provider.py, driven by the
    runtime through the official `openai` SDK): N tokens, read over SSE. The same stream read
    straight from the server with the same SDK is the baseline; the difference per token is
    Tether's overhead (adapter, engine, event log, bus, gateway, SSE)."""
    from openai import AsyncOpenAI

    n, samples = int(ctx.params["deltas"]), int(ctx.params["samples"])
    client = AsyncOpenAI(base_url=ctx.params["provider_url"], api_key="bench", max_retries=0)
    rows = []
    for _ in range(samples):
        t0 = time.perf_counter()
        stream = await client.chat.completions.create(
            model="bench-model",
            messages=[{"role": "user", "content": f"stream {n} deltas"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        tokens = 0
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                tokens += 1
        raw = time.perf_counter() - t0
        conv = await ctx.create_conversation()
        t0, reader = await read_run(ctx, conv, f"stream {n} deltas")
        assert reader.last is not None and reader.last.type == "done", "run did not complete"
        dur = reader.last.mono - t0
        rows.append(
            {
                "tokens": tokens,
                "deltas_produced": _deltas(reader.events),
                "events_delivered": reader.count,
                "direct_sdk_ms": raw * 1000,
                "through_tether_ms": dur * 1000,
                "tokens_per_s": n / dur,
                "overhead_us_per_token": (dur - raw) / n * 1e6,
                "usage_output_tokens": reader.last.json().get("usage", {}).get("outputTokens", 0),
            }
        )
    await client.close()
    return {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}


async def mcp_call(ctx: Ctx) -> dict[str, Any]:
    """An MCP tool call's overhead over a native tool's, stdio and HTTP (mcp_overhead.py)."""
    from tether_bench.mcp_overhead import mcp_call as measure

    return await measure(ctx.params)


async def langgraph_run(ctx: Ctx) -> dict[str, Any]:
    """The LangGraph agent (lggraph.py: a graph whose node streams ChatOpenAI from the fake
    provider) against the native agent on the same provider doing the same work (one model call,
    N tokens, N `text_delta` events), alternately, over SSE: first event and first text, events/s
    of one run, and microseconds per event for each; the difference is what running a graph
    costs per event (LangGraph, LangChain's callbacks, the driver's conversion) on top of
    Tether's own event path."""
    p = ctx.params
    n, samples, fe_samples = int(p["deltas"]), int(p["samples"]), int(p["first_event_samples"])
    kinds = {"langgraph": "lgbench", "native": ""}
    first: dict[str, list[float]] = {k: [] for k in kinds}
    first_text: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(fe_samples):
        for kind, agent in kinds.items():
            conv = await ctx.create_conversation()
            t0, reader = await read_run(ctx, conv, "stream 5 deltas", agent=agent)
            assert reader.last is not None and reader.last.type == "done", f"{kind}: not done"
            first[kind].append((reader.events[0].mono - t0) * 1000)
            text = next(e for e in reader.events if e.type == "text_delta")
            first_text[kind].append((text.mono - t0) * 1000)
    rows: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    for _ in range(samples):
        for kind, agent in kinds.items():
            conv = await ctx.create_conversation()
            t0, reader = await read_run(ctx, conv, f"stream {n} deltas", agent=agent)
            assert reader.last is not None and reader.last.type == "done", f"{kind}: not done"
            dur = reader.last.mono - t0
            rows[kind].append(
                {
                    "duration_ms": dur * 1000,
                    "events_delivered": reader.count,
                    "deltas_produced": _deltas(reader.events),
                    "events_per_s": reader.count / dur,
                    "us_per_event": dur / reader.count * 1e6,
                }
            )
    out: dict[str, Any] = {}
    for kind in kinds:
        out[kind] = {
            "first_event_ms": p50_p99(first[kind]),
            "first_text_ms": p50_p99(first_text[kind]),
            **{k: round(statistics.median(r[k] for r in rows[kind]), 3) for k in rows[kind][0]},
        }
    out["overhead_us_per_event"] = round(
        out["langgraph"]["us_per_event"] - out["native"]["us_per_event"], 3
    )
    out["deltas"] = n
    out["samples"] = samples
    return out


async def _counters(urls: list[str], pattern: re.Pattern[str]) -> dict[str, float]:
    """A counter of the runtime processes' metrics ports by the label `pattern` captures, summed
    over the processes."""
    out: dict[str, float] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
        for url in urls:
            async with s.get(url) as resp:
                text = await resp.text()
            for line in text.splitlines():
                m = pattern.match(line)
                if m:
                    out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


# A pod's merged metrics carry a `process` label too: every process's line counts.
_STATEMENTS = re.compile(r'^tether_db_statements_total\{(?:[^}]*,)?kind="(\w+)"[^}]*\} (\S+)$')
_GRPC_CALLS = re.compile(
    r'^tether_grpc_request_seconds_count\{(?:[^}]*,)?method="(?:[^"]*/)?([^"/]+)"[^}]*\} (\S+)$'
)


def _per_run(before: dict[str, float], after: dict[str, float], runs: int) -> dict[str, float]:
    return {k: round((v - before.get(k, 0.0)) / runs, 3) for k, v in sorted(after.items())}


async def short_runs(ctx: Ctx) -> dict[str, Any]:
    """Short runs, closed loop: `clients` clients each start a run (one read-only tool, then an
    answer) with a streaming POST, read its SSE stream to `done`, and start the next; `runs` runs
    in all after one warm-up run per client. Runs/s, POST -> done and POST -> first event, the
    runtime's CPU per run and the statements its pool sent per run (tether_db_statements_total,
    every statement in the window, background ones included, over the runs finished in it)."""
    p = ctx.params
    clients, runs = int(p["clients"]), int(p["runs"])
    per_conv = int(p.get("runs_per_conversation", 10))  # a conversation's history stays short
    service = await abnormal_service(ctx.dsn)
    text = f"show recent errors of {service}"
    convs: asyncio.Queue[str] = asyncio.Queue()
    # one per client for the warm-up and its first runs, then one every per_conv runs
    for c in await ctx.conversations(math.ceil(runs / per_conv) + clients):
        convs.put_nowait(c)

    async def one(conv: str, run_ms: list[float], first_ms: list[float]) -> None:
        t0, reader = await read_run(ctx, conv, text)
        kinds = [e.type for e in reader.events]
        if kinds[-1:] != ["done"] or "tool_finished" not in kinds:
            raise RuntimeError(f"short run did not call its tool and finish: {kinds}")
        run_ms.append((reader.events[-1].mono - t0) * 1000)
        first_ms.append((reader.events[0].mono - t0) * 1000)

    # Rows per run need Postgres' table statistics to settle (up to ~10 s after the burst)
    count_rows = bool(p.get("count_rows", True))
    base = await _pg_counts(ctx.dsn) if count_rows else {}
    mine = [convs.get_nowait() for _ in range(clients)]
    await asyncio.gather(*(one(c, [], []) for c in mine))  # warm-up
    if count_rows:  # the warm-up's rows must show before the "before" snapshot
        base = await _pg_wait(ctx.dsn, "run", base.get("run", (0, 0))[0] + clients)
    left = [runs]
    run_ms: list[float] = []
    first_ms: list[float] = []

    async def client(conv: str) -> None:
        used = 1  # the warm-up run
        while left[0] > 0:
            left[0] -= 1
            if used == per_conv:
                conv, used = convs.get_nowait(), 0
            used += 1
            await one(conv, run_ms, first_ms)

    metrics = list(p.get("runtime_metrics", []))
    st_before = await _counters(metrics, _STATEMENTS)
    grpc_before = await _counters(metrics, _GRPC_CALLS)
    wal_before = await _wal_lsn(ctx.dsn)
    cpu_before = (sum(map(_cpu_s, ctx.runtime_pids)), _cpu_s(ctx.gateway_pid))
    stores_cpu = StoresCpu()
    t0 = time.perf_counter()
    await asyncio.gather(*(client(c) for c in mine))
    wall_s = time.perf_counter() - t0
    cpu_after = (sum(map(_cpu_s, ctx.runtime_pids)), _cpu_s(ctx.gateway_pid))
    stores_cpu.stop()
    wal_bytes = await _wal_since(ctx.dsn, wal_before)
    st_after = await _counters(metrics, _STATEMENTS)
    grpc_calls = _per_run(grpc_before, await _counters(metrics, _GRPC_CALLS), runs)
    rows = (
        {
            "db_rows_per_run": _row_deltas(
                base, await _pg_wait(ctx.dsn, "run", base.get("run", (0, 0))[0] + runs), runs
            )
        }
        if count_rows
        else {}
    )
    by_kind = _per_run(st_before, st_after, runs)
    return {
        "runs": runs,
        "clients": clients,
        "runs_per_s": round(runs / wall_s, 1),
        "run_ms": p50_p99(run_ms),
        "first_event_ms": p50_p99(first_ms),
        "runtime_cpu_ms_per_run": round((cpu_after[0] - cpu_before[0]) * 1000 / runs, 3),
        "gateway_cpu_ms_per_run": round((cpu_after[1] - cpu_before[1]) * 1000 / runs, 3),
        **stores_cpu.per_run(runs),
        "statements_per_run": round(sum(by_kind.values()), 3),
        "statements_per_run_by_kind": {k: v for k, v in by_kind.items() if v},
        # the runtime's gRPC calls (tether_grpc_request_seconds, unary ones and streams' opening)
        "grpc_calls_per_run_by_method": {k: v for k, v in grpc_calls.items() if v},
        "wal_bytes_per_run": round(wal_bytes / runs, 1),
        **rows,
    }


SCENARIOS: dict[str, Callable[[Ctx], Awaitable[dict[str, Any]]]] = {
    "first_event": first_event,
    "resume": resume_to_tool_started,
    "single_run": single_run,
    "grpc_stream": grpc_stream,
    "replay": replay,
    "fanout": fanout,
    "short_runs": short_runs,
    "idle_sse": idle_sse,
    "provider_stream": provider_stream,
    "langgraph": langgraph_run,
    "mcp_call": mcp_call,
}


async def run(config: dict[str, Any]) -> dict[str, Any]:
    from tether_common.auth import issue_token

    _local_only(config["gateway"])
    _local_only(config["runtime"])
    raise_fd_limit()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=HTTP_TIMEOUT) as session:
        ctx = Ctx(
            gateway=config["gateway"],
            runtime=config["runtime"],
            token=issue_token(config["secret"], config.get("user", "alice"), ttl_s=3600),
            dsn=config["dsn"],
            redis=config["redis"],
            gateway_pid=int(config["gateway_pid"]),
            runtime_pids=[int(x) for x in config["runtime_pids"]],
            params=config.get("params", {}),
            session=session,
        )
        fn = SCENARIOS[config["scenario"]]
        return await asyncio.wait_for(fn(ctx), float(config.get("deadline_s", 300)))


def main() -> None:
    config = json.loads(sys.stdin.read())
    try:
        import uvloop

        result = uvloop.run(run(config))
    except ImportError:
        result = asyncio.run(run(config))
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)  # skip slow interpreter teardown of thousands of closed sockets


if __name__ == "__main__":
    main()
