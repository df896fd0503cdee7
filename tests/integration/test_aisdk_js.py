"""The AI SDK's UI message stream (v1) at /ai-sdk: the official `ai` package's chat client
(AbstractChat + DefaultChatTransport, what useChat runs), unmodified, on real processes (one
runtime, two gateways) driving the native opspilot agent (js/aisdk_flow.mjs): a turn on pod A
ends at the write tool's `tool-approval-request`; two tabs approve on pod B at once (one
restart), each continuing the same assistant message; a second turn cut mid-stream is resumed
on the other pod through GET .../stream (replayed from its `start`, no word repeated or lost),
and re-read with `Last-Event-ID` at several cut points exactly; an approval's continuation (the
second request of a turn) cut mid-answer and resumed the same way
(js/aisdk_continuation_resume.mjs, on a runtime of its own whose words come slowly); then bad
input, a clear 4xx that changes nothing."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from tether_common.auth import issue_token
from tether_testkit import stores
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.node import run_node
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET

SCRIPT = Path(__file__).parent / "js" / "aisdk_flow.mjs"

pytestmark = [pytest.mark.process, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def stack(base_env: dict[str, str], database_url: str) -> Iterator[tuple[str, str]]:
    """Its own runtime (words stream slowly enough to cut a turn mid-stream) on the session's
    database, and two gateways."""
    env = {**base_env, "TETHER_SCRIPTED_DELAY_S": "0.03"}
    procs: list[Proc] = [start_runtime(env, name="runtime-aisdk")]
    procs.append(start_gateway(env, procs[0].addr, name="gateway-aisdk-a"))
    procs.append(start_gateway(env, procs[0].addr, name="gateway-aisdk-b"))
    yield procs[1].addr, procs[2].addr
    for proc in procs:
        proc.terminate()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_the_official_client_approves_across_pods_and_resumes_exactly(stack, db):
    service, instance = await abnormal_service(db, prefix="aisdk")
    choice, first_choice = await abnormal_service(db, prefix="aisdksel")
    second_choice = f"{choice}-2"
    await db.execute(
        "INSERT INTO inv_instance (id, service, env, status) VALUES ($1, $2, 'prod', 'abnormal')",
        second_choice,
        choice,
    )
    scale, _ = await abnormal_service(db, prefix="aisdkinp")
    token = issue_token(TEST_SECRET, "alice")
    r = await run_node(str(SCRIPT), stack[0], stack[1], token, service, choice, scale)

    # Pod A: the lookup (a read tool, its output), then the write's approval request; the
    # stream finished there, and no turn is active while the card waits.
    first = r["first"]
    assert first["role"] == "assistant" and first["id"].startswith("msg-run_")
    lookup, gated = first["tools"]
    assert lookup["state"] == "output-available"
    assert gated["type"] == "tool-restart_instance" and gated["state"] == "approval-requested"
    assert gated["approval"]["id"].startswith("int_")
    assert gated["input"] == {"summary": f"instance_id={instance}"}
    assert r["whileWaiting"] == 204

    # Pod B, two tabs approving at once: one restart; each continued the same message.
    one, two = r["approved"]
    assert one == two, "both tabs got the same continuation"
    assert one["status"] == "ready" and one["errors"] == [] and one["count"] == 2
    assert one["id"] == first["id"], "the reply continues the same assistant message"
    assert one["parts"][:4] == first["parts"], one["parts"]
    restart = one["tools"][1]
    assert restart["state"] == "output-available" and restart["output"].startswith("restarted")
    assert restart["approval"] == {"id": gated["approval"]["id"], "approved": True}
    assert one["text"].startswith("Done: restarted")
    assert await executions(db, instance) == 1
    assert r["afterDone"] == 204

    # The second turn, cut on pod A after its first words and resumed on pod B by a fresh
    # chat: the whole answer once, as the raw read of the same resume has it.
    resumed, whole = r["resumed"], r["whole"]
    assert resumed["status"] == "ready" and resumed["errors"] == [], resumed
    assert resumed["count"] == 4 and resumed["role"] == "assistant"
    assert resumed["id"] != first["id"], "a new turn is a new message"
    deltas = [d for d in whole["data"] if '"text-delta"' in d]
    assert len(deltas) > 3 and resumed["text"]
    assert resumed["text"] == "".join(json.loads(d)["delta"] for d in deltas), (
        "no word repeated or lost"
    )
    assert whole["ids"][: len(resumed["headIds"])] == resumed["headIds"], "the POST's ids"
    assert whole["data"][0].startswith('{"type":"start"') and whole["data"][-1] == "[DONE]"
    assert len(set(whole["ids"])) == len(whole["ids"]) and all(whole["ids"])
    # Last-Event-ID on the other pod at several cut points: exactly the tail; 204 past the end.
    assert [c["cut"] for c in r["cuts"]][-1] == len(whole["ids"])
    assert all(c["exact"] for c in r["cuts"]), r["cuts"]
    assert r["cuts"][-1]["status"] == 204

    # A choice and a form: data-tether-interrupt parts answered by their responseSchema with
    # tether.resume on the other pod, then the write's approval; one assistant message each.
    choice_flow, form = r["choice"], r["form"]
    for flow in (choice_flow, form):
        assert flow["errors"] == [] and flow["count"] == 2, flow
        assert flow["asked"][1] == "approval" and flow["text"].startswith("Done: ")
        assert flow["parts"][-1] == ["text", "done"]
    assert choice_flow["asked"][0] == "select_option"
    assert choice_flow["answered"] == [["select_option", "responded"]]
    options = choice_flow["options"]["properties"]["value"]["oneOf"]
    assert [o["const"] for o in options] == [first_choice, second_choice]
    assert ["tool-select_option", "output-available"] in choice_flow["parts"]
    statuses = dict(
        await db.fetch(
            "SELECT id, status FROM inv_instance WHERE id = ANY($1)", [first_choice, second_choice]
        )
    )
    assert statuses == {first_choice: "abnormal", second_choice: "healthy"}
    assert form["asked"][0] == "input_required"
    assert form["options"]["required"] == ["replicas"]
    assert '"replicas": 3' in form["text"]


async def _counts(db: Any) -> tuple[int, int, int]:
    return (
        await db.fetchval("SELECT count(*) FROM conversation WHERE user_id = 'alice'"),
        await db.fetchval("SELECT count(*) FROM run WHERE user_id = 'alice'"),
        await db.fetchval("SELECT count(*) FROM client_ref WHERE user_id = 'alice'"),
    )


async def test_bad_input_is_a_clear_4xx_and_changes_nothing(stack, db, http):
    base = stack[0]
    auth = {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'alice')}"}
    turn = [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}]

    def body(**over: Any) -> dict[str, Any]:
        return {"id": str(uuid.uuid4()), "messages": turn, "trigger": "submit-message"} | over

    approval = {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {
                "type": "tool-restart_instance",
                "toolCallId": "c1",
                "state": "approval-responded",
                "approval": {"id": "int_x", "approved": True},
            }
        ],
    }
    before = await _counts(db)
    cases: list[tuple[str, dict[str, Any], int, str]] = [
        ("/ai-sdk/opspilot/chat", body(id=None), 400, "id must be"),
        ("/ai-sdk/opspilot/chat", body(messages=[]), 400, "must end"),
        ("/ai-sdk/opspilot/chat", body(trigger="regenerate-message"), 400, "regenerated"),
        ("/ai-sdk/opspilot/chat", body(messages=[{**turn[0], "parts": []}]), 400, "no text"),
        ("/ai-sdk/opspilot/chat", body(tether={"resume": [{"interruptId": "i"}]}), 400, "status"),
        ("/ai-sdk/nosuchagent/chat", body(), 404, "not found"),
        # An approval on a chat that waits on nothing: refused, no conversation made for it.
        ("/ai-sdk/opspilot/chat", body(messages=[*turn, approval]), 409, "no interrupt"),
    ]
    for path, payload, status, words in cases:
        async with http.post(base + path, json=payload, headers=auth) as resp:
            answer = await resp.json()
            assert resp.status == status, (payload, answer)
            assert words in answer["error"]["message"], answer
    async with http.post(base + "/ai-sdk/opspilot/chat", json=body()) as resp:
        assert resp.status == 401
    # The session cookie acts only with its CSRF token (as on /v1).
    async with http.post(base + "/v1/session", headers=auth) as resp:
        session = resp.cookies["tether_session"].value
    cookie = {"Cookie": f"tether_session={session}", "Origin": base}
    async with http.post(base + "/ai-sdk/opspilot/chat", json=body(), headers=cookie) as resp:
        assert resp.status == 403 and (await resp.json())["error"]["code"] == "CSRF_TOKEN_INVALID"
    async with http.get(base + "/ai-sdk/opspilot/chat/bad%20id/stream", headers=auth) as resp:
        assert resp.status == 400
    async with http.get(base + "/ai-sdk/nosuchagent/chat/c1/stream", headers=auth) as resp:
        assert resp.status == 404
    async with http.get(base + f"/ai-sdk/opspilot/chat/{uuid.uuid4()}/stream", headers=auth) as r:
        assert r.status == 204, "an unknown chat has no active turn"
    assert await _counts(db) == before


CONTINUATION = Path(__file__).parent / "js" / "aisdk_continuation_resume.mjs"


@pytest.fixture(scope="module")
def slow_stack(admin_dsn: str, base_env: dict[str, str]) -> Iterator[tuple[str, str, str]]:
    """A runtime whose words come 2.5 s apart, alone on a database of its own (on the session's
    database the shared runtime, with no delay, claimed the run in CI and the turn ended before
    the resume: 204), so a continuation's few words (`Done: restarted …`) outlast a cut and a
    resume on a loaded machine; and two gateways. Yields both gateways and the database."""
    dsn = asyncio.run(stores.create_fresh_database(admin_dsn))
    env = {**base_env, "DATABASE_URL": dsn, "TETHER_SCRIPTED_DELAY_S": "2.5"}
    procs: list[Proc] = [start_runtime(env, name="runtime-aisdk-slow")]
    try:
        procs.append(start_gateway(env, procs[0].addr, name="gateway-aisdk-slow-a"))
        procs.append(start_gateway(env, procs[0].addr, name="gateway-aisdk-slow-b"))
        yield procs[1].addr, procs[2].addr, dsn
    finally:
        for proc in procs:
            proc.terminate()
        asyncio.run(stores.drop_database(admin_dsn, dsn))


async def test_a_continuation_cut_mid_answer_resumes_exactly_on_the_other_pod(slow_stack):
    """The second request of a turn (the approval's, which continues the same assistant message)
    cut after its first words; useChat's resume (GET .../stream) on the other pod brings the
    whole message back: the run's every stretch as one message, each tool part once, the
    answer's words once, in order; Last-Event-ID inside the continuation gives exactly the tail."""
    db = await asyncpg.connect(slow_stack[2])
    try:
        await _continuation(slow_stack, db)
    finally:
        await db.close()


async def _continuation(slow_stack: tuple[str, str, str], db: Any) -> None:
    service, instance = await abnormal_service(db, prefix="aisdkcont")
    token = issue_token(TEST_SECRET, "alice")
    r = await run_node(str(CONTINUATION), slow_stack[0], slow_stack[1], token, service)
    print(f"the continuation's rest streamed for {r['resumedAfterMs']} ms after the cut")

    asked = r["asked"]
    assert asked["id"].startswith("msg-run_")
    # The cut: the continuation's `start` (same message), the approval's answer, the tool's
    # output, and the first words; then the connection failed (the client saw an error).
    cut = r["cut"]
    assert cut["status"] == "error" and cut["errors"] == 1, cut
    assert cut["parts"][0] == "start" and "text-delta" in cut["parts"], cut
    assert "tool-approval-response" in cut["parts"] and "tool-output-available" in cut["parts"]
    assert "finish" not in cut["parts"] and "[DONE]" not in cut["parts"], "cut before its end"

    resumed, whole = r["resumed"], r["whole"]
    assert resumed["status"] == "ready" and resumed["errors"] == [], resumed
    assert resumed["count"] == 2 and resumed["id"] == asked["id"], "the same assistant message"
    lookup, restart = resumed["tools"]
    assert lookup["type"] == "tool-find_instances" and lookup["state"] == "output-available"
    assert restart["type"] == "tool-restart_instance" and restart["state"] == "output-available"
    assert restart["output"].startswith(f"restarted {instance}")
    assert restart["approval"]["approved"] is True
    assert len(resumed["tools"]) == 2, "each tool part once"
    # The replay: the whole run as one message (each stretch's `start` names it; the first
    # stretch's `finish` and `[DONE]` left out), unique ids; the cut POST's ids are the same
    # events' (one run, one numbering on every pod and in both views).
    data = [json.loads(d) for d in whole["data"][:-1]]
    types = [d["type"] for d in data]
    assert whole["data"][-1] == "[DONE]" and types.count("finish") == 1, types
    assert [d for d in data if d["type"] == "start"] == 2 * [
        {"type": "start", "messageId": asked["id"]}
    ]
    assert len(set(whole["ids"])) == len(whole["ids"]) and all(whole["ids"])
    at = whole["ids"].index(cut["ids"][0])
    assert whole["ids"][at : at + len(cut["ids"])] == cut["ids"]
    # No word repeated or lost: the page's text is the replay's deltas, and the whole answer.
    deltas = [d["delta"] for d in data if d["type"] == "text-delta"]
    assert len(deltas) > 2 and resumed["text"] == "".join(deltas)
    assert resumed["text"] == f"Done: {restart['output']}."
    assert sum(p == "text" for p in resumed["parts"]) == 1
    # Last-Event-ID inside the continuation, on the other pod: exactly the tail; 204 at the end.
    assert all(c["exact"] for c in r["cuts"]), r["cuts"]
    assert r["cuts"][-1]["status"] == 204
    assert await executions(db, instance) == 1
