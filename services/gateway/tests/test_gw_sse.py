"""SSE: resume points, framing, heartbeats, 204, reset, retry across runtime pods, slow clients."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from typing import Any

import pytest
from aiohttp.http_writer import StreamWriter
from aiohttp.test_utils import TestClient
from gw_fake_runtime import SECRET, FakeRuntime, delta, done
from tether.runtime.v1 import events_pb2, resources_pb2
from tether_common.auth import issue_token
from tether_common.errors import InvalidArgument
from tether_common.event_json import sse_frame
from tether_common.input_parsers import resume_point as parse_resume_point
from tether_gateway.run_feed import RunFeed
from tether_gateway.sse import SSE_HEADERS
from tether_gateway.state import STATE


@pytest.mark.parametrize(
    ("header", "query", "expected"),
    [
        (None, None, 0),
        ("17", None, 17),
        (" 5 ", None, 5),
        ("3", "9", 3),
        (None, "9", 9),
        ("", "4", 4),
    ],
)
def test_resume_point(header: str | None, query: str | None, expected: int) -> None:
    assert parse_resume_point(header, query) == expected


@pytest.mark.parametrize("garbage", ["abc", "-1", "1.5", "１２", "0x10", "99999999999999999999"])
def test_resume_point_garbage(garbage: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_resume_point(garbage, None)
    with pytest.raises(InvalidArgument):
        parse_resume_point(None, garbage)


def test_frame_shape() -> None:
    frame = sse_frame(delta("run_1", 17, "héllo\nworld")).decode()
    lines = frame.split("\n")
    assert lines[0] == "id: 17" and lines[1] == "event: text_delta"
    assert lines[2].startswith('data: {"type":"text_delta","runId":"run_1","sequence":17,')
    assert '"delta":"héllo\\nworld"' in lines[2]  # data stays one line
    assert frame.endswith("\n\n") and len(lines) == 5
    reset = events_pb2.RunEvent(run_id="run_1", reset=events_pb2.Reset())
    assert sse_frame(reset).decode().startswith("event: reset\ndata: ")  # no id: position kept


def parse(body: str) -> list[dict[str, str]]:
    out = []
    for block in body.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                key, _, value = line.partition(": ")
                fields[key] = value
        if fields:
            out.append(fields)
    return out


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_replay_after_last_event_id(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    fake = fake_runtime[0]
    fake.add_run("run_1")
    for seq in range(1, 6):
        fake.append(delta("run_1", seq, f"d{seq}"))
    fake.append(done("run_1", 6))
    resp = await client.get(
        "/v1/runs/run_1/events", headers={**auth(user_token), "Last-Event-ID": "3"}
    )
    assert resp.status == 200
    for key, value in SSE_HEADERS.items():
        assert resp.headers[key] == value
    body = await resp.text()
    assert body.startswith("retry: 1500\n\n")
    frames = parse(body)
    assert [f["id"] for f in frames if "id" in f] == ["4", "5", "6"]
    assert frames[-1]["event"] == "done"


async def test_finished_run_with_nothing_left_is_204(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    fake = fake_runtime[0]
    fake.add_run("run_1")
    fake.append(delta("run_1", 1, "x"))
    fake.append(done("run_1", 2))
    resp = await client.get("/v1/runs/run_1/events?after=2", headers=auth(user_token))
    assert resp.status == 204


async def test_garbage_last_event_id_is_400(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    fake_runtime[0].add_run("run_1")
    resp = await client.get(
        "/v1/runs/run_1/events", headers={**auth(user_token), "Last-Event-ID": "nope"}
    )
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "INVALID_ARGUMENT"


async def test_ahead_gets_reset_then_live_events(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    fake = fake_runtime[0]
    fake.add_run("run_1")
    fake.append(delta("run_1", 1, "a"))
    resp = await client.get("/v1/runs/run_1/events?after=50", headers=auth(user_token))
    assert resp.status == 200
    first = await asyncio.wait_for(_read_until(resp, b"event: reset"), 5)
    assert b"event: reset" in first
    fake.append(delta("run_1", 2, "b"))
    fake.append(done("run_1", 3))
    rest = (first + await resp.read()).decode()
    ids = [f["id"] for f in parse(rest) if "id" in f]
    assert ids == ["2", "3"]  # continues after the run's real position, not the bogus one


async def test_resumes_ahead_share_one_upstream(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    """A resume point past the run's end gets its `reset` from the gateway's own GetRun and
    joins the run's feed: many of them cost one upstream call, not one each for the run's life."""
    fake = fake_runtime[0]
    fake.add_run("run_1")
    fake.append(delta("run_1", 1, "a"))
    resps = []
    for after in (50, 10**9, 2):
        resp = await client.get(f"/v1/runs/run_1/events?after={after}", headers=auth(user_token))
        assert resp.status == 200
        head = await asyncio.wait_for(_read_until(resp, b"event: reset"), 5)
        assert b"event: reset" in head and b'"lastSequence":1' in head
        resps.append((resp, head))
    fake.append(delta("run_1", 2, "b"))
    fake.append(done("run_1", 3))
    for resp, head in resps:
        rest = (head + await resp.read()).decode()
        assert [f["id"] for f in parse(rest) if "id" in f] == ["2", "3"]
    assert fake.stream_calls == [("run_1", 1)]  # one feed, from the run's real position


async def test_ahead_of_a_finished_run_gets_reset_and_the_end(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    fake = fake_runtime[0]
    fake.add_run("run_1")
    fake.append(done("run_1", 1))
    resp = await client.get("/v1/runs/run_1/events?after=7", headers=auth(user_token))
    assert resp.status == 200
    frames = parse((await asyncio.wait_for(resp.read(), 5)).decode())
    assert [f.get("event") for f in frames if "event" in f] == ["reset"]
    assert fake.stream_calls == []  # nothing to follow: no upstream at all


async def _read_until(resp: Any, marker: bytes) -> bytes:
    buf = b""
    while marker not in buf:
        chunk = await resp.content.readany()
        if not chunk:
            break
        buf += chunk
    return buf


async def test_heartbeat_when_idle_and_stream_stays_open(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    fake = fake_runtime[0]
    fake.add_run("run_1", resources_pb2.RUN_STATUS_INTERRUPTED)
    fake.append(delta("run_1", 1, "waiting"))
    resp = await client.get("/v1/runs/run_1/events", headers=auth(user_token))
    loop = asyncio.get_running_loop()
    began = loop.time()
    buf = await asyncio.wait_for(_read_until(resp, b": keep-alive\n\n"), 3)
    assert loop.time() - began < 1.5  # heartbeat interval is 0.3 s in these tests
    assert b"id: 1\n" in buf
    fake.append(done("run_1", 2))
    rest = await asyncio.wait_for(resp.read(), 3)
    assert b"event: done" in rest


async def test_stream_token_reads_only_its_run(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    fake = fake_runtime[0]
    fake.add_run("run_1")
    fake.add_run("run_2")
    fake.append(done("run_1", 1))
    fake.append(done("run_2", 1))
    resp = await client.post("/v1/runs/run_1/stream-token", headers=auth(user_token))
    assert resp.status == 201
    token = (await resp.json())["token"]
    resp = await client.get(f"/v1/runs/run_1/events?token={token}")
    assert resp.status == 200 and b"event: done" in await resp.read()
    resp = await client.get(f"/v1/runs/run_2/events?token={token}")
    assert resp.status == 404
    # A stream token never acts, and a user token is never accepted in the URL.
    resp = await client.get("/v1/runs/run_1", headers=auth(token))
    assert resp.status == 401
    resp = await client.get(f"/v1/runs/run_1/events?token={user_token}")
    assert resp.status == 401
    assert issue_token(SECRET, "alice", scope="stream", run_id="run_1")


async def test_runtime_pod_loss_is_invisible(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    fake = fake_runtime[0]
    fake.add_run("run_1")
    fake.append(delta("run_1", 1, "a"))
    fake.fail_next_stream_after = 2
    resp = await client.get("/v1/runs/run_1/events", headers=auth(user_token))
    await _read_until(resp, b"id: 1\n")
    for seq in range(2, 5):
        fake.append(delta("run_1", seq, str(seq)))
        await asyncio.sleep(0.05)
    fake.append(done("run_1", 5))
    body = await asyncio.wait_for(resp.read(), 5)
    ids = [f["id"] for f in parse(body.decode()) if "id" in f]
    assert ids == ["2", "3", "4", "5"]
    assert [after for _, after in fake.stream_calls][-1] >= 1  # reopened from its position


async def test_never_reading_client_is_dropped_others_unaffected(
    make_client: Any, fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    client: TestClient[Any, Any] = await make_client(sse_buffer_bytes=16 * 1024)
    fake = fake_runtime[0]
    fake.add_run("run_1")
    fake.append(delta("run_1", 1, "start"))
    # A client that sends its request and never reads, with a tiny receive window.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (client.host, client.port))
    request = (
        "GET /v1/runs/run_1/events HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {user_token}\r\n\r\n"
    )
    await loop.sock_sendall(sock, request.encode())
    good = await client.get("/v1/runs/run_1/events", headers=auth(user_token))
    await _read_until(good, b"id: 1\n")
    reader = asyncio.create_task(good.read())
    chunk = "x" * 1000
    for seq in range(2, 2002):
        fake.append(delta("run_1", seq, chunk))
        if seq % 50 == 0:
            await asyncio.sleep(0.01)
    fake.append(done("run_1", 2002))
    body = await asyncio.wait_for(reader, 20)
    ids = [int(f["id"]) for f in parse(body.decode()) if "id" in f]
    assert ids == list(range(2, 2003))  # the reading client got everything
    metrics = await (await client.get("/metrics")).text()
    assert 'tether_gateway_sse_dropped_total{reason="slow_client"} 1.0' in metrics
    sock.close()


async def test_far_behind_catches_up_then_joins_the_feed(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    """A resume point below the feed's floor streams on its own only until it has caught up;
    then it follows the shared feed and its own upstream call ends."""
    fake = fake_runtime[0]
    fake.add_run("run_1")
    for seq in (1, 2, 3):
        fake.append(delta("run_1", seq, "x"))
    ahead = await client.get("/v1/runs/run_1/events?after=3", headers=auth(user_token))
    assert ahead.status == 200
    for _ in range(100):  # the feed (floor 3) is open upstream
        if fake.live["run_1"]:
            break
        await asyncio.sleep(0.02)
    behind = await client.get("/v1/runs/run_1/events?after=1", headers=auth(user_token))
    assert behind.status == 200
    head = await asyncio.wait_for(_read_until(behind, b"id: 3\n"), 5)
    for _ in range(100):
        if len(fake.live["run_1"]) == 1:
            break
        await asyncio.sleep(0.02)
    assert [after for _, after in fake.stream_calls] == [3, 1]
    assert len(fake.live["run_1"]) == 1, "the catch-up stream kept its own upstream"
    # Both connections now follow the run's one shared feed (the catch-up one was a dedicated
    # RunFeed, handed over), and the upstream gauge counts that feed alone.
    gw = client.app[STATE]
    shared = gw.feeds.feeds["run_1"]
    assert type(shared) is RunFeed and shared.shared and len(shared.subscribers) == 2
    assert {s._feed for s in gw.streams} == {shared}
    for _ in range(100):  # the catch-up feed's task ends a moment after its call
        metrics = await (await client.get("/metrics")).text()
        if "tether_gateway_sse_upstream_streams 1.0" in metrics:
            break
        await asyncio.sleep(0.02)
    assert "tether_gateway_sse_upstream_streams 1.0" in metrics
    fake.append(delta("run_1", 4, "y"))
    fake.append(done("run_1", 5))
    rest = (head + await asyncio.wait_for(behind.read(), 5)).decode()
    assert [f["id"] for f in parse(rest) if "id" in f] == ["2", "3", "4", "5"]
    rest = (await asyncio.wait_for(ahead.read(), 5)).decode()
    assert [f["id"] for f in parse(rest) if "id" in f] == ["4", "5"]


def count_response_writes(monkeypatch: pytest.MonkeyPatch) -> dict[StreamWriter, list[bytes]]:
    """What the gateway's responses hand their transports, write by write: aiohttp's
    StreamWriter makes one transport write per `_write` or `_writelines`. A writer whose first
    write is not a status line is the test client's (requests use the same class). Keyed by
    the writer itself, kept alive: an id could be reused by a later writer."""
    writes: dict[StreamWriter, list[bytes]] = {}
    write, writelines = StreamWriter._write, StreamWriter._writelines

    def counted_write(self: StreamWriter, chunk: Any) -> None:
        writes.setdefault(self, []).append(bytes(chunk))
        write(self, chunk)

    def counted_writelines(self: StreamWriter, chunks: Iterable[Any]) -> None:
        chunks = [bytes(c) for c in chunks]
        writes.setdefault(self, []).append(b"".join(chunks))
        writelines(self, chunks)

    monkeypatch.setattr(StreamWriter, "_write", counted_write)
    monkeypatch.setattr(StreamWriter, "_writelines", counted_writelines)
    return writes


def responses(writes: dict[StreamWriter, list[bytes]]) -> list[list[bytes]]:
    return [w for w in writes.values() if w[0].startswith(b"HTTP/1.1 ")]


async def test_a_stream_writes_its_start_with_the_frames_at_hand_and_its_end_with_the_last(
    client: TestClient[Any, Any],
    fake_runtime: tuple[FakeRuntime, str],
    user_token: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The headers, `retry:` and the frames ready when a stream opens leave in one write, the
    last frames with the chunked body's end in another (each write is a system call and a
    segment for the client). A started run's first message is in the first write (here it
    carries the run's end too, which the feed passes on at its next turn: the body's end
    follows alone); a replay whose frames arrive after the stream opened takes two writes in
    all. They were three more: the headers, `retry:` and the body's end, each alone."""
    fake = fake_runtime[0]
    writes = count_response_writes(monkeypatch)
    resp = await client.post(
        "/v1/conversations/conv_1/runs",
        json={"text": "hi"},
        headers={**auth(user_token), "Accept": "text/event-stream"},
    )
    assert resp.status == 201
    body = await resp.text()
    assert body.startswith("retry: 1500\n\n") and "event: done" in body
    [started] = responses(writes)
    assert len(started) == 2, started
    assert b"retry: 1500\n\n" in started[0] and b"event: done" in started[0]
    assert started[1] == b"0\r\n\r\n"

    writes.clear()
    fake.add_run("run_1")
    for seq in (1, 2, 3):
        fake.append(delta("run_1", seq, f"d{seq}"))
    fake.append(done("run_1", 4))
    resp = await client.get("/v1/runs/run_1/events?after=1", headers=auth(user_token))
    assert resp.status == 200
    frames = parse(await resp.text())
    assert [f["id"] for f in frames if "id" in f] == ["2", "3", "4"]
    [replay] = responses(writes)
    assert len(replay) == 2, replay
    assert replay[0].endswith(b"retry: 1500\n\n\r\n")  # the headers, then `retry:`, at once
    assert b"id: 2\n" in replay[1] and replay[1].endswith(b"\r\n0\r\n\r\n")


def _awaiting(coro: Any) -> list[str]:
    """The names of the coroutines `coro` awaits, down its chain of awaits."""
    names = []
    while coro is not None and hasattr(coro, "cr_code"):
        names.append(coro.cr_code.co_qualname)
        coro = coro.cr_await
    return names


async def test_an_idle_stream_keeps_only_the_frames_that_must_wrap_it(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    """An idle stream is held for hours, by thousands: the middlewares that only act before the
    handler (the forwarded-for chain, the parameter check, tracing that records nothing) hand
    its coroutine on instead of awaiting it, and so does `stream_response`; the stream sleeps
    in its own one coroutine (`EventStream.serve`, no sleep or loop coroutine under it). What
    is left of Tether's is the middlewares that act after the handler (metrics, errors) and
    the handler itself."""
    fake_runtime[0].add_run("run_1")
    resp = await client.get("/v1/runs/run_1/events", headers=auth(user_token))
    assert resp.status == 200
    await asyncio.wait_for(_read_until(resp, b"retry:"), 5)
    await asyncio.sleep(0.05)  # the stream is asleep after its first write
    chains = [_awaiting(t.get_coro()) for t in asyncio.all_tasks()]
    [chain] = [c for c in chains if "run_events" in c]
    # After aiohttp's own (the request's handling, the app's, its current-app middleware):
    ours = chain[chain.index("_fix_request_current_app.<locals>.impl") + 1 :]
    assert ours == [
        "Metrics.middleware.<locals>.measure",
        "error_middleware",
        "run_events",
        "EventStream.serve",
    ], chain
    resp.close()
