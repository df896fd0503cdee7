"""Retention through real processes (issue 18): an old partition of run_event is dropped while
streams of recent runs are running, and they still get every event, once and in order; the run
whose events were dropped answers GetRun / GET /v1/runs/{id} with events_expired, and a stream of
it (gRPC StreamRunEvents, SSE) gets `reset` with the run's state, never a silent start from 0."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_common.auth import issue_token
from tether_runtime.store import event_partitions
from tether_runtime.store.db import create_pool
from tether_testkit.client import Client, token, types
from tether_testkit.dated_runs import partition_of, run_minted_at
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import Frame, SseReader

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

STREAMS = 6
DELTAS = 1500  # at TETHER_SCRIPTED_DELAY_S=0.002 a run streams for about 3 s


@pytest.fixture
async def store(private_env: dict[str, str]) -> AsyncIterator[Any]:
    pool = await create_pool(private_env["DATABASE_URL"], min_size=1, max_size=1)
    async with pool.acquire() as conn:
        yield conn
    await pool.close()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=90)) as session:
        yield session


def _headers(**extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'alice')}", **extra}


async def _conversation(http: aiohttp.ClientSession, gw: str) -> str:
    async with http.post(f"{gw}/v1/conversations", json={"title": "r"}, headers=_headers()) as r:
        assert r.status == 201, await r.text()
        return str((await r.json())["conversation"]["id"])


async def _start(http: aiohttp.ClientSession, gw: str, text: str) -> str:
    conv = await _conversation(http, gw)
    body = {"text": text, "idempotencyKey": uuid.uuid4().hex}
    async with http.post(f"{gw}/v1/conversations/{conv}/runs", json=body, headers=_headers()) as r:
        assert r.status == 201, await r.text()
        return str((await r.json())["run"]["id"])


async def _get_run(http: aiohttp.ClientSession, gw: str, run_id: str) -> dict[str, Any]:
    async with http.get(f"{gw}/v1/runs/{run_id}", headers=_headers()) as r:
        assert r.status == 200, await r.text()
        return dict((await r.json())["run"])


class Watched:
    """One SSE stream read to its end, each event's arrival time kept."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.reader = SseReader(resp)
        self.events: list[Frame] = []
        self.first = asyncio.Event()

    async def read(self) -> None:
        while True:
            frame = await self.reader.next(timeout=60)
            if frame is None:
                return
            if frame.kind == "event":
                self.events.append(frame)
                if frame.event == "text_delta":
                    self.first.set()


async def test_dropping_an_old_partition_while_recent_runs_stream(
    private_env: dict[str, str], procs: list[Proc], store: Any, http: aiohttp.ClientSession
) -> None:
    runtime = start_runtime(private_env, name="rt-retention")
    procs.append(runtime)
    gateway = start_gateway(private_env, runtime.addr, name="gw-retention")
    procs.append(gateway)
    gw = gateway.addr
    grpc_client = Client(runtime.addr, token(TEST_SECRET, "alice"))
    try:
        # A finished run from before this database's migration (the first partition, the table
        # 0019 converted), and one finished today.
        old_conv = await _conversation(http, gw)
        now = await store.fetchval("SELECT now()")
        old, old_last = await run_minted_at(store, now - dt.timedelta(days=40), old_conv, deltas=5)
        assert await partition_of(store, old) == "run_event_legacy"
        recent_done = await _start(http, gw, "stream 3 deltas")
        assert types(await grpc_client.events(recent_done))[-1] == "done"
        assert (await partition_of(store, recent_done) or "").startswith("run_event_p")
        # Before the drop the old run replays in full, as any other (nothing fakes a reset).
        async with http.get(
            f"{gw}/v1/runs/{old}/events", headers=_headers(Accept="text/event-stream")
        ) as r:
            assert r.status == 200
            before = [f for f in await SseReader(r).rest() if f.kind == "event"]
        assert [int(f.id or 0) for f in before] == list(range(1, old_last + 1))
        assert (await _get_run(http, gw, old))["eventsExpired"] is False

        # Recent runs streaming over SSE while the old partition is dropped.
        run_ids = [await _start(http, gw, f"stream {DELTAS} deltas") for _ in range(STREAMS)]
        watched = []
        for run_id in run_ids:
            resp = await http.get(
                f"{gw}/v1/runs/{run_id}/events", headers=_headers(Accept="text/event-stream")
            )
            assert resp.status == 200
            watched.append(Watched(resp))
        readers = [asyncio.create_task(w.read()) for w in watched]
        await asyncio.wait_for(asyncio.gather(*(w.first.wait() for w in watched)), 30)
        # Any pod's turn of the job does this; a test cannot wait 30 days, so it asks for a
        # retention of a millisecond: only the partition that ended at the migration qualifies.
        turn = await event_partitions.maintain(store, 0.001)
        dropped_at = time.monotonic()
        assert turn.ran and turn.dropped == ["run_event_legacy"], turn
        await asyncio.wait_for(asyncio.gather(*readers), 90)

        for run_id, w in zip(run_ids, watched, strict=True):
            seqs = [int(f.id or 0) for f in w.events]
            last = await store.fetchval("SELECT last_sequence FROM run WHERE id = $1", run_id)
            assert seqs == list(range(1, last + 1)), f"{run_id}: not every event, once, in order"
            assert w.events[-1].event == "done"
            stored = await store.fetch(
                "SELECT sequence FROM run_event WHERE run_id = $1 ORDER BY sequence", run_id
            )
            assert [r["sequence"] for r in stored] == seqs
        # The streams were mid-run when the partition went (not all over before it).
        assert any(f.at > dropped_at for w in watched for f in w.events)
        assert all(w.events[0].at < dropped_at for w in watched)

        # The old run: its state stays, its events are gone, and every reader is told so.
        assert await partition_of(store, old) is None
        view = await _get_run(http, gw, old)
        assert view["eventsExpired"] is True
        assert view["status"] == "completed" and view["lastSequence"] == old_last
        got = await grpc_client.stub.GetRun(
            pb.GetRunRequest(run_id=old), metadata=grpc_client.md, timeout=10
        )
        assert got.run.events_expired and got.run.last_sequence == old_last
        for resume in ("0", str(old_last - 2)):
            async with http.get(
                f"{gw}/v1/runs/{old}/events",
                headers=_headers(Accept="text/event-stream", **{"Last-Event-ID": resume}),
            ) as r:
                assert r.status == 200
                frames = [f for f in await SseReader(r).rest() if f.kind == "event"]
            assert [f.event for f in frames] == ["reset"], frames
            run = frames[0].json["run"]
            assert run["eventsExpired"] is True and run["lastSequence"] == old_last
            assert run["status"] == "completed"
        async with http.get(
            f"{gw}/v1/runs/{old}/events",
            headers=_headers(Accept="text/event-stream", **{"Last-Event-ID": str(old_last)}),
        ) as r:
            assert r.status == 204  # nothing was left to send anyway
        # A direct gRPC reader (what the gateway's dedicated streams use) gets the same reset.
        events = await grpc_client.events(old, after=0)
        assert types(events) == ["reset"]
        assert events[0].reset.run.events_expired
        assert events[0].reset.run.last_sequence == old_last

        # A listing says so too; a recent run is untouched.
        async with http.get(
            f"{gw}/v1/runs", params={"conversationId": old_conv}, headers=_headers()
        ) as r:
            assert r.status == 200, await r.text()
            listed = (await r.json())["runs"]
        assert [(x["id"], x["eventsExpired"]) for x in listed] == [(old, True)]
        assert (await _get_run(http, gw, recent_done))["eventsExpired"] is False
        assert types(await grpc_client.events(recent_done))[-1] == "done"
    finally:
        await grpc_client.close()
