"""The floor of the stack under #34's headline: what the packages Tether is built on (aiohttp,
grpc.aio, asyncpg, redis-py, uvloop) cost per short run when they make the I/O a short run needs
and nothing else. `PYTHONPATH=bench uv run --frozen python -m tether_bench.stack_floor [--runs N]
[--clients C] [--reps R] [--idle N] [--guarantees]` prints JSON; `make bench` runs it, plain and
with `--guarantees`, after each repetition (`stack_floor` in its document).

Two processes stand in for the services, with no Tether code in them:

- a "runtime": a grpc.aio server (raw bytes, no protobuf) whose StartRun commits the run's first
  event and answers; the run then reads once on a second pool (the read tool's query), and
  commits three more batches of events (tool start and finish; ten text deltas; done: 15 events,
  as a short run of `make bench` writes, in 4 commits). Every batch goes through one sink shared
  by all runs, as Tether's EventSink: what all runs queued while a statement was in flight goes
  to Postgres in ONE statement, then to Redis in ONE pipelined round trip of PUBLISHes. No lease,
  fence, admission, claim, tool row, message row, metric, log or trace.
- a "gateway": aiohttp on uvloop; `POST /runs` compares a static bearer token, reads the JSON
  body, makes one Redis round trip for the rate limit and the stream's slot (one EVALSHA: Tether
  makes two or three), calls StartRun over gRPC, answers 201 with `text/event-stream` and writes
  each published batch as SSE frames as it comes (one PSUBSCRIBE for all runs, where Tether
  subscribes per run), ends at `done` and frees the slot (one ZREM).

With `--guarantees`, the same two make the I/O Tether's guarantees need beside: the run's row
admitted before the answer and claimed before it executes (two more statements, each batched over
all runs as Tether batches them), a Redis channel per run that the gateway subscribes to and
waits for Redis to confirm before it starts the run (SUBSCRIBE and UNSUBSCRIBE batched as Tether's
bus does), and protobuf on the gRPC call (Tether's StartRunRequest and StartRunResponse). Still no
Tether code: no fence, lease renewal, tool row, message row, signed token, metric or log.

With `--idle N` (default 5,000), the gateway then holds N idle SSE streams (its headers,
`retry:`, a heartbeat a second from one loop for all, where Tether's gateway keeps a task per
stream) and the figure is its RSS growth per stream, as `make bench`'s `idle_sse` measures the
gateway's.

The load is `make bench`'s `short_runs` shape: C clients in a closed loop, each POSTs and reads
its stream to `done`. Measured over the N runs after a warm-up: the CPU of each process per run
(psutil), every Postgres and redis-server process on the box (as `short_runs` counts them), runs
per second. Each figure is the median of R repetitions, each with fresh processes.

Everything here is a lower bound of what Tether does per run (fewer statements and rows, fewer
Redis commands, no protobuf, no authentication beyond a string compare, one heartbeat loop): no
work on Tether's own code brings its runtime + gateway, or its idle stream, below these figures
on this stack. #34's headline asks Tether's two services for at most the Postgres CPU of a short
run, which this floor alone comes within about a tenth of (bench/README.md, "The stack's floor")."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any, Generic, TypeVar

import aiohttp
import asyncpg
import grpc
import psutil
import redis.asyncio as aioredis
import uvloop
from aiohttp import web
from tether.runtime.v1 import events_pb2, resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as rs

from tether_bench.loadgen import StoresCpu, raise_fd_limit
from tether_bench.stack import free_port

_DB = os.environ.get("TETHER_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
_REDIS = os.environ.get("TETHER_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
_TOKEN = "Bearer " + "t" * 600  # about the size of the bench's signed token
_METHOD = "/floor.Runtime/StartRun"
_STATEMENTS = "/floor.Runtime/Statements"  # how many the runtime made so far (not per run)
_GATE = "redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2]) return redis.call('ZCARD', KEYS[1])"
T = TypeVar("T")
_TABLE = "stack_floor_event"
_RUNS = "stack_floor_run"
_TEXT_DELTAS = 10
_SSE_HEADERS = {  # as the gateway's streams (tether_gateway/sse.py)
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}


def _batch(
    run_id: str, first: int, *events: tuple[str, dict[str, Any]]
) -> tuple[str, list[tuple[int, bytes]]]:
    """A run's events from sequence `first` on, each encoded once (for the row and the bus)."""
    return run_id, [
        (seq, _event(run_id, seq, kind, data)) for seq, (kind, data) in enumerate(events, first)
    ]


def _event(run_id: str, seq: int, kind: str, data: dict[str, Any]) -> bytes:
    return json.dumps(
        {"run_id": run_id, "sequence": seq, "type": kind, "time": time.time(), "data": data},
        separators=(",", ":"),
    ).encode()


class _Batched(Generic[T]):
    """What every run queued while the previous round trip was in flight goes in ONE: `add`
    returns once its batch is done (Tether batches its appends, admissions and claims so)."""

    def __init__(self) -> None:
        self._queue: list[tuple[T, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self.statements = 0

    async def add(self, item: T) -> None:
        done = asyncio.get_running_loop().create_future()
        self._queue.append((item, done))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        await done

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            self.statements += 1
            await self._write([item for item, _ in batch])
            for _, done in batch:
                done.set_result(None)

    async def _write(self, items: list[T]) -> None:
        raise NotImplementedError


class _Sink(_Batched[tuple[str, list[tuple[int, bytes]]]]):
    """A run's events: one statement, then one pipelined publish, for every run's batch."""

    def __init__(self, pool: asyncpg.Pool, redis: aioredis.Redis) -> None:
        super().__init__()
        self.pool, self.redis = pool, redis

    async def _write(self, items: list[tuple[str, list[tuple[int, bytes]]]]) -> None:
        rows = [(r, s, e) for r, events in items for s, e in events]
        await self.pool.execute(
            f"INSERT INTO {_TABLE} (run_id, sequence, data) "
            "SELECT * FROM unnest($1::text[], $2::int[], $3::text[])",
            [r for r, _, _ in rows],
            [s for _, s, _ in rows],
            [e.decode() for _, _, e in rows],
        )
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id, events in items:
                pipe.publish(f"floor:{run_id}", b"\n".join(e for _, e in events))
            await pipe.execute()


class _Batch(_Batched[str]):
    """One statement over the ids of the runs (the admission's and the claim's, with
    `--guarantees`)."""

    def __init__(self, pool: asyncpg.Pool, sql: str) -> None:
        super().__init__()
        self.pool, self.sql = pool, sql

    async def _write(self, items: list[str]) -> None:
        await self.pool.execute(self.sql, items)


class _Channels:
    """Per-run SUBSCRIBE and UNSUBSCRIBE on one pubsub connection, batched as Tether's bus does
    (what runs asked while a command was in flight goes as ONE command); `join` returns once
    Redis confirmed the channel, so nothing published after it can pass the stream by."""

    def __init__(self, pubsub: Any) -> None:
        self.pubsub = pubsub
        self.confirmed: dict[str, asyncio.Event] = {}
        self._dirty: dict[str, bool] = {}
        self._task: asyncio.Task[None] | None = None

    async def join(self, channel: str) -> None:
        self.confirmed[channel] = event = asyncio.Event()
        self._change(channel, True)
        await event.wait()

    def leave(self, channel: str) -> None:
        self.confirmed.pop(channel, None)
        self._change(channel, False)

    def _change(self, channel: str, wanted: bool) -> None:
        self._dirty[channel] = wanted
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        while self._dirty:
            changes, self._dirty = self._dirty, {}
            if joins := [c for c, wanted in changes.items() if wanted]:
                await self.pubsub.subscribe(*joins)
            if leaves := [c for c, wanted in changes.items() if not wanted]:
                await self.pubsub.unsubscribe(*leaves)


async def _runtime(port: int, dsn: str, redis_url: str, guarantees: bool) -> None:
    pool = await asyncpg.create_pool(dsn, min_size=4, max_size=10)
    tools = await asyncpg.create_pool(dsn, min_size=2, max_size=4)
    redis = aioredis.Redis.from_url(redis_url)
    sink = _Sink(pool, redis)
    admit = _Batch(pool, f"INSERT INTO {_RUNS} (id) SELECT unnest($1::text[])")
    claim = _Batch(pool, f"UPDATE {_RUNS} SET lease = lease + 1 WHERE id = ANY($1::text[])")
    tasks: set[asyncio.Task[None]] = set()

    reads = 0

    async def execute(run_id: str) -> None:
        nonlocal reads
        if guarantees:
            await claim.add(run_id)
        reads += 1
        await tools.fetchval(f"SELECT count(*) FROM {_TABLE} WHERE run_id = $1", run_id)
        await sink.add(
            _batch(
                run_id,
                2,
                ("tool_started", {"tool": "recent_errors"}),
                ("tool_finished", {"ok": True, "summary": "3 errors"}),
            )
        )
        text = [("text_delta", {"text": f"w{i} "}) for i in range(_TEXT_DELTAS)]
        await sink.add(_batch(run_id, 4, *text))
        await sink.add(_batch(run_id, 4 + _TEXT_DELTAS, ("done", {})))

    async def start_run(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        asked = rs.StartRunRequest.FromString(request) if guarantees else None
        run_id = asked.run_id if asked is not None else request.decode()
        if guarantees:
            await admit.add(run_id)
        await sink.add(_batch(run_id, 1, ("run_started", {})))
        task = asyncio.create_task(execute(run_id))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        if asked is None:
            return b"ok"
        run = resources_pb2.Run(
            id=run_id, conversation_id=asked.conversation_id, status=resources_pb2.RUN_STATUS_QUEUED
        )
        started = events_pb2.RunEvent(run_id=run_id, sequence=1)
        started.run_started.conversation_id = asked.conversation_id
        return bytes(rs.StartRunResponse(run=run, events=[started]).SerializeToString())

    async def statements(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return str(sink.statements + admit.statements + claim.statements + reads).encode()

    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "floor.Runtime",
        {
            "StartRun": grpc.unary_unary_rpc_method_handler(start_run),
            "Statements": grpc.unary_unary_rpc_method_handler(statements),
        },
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


async def _gateway(port: int, runtime_port: int, redis_url: str, guarantees: bool) -> None:
    redis = aioredis.Redis.from_url(redis_url)
    gate = redis.register_script(_GATE)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{runtime_port}")
    start = channel.unary_unary(_METHOD, None, None)
    streams: dict[str, asyncio.Queue[bytes]] = {}
    pubsub = redis.pubsub()
    channels = _Channels(pubsub)
    # One pattern for all runs; with `--guarantees` a channel per run (a placeholder channel
    # keeps the connection subscribed between runs).
    await (pubsub.subscribe("floor:hello") if guarantees else pubsub.psubscribe("floor:*"))

    async def listen() -> None:
        async for msg in pubsub.listen():
            kind, channel = msg["type"], msg["channel"].decode()
            if kind in ("pmessage", "message"):
                queue = streams.get(channel[6:])
                if queue is not None:
                    queue.put_nowait(msg["data"])
            elif kind == "subscribe" and (event := channels.confirmed.get(channel)):
                event.set()

    listener = asyncio.create_task(listen())

    async def runs(request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != _TOKEN:
            raise web.HTTPUnauthorized()
        body = await request.json()
        user = str(body["user"])
        run_id = uuid.uuid4().hex
        await gate(keys=[f"floor:slots:{user}"], args=[time.time(), run_id])
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        streams[run_id] = queue
        try:
            if guarantees:
                await channels.join(f"floor:{run_id}")
                asked = rs.StartRunRequest(conversation_id="c", text=body["text"], run_id=run_id)
                answer = rs.StartRunResponse.FromString(await start(asked.SerializeToString()))
                assert answer.run.id == run_id
            else:
                await start(run_id.encode())
            resp = web.StreamResponse(status=201, headers=_SSE_HEADERS)
            await resp.prepare(request)
            while True:
                batch = await queue.get()
                events = batch.split(b"\n")
                await resp.write(b"".join(b"data: " + e + b"\n\n" for e in events))
                if b'"type":"done"' in events[-1]:
                    break
            await resp.write_eof()
            return resp
        finally:
            del streams[run_id]
            if guarantees:
                channels.leave(f"floor:{run_id}")
            await redis.zrem(f"floor:slots:{user}", run_id)

    idle: set[web.StreamResponse] = set()

    async def events(request: web.Request) -> web.StreamResponse:
        """An SSE stream that never gets an event: headers, `retry:`, then heartbeats."""
        if request.headers.get("Authorization") != _TOKEN:
            raise web.HTTPUnauthorized()
        resp = web.StreamResponse(headers=_SSE_HEADERS)
        await resp.prepare(request)
        await resp.write(b"retry: 1000\n\n")
        idle.add(resp)
        try:
            await asyncio.get_running_loop().create_future()  # until the client leaves
        finally:
            idle.discard(resp)
        return resp

    async def heartbeats() -> None:  # one loop for every idle stream (Tether: one per stream)
        while True:
            await asyncio.sleep(1.0)
            for resp in list(idle):
                with contextlib.suppress(ConnectionError):
                    await resp.write(b": ping\n\n")

    beating = asyncio.create_task(heartbeats())
    app = web.Application()
    app.router.add_post("/runs", runs)
    app.router.add_get("/events", events)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        listener.cancel()
        beating.cancel()


async def _load(url: str, clients: int, runs: int) -> float:
    left = runs

    async def client(session: aiohttp.ClientSession, n: int) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            async with session.post(
                url,
                json={"user": f"u{n}", "text": "show recent errors"},
                headers={"Authorization": _TOKEN, "Accept": "text/event-stream"},
            ) as resp:
                body = await resp.read()
                assert resp.status == 201 and b'"type":"done"' in body, (resp.status, body[-200:])

    async with aiohttp.ClientSession() as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(session, n) for n in range(clients)))
        return time.perf_counter() - t0


async def _hold_idle(url: str, connections: int, gateway: psutil.Process) -> float:
    """Open `connections` idle streams (100 at a time), wait until each got its `retry:` and one
    heartbeat, and return the gateway's RSS growth per connection in KiB."""
    await asyncio.sleep(0.5)
    before = int(gateway.memory_info().rss)
    gate = asyncio.Semaphore(100)
    beaten = 0
    all_beat = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=0, force_close=True)

    async def hold(session: aiohttp.ClientSession) -> None:
        nonlocal beaten
        async with gate:
            resp = await session.get(url, headers={"Authorization": _TOKEN})
            assert resp.status == 200, resp.status
            await resp.content.readuntil(b"\n\n")  # retry:
        await resp.content.readuntil(b"\n\n")  # a heartbeat
        beaten += 1
        if beaten == connections:
            all_beat.set()
        await resp.content.read()  # until closed

    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = [asyncio.create_task(hold(session)) for _ in range(connections)]
        waiter = asyncio.create_task(all_beat.wait())
        # Until every stream had its heartbeat, or one fails or ends (each should stay open).
        done, _ = await asyncio.wait(
            [waiter, *tasks], timeout=120, return_when=asyncio.FIRST_COMPLETED
        )
        failed = [t for t in done if t is not waiter]
        if failed or not all_beat.is_set():
            why = [t.exception() or "closed" for t in failed[:1]]
            raise RuntimeError(f"idle streams: {beaten} of {connections} had a heartbeat {why}")
        await asyncio.sleep(2.0)  # a few heartbeats more, as the bench's hold
        grown = int(gateway.memory_info().rss) - before
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return grown / connections / 1024


def _threads_cpu(proc: psutil.Process) -> float:
    """CPU seconds of the process's threads other than its main one (grpc's poller among them)."""
    return float(sum(t.user_time + t.system_time for t in proc.threads() if t.id != proc.pid))


def _statements(runtime_port: int) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{runtime_port}") as channel:
        return int(channel.unary_unary(_STATEMENTS, None, None)(b"", timeout=10))


def _spawn(*args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether_bench.stack_floor", *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError(f"stack_floor {' '.join(args[:2])} did not start (exit {proc.wait()})")
    return proc


async def _prepare(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            f"DROP TABLE IF EXISTS {_TABLE}, {_RUNS}; CREATE UNLOGGED TABLE {_TABLE} "
            "(run_id text NOT NULL, sequence int NOT NULL, data text NOT NULL, "
            f"PRIMARY KEY (run_id, sequence)); CREATE UNLOGGED TABLE {_RUNS} "
            "(id text PRIMARY KEY, lease int NOT NULL DEFAULT 0)"
        )
    finally:
        await conn.close()


async def _drop(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"DROP TABLE IF EXISTS {_TABLE}, {_RUNS}")
    finally:
        await conn.close()


def repetition(
    runs: int,
    clients: int,
    dsn: str = _DB,
    redis_url: str = _REDIS,
    idle: int = 0,
    guarantees: bool = False,
) -> dict[str, float]:
    """One measurement with fresh processes (blocking: it runs event loops of its own); with
    `idle`, then that many idle SSE connections' RSS on the same gateway (as `idle_sse`)."""
    asyncio.run(_prepare(dsn))
    rt_port, gw_port = free_port(), free_port()
    backends = ("--dsn", dsn, "--redis", redis_url, *(("--guarantees",) if guarantees else ()))
    runtime = _spawn("--role", "runtime", "--port", str(rt_port), *backends)
    gateway = _spawn(
        "--role", "gateway", "--port", str(gw_port), "--runtime-port", str(rt_port), *backends
    )
    url = f"http://127.0.0.1:{gw_port}/runs"
    try:
        uvloop.run(_load(url, clients, clients * 4))  # warm-up
        procs = {"runtime": psutil.Process(runtime.pid), "gateway": psutil.Process(gateway.pid)}
        before = {n: sum(p.cpu_times()[:2]) for n, p in procs.items()}
        threads = {n: _threads_cpu(p) for n, p in procs.items()}
        statements = _statements(rt_port)
        own = sum(psutil.Process().cpu_times()[:2])
        stores = StoresCpu()
        wall = uvloop.run(_load(url, clients, runs))
        stores.stop()
        own = sum(psutil.Process().cpu_times()[:2]) - own
        statements = _statements(rt_port) - statements
        out = {
            f"{n}_cpu_ms_per_run": 1000 * (sum(p.cpu_times()[:2]) - before[n]) / runs
            for n, p in procs.items()
        }
        for n, p in procs.items():
            out[f"{n}_threads_cpu_ms_per_run"] = 1000 * (_threads_cpu(p) - threads[n]) / runs
        out.update(stores.per_run(runs))
        out["loadgen_cpu_ms_per_run"] = 1000 * own / runs  # StoresCpu's counts its children
        out["statements_per_run"] = statements / runs
        out["runs_per_s"] = runs / wall
        if idle:
            out["idle_sse_connection_kib"] = uvloop.run(
                _hold_idle(f"http://127.0.0.1:{gw_port}/events", idle, procs["gateway"])
            )
        return out
    finally:
        for proc in (gateway, runtime):
            proc.terminate()
            proc.wait(10)
        asyncio.run(_drop(dsn))


async def _orphaned() -> None:
    """Return when the process that spawned this one is gone (a killed harness leaves none)."""
    parent = os.getppid()
    while os.getppid() == parent:  # noqa: ASYNC110 (no event tells of it)
        await asyncio.sleep(1.0)


async def _serve(role: Any) -> None:
    serving = asyncio.ensure_future(role)
    orphaned = asyncio.ensure_future(_orphaned())
    await asyncio.wait([serving, orphaned], return_when=asyncio.FIRST_COMPLETED)
    for task in (serving, orphaned):
        task.cancel()
    if serving.done() and not serving.cancelled() and serving.exception():
        raise serving.exception()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="stack_floor", description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", choices=("runtime", "gateway"))
    ap.add_argument("--port", type=int)
    ap.add_argument("--runtime-port", type=int)
    ap.add_argument("--dsn", default=_DB)
    ap.add_argument("--redis", default=_REDIS)
    ap.add_argument("--runs", type=int, default=3000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--idle", type=int, default=5000, help="idle SSE connections (0: none)")
    ap.add_argument(
        "--guarantees",
        action="store_true",
        help="add the I/O Tether's guarantees need: admission and claim statements, a channel "
        "per run confirmed before the start, protobuf on the gRPC call",
    )
    args = ap.parse_args(argv)
    if args.role == "runtime":
        uvloop.run(_serve(_runtime(args.port, args.dsn, args.redis, args.guarantees)))
        return
    if args.role == "gateway":
        uvloop.run(_serve(_gateway(args.port, args.runtime_port, args.redis, args.guarantees)))
        return
    raise_fd_limit()
    reps = [
        repetition(args.runs, args.clients, args.dsn, args.redis, args.idle, args.guarantees)
        for _ in range(args.reps)
    ]
    doc: dict[str, Any] = {k: round(statistics.median(r[k] for r in reps), 3) for k in reps[0]}
    doc["repetitions"] = reps
    doc["runs"], doc["clients"] = args.runs, args.clients
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
