"""gRPC's socket I/O stays on grpc.aio's poller thread in the serving processes
(tether_common.grpc_io_path): runs streamed through a real gateway and runtime leave gRPC core's
EventEngine threads idle, whether the processes start cold (`python -m tether_runtime`, `python -m
tether_cli.main gateway`, as a deployment runs them) or from the tests' warm fork server. It fails
if an entry point lets grpc load before the choice is made, or if a grpcio release makes the
EventEngine path permanent."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from tether_common.auth import issue_token
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import SseReader

pytestmark = pytest.mark.process
RUNS = 30
QUIET = 3  # EventEngine switches a run may still make: its timers (measured: 1-1.5)


def engine_switches(proc: Proc) -> int:
    """Context switches so far of the process's gRPC EventEngine threads (named by grpc)."""
    total = 0
    for task in Path(f"/proc/{proc.pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() != "event_engine":
                continue
            for line in (task / "status").read_text().splitlines():
                if "ctxt_switches:" in line:  # voluntary_ and nonvoluntary_
                    total += int(line.split(":", 1)[1])
        except FileNotFoundError:
            continue  # a thread that ended meanwhile
    return total


@pytest.fixture(params=["cold", "forked"])
def pair(
    request: pytest.FixtureRequest, base_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Proc, Proc]]:
    if request.param == "cold":
        monkeypatch.setenv("TETHER_TEST_FORKSERVER", "0")  # plain `python -m ...` processes
    # Not inherited from the tests' own process (conftest chose it there): the entry points must.
    monkeypatch.delenv("GRPC_EXPERIMENTS", raising=False)
    env = {k: v for k, v in base_env.items() if k != "GRPC_EXPERIMENTS"}
    rt = start_runtime(env, name=f"runtime-io-path-{request.param}", timeout=60)
    gw = start_gateway(env, rt.addr, name=f"gateway-io-path-{request.param}", timeout=60)
    try:
        yield rt, gw
    finally:
        gw.terminate()
        rt.terminate()


async def test_streamed_runs_leave_grpcs_event_engine_threads_idle(pair: tuple[Proc, Proc]) -> None:
    rt, gw = pair
    auth = {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'alice')}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        async with http.post(f"{gw.addr}/v1/conversations", json={}, headers=auth) as r:
            assert r.status == 201, await r.text()
            conv = (await r.json())["conversation"]["id"]
        before = engine_switches(rt), engine_switches(gw)
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
        after = engine_switches(rt), engine_switches(gw)
    runtime_switches, gateway_switches = (a - b for a, b in zip(after, before, strict=True))
    # On the EventEngine path (GRPC_EXPERIMENTS set to nothing): 11 a run in the gateway and 6
    # in the runtime; here 1-1.5 in each, its timers.
    assert gateway_switches < QUIET * RUNS, f"gateway: {gateway_switches} EventEngine switches"
    assert runtime_switches < QUIET * RUNS, f"runtime: {runtime_switches} EventEngine switches"
