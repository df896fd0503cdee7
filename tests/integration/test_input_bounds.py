"""Issue #35, findings 2-4 (and the page tokens of conversations and messages, which the fuzzers
found): numbers, times and page tokens a client sends are parsed within bounds
(tether_common.input_parsers) and refused with 400 / INVALID_ARGUMENT, never a 500 / INTERNAL,
through a real gateway and runtime; and the idempotency key is 1-128 characters on both sides."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether.runtime.v1 import runtime_service_pb2_grpc
from tether_common.input_parsers import MAX_IDEMPOTENCY_KEY
from tether_testkit.client import Client, token
from tether_testkit.processes import Proc, start_gateway
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.security import bearer, new_user

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

# Past Python's int() digit limit (4300): int("0" * 4301) raised ValueError inside the handler.
LONG_ZEROS = "0" * 4301
DEEP_TOKEN = base64.urlsafe_b64encode(b"[" * 1200).decode().rstrip("=")
# In Timestamp's range as written, out of it in UTC (year 0 and year 10000).
TIMES_OUT_OF_RANGE = (
    {"since": "0001-01-01T00:00:00+14:00"},
    {"until": "9999-12-31T23:59:59-14:00"},
)


@pytest.fixture(scope="module")
def gateway(runtime: Proc, base_env: dict[str, str]) -> Iterator[str]:
    gw = start_gateway(base_env, runtime.addr, name="input-bounds-gw")
    yield gw.addr
    gw.terminate()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def admin(db: Any) -> str:
    user = new_user("bounds-admin")
    for action in ("audit.read", "runs.read"):
        await db.execute(
            'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3)', user, action, "*"
        )
    return user


async def get(
    http: aiohttp.ClientSession, url: str, who: str, headers: dict[str, str] | None = None, **q: str
) -> tuple[int, str]:
    async with http.get(url, params=q, headers={**bearer(who), **(headers or {})}) as r:
        return r.status, await r.text()


async def finished_run(http: aiohttp.ClientSession, gw: str, user: str) -> str:
    async with http.post(f"{gw}/v1/conversations", json={"title": "b"}, headers=bearer(user)) as r:
        conv = (await r.json())["conversation"]["id"]
    body = {"text": "stream 2 deltas"}
    async with http.post(
        f"{gw}/v1/conversations/{conv}/runs", json=body, headers=bearer(user)
    ) as r:
        assert r.status == 201, await r.text()
        run_id: str = (await r.json())["run"]["id"]
    deadline = time.monotonic() + 30
    while True:
        async with http.get(f"{gw}/v1/runs/{run_id}", headers=bearer(user)) as r:
            if (await r.json())["run"]["status"] == "completed":
                return run_id
        assert time.monotonic() < deadline, f"{run_id} never completed"
        await asyncio.sleep(0.05)


async def code_of(call: Any) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as err:
        return err.code()
    return grpc.StatusCode.OK


async def test_a_resume_point_of_any_length_is_never_500(
    gateway: str, http: aiohttp.ClientSession
) -> None:
    """Finding 2: 4,301 digits, even all zeros, were a 500 (int() past its digit limit)."""
    user = new_user("bounds-sse")
    run_id = await finished_run(http, gateway, user)
    url = f"{gateway}/v1/runs/{run_id}/events"
    sse = {"Accept": "text/event-stream"}
    # Zeros are 0 however many: the finished run's events from the start (200, then the end).
    status, text = await get(http, url, user, {**sse, "Last-Event-ID": LONG_ZEROS})
    assert status == 200 and "event: done" in text, (status, text[:300])
    status, text = await get(http, url, user, sse, after=LONG_ZEROS)
    assert status == 200 and "event: done" in text, (status, text[:300])
    for bad in ("1" + LONG_ZEROS, "9" * 4301, str(2**63)):
        status, text = await get(http, url, user, {**sse, "Last-Event-ID": bad})
        assert status == 400 and "INVALID_ARGUMENT" in text, (bad[:10], status, text)
        status, text = await get(http, url, user, sse, after=bad)
        assert status == 400 and "INVALID_ARGUMENT" in text, (bad[:10], status, text)


async def test_time_filters_out_of_range_are_400_for_anyone(
    gateway: str, http: aiohttp.ClientSession, admin: str
) -> None:
    """Finding 3 over HTTP: OverflowError in Timestamp.FromDatetime was a 500, on /v1/audit for
    callers without the grant too (the crash came before the runtime's permission check)."""
    user = new_user("bounds-time")
    for route in ("/v1/runs", "/v1/audit"):
        for who in (user, admin):
            for query in TIMES_OUT_OF_RANGE:
                status, text = await get(http, f"{gateway}{route}", who, **query)
                assert status == 400 and "INVALID_ARGUMENT" in text, (route, query, status, text)
    # The range's own ends are times like any other.
    for query in ({"since": "0001-01-01T00:00:00Z"}, {"until": "9999-12-31T23:59:59Z"}):
        for route in ("/v1/runs", "/v1/audit"):
            status, text = await get(http, f"{gateway}{route}", admin, **query)
            assert status == 200, (route, query, status, text)


async def test_time_filters_out_of_range_are_invalid_argument_over_grpc(
    runtime: Proc, admin: str
) -> None:
    """Finding 3 over gRPC: a start_time/end_time of 2^40 seconds was INTERNAL (ToDatetime)."""
    c = Client(runtime.addr, token(TEST_SECRET, admin))
    try:
        for field in ("start_time", "end_time"):
            for ts in (Timestamp(seconds=2**40), Timestamp(seconds=-(2**40)), Timestamp(nanos=-1)):
                for call in (
                    c.stub.ListRuns(pb.ListRunsRequest(**{field: ts}), metadata=c.md, timeout=10),
                    c.stub.ListAuditRecords(
                        pb.ListAuditRecordsRequest(**{field: ts}), metadata=c.md, timeout=10
                    ),
                ):
                    assert await code_of(call) == grpc.StatusCode.INVALID_ARGUMENT, (field, ts)
        # The first and the last second Timestamp allows.
        edges = pb.ListRunsRequest(
            start_time=Timestamp(seconds=-62_135_596_800),
            end_time=Timestamp(seconds=253_402_300_799, nanos=999_999_999),
        )
        assert await code_of(c.stub.ListRuns(edges, metadata=c.md, timeout=10)) == (
            grpc.StatusCode.OK
        )
    finally:
        await c.close()


async def test_a_deeply_nested_page_token_is_400(
    gateway: str, http: aiohttp.ClientSession, admin: str
) -> None:
    """Finding 4 over HTTP: base64url of 1,200 `[` raised RecursionError in decode_token."""
    for route, who in (("/v1/runs", new_user("bounds-token")), ("/v1/audit", admin)):
        status, text = await get(http, f"{gateway}{route}", who, pageToken=DEEP_TOKEN)
        assert status == 400 and "INVALID_ARGUMENT" in text, (route, status, text)


async def test_a_deeply_nested_page_token_is_invalid_argument_over_grpc(
    runtime: Proc, admin: str
) -> None:
    """Finding 4 over gRPC: ListRuns (anyone) and ListAuditRecords (the admin) were INTERNAL."""
    c = Client(runtime.addr, token(TEST_SECRET, admin))
    try:
        for call in (
            c.stub.ListRuns(pb.ListRunsRequest(page_token=DEEP_TOKEN), metadata=c.md, timeout=10),
            c.stub.ListAuditRecords(
                pb.ListAuditRecordsRequest(page_token=DEEP_TOKEN), metadata=c.md, timeout=10
            ),
        ):
            assert await code_of(call) == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await c.close()


async def test_the_idempotency_key_limit_is_the_same_at_gateway_and_runtime(
    gateway: str, http: aiohttp.ClientSession, runtime: Proc
) -> None:
    """128 characters at both (the runtime took 200 before); one more is refused by both."""
    assert MAX_IDEMPOTENCY_KEY == 128
    user = new_user("bounds-key")
    c = Client(runtime.addr, token(TEST_SECRET, user))
    try:
        conv = await c.conversation()
        longest, too_long = "k" * MAX_IDEMPOTENCY_KEY, "k" * (MAX_IDEMPOTENCY_KEY + 1)
        assert (await c.start(conv, "stream 2 deltas", longest)).run.id
        for bad in (too_long, "a\x00b"):
            req = pb.StartRunRequest(conversation_id=conv, text="hi", idempotency_key=bad)
            code = await code_of(c.stub.StartRun(req, metadata=c.md, timeout=10))
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (bad[:5], code)
            # Checked before the run is looked up: a made-up run is refused for the key alone.
            code = await code_of(c.resume("run_x", "int_x", key=bad))
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (bad[:5], code)
        assert await code_of(c.resume("run_x", "int_x", key=longest)) == grpc.StatusCode.NOT_FOUND
        other = await c.conversation()
    finally:
        await c.close()
    url = f"{gateway}/v1/conversations/{other}/runs"
    body = {"text": "hi", "idempotencyKey": too_long}
    async with http.post(url, json=body, headers=bearer(user)) as r:
        assert r.status == 400, await r.text()
    body = {"text": "stream 2 deltas", "idempotencyKey": uuid.uuid4().hex + "x" * 96}
    async with http.post(url, json=body, headers=bearer(user)) as r:
        assert r.status == 201, await r.text()
    resume = {"interruptId": "int_x", "decision": "approve", "idempotencyKey": too_long}
    async with http.post(f"{gateway}/v1/runs/run_x/resume", json=resume, headers=bearer(user)) as r:
        assert r.status == 400, await r.text()


def test_conversation_and_message_pages_take_only_tokens_they_issued(runtime: Proc) -> None:
    """A page token of ListConversations / ListMessages is one the API issued for the same
    listing: pages walk every conversation once; a raw id, a deep token or another user's token
    is INVALID_ARGUMENT (they were read as a raw id before)."""
    md = tuple((k.lower(), v) for k, v in bearer(new_user("f3c")).items())
    other = tuple((k.lower(), v) for k, v in bearer(new_user("f3d")).items())
    with grpc.insecure_channel(runtime.addr) as channel:
        stub = runtime_service_pb2_grpc.RuntimeServiceStub(channel)
        made = {
            stub.CreateConversation(
                pb.CreateConversationRequest(title=f"c{i}"), metadata=md
            ).conversation.id
            for i in range(5)
        }
        seen: list[str] = []
        token = ""
        while True:
            page = stub.ListConversations(
                pb.ListConversationsRequest(page_size=2, page_token=token), metadata=md
            )
            seen += [c.id for c in page.conversations]
            token = page.next_page_token
            if not token:
                break
        assert sorted(seen) == sorted(made)
        first = stub.ListConversations(pb.ListConversationsRequest(page_size=2), metadata=md)
        for bad, who in (
            (first.next_page_token, other),
            (first.conversations[-1].id, md),
            (DEEP_TOKEN, md),
        ):
            with pytest.raises(grpc.RpcError) as info:
                stub.ListConversations(
                    pb.ListConversationsRequest(page_size=2, page_token=bad), metadata=who
                )
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
        conv = sorted(made)[0]
        with pytest.raises(grpc.RpcError) as info:
            stub.ListMessages(
                pb.ListMessagesRequest(conversation_id=conv, page_token=DEEP_TOKEN),
                metadata=md,
            )
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
