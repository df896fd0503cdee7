"""An open stream ends when its authorisation does, against a scripted runtime: a stream token's
stream reaches the runtime as the gateway's service identity on the user's behalf (the stream
token itself never leaves the gateway) and ends with `reauthenticate` at the token's expiry; a
sign-out ends a bearer's open stream at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import jwt
from aiohttp.test_utils import TestClient
from gw_fake_runtime import SECRET, FakeRuntime, delta
from tether_common.auth import issue_token

FRAME = 'event: reauthenticate\ndata: {"type":"reauthenticate","reason":"%s"}\n\n'


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_stream_token_reads_on_behalf_and_its_stream_ends_at_expiry(
    make_client: Callable[..., Awaitable[TestClient[Any, Any]]],
    fake_runtime: tuple[FakeRuntime, str],
    user_token: str,
) -> None:
    fake = fake_runtime[0]
    fake.add_run("run_1")
    fake.append(delta("run_1", 1, "a"))
    # exp is whole seconds (int(now + ttl)): a TTL of 1 s left the token 0-1 s of life, at times
    # too little for the first event to arrive before the end; 2 s leaves it at least 1 s.
    client = await make_client(stream_token_ttl_s=2.0, jwt_leeway_s=0.0)
    resp = await client.post("/v1/runs/run_1/stream-token", headers=auth(user_token))
    token = (await resp.json())["token"]
    fake.tokens.clear()
    fake.on_behalf.clear()
    resp = await client.get(f"/v1/runs/run_1/events?token={token}")
    assert resp.status == 200
    body = (await asyncio.wait_for(resp.read(), 6)).decode()
    assert "id: 1\n" in body, "the events before the end"
    assert body.endswith(FRAME % "expired"), body
    assert body.count("event: reauthenticate") == 1
    assert fake.on_behalf and set(fake.on_behalf) == {"alice"}
    for header in fake.tokens:
        assert token not in header, "a stream token never reaches the runtime"
        claims = jwt.decode(header.removeprefix("Bearer "), SECRET, algorithms=["HS256"])
        assert claims["scope"] == "service" and claims["on_behalf"] is True
    # The stream may end up to a heartbeat's slot before `exp` (stream_deadlines.py), when the
    # token still opens one: ask again once it has expired.
    exp = jwt.decode(token, options={"verify_signature": False})["exp"]
    await asyncio.sleep(max(0.0, exp - time.time() + 0.05))
    resp = await client.get(f"/v1/runs/run_1/events?token={token}")
    assert resp.status == 401


async def test_a_sign_out_ends_the_open_streams_of_its_token(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str]
) -> None:
    fake = fake_runtime[0]
    fake.add_run("run_1")
    fake.append(delta("run_1", 1, "a"))
    session, other = issue_token(SECRET, "alice"), issue_token(SECRET, "alice")
    held = await client.get("/v1/runs/run_1/events", headers=auth(session))
    kept = await client.get("/v1/runs/run_1/events", headers=auth(other))
    assert held.status == kept.status == 200
    resp = await client.delete("/v1/session", headers=auth(session))
    assert resp.status == 204
    body = (await asyncio.wait_for(held.read(), 3)).decode()
    assert body.endswith(FRAME % "revoked"), body
    assert (await client.get("/v1/runs/run_1", headers=auth(session))).status == 401
    assert (await client.get("/v1/runs/run_1", headers=auth(other))).status == 200
    kept.close()
