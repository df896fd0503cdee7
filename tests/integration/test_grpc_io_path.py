"""gRPC's socket I/O stays on grpc.aio's poller thread in the serving processes
(tether_common.grpc_io_path): runs streamed through a real gateway and runtime wake gRPC core's
EventEngine threads far less than on grpc's default path, whether the processes start cold
(`python -m tether_runtime`, `python -m tether_cli.main gateway`, as a deployment runs them) or
from the tests' warm fork server. It fails if an entry point lets grpc load before the choice is
made, or if a grpcio release makes the EventEngine path permanent.

What wakes those threads with time (timers) is taken out, an idle spell as long as the runs
measured after them (a loaded CI run saw 3.2 switches a run in the gateway here, against 1-1.5 on
a quiet machine), and the rest is compared with the same runs on grpc's default path
(GRPC_EXPERIMENTS set to nothing: an operator's value wins) in the same module. Measured for 30
runs: 17-48 switches here in either process, quiet or with four busy loops beside it, against
176-194 (runtime) and 306-315 (gateway) on grpc's default."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
import pytest
from tether_common.auth import issue_token
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import SseReader
from tether_testkit.thread_switches import context_switches

pytestmark = pytest.mark.process
RUNS = 30


def engine_switches(proc: Proc) -> int:
    """Context switches so far of the process's gRPC EventEngine threads (named by grpc)."""
    return context_switches(proc.pid, "event_engine")


@contextmanager
def serving(
    base_env: dict[str, str], kind: str, experiments: str | None = None
) -> Iterator[tuple[Proc, Proc]]:
    """A runtime and a gateway, cold (plain `python -m ...`) or forked; `experiments`: their
    GRPC_EXPERIMENTS, else none in their environment (the entry points must choose)."""
    with pytest.MonkeyPatch.context() as mp:
        if kind == "cold":
            mp.setenv("TETHER_TEST_FORKSERVER", "0")
        mp.delenv("GRPC_EXPERIMENTS", raising=False)
        env = {k: v for k, v in base_env.items() if k != "GRPC_EXPERIMENTS"}
        if experiments is not None:
            env["GRPC_EXPERIMENTS"] = experiments
        rt = start_runtime(env, name=f"runtime-io-path-{kind}", timeout=60)
        try:
            gw = start_gateway(env, rt.addr, name=f"gateway-io-path-{kind}", timeout=60)
        except BaseException:
            rt.terminate()
            raise
    try:
        yield rt, gw
    finally:
        gw.terminate()
        rt.terminate()


async def streamed_runs_switches(rt: Proc, gw: Proc) -> tuple[int, int]:
    """EventEngine context switches in (runtime, gateway) over RUNS runs streamed from start,
    less those of an idle spell as long (what wakes the threads with time, not with calls:
    timers, more of them the more loaded the machine)."""
    loop = asyncio.get_running_loop()
    auth = {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'alice')}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        async with http.post(f"{gw.addr}/v1/conversations", json={}, headers=auth) as r:
            assert r.status == 201, await r.text()
            conv = (await r.json())["conversation"]["id"]
        before = engine_switches(rt), engine_switches(gw)
        started = loop.time()
        for _ in range(RUNS):
            resp = await http.post(
                f"{gw.addr}/v1/conversations/{conv}/runs",
                json={"text": "stream 5 deltas", "idempotencyKey": uuid.uuid4().hex},
                headers={**auth, "Accept": "text/event-stream"},
            )
            assert resp.status == 201, await resp.text()
            frames = await SseReader(resp).events_until("done")
            resp.release()
            assert frames[-1].event == "done"
        ran = engine_switches(rt) - before[0], engine_switches(gw) - before[1]
    before = engine_switches(rt), engine_switches(gw)
    await asyncio.sleep(loop.time() - started)
    idle = engine_switches(rt) - before[0], engine_switches(gw) - before[1]
    return ran[0] - idle[0], ran[1] - idle[1]


@pytest.fixture(scope="module")
async def on_grpcs_default(base_env: dict[str, str]) -> tuple[int, int]:
    with serving(base_env, "cold", experiments=" ") as (rt, gw):
        return await streamed_runs_switches(rt, gw)


@pytest.mark.parametrize("kind", ["cold", "forked"])
async def test_streamed_runs_wake_grpcs_event_engine_threads_far_less_than_by_default(
    base_env: dict[str, str], on_grpcs_default: tuple[int, int], kind: str
) -> None:
    with serving(base_env, kind) as (rt, gw):
        runtime, gateway = await streamed_runs_switches(rt, gw)
    default_runtime, default_gateway = on_grpcs_default
    assert default_gateway >= 3 * RUNS, f"grpc's default path woke them only {default_gateway}"
    assert gateway * 2 < default_gateway, f"gateway: {gateway} against {default_gateway}"
    assert runtime * 2 < default_runtime, f"runtime: {runtime} against {default_runtime}"
