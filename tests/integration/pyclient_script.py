"""Drives a real runtime with tether_client as a user's program would: run by the python of a fresh
virtualenv holding only the tether-client wheel (test_python_client.py), so it imports nothing
else of the repository. `python pyclient_script.py SCENARIO` with TETHER_TARGET, TETHER_TOKEN
(and, per scenario, TARGET_INSTANCE, STREAM_TOKEN, DEAD_TARGET,
STUCK_TARGET); prints `PROGRESS ...` lines while
it works and one `RESULT <json>` line at the end."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from tether_client import (
    RetryPolicy,
    RunEvent,
    TetherClient,
    TetherClientSync,
    TetherError,
    event_kind,
)

TARGET = os.environ["TETHER_TARGET"]
TOKEN = os.environ["TETHER_TOKEN"]


def say(*parts: object) -> None:
    print(*parts, flush=True)


def summary(events: list[RunEvent]) -> dict[str, Any]:
    return {
        "seqs": [e.sequence for e in events],
        "kinds": [event_kind(e) for e in events],
        "text": "".join(e.text_delta.delta for e in events if event_kind(e) == "text_delta"),
    }


async def read_line() -> str:
    return (await asyncio.to_thread(sys.stdin.readline)).strip()


async def flow(
    client: TetherClient, prompt: str, *, wait_at_interrupt: bool = False
) -> dict[str, Any]:
    """Start, stream to the interrupt, approve, stream to done."""
    conv = await client.create_conversation("pyclient flow")
    run = await client.start(conv.id, prompt)
    events: list[RunEvent] = []
    stream = client.stream(run.id)
    async for event in stream:
        events.append(event)
        if event_kind(event) == "interrupt":
            say("PROGRESS interrupt", event.sequence)
            if wait_at_interrupt:
                assert await read_line() == "GO"
            await client.approve(run.id, event.interrupt.interrupt_id)
    final = await client.get_run(run.id)
    return {"run_id": run.id, "status": final.status, "reconnects": stream.reconnects,
            **summary(events)}  # fmt: skip


async def kill_mid_stream(client: TetherClient) -> dict[str, Any]:
    """A long text run: PROGRESS after some deltas (the test SIGKILLs the runtime then), then the
    approve flow, stopping at its interrupt until the test says GO."""
    conv = await client.create_conversation("pyclient kill")
    run = await client.start(conv.id, "stream 300 deltas")
    events: list[RunEvent] = []
    stream = client.stream(run.id)
    async for event in stream:
        events.append(event)
        if len(events) == 30:
            say("PROGRESS streaming", event.sequence)
    text_run = {"run_id": run.id, "reconnects": stream.reconnects, **summary(events)}
    approve_run = await flow(
        client, f"restart {os.environ['TARGET_INSTANCE']} in prod", wait_at_interrupt=True
    )
    return {"text_run": text_run, "approve_run": approve_run}


async def double_approve(client: TetherClient) -> dict[str, Any]:
    conv = await client.create_conversation("pyclient double")
    run = await client.start(conv.id, f"restart {os.environ['TARGET_INSTANCE']} in prod")
    events: list[RunEvent] = []
    answers: list[str] = []
    async for event in client.stream(run.id):
        events.append(event)
        if event_kind(event) == "interrupt":
            iid = event.interrupt.interrupt_id
            both = await asyncio.gather(client.approve(run.id, iid), client.approve(run.id, iid))
            answers = [a.SerializeToString(deterministic=True).hex() for a in both]
    return {"answers": answers, **summary(events)}


async def expect(name: str, call: Any, out: dict[str, Any]) -> None:
    try:
        await call
    except TetherError as err:
        out[name] = [type(err).__name__, err.reason, err.code.name, err.message]
        return
    out[name] = ["no error"]


async def errors(client: TetherClient) -> dict[str, Any]:
    """Each error class from a real call."""
    out: dict[str, Any] = {}
    conv = await client.create_conversation("pyclient errors")
    # A decided interrupt, and a finished run.
    done = await flow(client, f"restart {os.environ['TARGET_INSTANCE']} in prod")
    first = await client.get_run(done["run_id"])
    seen = [e async for e in client.stream(done["run_id"])]
    iid = next(e.interrupt.interrupt_id for e in seen if event_kind(e) == "interrupt")
    await expect("run_not_found", client.get_run("run_doesnotexist"), out)
    await expect("conversation_not_found", client.get_conversation("conv_doesnotexist"), out)
    await expect("already_resolved", client.reject(done["run_id"], iid), out)
    await expect("interrupt_not_found", client.approve(done["run_id"], "intr_nope"), out)
    await expect("not_cancellable", client.cancel(first.id), out)
    await client.start(conv.id, "hello", idempotency_key="pyclient-key-1")
    await expect(
        "key_reused", client.start(conv.id, "another body", idempotency_key="pyclient-key-1"), out
    )
    await expect("agent_not_found", client.start(conv.id, "hello", agent="no-such-agent"), out)
    await expect("invalid_argument", client.create_conversation("x" * 300), out)
    # A pending interrupt answered the wrong way, then cancelled.
    prun = await client.start(conv.id, f"restart {os.environ['TARGET_INSTANCE']} in prod")
    async for event in client.stream(prun.id):
        if event_kind(event) == "interrupt":
            pending = event.interrupt.interrupt_id
            await expect("invalid_answer", client.answer(prun.id, pending, option="x"), out)
            await client.cancel(prun.id, "test over")
    # A token that may only read one run's stream may not act.
    async with TetherClient(TARGET, token=os.environ["STREAM_TOKEN"]) as reader:
        await expect("permission_denied", reader.list_agents(), out)
    async with TetherClient(TARGET, token="not-a-jwt") as bad:
        await expect("unauthenticated", bad.list_agents(), out)
    fast = RetryPolicy(attempts=2, initial_backoff_s=0.01)
    async with TetherClient(os.environ["DEAD_TARGET"], token=TOKEN, retry=fast) as dead:
        await expect("unavailable", dead.get_run(first.id), out)
    # A server that accepts the connection and never speaks: the call waits out its deadline.
    async with TetherClient(os.environ["STUCK_TARGET"], token=TOKEN) as stuck:
        await expect("deadline", stuck.list_agents(deadline_s=0.5), out)
    agents = await client.list_agents()
    out["agents"] = [a.name for a in agents.agents]
    out["default_agent"] = agents.default_agent
    return out


def sync_facade() -> dict[str, Any]:
    with TetherClientSync(TARGET, token=TOKEN) as client:
        conv = client.create_conversation("pyclient sync")
        run = client.start(conv.id, "stream 5 deltas")
        events = list(client.stream(run.id))
        return {"status": client.get_run(run.id).status, **summary(events)}


async def main(scenario: str) -> dict[str, Any]:
    if scenario == "sync":
        return await asyncio.to_thread(sync_facade)
    async with TetherClient(TARGET, token=TOKEN) as client:
        if scenario == "flow":
            return await flow(client, f"restart {os.environ['TARGET_INSTANCE']} in prod")
        if scenario == "kill":
            return await kill_mid_stream(client)
        if scenario == "double":
            return await double_approve(client)
        if scenario == "errors":
            return await errors(client)
    raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    result = asyncio.run(main(sys.argv[1]))
    say("RESULT", json.dumps(result))
