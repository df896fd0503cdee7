"""Finding 8, the browser's session: the HttpOnly session cookie acts on a state-changing route
only with the session's CSRF token and from the gateway's own origin; without them the request
is 403 with a clear code and changes nothing. Bearer-header callers are unaffected. Against real
runtime and gateway processes."""

from __future__ import annotations

from typing import Any

import aiohttp
from tether_testkit.processes import Proc
from tether_testkit.security import bearer, new_user, owned_interrupted_run


async def _open_session(http: aiohttp.ClientSession, gw: str, user: str) -> tuple[str, str]:
    """(the session cookie's value, its CSRF token), as the browser's login gets them."""
    async with http.post(f"{gw}/v1/session", headers=bearer(user)) as r:
        assert r.status == 200, await r.text()
        session = await r.json()
        cookie = r.cookies["tether_session"]
    assert cookie["httponly"] and cookie["samesite"] == "Strict"
    assert session["user"] == user and session["csrfToken"]
    assert cookie.value not in str(session), "the session token is never in a body"
    return cookie.value, session["csrfToken"]


def _cookie(value: str, *, origin: str | None = None, csrf: str | None = None) -> dict[str, str]:
    headers = {"Cookie": f"tether_session={value}"}
    if origin is not None:
        headers["Origin"] = origin
    if csrf is not None:
        headers["X-CSRF-Token"] = csrf
    return headers


async def _error_code(r: aiohttp.ClientResponse) -> str:
    body: Any = await r.json()
    return str(body["error"]["code"])


async def _conversations(http: aiohttp.ClientSession, gw: str, user: str) -> int:
    async with http.get(f"{gw}/v1/conversations", headers=bearer(user)) as r:
        assert r.status == 200
        return len((await r.json())["conversations"])


async def test_cookie_post_needs_the_csrf_token_and_same_origin(
    gateway: Proc, http: aiohttp.ClientSession
) -> None:
    gw, user = gateway.addr, new_user("csrf")
    session, token = await _open_session(http, gw, user)
    url, body = f"{gw}/v1/conversations", {"title": "csrf"}

    refused = {
        "no token": _cookie(session, origin=gw),
        "wrong token": _cookie(session, origin=gw, csrf=token[:-2] + "xx"),
        "another session's token": _cookie(
            session, origin=gw, csrf=(await _open_session(http, gw, new_user("csrf")))[1]
        ),
        "other origin": _cookie(session, origin="https://evil.example", csrf=token),
        "cross-site fetch": {**_cookie(session, csrf=token), "Sec-Fetch-Site": "cross-site"},
        "no origin at all": _cookie(session, csrf=token),
        "origin null": _cookie(session, origin="null", csrf=token),
    }
    for case, headers in refused.items():
        async with http.post(url, json=body, headers=headers) as r:
            assert r.status == 403, (case, r.status, await r.text())
            expected = "CSRF_TOKEN_INVALID" if "token" in case else "CSRF_ORIGIN_REFUSED"
            assert await _error_code(r) == expected, case
    assert await _conversations(http, gw, user) == 0, "a refused request created something"

    same_origin = {**_cookie(session, origin=gw, csrf=token), "Sec-Fetch-Site": "same-origin"}
    async with http.post(url, json=body, headers=same_origin) as r:
        assert r.status == 201, await r.text()
    assert await _conversations(http, gw, user) == 1

    # GETs need no CSRF token: SameSite=Strict keeps the cookie off other sites' requests.
    async with http.get(url, headers=_cookie(session)) as r:
        assert r.status == 200
    # Bearer-header callers (API clients, the CLI) are not concerned by any of it.
    async with http.post(url, json=body, headers={**bearer(user), "Origin": "https://x.test"}) as r:
        assert r.status == 201, await r.text()


async def test_cookie_without_csrf_cannot_resume_cancel_or_mint_stream_tokens(
    gateway: Proc, http: aiohttp.ClientSession, db: Any
) -> None:
    gw, user = gateway.addr, new_user("csrf")
    run = await owned_interrupted_run(db, gw, http, user)
    run_id, interrupt_id = run["run"], run["interrupt"]
    session, token = await _open_session(http, gw, user)
    no_csrf = _cookie(session, origin=gw)
    attempts = {
        f"/v1/runs/{run_id}/resume": {
            "interruptId": interrupt_id,
            "decision": "approve",
            "idempotencyKey": "csrf-approve",
        },
        f"/v1/runs/{run_id}/cancel": {"reason": "csrf"},
        f"/v1/runs/{run_id}/stream-token": {},
        f"/v1/conversations/{run['conv']}/runs": {"text": "restart everything"},
    }
    for path, body in attempts.items():
        async with http.post(f"{gw}{path}", json=body, headers=no_csrf) as r:
            assert r.status == 403, (path, await r.text())
            assert await _error_code(r) == "CSRF_TOKEN_INVALID"
    async with http.get(f"{gw}/v1/runs/{run_id}", headers=bearer(user)) as r:
        state = (await r.json())["run"]
    assert state["status"] == "interrupted", "the refused approve or cancel acted"
    async with http.get(f"{gw}/v1/runs", headers=bearer(user)) as r:
        assert len((await r.json())["runs"]) == 1, "the refused start started a run"

    # With the token, from this origin, the same session acts.
    ok = _cookie(session, origin=gw, csrf=token)
    async with http.post(f"{gw}/v1/runs/{run_id}/stream-token", json={}, headers=ok) as r:
        assert r.status == 201, await r.text()
    async with http.post(f"{gw}/v1/runs/{run_id}/cancel", json={}, headers=ok) as r:
        assert r.status in (200, 202), await r.text()


async def test_signing_out_with_the_cookie_needs_the_csrf_token(
    gateway: Proc, http: aiohttp.ClientSession
) -> None:
    gw, user = gateway.addr, new_user("csrf")
    session, token = await _open_session(http, gw, user)
    async with http.delete(f"{gw}/v1/session", headers=_cookie(session, origin=gw)) as r:
        assert r.status == 403
        assert "tether_session" not in r.cookies, "another site could sign the user out"
    async with http.get(f"{gw}/v1/session", headers=_cookie(session)) as r:
        assert r.status == 200
        assert (await r.json()) == {
            "user": user,
            "csrfToken": token,
            "expiresAt": (await r.json())["expiresAt"],
        }
    ok = _cookie(session, origin=gw, csrf=token)
    async with http.delete(f"{gw}/v1/session", headers=ok) as r:
        assert r.status == 204
        assert r.cookies["tether_session"].value == ""
    # A login posted from another site is refused too (the attacker's own session forced on
    # the user's browser).
    headers = {**bearer(user), "Origin": "https://evil.example"}
    async with http.post(f"{gw}/v1/session", headers=headers) as r:
        assert r.status == 403
        assert "tether_session" not in r.cookies
