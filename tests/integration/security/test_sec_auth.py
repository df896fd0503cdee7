"""Authentication on every route and RPC, and ownership: every HTTP route of the OpenAPI document
(so a new one cannot be forgotten) and every RuntimeService method (from the descriptor) refuse
a missing, expired, forged, `alg: none` or stream-scoped token; another user's resources are 404
and stay unchanged; stream tokens read only their run and expire."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import grpc
import jwt
import pytest
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_common.auth import issue_token
from tether_gateway.health import openapi_document
from tether_testkit.client import Client
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.security import (
    PUBLIC,
    bearer,
    concrete_path,
    grant_restart,
    new_user,
    owned_interrupted_run,
)

SERVICE = pb.DESCRIPTOR.services_by_name["RuntimeService"]
STREAM_ROUTE = ("get", "/v1/runs/{id}/events")


def bad_tokens(user: str, run_id: str) -> dict[str, str]:
    now = int(time.time())
    return {
        "expired": issue_token(TEST_SECRET, user, ttl_s=-120),  # beyond any clock leeway
        "wrong_signature": issue_token("another-secret-that-is-also-32-bytes-long", user),
        "alg_none": jwt.encode(
            {"sub": user, "exp": now + 600, "scope": "user"}, key=None, algorithm="none"
        ),
        "garbage": "definitely.not.ajwt",
        "no_exp": jwt.encode({"sub": user, "scope": "user"}, TEST_SECRET, algorithm="HS256"),
        "stream_scope": issue_token(TEST_SECRET, user, ttl_s=300, scope="stream", run_id=run_id),
    }


def operations() -> list[tuple[str, str]]:
    paths: Any = openapi_document()["paths"]
    return [(m, p) for p, ops in paths.items() for m in ops if (m, p) not in PUBLIC]


def url_for(path: str, ids: dict[str, str]) -> str:
    return concrete_path(path, ids["conv"], ids["run"])


def body_for(method: str, path: str, ids: dict[str, str]) -> dict[str, str] | None:
    if method != "post":
        return None
    if path.endswith("/resume"):
        key = uuid.uuid4().hex
        return {"interruptId": ids["interrupt"], "decision": "approve", "idempotencyKey": key}
    if path.endswith("/runs"):
        return {"text": "hello"}
    return {}


async def snapshot(db: Any, ids: dict[str, str]) -> list[Any]:
    """Every row a request about these resources could change."""
    queries = [
        ("SELECT * FROM conversation WHERE id = $1", ids["conv"]),
        ("SELECT * FROM message WHERE conversation_id = $1 ORDER BY id", ids["conv"]),
        ("SELECT * FROM run WHERE conversation_id = $1 ORDER BY id", ids["conv"]),
        ("SELECT * FROM interrupt WHERE run_id = $1", ids["run"]),
        ("SELECT * FROM tool_call WHERE run_id = $1", ids["run"]),
        ("SELECT run_id, sequence, type FROM run_event WHERE run_id = $1 ORDER BY 2", ids["run"]),
        ("SELECT * FROM inv_operation WHERE target = $1", ids["instance"]),
        ("SELECT status FROM inv_instance WHERE id = $1", ids["instance"]),
    ]
    return [[dict(r) for r in await db.fetch(q, arg)] for q, arg in queries]


async def test_every_route_refuses_bad_tokens(gateway, http, db):
    owner = new_user("owner")
    ids = await owned_interrupted_run(db, gateway.addr, http, owner)
    tokens = bad_tokens(owner, ids["run"])
    before = await snapshot(db, ids)
    ops = operations()
    assert len(ops) >= 10 and STREAM_ROUTE in ops
    checked = 0
    for method, path in ops:
        url = f"{gateway.addr}{url_for(path, ids)}"
        body = body_for(method, path, ids)
        unauthenticated = (401, "UNAUTHENTICATED")
        variants: list[tuple[str, dict[str, str], dict[str, str], tuple[int, str]]] = [
            ("none", {}, {}, unauthenticated)
        ]
        for name, tok in tokens.items():
            if name == "stream_scope" and (method, path) == STREAM_ROUTE:
                continue  # the one route a stream token is for (tested below)
            variants.append((name, {"Authorization": f"Bearer {tok}"}, {}, unauthenticated))
            cookie = {"Cookie": f"tether_session={tok}"}
            variants.append((f"cookie:{name}", cookie, {}, unauthenticated))
        user_token = issue_token(TEST_SECRET, owner)
        # A user token never travels in a URL; only a stream token may (on the events route).
        variants.append(("user_token_in_url", {}, {"token": user_token}, unauthenticated))
        if method == "post":
            # A valid session cookie acts only with its CSRF token, from this origin; the
            # session itself is opened with a bearer header only.
            session = {"Cookie": f"tether_session={user_token}"}
            login = path == "/v1/session"
            variants += [
                (
                    "cookie_without_origin",
                    session,
                    {},
                    unauthenticated if login else (403, "CSRF_ORIGIN_REFUSED"),
                ),
                (
                    "cookie_without_csrf_token",
                    {**session, "Origin": gateway.addr},
                    {},
                    unauthenticated if login else (403, "CSRF_TOKEN_INVALID"),
                ),
            ]
        for name, headers, params, (status, code) in variants:
            async with http.request(method, url, json=body, headers=headers, params=params) as r:
                text = await r.text()
                assert r.status == status, f"{method.upper()} {path} with {name}: {r.status} {text}"
                assert json.loads(text)["error"]["code"] == code
                checked += 1
    assert checked > 100
    assert await snapshot(db, ids) == before, "a refused request changed something"


async def call(channel: grpc.aio.Channel, method: Any, token: str | None) -> grpc.StatusCode:
    path = f"/{SERVICE.full_name}/{method.name}"
    req_cls = getattr(pb, method.input_type.name)
    resp_cls = getattr(pb, method.output_type.name)
    md = (("authorization", f"Bearer {token}"),) if token is not None else ()
    try:
        if method.server_streaming:
            stream = channel.unary_stream(
                path,
                request_serializer=req_cls.SerializeToString,
                response_deserializer=resp_cls.FromString,
            )(req_cls(), metadata=md, timeout=5)
            async for _ in stream:
                pass
        else:
            await channel.unary_unary(
                path,
                request_serializer=req_cls.SerializeToString,
                response_deserializer=resp_cls.FromString,
            )(req_cls(), metadata=md, timeout=5)
    except grpc.aio.AioRpcError as err:
        return err.code()
    return grpc.StatusCode.OK


async def test_every_rpc_refuses_bad_tokens(runtime):
    user = new_user("rpc")
    tokens = {k: v for k, v in bad_tokens(user, "run_x").items() if k != "stream_scope"}
    methods = list(SERVICE.methods)
    assert {"StartRun", "ResumeRun", "StreamRunEvents", "CancelRun"} <= {m.name for m in methods}
    channel = grpc.aio.insecure_channel(runtime.addr)
    try:
        for method in methods:
            for name, tok in [("none", None), *tokens.items()]:
                code = await call(channel, method, tok)
                assert code == grpc.StatusCode.UNAUTHENTICATED, f"{method.name} with {name}: {code}"
        # A stream token only reads its own run: every action is refused, other runs don't exist.
        stream_tok = issue_token(TEST_SECRET, user, scope="stream", run_id="run_x")
        for method in methods:
            code = await call(channel, method, stream_tok)
            expected = (
                grpc.StatusCode.NOT_FOUND
                if method.name in ("GetRun", "StreamRunEvents")
                else grpc.StatusCode.PERMISSION_DENIED
            )
            assert code == expected, f"{method.name} with a stream token: {code}"
    finally:
        await channel.close()


async def test_another_users_resources_are_404_and_untouched(gateway, http, db, runtime):
    owner, mallory = new_user("owner"), new_user("mallory")
    ids = await owned_interrupted_run(db, gateway.addr, http, owner)
    await grant_restart(db, mallory)  # she may restart things: the 404 is about ownership
    before = await snapshot(db, ids)
    gw, h = gateway.addr, bearer(mallory)
    key = uuid.uuid4().hex
    attempts = [
        ("get", f"/v1/conversations/{ids['conv']}", None),
        ("get", f"/v1/conversations/{ids['conv']}/messages", None),
        ("post", f"/v1/conversations/{ids['conv']}/runs", {"text": "restart it"}),
        ("get", f"/v1/runs/{ids['run']}", None),
        ("get", f"/v1/runs/{ids['run']}/events", None),
        ("post", f"/v1/runs/{ids['run']}/stream-token", {}),
        (
            "post",
            f"/v1/runs/{ids['run']}/resume",
            {"interruptId": ids["interrupt"], "decision": "approve", "idempotencyKey": key},
        ),
        ("post", f"/v1/runs/{ids['run']}/cancel", {}),
    ]
    for method, path, body in attempts:
        async with http.request(method, f"{gw}{path}", json=body, headers=h) as r:
            text = await r.text()
            assert r.status == 404, f"{method.upper()} {path}: {r.status} {text}"
            assert ids["conv"] not in text or path.startswith("/v1/conversations")
    async with http.get(f"{gw}/v1/conversations", headers=h) as r:
        assert ids["conv"] not in await r.text()

    c = Client(runtime.addr, issue_token(TEST_SECRET, mallory))
    try:
        rpcs = [
            c.stub.GetConversation(
                pb.GetConversationRequest(conversation_id=ids["conv"]), metadata=c.md
            ),
            c.stub.ListMessages(pb.ListMessagesRequest(conversation_id=ids["conv"]), metadata=c.md),
            c.stub.StartRun(
                pb.StartRunRequest(conversation_id=ids["conv"], text="x"), metadata=c.md
            ),
            c.stub.GetRun(pb.GetRunRequest(run_id=ids["run"]), metadata=c.md),
            c.stub.CancelRun(pb.CancelRunRequest(run_id=ids["run"]), metadata=c.md),
            c.resume(ids["run"], ids["interrupt"]),
            c.events(ids["run"], timeout=5),
        ]
        for rpc in rpcs:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await rpc
            assert info.value.code() == grpc.StatusCode.NOT_FOUND, info.value
    finally:
        await c.close()
    assert await snapshot(db, ids) == before, "another user's request changed something"
    assert (
        await db.fetchval(
            "SELECT count(*) FROM idempotency_key WHERE scope LIKE '%' || $1 || '%'", mallory
        )
        == 0
    )


async def test_stream_token_is_bound_to_one_run_and_expires(gateway, http, db):
    owner = new_user("stream")
    first = await owned_interrupted_run(db, gateway.addr, http, owner)
    second = await owned_interrupted_run(db, gateway.addr, http, owner)
    gw = gateway.addr
    async with http.post(f"{gw}/v1/runs/{first['run']}/stream-token", headers=bearer(owner)) as r:
        assert r.status == 201
        issued = await r.json()
    claims = jwt.decode(issued["token"], options={"verify_signature": False})
    assert claims["run"] == first["run"] and claims["scope"] == "stream"
    assert claims["exp"] - time.time() <= 120, "a stream token must be short-lived"

    def events(run_id: str, tok: str) -> Any:
        return http.get(f"{gw}/v1/runs/{run_id}/events", params={"token": tok})

    async with events(first["run"], issued["token"]) as r:
        assert r.status == 200
        assert (await r.content.readuntil(b"\n\n")).startswith(b"retry:")
    async with events(second["run"], issued["token"]) as r:
        assert r.status == 404, await r.text()
    # Bearer on an action route: a stream token never acts, even on its own run.
    stream_h = {"Authorization": f"Bearer {issued['token']}"}
    async with http.post(f"{gw}/v1/runs/{first['run']}/cancel", json={}, headers=stream_h) as r:
        assert r.status == 401
    # A stream-scoped token of the user tokens' issuer is no stream token: only the gateways'
    # own are (their expiry and the end of open streams: test_sec_stream_tokens.py).
    legacy = issue_token(TEST_SECRET, owner, ttl_s=60, scope="stream", run_id=first["run"])
    async with events(first["run"], legacy) as r:
        assert r.status == 401, await r.text()
