"""Finding 2, the gateway's side: stream tokens signed with a key only gateways hold, bound to one
run and one user, short-lived; an open stream ends (one `reauthenticate` frame) when the token
that opened it expires or is revoked; a sign-out revokes its token on every gateway pod at once
(two pods share one runtime and one Redis)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import grpc
import jwt
import pytest
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_common.auth import issue_token
from tether_gateway.health import openapi_document
from tether_testkit.client import Client
from tether_testkit.processes import Proc, start_gateway, tether_cli
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.security import PUBLIC, concrete_path, new_user, owned_interrupted_run

STREAM_TTL_S = 4
POD_ENV = {
    "TETHER_STREAM_TOKEN_TTL_S": str(STREAM_TTL_S),
    "TETHER_JWT_LEEWAY_S": "0",
    "TETHER_SSE_HEARTBEAT_S": "0.5",
}
EVENTS_ROUTE = ("get", "/v1/runs/{id}/events")


@pytest.fixture(scope="module")
def pods(runtime: Proc, base_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    env = {**base_env, **POD_ENV}
    a = start_gateway(env, runtime.addr, name="gateway-tok-a")
    b = start_gateway(env, runtime.addr, name="gateway-tok-b")
    yield a.addr, b.addr
    for proc in (a, b):
        proc.terminate()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def stream_token(http: aiohttp.ClientSession, gw: str, run_id: str, token: str) -> str:
    async with http.post(f"{gw}/v1/runs/{run_id}/stream-token", headers=auth(token)) as r:
        assert r.status == 201, await r.text()
        return str((await r.json())["token"])


async def frames_until_end(resp: aiohttp.ClientResponse, within_s: float) -> list[str]:
    """Every SSE frame until the server ends the stream (fails when it does not in time)."""
    frames: list[str] = []
    async with asyncio.timeout(within_s):
        buffer = b""
        async for chunk in resp.content.iter_any():
            buffer += chunk
            *done, buffer = buffer.split(b"\n\n")
            frames += [f.decode() for f in done]
    return frames


def reauthenticate(frames: list[str]) -> list[dict[str, Any]]:
    found = []
    for frame in frames:
        lines = frame.split("\n")
        if "event: reauthenticate" in lines:
            assert not any(line.startswith("id:") for line in lines), "no id: on this frame"
            data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
            found.append(json.loads(data[0]))
    return found


async def test_an_expired_stream_token_ends_its_open_stream(pods, http, db):
    a, _ = pods
    user = new_user("expiry")
    ids = await owned_interrupted_run(db, a, http, user)  # waits at a confirmation: no events
    tok = await stream_token(http, a, ids["run"], issue_token(TEST_SECRET, user))
    claims = jwt.decode(tok, options={"verify_signature": False})
    assert claims["iss"] == "tether-gateway" and claims["aud"] == "tether-stream"
    assert claims["sub"] == user and claims["run"] == ids["run"] and claims["jti"]
    assert claims["exp"] - time.time() <= STREAM_TTL_S + 1

    opened = time.monotonic()
    async with http.get(f"{a}/v1/runs/{ids['run']}/events", params={"token": tok}) as r:
        assert r.status == 200, await r.text()
        frames = await frames_until_end(r, within_s=STREAM_TTL_S + 5)
    assert reauthenticate(frames) == [{"type": "reauthenticate", "reason": "expired"}]
    assert "event: reauthenticate" in frames[-1], "the stream ends right after the frame"
    assert time.monotonic() - opened >= STREAM_TTL_S - 1.5, "ended before the token expired"
    # The stream may end up to a heartbeat's slot before `exp` (stream_deadlines.py), when the
    # token still opens one: ask again once it has expired.
    await asyncio.sleep(max(0.0, claims["exp"] - time.time() + 0.2))
    async with http.get(f"{a}/v1/runs/{ids['run']}/events", params={"token": tok}) as r:
        assert r.status == 401, "an expired stream token opens nothing"

    # A bearer token's stream ends at its expiry the same way.
    short = issue_token(TEST_SECRET, user, ttl_s=2)
    async with http.get(f"{a}/v1/runs/{ids['run']}/events", headers=auth(short)) as r:
        assert r.status == 200, await r.text()
        frames = await frames_until_end(r, within_s=7)
    assert reauthenticate(frames) == [{"type": "reauthenticate", "reason": "expired"}]

    # A stream token never outlives the token it was minted with: one with 2 s left (to the
    # fraction of a second: issue_token's whole seconds could leave it almost none) gets a stream
    # token that ends with it, not STREAM_TTL_S from now.
    claims = jwt.decode(issue_token(TEST_SECRET, user), options={"verify_signature": False})
    nearly = jwt.encode({**claims, "exp": time.time() + 2}, TEST_SECRET, algorithm="HS256")
    minted = await stream_token(http, a, ids["run"], nearly)
    assert (
        jwt.decode(minted, options={"verify_signature": False})["exp"]
        <= jwt.decode(nearly, options={"verify_signature": False})["exp"]
    )


async def test_a_stream_token_reads_only_its_run_and_acts_nowhere(pods, http, db):
    a, b = pods
    user = new_user("bound")
    first = await owned_interrupted_run(db, a, http, user)
    second = await owned_interrupted_run(db, a, http, user)
    tok = await stream_token(http, a, first["run"], issue_token(TEST_SECRET, user))

    # Its own run, on either pod (every gateway holds the key).
    for gw in (a, b):
        async with http.get(f"{gw}/v1/runs/{first['run']}/events", params={"token": tok}) as r:
            assert r.status == 200, await r.text()
            assert (await r.content.readuntil(b"\n\n")).startswith(b"retry:")
    # Another run of the same user: as if it did not exist.
    for how in ({"params": {"token": tok}}, {"headers": auth(tok)}):
        async with http.get(f"{a}/v1/runs/{second['run']}/events", **how) as r:
            assert r.status == 404, await r.text()
    # Every other route of the OpenAPI document refuses it, as a bearer, cookie or ?token=.
    paths: Any = openapi_document()["paths"]
    ops = [(m, p) for p, o in paths.items() for m in o if (m, p) not in PUBLIC]
    refused = 0
    for method, path in ops:
        if (method, path) == EVENTS_ROUTE:
            continue
        url = a + concrete_path(path, first["conv"], first["run"])
        body = {"text": "x"} if method == "post" else None
        for how in (
            {"headers": auth(tok)},
            {"headers": {"Cookie": f"tether_session={tok}"}},
            {"params": {"token": tok}},
        ):
            async with http.request(method, url, json=body, **how) as r:
                assert r.status == 401, f"{method.upper()} {path} {how}: {r.status}"
                refused += 1
    assert refused >= 30
    # One signed with the user tokens' key (all a runtime or the dev issuer could make) is no
    # stream token, whatever its claims say.
    forged = jwt.decode(tok, options={"verify_signature": False})
    fake = jwt.encode(forged, TEST_SECRET, algorithm="HS256")
    async with http.get(f"{a}/v1/runs/{first['run']}/events", params={"token": fake}) as r:
        assert r.status == 401


async def test_the_runtime_cannot_verify_a_stream_token(pods, http, db, runtime):
    a, _ = pods
    user = new_user("rtok")
    ids = await owned_interrupted_run(db, a, http, user)
    tok = await stream_token(http, a, ids["run"], issue_token(TEST_SECRET, user))
    c = Client(runtime.addr, tok)
    try:
        for rpc in (
            lambda: c.stub.GetRun(pb.GetRunRequest(run_id=ids["run"]), metadata=c.md, timeout=5),
            lambda: c.events(ids["run"], timeout=5),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await rpc()
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, info.value
    finally:
        await c.close()


async def test_sign_out_on_one_pod_revokes_on_every_pod(pods, http, db, runtime, base_env, procs):
    a, b = pods
    user = new_user("revoke")
    ids = await owned_interrupted_run(db, a, http, user)
    session = issue_token(TEST_SECRET, user)
    other = issue_token(TEST_SECRET, user)  # the same user's other login stays valid
    run_url = f"/v1/runs/{ids['run']}"
    minted = await stream_token(http, b, ids["run"], session)

    held = await http.get(f"{b}{run_url}/events", headers=auth(session))  # open on pod b
    try:
        assert held.status == 200, await held.text()
        async with http.get(f"{b}{run_url}", headers=auth(session)) as r:
            assert r.status == 200

        async with http.delete(f"{a}/v1/session", headers=auth(session)) as r:  # sign out on a
            assert r.status == 204, await r.text()

        # Pod b ends the open stream as soon as it hears of it ...
        frames = await frames_until_end(held, within_s=3)
        assert reauthenticate(frames) == [{"type": "reauthenticate", "reason": "revoked"}]
    finally:
        held.close()
    # ... and from then on refuses the token and what was minted from it.
    async with http.get(f"{b}{run_url}", headers=auth(session)) as r:
        assert r.status == 401, await r.text()
        assert (await r.json())["error"]["code"] == "UNAUTHENTICATED"
    async with http.get(f"{b}{run_url}/events", params={"token": minted}) as r:
        assert r.status == 401
    async with http.post(f"{b}{run_url}/stream-token", headers=auth(session)) as r:
        assert r.status == 401
    async with http.get(f"{b}{run_url}", headers=auth(other)) as r:
        assert r.status == 200, "another login of the same user is not signed out"

    # The runtime follows the same deny-list: a service calling gRPC directly with the signed-out
    # token is refused there too (the copy learns it over pub/sub, within moments).
    for token, want in ((session, grpc.StatusCode.UNAUTHENTICATED), (other, None)):
        c = Client(runtime.addr, token)
        try:
            deadline = time.monotonic() + 3
            while True:
                try:
                    await c.stub.GetRun(
                        pb.GetRunRequest(run_id=ids["run"]), metadata=c.md, timeout=5
                    )
                    got = None
                except grpc.aio.AioRpcError as err:
                    got = err.code()
                if got == want or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert got == want, (
                f"runtime answered {got} for {'the signed-out' if want else 'another'} login"
            )
        finally:
            await c.close()

    # A pod started afterwards loads the deny-list from Redis.
    late = start_gateway({**base_env, **POD_ENV}, runtime.addr, name="gateway-tok-late")
    procs.append(late)
    async with http.get(f"{late.addr}{run_url}", headers=auth(session)) as r:
        assert r.status == 401

    # Signing out needs the session: without one nothing is revoked and the answer is 401.
    async with http.delete(f"{a}/v1/session") as r:
        assert r.status == 401


async def test_a_sign_out_ends_the_streams_of_stream_tokens_minted_from_it(pods, http, db):
    a, b = pods
    user = new_user("revoke")
    ids = await owned_interrupted_run(db, a, http, user)
    session = issue_token(TEST_SECRET, user)
    minted = await stream_token(http, a, ids["run"], session)
    by_token = await http.get(f"{b}/v1/runs/{ids['run']}/events", params={"token": minted})
    try:
        assert by_token.status == 200, await by_token.text()
        async with http.delete(f"{a}/v1/session", headers=auth(session)) as r:
            assert r.status == 204
        frames = await frames_until_end(by_token, within_s=3)
        assert reauthenticate(frames) == [{"type": "reauthenticate", "reason": "revoked"}]
    finally:
        by_token.close()


async def test_an_operator_revokes_a_token_by_its_jti(pods, http, db, base_env):
    a, b = pods
    user = new_user("ops")
    ids = await owned_interrupted_run(db, a, http, user)
    leaked = issue_token(TEST_SECRET, user)
    jti = jwt.decode(leaked, options={"verify_signature": False})["jti"]
    held = await http.get(f"{a}/v1/runs/{ids['run']}/events", headers=auth(leaked))
    try:
        assert held.status == 200
        cli = await asyncio.to_thread(tether_cli, "revoke", jti, "--ttl", "600", env=base_env)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        frames = await frames_until_end(held, within_s=3)
        assert reauthenticate(frames) == [{"type": "reauthenticate", "reason": "revoked"}]
    finally:
        held.close()
    async with http.get(f"{b}/v1/runs/{ids['run']}", headers=auth(leaked)) as r:
        assert r.status == 401
