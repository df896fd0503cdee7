"""TETHER_RUNTIME_ROLE: a runtime may run as an API process (gRPC, no worker) and a worker
process (agent loops, health only), real processes on a database of their own. Runs started on
the API process execute on the worker and stream back through the API process; neither half
does the other's job."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from tether.runtime.v1 import resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit import stores
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
async def roles_env(base_env: dict[str, str], admin_dsn: str) -> AsyncIterator[dict[str, str]]:
    dsn = await stores.create_fresh_database(admin_dsn)
    yield {**base_env, "DATABASE_URL": dsn, "TETHER_SCRIPTED_DELAY_S": "0.002"}
    await stores.drop_database(admin_dsn, dsn)


def _client(proc: Proc) -> Client:
    return Client(proc.addr, token(TEST_SECRET, "alice"))


async def test_api_and_worker_processes_split_the_runtime(roles_env: dict[str, str]) -> None:
    api = start_runtime({**roles_env, "TETHER_RUNTIME_ROLE": "api"}, name="runtime-api")
    worker: Proc | None = None
    client = _client(api)
    try:
        conv = await client.conversation()
        started = await client.start(conv, "stream 30 deltas")
        run_id = started.run.id
        # An API process alone never executes a run: it stays queued.
        await asyncio.sleep(1.0)
        run = await client.stub.GetRun(
            pb.GetRunRequest(run_id=run_id), metadata=client.md, timeout=10
        )
        assert run.run.status == resources_pb2.RUN_STATUS_QUEUED
        # A worker process picks it up; the events stream back through the API process.
        worker = start_runtime({**roles_env, "TETHER_RUNTIME_ROLE": "worker"}, name="runtime-w")
        evs = await client.events(run_id)
        assert types(evs)[0] == "run_started" and types(evs)[-1] == "done"
        assert types(evs).count("text_delta") >= 1
        assert_dense(evs)
        # The worker process serves health, not the API.
        wclient = _client(worker)
        try:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await wclient.conversation()
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        finally:
            await wclient.close()
    finally:
        await client.close()
        for p in (worker, api):
            if p is not None:
                assert p.terminate() in (0, -15), p.log()[-3000:]
