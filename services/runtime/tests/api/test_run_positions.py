"""GetRunPositions: the last sequence of each run named, in one read, for the runs the caller may
read: a user's own (another user's run is left out, as if it did not exist); every run for a
service that may act on behalf of users (the gateway's positioning check of the runs it follows
on the bus). A stream token, an empty list or too long a one is refused."""

from __future__ import annotations

import grpc
import pytest
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_common.auth import issue_token
from tether_common.ids import new_id
from tether_testkit.client import Client, token
from tether_testkit.secrets import TEST_SECRET

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast


async def _positions(c: Client, run_ids: list[str]) -> dict[str, int]:
    resp = await c.stub.GetRunPositions(
        pb.GetRunPositionsRequest(run_ids=run_ids), metadata=c.md, timeout=10
    )
    return dict(resp.last_sequences)


async def test_each_caller_gets_the_positions_it_may_read(runtime, db) -> None:
    alice = Client(runtime.addr, token(TEST_SECRET, "alice"))
    bob = Client(runtime.addr, token(TEST_SECRET, "bob"))
    gateway = Client(
        runtime.addr, issue_token(TEST_SECRET, "gateway", scope="service", on_behalf=True)
    )
    plain_service = Client(runtime.addr, issue_token(TEST_SECRET, "crm", scope="service"))
    try:
        a = (await alice.start(await alice.conversation(), "hi")).run.id
        b = (await bob.start(await bob.conversation(), "hi")).run.id
        await db.execute("UPDATE run SET last_sequence = 7 WHERE id = $1", a)
        missing = new_id("run")
        assert await _positions(alice, [a, b, missing]) == {a: 7}
        assert await _positions(bob, [a, b]) == {b: 1}
        assert await _positions(gateway, [a, b, missing]) == {a: 7, b: 1}
        assert await _positions(plain_service, [a, b]) == {}  # its own runs only: none
    finally:
        for c in (alice, bob, gateway, plain_service):
            await c.close()


async def test_a_stream_token_or_a_bad_list_is_refused(runtime) -> None:
    alice = Client(runtime.addr, token(TEST_SECRET, "alice"))
    streamer = Client(
        runtime.addr, issue_token(TEST_SECRET, "alice", scope="stream", run_id=new_id("run"))
    )
    try:
        for c, ids, code in [
            (alice, [], grpc.StatusCode.INVALID_ARGUMENT),
            (alice, [new_id("run") for _ in range(1001)], grpc.StatusCode.INVALID_ARGUMENT),
            (streamer, [new_id("run")], grpc.StatusCode.PERMISSION_DENIED),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _positions(c, ids)
            assert err.value.code() == code
    finally:
        await alice.close()
        await streamer.close()
