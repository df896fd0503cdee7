"""Tether as a LangGraph server: the official `langgraph-sdk` client, unchanged, against the
gateway's /langgraph mount on real processes (one runtime, two gateways), driving the native
opspilot agent: a stream that ends at the interrupt (its run `success`, the thread
`interrupted`), exact joins from several cut points on the other pod, a resume on the other pod
sent twice at once (one restart), runs.wait, runs.list, reject on a busy thread and cancel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from tether_common.auth import issue_token
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = [pytest.mark.process, pytest.mark.timeout(180)]

MODES = ["values", "updates", "messages-tuple", "custom"]


@pytest.fixture(scope="module")
def gateways(runtime: Proc, base_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    a = start_gateway(base_env, runtime.addr, name="gateway-lg-a")
    b = start_gateway(base_env, runtime.addr, name="gateway-lg-b")
    yield a.addr, b.addr
    for proc in (a, b):
        proc.terminate()


def client(base: str, user: str = "alice") -> LangGraphClient:
    token = issue_token(TEST_SECRET, user)
    return get_client(url=f"{base}/langgraph", headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
async def clients(gateways: tuple[str, str]) -> AsyncIterator[tuple[LangGraphClient, ...]]:
    a, b = client(gateways[0]), client(gateways[1])
    yield a, b
    for c in (a, b):
        await c.aclose()


def ask(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def wire(parts: list[Any]) -> list[tuple[str, Any, str | None]]:
    return [(p.event, p.data, p.id) for p in parts]


async def collect(stream: AsyncIterator[Any]) -> list[Any]:
    return [part async for part in stream]


async def test_stream_to_interrupt_exact_joins_and_one_resume_on_the_other_pod(clients, db):
    a, b = clients
    assistants = await a.assistants.search()
    opspilot = next(x for x in assistants if x["graph_id"] == "opspilot")
    assert (await b.assistants.get(opspilot["assistant_id"]))["graph_id"] == "opspilot"
    service, instance = await abnormal_service(db, prefix="lg")
    thread = await a.threads.create()
    t = thread["thread_id"]
    assert thread["status"] == "idle"

    seen: list[Any] = []
    first = await collect(
        a.runs.stream(
            t,
            opspilot["assistant_id"],
            input=ask(f"restart the abnormal {service} instance"),
            stream_mode=MODES,
            on_run_created=seen.append,
        )
    )
    events = [p.event for p in first]
    assert events[0] == "metadata", events
    run_id = first[0].data["run_id"]
    assert seen and seen[0]["run_id"] == run_id and seen[0]["thread_id"] == t
    ids = [p.id for p in first]
    assert all(ids) and len(set(ids)) == len(ids), "every event has its own id"
    assert "updates" in events and "values" in events
    updates = [p.data for p in first if p.event == "updates"]
    tool_calls = [
        call["name"]
        for u in updates
        for m in u.get("agent", {}).get("messages", [])
        for call in m["tool_calls"]
    ]
    assert tool_calls, updates
    assert "__interrupt__" in updates[-1], updates[-1]
    interrupt = updates[-1]["__interrupt__"][0]
    assert interrupt["value"]["kind"] == "confirm_action" and len(interrupt["id"]) == 32
    assert first[-1].event == "values" and first[-1].data["__interrupt__"] == [interrupt]
    assert first[-1].data["messages"][0]["type"] == "human"

    # The stream ended at the interrupt with its run already finished, as LangGraph's does.
    assert (await a.runs.get(t, run_id))["status"] == "success"
    # (found from the run alone, its log unread: the same as listed from the log)
    assert await a.runs.get(t, run_id) == (await a.runs.list(t))[0]
    assert (await b.threads.get(t))["status"] == "interrupted"
    state = await b.threads.get_state(t)
    assert state["next"] and state["tasks"][0]["interrupts"] == [interrupt]
    assert await executions(db, instance) == 0

    # Joins on the other pod from several cut points: exactly the tail of the first stream.
    for cut in (0, 1, len(first) // 2, len(first) - 1, len(first)):
        last = "0" if cut == 0 else first[cut - 1].id
        joined = await collect(b.runs.join_stream(t, run_id, stream_mode=MODES, last_event_id=last))
        assert wire(joined) == wire(first[cut:]), cut
    # Without stream_mode a join gets every mode Tether streams: the same here.
    assert wire(await collect(b.runs.join_stream(t, run_id, last_event_id="0"))) == wire(first)

    # The resume on the other pod, sent twice at once: one answer, one restart.
    resume = {"resume": True}
    r1, r2 = await asyncio.gather(
        collect(b.runs.stream(t, "opspilot", command=resume, stream_mode=MODES)),
        collect(b.runs.stream(t, "opspilot", command=resume, stream_mode=MODES)),
    )
    assert wire(r1) == wire(r2)
    resumed_id = r1[0].data["run_id"]
    assert r1[0].event == "metadata" and resumed_id != run_id
    assert not any("__interrupt__" in p.data for p in r1 if p.event in ("values", "updates"))
    tools = [
        m["name"]
        for p in r1
        if p.event == "updates"
        for m in p.data.get("tools", {}).get("messages", [])
    ]
    assert tools, "the restart's result comes as a tool message"
    assert r1[-1].event == "values" and r1[-1].data["messages"][-1]["type"] == "ai"
    text = "".join(p.data[0]["content"] for p in r1 if p.event == "messages")
    assert text.strip(), "the model's text streams as message chunks"
    assert text == r1[-1].data["messages"][-1]["content"]
    assert await executions(db, instance) == 1
    # And once more after it finished: the runtime answers with the first resume, nothing new.
    again = await collect(a.runs.stream(t, "opspilot", command=resume, stream_mode=MODES))
    assert wire(again) == wire(r1)
    assert await executions(db, instance) == 1

    assert (await a.runs.get(t, resumed_id))["status"] == "success"
    assert (await a.threads.get(t))["status"] == "idle"
    listed = await a.runs.list(t)
    assert [r["run_id"] for r in listed] == [resumed_id, run_id]
    assert [r["status"] for r in listed] == ["success", "success"]
    assert [await a.runs.get(t, r["run_id"]) for r in listed] == listed
    assert all(r["assistant_id"] == opspilot["assistant_id"] for r in listed)
    # A join of the finished resume run replays it whole, on either pod.
    assert wire(
        await collect(a.runs.join_stream(t, resumed_id, stream_mode=MODES, last_event_id="0"))
    ) == wire(r1)


async def test_wait_returns_the_state_with_the_interrupt_then_a_rejection(clients, db):
    a, b = clients
    service, instance = await abnormal_service(db, prefix="lgw")
    t = (await a.threads.create())["thread_id"]
    paused = await a.runs.wait(t, "opspilot", input=ask(f"restart the abnormal {service} instance"))
    assert paused["__interrupt__"][0]["value"]["kind"] == "confirm_action"
    assert paused["messages"][0]["content"] == f"restart the abnormal {service} instance"
    done = await b.runs.wait(t, "opspilot", command={"resume": False})
    assert "__interrupt__" not in done and done["messages"][-1]["type"] == "ai"
    assert await executions(db, instance) == 0, "rejected: nothing restarted"
    runs = await b.runs.list(t)
    assert len(runs) == 2 and {r["status"] for r in runs} == {"success"}
    joined = await a.runs.join(t, runs[0]["run_id"])
    assert joined["messages"] == done["messages"]


async def test_threads_search_history_delete_and_schemas(clients):
    a, b = clients
    t = (await a.threads.create(metadata={"title": "lg search"}))["thread_id"]
    found = await b.threads.search(status="idle", limit=50)
    assert t in [x["thread_id"] for x in found]
    assert all(x["status"] == "idle" for x in found)
    [state] = await b.threads.get_history(t)
    assert state["values"] == {} and state["next"] == []
    schemas = await a.assistants.get_schemas("opspilot")
    assert schemas["graph_id"] == "opspilot" and schemas["state_schema"] is None
    await a.threads.delete(t)
    with pytest.raises(httpx.HTTPStatusError) as err:
        await b.threads.get(t)
    assert err.value.response.status_code == 404


async def test_bad_input_unknown_thread_and_run_and_no_token(clients, gateways):
    a, _ = clients
    t = (await a.threads.create())["thread_id"]
    with pytest.raises(httpx.HTTPStatusError) as err:
        await a.runs.wait(t, "opspilot", input={"messages": []})
    assert err.value.response.status_code == 422
    assert err.value.response.json()["detail"], "LangGraph's error shape: a detail"
    with pytest.raises(httpx.HTTPStatusError) as err:
        await a.runs.wait(t, "no-such-agent", input=ask("hi"))
    assert err.value.response.status_code == 404
    with pytest.raises(httpx.HTTPStatusError) as err:
        await a.runs.wait(t, "opspilot", command={"resume": True})
    assert err.value.response.status_code == 409, "nothing to resume"
    with pytest.raises(httpx.HTTPStatusError) as err:
        await a.threads.get("00000000-0000-0000-0000-000000000000")
    assert err.value.response.status_code == 404
    with pytest.raises(httpx.HTTPStatusError) as err:
        await a.runs.get(t, "00000000-0000-0000-0000-000000000000")
    assert err.value.response.status_code == 404
    async with httpx.AsyncClient() as raw:
        r = await raw.post(f"{gateways[0]}/langgraph/assistants/search", json={})
        assert r.status_code == 401 and "detail" in r.json()
        # Another user's thread is not found, as Tether's own API answers.
        other = {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'bob')}"}
        r = await raw.get(f"{gateways[0]}/langgraph/threads/{t}", headers=other)
        assert r.status_code == 404, r.text


async def test_reject_on_a_busy_thread_and_cancel(private_env, procs):
    # A slow model (200 pieces, 50 ms each) keeps the run busy long enough to be refused a
    # second one and cancelled. A database of its own: the shared runtime claims no run of it.
    base_env = private_env
    rt = start_runtime({**base_env, "TETHER_SCRIPTED_DELAY_S": "0.05"}, name="runtime-lg-slow")
    procs.append(rt)
    gw = start_gateway(base_env, rt.addr, name="gateway-lg-slow")
    procs.append(gw)
    c = client(gw.addr)
    try:
        t = (await c.threads.create())["thread_id"]
        run = await c.runs.create(t, "opspilot", input=ask("stream 200 deltas"))
        assert run["status"] in ("pending", "running")
        with pytest.raises(httpx.HTTPStatusError) as err:
            await c.runs.create(t, "opspilot", input=ask("again"), multitask_strategy="reject")
        assert err.value.response.status_code == 409
        assert (await c.threads.get(t))["status"] == "busy"
        await c.runs.cancel(t, run["run_id"], wait=True)
        assert (await c.runs.get(t, run["run_id"]))["status"] == "interrupted"
        assert (await c.threads.get(t))["status"] == "idle"

        # on_disconnect=cancel: the client that leaves mid-stretch takes the run with it.
        stream = c.runs.stream(
            t,
            "opspilot",
            input=ask("stream 200 deltas"),
            on_disconnect="cancel",
            stream_mode="messages-tuple",
        )
        parts = [await anext(stream) for _ in range(3)]
        await stream.aclose()  # type: ignore[attr-defined]
        gone = parts[0].data["run_id"]
        for _ in range(100):
            if (await c.runs.get(t, gone))["status"] != "running":
                break
            await asyncio.sleep(0.1)
        assert (await c.runs.get(t, gone))["status"] == "interrupted"
    finally:
        await c.aclose()


async def test_stateless_runs_and_the_messages_mode(clients):
    a, _ = clients
    parts = await collect(
        a.runs.stream(None, "opspilot", input=ask("hello"), stream_mode=["messages", "values"])
    )
    assert parts[0].event == "metadata"
    partial = [p.data for p in parts if p.event == "messages/partial"]
    complete = [p.data for p in parts if p.event == "messages/complete"]
    assert partial and complete, [p.event for p in parts]
    assert partial[-1][0]["content"] == complete[0][0]["content"]
    assert parts[-1].event == "values"
    assert parts[-1].data["messages"][-1]["content"] == complete[0][0]["content"]
    final = await a.runs.wait(None, "opspilot", input=ask("hello"))
    assert final["messages"][-1]["content"] == complete[0][0]["content"]


async def test_the_sdk_stream_survives_a_gateway_crash_exactly(private_env, procs):
    """SIGKILL the gateway mid-stream and start another on its address: the SDK reconnects by
    itself (Location, Last-Event-ID) and the stream goes on with no gap and no duplicate."""
    base_env = private_env  # a database of its own: only the slow runtime works on its runs
    rt = start_runtime({**base_env, "TETHER_SCRIPTED_DELAY_S": "0.05"}, name="runtime-lg-crash")
    procs.append(rt)
    gw = start_gateway(base_env, rt.addr, name="gateway-lg-crash")
    procs.append(gw)
    port = int(gw.addr.rsplit(":", 1)[1])
    c = client(gw.addr)
    try:
        t = (await c.threads.create())["thread_id"]
        stream = c.runs.stream(
            t, "opspilot", input=ask("stream 120 deltas"), stream_mode="messages-tuple"
        )
        parts = [await anext(stream) for _ in range(10)]
        gw.kill()
        procs.append(
            await asyncio.to_thread(
                start_gateway, base_env, rt.addr, name="gateway-lg-crash-2", port=port
            )
        )
        parts += [p async for p in stream]
        run_id = parts[0].data["run_id"]
        seqs = [tuple(int(x) for x in p.id.split("-")) for p in parts]
        assert seqs == sorted(set(seqs)), "no event twice, none out of order"
        text = "".join(p.data[0]["content"] for p in parts if p.event == "messages")
        assert text == "".join(f"t{i} " for i in range(120)), "no event lost"
        assert (await c.runs.get(t, run_id))["status"] == "success"
        whole = await collect(c.runs.join_stream(t, run_id, stream_mode="messages-tuple"))
        assert wire(whole) == wire(parts)
    finally:
        await c.aclose()
