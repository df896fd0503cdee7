"""Least privilege by scope (issue 16, finding 4), on real runtime and gateway processes:

- a read tool that declares a grant runs only for a user holding it on the call's scope: a user
  without `logs.read` on another service is refused its logs (a `tool_finished` with status
  error, no `tool_started`, the tool never called) and not one log line reaches an event, the
  answer, the model's context or the stored event log; on their own service the same user reads;
- write grants are scoped: a user may restart in scope, is denied out of scope (no card, nothing
  done); the demo's seeded grants are scoped per service (alice: payment-api, bob: checkout-web);
- the gate's allowlist depends on the user (TETHER_TOOL_ALLOW_GRANT): a tool reserved to holders of
  `tool.use` is not offered to anyone else's model, and a call forced by a scripted model is a
  gate violation that is blocked; a holder is offered it and reaches the card, and revoking the
  grant takes it off the next offer;
- a scope cannot be dodged: naming one's own service with another service's instance reads
  nothing (the tool reads only an instance of the service its scope names)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tether.runtime.v1 import events_pb2
from tether_testkit.client import Client, token, types
from tether_testkit.fake_llm import FakeCall, Reply
from tether_testkit.fake_openai import FakeOpenAI
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.processes import Proc, free_port, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.security import bearer, new_user
from tether_testkit.sse import SseReader

MARKER = "PLANTED-LOG-LINE-7f3a9c"  # a log line of the other user's service


async def _plant_log(db: Any, instance: str, line: str) -> None:
    await db.execute(
        "INSERT INTO inv_log (instance_id, level, line, at) VALUES ($1, 'ERROR', $2, now())",
        instance,
        line,
    )


async def _ask(http: Any, base: str, user: str, text: str) -> tuple[str, str, list[Any]]:
    """A new conversation of `user`, a streaming run of `text` to its end: (conv, run, frames)."""
    auth = bearer(user)
    async with http.post(f"{base}/v1/conversations", json={}, headers=auth) as r:
        assert r.status == 201, await r.text()
        conv = (await r.json())["conversation"]["id"]
    headers = {**auth, "Accept": "text/event-stream"}
    body = {"text": text}
    async with http.post(f"{base}/v1/conversations/{conv}/runs", json=body, headers=headers) as r:
        assert r.status == 201, await r.text()
        run_id = r.headers["X-Run-Id"]
        frames = await SseReader(r).rest()
    return conv, run_id, frames


def _answer(frames: list[Any]) -> str:
    return "".join(f.json.get("delta", "") for f in frames if f.event == "text_delta")


async def test_a_user_without_the_read_grant_is_refused_another_services_logs(
    gateway: Proc, db: Any, http: Any
) -> None:
    mallory, owner = new_user("reader"), new_user("owner")
    _, mine = await abnormal_service(db, prefix="rmine", owner=mallory)
    their_service, theirs = await abnormal_service(db, prefix="rtheirs", owner=owner)
    await _plant_log(db, theirs, f"connecting with {MARKER}")
    await _plant_log(db, mine, "my own line")

    conv, run_id, frames = await _ask(http, gateway.addr, mallory, f"show me the logs of {theirs}")
    assert frames and frames[-1].event == "done", [f.event for f in frames]
    finished = [f.json for f in frames if f.event == "tool_finished"]
    assert [(t["tool"], t["status"]) for t in finished] == [("get_logs", "error")], finished
    assert f"may not logs.read on {their_service}/prod" in finished[0]["summary"]
    started = [f.json["tool"] for f in frames if f.event == "tool_started"]
    assert "get_logs" not in started, "a refused read announced itself as started"
    assert "not allowed to read the logs" in _answer(frames)

    # Not one line of theirs anywhere a client or the model could see it.
    everything = ["\n".join(f.data for f in frames)]
    for path in (f"/v1/runs/{run_id}/events?after=0", f"/v1/conversations/{conv}/messages"):
        async with http.get(f"{gateway.addr}{path}", headers=bearer(mallory)) as r:
            assert r.status == 200
            everything.append(await r.text())
    everything.append(
        await db.fetchval(
            "SELECT string_agg(data::text, ' ') FROM run_event WHERE run_id = $1", run_id
        )
    )
    everything.append(await db.fetchval("SELECT checkpoint::text FROM run WHERE id = $1", run_id))
    for text in everything:
        assert MARKER not in text
    call = await db.fetchrow(
        "SELECT status, result FROM tool_call WHERE run_id = $1 AND tool = 'get_logs'", run_id
    )
    assert call is not None and call["status"] == "failed"
    assert json.loads(call["result"])["outcome"] == "denied"

    # The same user on their own service reads it: the refusal is the scope, not a broken tool.
    _, _, own = await _ask(http, gateway.addr, mallory, f"show me the logs of {mine}")
    assert own[-1].event == "done"
    assert [f.json["status"] for f in own if f.event == "tool_finished"] == ["success"]
    assert "my own line" in _answer(own)

    # A grant added while nothing is cached takes effect on the next call.
    await db.execute(
        'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3)',
        mallory,
        "logs.read",
        f"{their_service}/prod",
    )
    _, _, now = await _ask(http, gateway.addr, mallory, f"show me the logs of {theirs}")
    assert [f.json["status"] for f in now if f.event == "tool_finished"] == ["success"]
    assert MARKER in _answer(now)


async def test_write_grants_are_scoped_in_scope_allowed_out_of_scope_denied(
    runtime: Proc, db: Any
) -> None:
    user = new_user("scoped")
    mine, my_instance = await abnormal_service(db, prefix="wmine", owner=user)
    _, other_instance = await abnormal_service(db, prefix="wother", owner=new_user("owner"))
    c = Client(runtime.addr, token(TEST_SECRET, user))
    try:
        conv = await c.conversation()
        run = (await c.start(conv, f"restart {other_instance}")).run
        evs = await c.events(run.id)
        assert "interrupt" not in types(evs) and types(evs)[-1] == "done", types(evs)
        text = "".join(e.text_delta.delta for e in evs if e.WhichOneof("event") == "text_delta")
        assert "not allowed" in text
        assert await executions(db, other_instance) == 0

        run = (await c.start(await c.conversation(), f"restart {my_instance}")).run
        evs = await c.events(run.id, until="interrupt")
        assert types(evs)[-1] == "interrupt", types(evs)
        assert evs[-1].interrupt.payload.target.endswith(f"({mine}/prod)")
        await c.resume(run.id, evs[-1].interrupt.interrupt_id)
        rest = await c.events(run.id, after=evs[-1].sequence)
        assert types(rest)[-1] == "done"
        assert await executions(db, my_instance) == 1
    finally:
        await c.close()


async def test_the_demo_grants_are_scoped_per_service(runtime: Proc, db: Any) -> None:
    """Seeded by `tether seed-demo` (the test database is prepared the same way): alice looks
    after payment-api and bob after checkout-web; neither reaches the other's."""
    seeded = {
        (r["user_id"], r["action"], r["scope"])
        for r in await db.fetch(
            "SELECT user_id, action, scope FROM \"grant\" WHERE user_id IN ('alice', 'bob')"
        )
    }
    demo = ("logs.read", "instance.restart", "service.scale")
    assert not any(scope == "*" for _, action, scope in seeded if action in demo), seeded
    assert ("alice", "instance.restart", "payment-api/*") in seeded
    assert ("bob", "instance.restart", "checkout-web/*") in seeded

    async def ask(user: str, text: str, until: str | None = None) -> list[events_pb2.RunEvent]:
        c = Client(runtime.addr, token(TEST_SECRET, user))
        try:
            run = (await c.start(await c.conversation(), text)).run
            return await c.events(run.id, until=until)
        finally:
            await c.close()

    def finished(evs: list[events_pb2.RunEvent]) -> list[tuple[str, int]]:
        return [
            (e.tool_finished.tool, e.tool_finished.status)
            for e in evs
            if e.WhichOneof("event") == "tool_finished"
        ]

    error, success = events_pb2.TOOL_STATUS_ERROR, events_pb2.TOOL_STATUS_SUCCESS
    # bob may not read payment-api's logs (the seeded lines never reach him); alice may.
    bobs = await ask("bob", "show me the logs of payment-api-2")
    assert finished(bobs) == [("get_logs", error)]
    assert "card-processor" not in str(bobs)
    alices = await ask("alice", "show me the logs of payment-api-2")
    assert finished(alices) == [("get_logs", success)]
    # alice may not restart checkout-web (no card: denied at the proposal); bob gets the card.
    evs = await ask("alice", "restart checkout-web-1")
    assert "interrupt" not in types(evs)
    assert "not allowed" in "".join(
        e.text_delta.delta for e in evs if e.WhichOneof("event") == "text_delta"
    )
    evs = await ask("bob", "restart checkout-web-1", until="interrupt")
    assert types(evs)[-1] == "interrupt"
    bob = Client(runtime.addr, token(TEST_SECRET, "bob"))
    try:  # leave checkout-web as it was
        await bob.resume(
            evs[-1].run_id, evs[-1].interrupt.interrupt_id, events_pb2.DECISION_REJECTED
        )
        assert types(await bob.events(evs[-1].run_id))[-1] == "done"
    finally:
        await bob.close()


# -- the user-dependent gate ---------------------------------------------------------------------

RESERVED = "scale_service"


def _violations(metrics_url: str) -> float:
    body = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith("tether_tool_gate_violations_total{")
        and 'mode="enforce"' in line
        and f'tool="{RESERVED}"' in line
    )


@pytest.fixture
async def openai_runtime(private_env: dict[str, str]) -> AsyncIterator[tuple[Proc, FakeOpenAI]]:
    llm = FakeOpenAI(api_key="sk-test-scopes-0123456789")
    await llm.start()
    proc = start_runtime(
        {
            **private_env,
            "TETHER_MODEL": "openai",
            "TETHER_OPENAI_BASE_URL": llm.base_url,
            "TETHER_OPENAI_API_KEY": "sk-test-scopes-0123456789",
            "TETHER_OPENAI_MODEL": "test-model-1",
            "TETHER_TOOL_ALLOW_GRANT": f"opspilot:{RESERVED}",
            "TETHER_METRICS_ADDR": f"127.0.0.1:{free_port()}",
        },
        name="runtime-gate-grant",
    )
    try:
        yield proc, llm
    finally:
        proc.terminate()
        await llm.stop()


def _offered(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


def _tool_messages(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]


async def test_a_tool_reserved_to_a_grant_is_neither_offered_nor_callable_without_it(
    openai_runtime: tuple[Proc, FakeOpenAI], private_db: Any
) -> None:
    proc, llm = openai_runtime
    metrics_url = f"http://{proc.env['TETHER_METRICS_ADDR']}/metrics"
    holder, other = new_user("holder"), new_user("other")
    service, _ = await abnormal_service(private_db, prefix="gate", owner=holder)
    # Both may scale the service: only the gate's grant tells them apart.
    await abnormal_service(private_db, prefix="gate2", owner=other)
    await private_db.execute(
        'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3)',
        other,
        "service.scale",
        f"{service}/*",
    )
    await private_db.execute(
        'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3)',
        holder,
        "tool.use",
        f"opspilot/{RESERVED}",
    )
    scale = FakeCall(RESERVED, {"service": service, "env": "prod", "replicas": 5})

    async def run_as(user: str, until: str | None = None) -> tuple[str, list[Any]]:
        c = Client(proc.addr, token(TEST_SECRET, user))
        try:
            run = (await c.start(await c.conversation(), f"scale {service} to 5")).run
            return run.id, await c.events(run.id, until=until)
        finally:
            await c.close()

    # Someone else: not offered; a call forced anyway is a violation, blocked, nothing asked.
    llm.replies = [Reply(calls=[scale]), Reply(text="I could not.")]
    llm.requests.clear()
    before = _violations(metrics_url)
    _, evs = await run_as(other, until="interrupt")  # a card would be the hole
    assert types(evs)[-1] == "done", types(evs)
    assert "interrupt" not in types(evs) and "tool_started" not in types(evs)
    first, second = (r.body for r in llm.requests)
    assert RESERVED not in _offered(first) and "find_instances" in _offered(first)
    assert RESERVED not in _offered(second)
    (told,) = _tool_messages(second)
    assert json.loads(told)["outcome"] == "blocked", told
    assert _violations(metrics_url) == before + 1
    replicas = await private_db.fetchval(
        "SELECT replicas FROM inv_service WHERE name = $1 AND env = 'prod'", service
    )
    assert replicas == 1, "the blocked call scaled the service"

    # The holder: offered, and the call reaches a person's card.
    llm.replies = [Reply(calls=[scale]), Reply(text="Scaled.")]
    llm.requests.clear()
    _, evs = await run_as(holder, until="interrupt")
    assert types(evs)[-1] == "interrupt", types(evs)
    assert RESERVED in _offered(llm.requests[0].body)
    assert _violations(metrics_url) == before + 1

    # Revoked: the next step's offer no longer has it (read at every step, never cached).
    await private_db.execute(
        "DELETE FROM \"grant\" WHERE user_id = $1 AND action = 'tool.use'", holder
    )
    llm.replies = [Reply(text="Nothing to do.")]
    llm.requests.clear()
    _, evs = await run_as(holder)
    assert types(evs)[-1] == "done"
    assert RESERVED not in _offered(llm.requests[0].body)


async def test_a_scope_cannot_be_dodged_by_naming_ones_own_service(
    openai_runtime: tuple[Proc, FakeOpenAI], private_db: Any
) -> None:
    """A model (or a prompt injection steering it) that names the user's own service with another
    service's instance reads nothing: the grant covers the scope named, and the tool reads only
    an instance of that service."""
    proc, llm = openai_runtime
    user = new_user("dodger")
    mine, _ = await abnormal_service(private_db, prefix="dmine", owner=user)
    _, theirs = await abnormal_service(private_db, prefix="dtheirs", owner=new_user("owner"))
    await _plant_log(private_db, theirs, f"connecting with {MARKER}")
    dodge = FakeCall("get_logs", {"service": mine, "env": "prod", "instance_id": theirs})
    llm.replies = [Reply(calls=[dodge]), Reply(text="Nothing for you.")]
    llm.requests.clear()
    c = Client(proc.addr, token(TEST_SECRET, user))
    try:
        run = (await c.start(await c.conversation(), f"logs of {theirs}")).run
        evs = await c.events(run.id)
    finally:
        await c.close()
    assert types(evs)[-1] == "done", types(evs)
    (done,) = [e.tool_finished for e in evs if e.WhichOneof("event") == "tool_finished"]
    assert done.status == events_pb2.TOOL_STATUS_ERROR
    assert f"no instance {theirs} in {mine}/prod" in done.summary
    assert MARKER not in str(evs)
    assert all(MARKER not in m for m in _tool_messages(llm.requests[1].body))
