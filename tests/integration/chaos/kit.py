"""Shared pieces of the fault suite: the scale switch, process bookkeeping, store readers and the
comparisons every fault ends with (the client's view against the Postgres log)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import asyncpg
from tether.runtime.v1 import events_pb2
from tether_common.auth import issue_token
from tether_common.event_json import TERMINAL_TYPES, event_type
from tether_testkit import history
from tether_testkit.processes import Proc, free_port
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import SseReader

SCALE = os.environ.get("TETHER_CHAOS_SCALE", "fast").strip().lower() or "fast"
FULL = SCALE == "full"
USER = "alice"
TERMINAL_STATUSES = ("completed", "failed", "cancelled")
# Settings every chaos process shares: no per-user limits (a storm is the point), fast leases.
CHAOS_ENV = {
    "TETHER_RATE_LIMIT_PER_MIN": "0",
    "TETHER_MAX_STREAMS_PER_USER": "0",
    # DEBUG to follow a fault's streams (the bus's reconnects, the positioning check's nudges).
    "TETHER_LOG_LEVEL": os.environ.get("TETHER_CHAOS_LOG_LEVEL", "INFO"),
}


def size(fast: float, full: float) -> Any:
    """A count or a duration for this scale (TETHER_CHAOS_SCALE=fast|full)."""
    return full if FULL else fast


def bearer(user: str = USER) -> str:
    return issue_token(TEST_SECRET, user)


def headers(user: str = USER, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {bearer(user)}", **extra}


# -- processes -------------------------------------------------------------------------------


@dataclass
class Procs:
    """Every process a test starts; whatever is still alive at the end is killed."""

    started: list[Proc] = field(default_factory=list)

    def add(self, proc: Proc) -> Proc:
        self.started.append(proc)
        return proc

    def cleanup(self) -> None:
        for p in self.started:
            if p.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)
                p.kill()


class PrivateRedis:
    """A redis-server of the test's own on a fixed port, so it can be stopped and started again
    without touching the machine's shared Redis."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10) -> None:
        log = open(os.path.join(self.folder, "redis.log"), "ab")  # noqa: SIM115 - child owns it
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--dir", self.folder],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ok = subprocess.run(
                ["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True
            )
            if ok.stdout.strip() == "PONG":
                return
            time.sleep(0.05)
        raise TimeoutError("private redis did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None


# -- waiting ---------------------------------------------------------------------------------


async def wait_for(
    what: str, check: Callable[[], Awaitable[object]], timeout: float, interval: float = 0.1
) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


# -- the truth -------------------------------------------------------------------------------


async def stored_events(conn: asyncpg.Connection, run_id: str) -> list[events_pb2.RunEvent]:
    rows = await conn.fetch(
        "SELECT data FROM run_event WHERE run_id = $1 ORDER BY sequence", run_id
    )
    return [events_pb2.RunEvent.FromString(bytes(r["data"])) for r in rows]


async def run_statuses(conn: asyncpg.Connection, run_ids: list[str]) -> dict[str, str]:
    rows = await conn.fetch("SELECT id, status FROM run WHERE id = ANY($1::text[])", run_ids)
    return {r["id"]: r["status"] for r in rows}


def check_log(evs: list[events_pb2.RunEvent]) -> tuple[int, int]:
    """(gaps, duplicates) in a run's stored log: sequences must be exactly 1..N (the checker's)."""
    return history.log_faults(evs)


def compare(got: list[int], truth: list[int]) -> tuple[int, int]:
    """(lost, duplicated) of a client's sequence list against the stored one (the checker's)."""
    return history.view_faults(got, truth)


async def check_histories(
    conn: asyncpg.Connection | asyncpg.Pool,
    histories: list[history.History],
    run_ids: list[str] | None = None,
    *,
    require_end: bool = True,
) -> history.Report:
    """The history checker over a fault's clients (and `run_ids`, whether a client saw them or
    not) against the Postgres log: the figures of its row in the chaos table."""
    ids = set(run_ids or [])
    for h in histories:
        ids |= h.runs()
    truth = await history.Truth.read(conn, ids)
    return history.check(histories, truth, require_end=require_end)


def is_terminal(e: events_pb2.RunEvent) -> bool:
    return event_type(e) in TERMINAL_TYPES


# -- HTTP / SSE ------------------------------------------------------------------------------


async def http_new_run(http: aiohttp.ClientSession, base: str, text: str) -> str:
    async with http.post(
        f"{base}/v1/conversations", json={"title": "chaos"}, headers=headers()
    ) as r:
        assert r.status == 201, await r.text()
        conv = (await r.json())["conversation"]["id"]
    body = {"text": text, "idempotencyKey": uuid.uuid4().hex}
    async with http.post(f"{base}/v1/conversations/{conv}/runs", json=body, headers=headers()) as r:
        assert r.status == 201, await r.text()
        return str((await r.json())["run"]["id"])


@dataclass
class SseResult:
    run_id: str
    frames: list[tuple[int, str, str]] = field(default_factory=list)  # (id, event, data)
    reconnects: int = 0
    reconnect_at: list[float] = field(default_factory=list)
    first_after_reconnect: list[float] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)  # arrival - event time
    arrived: list[float] = field(default_factory=list)  # wall-clock arrival of each frame
    finished: bool = False
    error: str = ""

    @property
    def ids(self) -> list[int]:
        return [f[0] for f in self.frames]

    @property
    def last_id(self) -> int:
        return self.frames[-1][0] if self.frames else 0


async def follow_sse(
    http: aiohttp.ClientSession,
    bases: Callable[[int], str],
    run_id: str,
    *,
    deadline_s: float,
    max_reconnects: int = 30,
    on_event: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None,
    result: SseResult | None = None,
    record: history.History | None = None,
) -> SseResult:
    """What a browser's EventSource does: read, and on any break reconnect with Last-Event-ID
    (to `bases(attempt)`) until the terminal event. Bounded by a deadline and a reconnect cap.
    `record`: the history each (re)attach and each event received goes into."""
    res = result or SseResult(run_id)
    deadline = time.monotonic() + deadline_s
    attempt = 0
    while time.monotonic() < deadline and attempt <= max_reconnects:
        h = headers(Accept="text/event-stream")
        if res.frames:
            h["Last-Event-ID"] = str(res.last_id)
        fresh = True
        if record is not None:
            record.attach(run_id, res.last_id)
        try:
            resp = await http.get(f"{bases(attempt)}/v1/runs/{run_id}/events", headers=h)
            if resp.status == 204:
                resp.release()
                res.finished = True
                return res
            if resp.status != 200:
                res.error = f"HTTP {resp.status}: {await resp.text()}"
                resp.release()
                raise ConnectionError(res.error)
            reader = SseReader(resp)
            try:
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    frame = await reader.next(timeout=left)
                    if frame is None:
                        break
                    if frame.kind != "event" or frame.id is None:
                        continue
                    data = frame.json
                    if fresh and attempt:
                        res.first_after_reconnect.append(time.monotonic())
                        fresh = False
                    res.frames.append((int(frame.id), frame.event, frame.data))
                    if record is not None:
                        record.event(run_id, int(frame.id), frame.event)
                    res.arrived.append(time.time())
                    _note_delay(res, data)
                    if on_event is not None:
                        await on_event(frame.event, data)
                    if frame.event in TERMINAL_TYPES:
                        res.finished = True
                        return res
            finally:
                resp.close()
        except (aiohttp.ClientError, ConnectionError, TimeoutError, OSError):
            pass
        attempt += 1
        res.reconnects += 1
        res.reconnect_at.append(time.monotonic())
        await asyncio.sleep(min(0.05 * attempt, 0.5))
    return res


def _note_delay(res: SseResult, data: dict[str, Any]) -> None:
    from datetime import datetime

    stamp = data.get("time")
    if not stamp:
        return
    with contextlib.suppress(ValueError):
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        res.delays.append(time.time() - at)


def expected_frames(evs: list[events_pb2.RunEvent]) -> list[tuple[int, str, str]]:
    """The frames a client must end with for a stored log: (id, event, data) per event."""
    import json

    from tether_common.event_json import event_json

    return [
        (
            e.sequence,
            event_type(e),
            json.dumps(event_json(e), separators=(",", ":"), ensure_ascii=False),
        )
        for e in evs
    ]


def fmt_s(values: list[float]) -> str:
    if not values:
        return "-"
    return f"p50 {statistics.median(values):.2f}s / max {max(values):.2f}s"


@contextlib.asynccontextmanager
async def http_session(limit: int = 0) -> AsyncIterator[aiohttp.ClientSession]:
    conn = aiohttp.TCPConnector(limit=limit, force_close=False)
    async with aiohttp.ClientSession(
        connector=conn, timeout=aiohttp.ClientTimeout(total=None, sock_connect=5)
    ) as s:
        yield s


async def http_approve(
    http: aiohttp.ClientSession, base: str, run_id: str, interrupt_id: str, key: str = ""
) -> int:
    body = {
        "interruptId": interrupt_id,
        "decision": "approve",
        "idempotencyKey": key or uuid.uuid4().hex,
    }
    async with http.post(f"{base}/v1/runs/{run_id}/resume", json=body, headers=headers()) as r:
        return r.status


def approver(
    http: aiohttp.ClientSession,
    base: Callable[[], str],
    run_id: str,
    record: history.History | None = None,
) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
    """An on_event callback that approves the run's interrupts as they appear (each decision sent
    goes into `record`)."""

    async def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "interrupt":
            iid = data["interruptId"]
            key = f"approve-{iid}"
            for _ in range(20):
                status = 0
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    status = await http_approve(http, base(), run_id, iid, key)
                if record is not None:
                    outcome = {202: "accepted", 409: "resolved"}.get(status, "error")
                    record.decision(run_id, iid, key, outcome=outcome)
                if status in (202, 409):
                    return
                await asyncio.sleep(0.5)

    return on_event


async def metric(http: aiohttp.ClientSession, url: str, name: str) -> float:
    """Sum of a Prometheus metric's samples (all labels) at `url`."""
    total = 0.0
    async with http.get(url) as r:
        for line in (await r.text()).splitlines():
            if line.startswith(name) and (line[len(name)] in " {"):
                total += float(line.split()[-1])
    return total
