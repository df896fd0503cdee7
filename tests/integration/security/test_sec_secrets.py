"""No secret leaves the system: a tool's output carrying an API key, a JWT and a database URL with
a password reaches no SSE event, HTTP response, ListMessages answer or process log unmasked; a
bad bearer token is never echoed back or logged."""

from __future__ import annotations

import grpc
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit.client import Client, token
from tether_testkit.inventory import abnormal_service
from tether_testkit.processes import start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.security import bearer, new_user
from tether_testkit.sse import SseReader

API_KEY = "sk-live-4f9XqT2mB7vR1kLp0Zs8Wd3H"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJyb290Iiwic2NvcGUiOiJhZG1pbiJ9."
    "Qm9ndXNTaWduYXR1cmVGb3JUZXN0czEyMzQ1Ng"
)
DB_PASSWORD = "Hunter2-Pr0d-Passw0rd"
DSN = f"postgresql://payments:{DB_PASSWORD}@db-primary.internal:5432/payments"
LEAKS = [API_KEY, JWT, DB_PASSWORD, "db-primary.internal", JWT.split(".")[2]]
BAD_TOKEN = "not-a-jwt-9c1e7f3a5b2d4e6f8a0b"
FORGED = token("some-other-secret-that-is-long-enough-0123", "alice")


def assert_clean(where: str, text: str) -> None:
    for secret in LEAKS:
        assert secret not in text, f"{secret!r} leaked into {where}"


async def test_planted_secrets_never_leave(private_env, private_db, http):
    db = private_db
    runtime = start_runtime(private_env, name="runtime-secrets")
    gateway = start_gateway(private_env, runtime.addr, name="gateway-secrets")
    try:
        user = new_user("leak")
        _, instance = await abnormal_service(db, prefix="leak", owner=user)  # may read its logs
        for line in (
            f"ERROR payment provider rejected key {API_KEY}",
            f"WARN retrying with Authorization: Bearer {JWT}",
            f"FATAL could not connect to {DSN}",
            f"DEBUG config dump: database_url={DSN} api_key={API_KEY} token={JWT}",
        ):
            await db.execute(
                "INSERT INTO inv_log (instance_id, level, line, at) VALUES ($1, 'error', $2, now())",
                instance,
                line,
            )
        base, auth = gateway.addr, bearer(user)
        async with http.post(f"{base}/v1/conversations", json={}, headers=auth) as r:
            assert r.status == 201
            conv = (await r.json())["conversation"]["id"]
        body = {"text": f"show me the logs of {instance}"}
        headers = {**auth, "Accept": "text/event-stream"}
        async with http.post(
            f"{base}/v1/conversations/{conv}/runs", json=body, headers=headers
        ) as r:
            assert r.status == 201, await r.text()
            run_id = r.headers["X-Run-Id"]
            frames = await SseReader(r).rest()
        assert frames and frames[-1].event == "done", [f.event for f in frames]
        tools = [f.json for f in frames if f.event == "tool_finished"]
        assert tools, "the agent never read the logs: the test would prove nothing"
        assert_clean("the SSE stream", "\n".join(f.data for f in frames))

        texts = []
        for path in (
            f"/v1/runs/{run_id}",
            f"/v1/conversations/{conv}",
            f"/v1/conversations/{conv}/messages",
            "/v1/conversations",
        ):
            async with http.get(f"{base}{path}", headers=auth) as r:
                assert r.status == 200
                texts.append(await r.text())
        async with http.get(f"{base}/v1/runs/{run_id}/events?after=0", headers=auth) as r:
            texts.append(await r.text())  # the replay from Postgres, not the live fan-out
        assert_clean("HTTP responses", "\n".join(texts))
        assert any(instance in t for t in texts), "the answer never mentioned the instance"
        # The lines did travel (masked): the test would notice a tool that just dropped them.
        messages = texts[2]
        assert "***key***" in messages and "postgresql://***" in messages, messages

        client = Client(runtime.addr, token(TEST_SECRET, user))
        try:
            msgs = await client.stub.ListMessages(
                pb.ListMessagesRequest(conversation_id=conv), metadata=client.md, timeout=10
            )
            assert_clean("ListMessages", str(msgs))
            evs = await client.events(run_id)
            assert_clean("StreamRunEvents", "\n".join(str(e) for e in evs))
        finally:
            await client.close()
        # What is stored may hold the raw tool output (it is the truth); what the events table
        # replays to clients must not.
        stored = await db.fetchval(
            "SELECT string_agg(data::text, ' ') FROM run_event WHERE run_id = $1", run_id
        )
        assert_clean("the stored event log", stored)
    finally:
        gateway.terminate()
        runtime.terminate()
    assert_clean("the runtime's log", runtime.log())
    assert_clean("the gateway's log", gateway.log())


async def test_bad_bearer_token_is_never_echoed(private_env, http):
    runtime = start_runtime(private_env, name="runtime-badtoken")
    gateway = start_gateway(private_env, runtime.addr, name="gateway-badtoken")
    try:
        answers = []
        for bad in (BAD_TOKEN, FORGED):
            h = {"Authorization": f"Bearer {bad}"}
            for method, path in (("GET", "/v1/conversations"), ("POST", "/v1/conversations")):
                async with http.request(method, f"{gateway.addr}{path}", headers=h) as r:
                    assert r.status == 401
                    answers.append(await r.text())
            async with http.get(f"{gateway.addr}/v1/runs/run_x/events", params={"token": bad}) as r:
                assert r.status == 401
                answers.append(await r.text())
            channel = grpc.aio.insecure_channel(runtime.addr)
            try:
                stub_call = channel.unary_unary(
                    "/tether.runtime.v1.RuntimeService/ListConversations",
                    request_serializer=pb.ListConversationsRequest.SerializeToString,
                    response_deserializer=pb.ListConversationsResponse.FromString,
                )
                try:
                    await stub_call(
                        pb.ListConversationsRequest(),
                        metadata=(("authorization", f"Bearer {bad}"),),
                        timeout=5,
                    )
                    raise AssertionError("a bad token was accepted")
                except grpc.aio.AioRpcError as err:
                    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
                    answers.append(f"{err.details()} {err.trailing_metadata()}")
            finally:
                await channel.close()
    finally:
        gateway.terminate()
        runtime.terminate()
    for where, text in (
        ("responses", "\n".join(answers)),
        ("the gateway's log", gateway.log()),
        ("the runtime's log", runtime.log()),
    ):
        assert BAD_TOKEN not in text, f"the bad token was echoed in {where}"
        assert FORGED not in text and FORGED.split(".")[2] not in text, where
