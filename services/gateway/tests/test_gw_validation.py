"""Request validation: JSON objects with known string fields, size limits, auth first."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from tether_common.errors import InvalidArgument
from tether_common.input_parsers import MAX_JSON_DEPTH, json_depth
from tether_gateway.api import RESUME_RUN, START_RUN
from tether_gateway.validation import validate


def test_accepts_known_fields() -> None:
    assert validate({"text": "hi", "idempotencyKey": "k"}, START_RUN) == {
        "text": "hi",
        "idempotencyKey": "k",
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "must be a JSON object"),
        ({"text": "hi", "extra": 1}, "unknown field 'extra'"),
        ({"text": 42}, "must be a string"),
        ({"text": "x" * 8001}, "longer than 8000"),
    ],
)
def test_rejects_bad_start_bodies(body: object, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        validate(body, START_RUN)


def test_resume_decision_is_an_enum() -> None:
    body = {"interruptId": "int_1", "decision": "maybe", "idempotencyKey": "k"}
    with pytest.raises(InvalidArgument, match="one of approve, reject, respond"):
        validate(body, RESUME_RUN)
    body["decision"] = "approve"
    assert validate(body, RESUME_RUN)["decision"] == "approve"


async def _error(resp: Any) -> dict[str, str]:
    body = await resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    return dict(body["error"])


async def test_http_unknown_field_is_400(client: TestClient[Any, Any], user_token: str) -> None:
    resp = await client.post(
        "/v1/runs/run_1/resume",
        json={"interruptId": "i", "decision": "approve", "idempotencyKey": "k", "x": 1},
        headers={"Authorization": f"Bearer {user_token}"},
    )
    assert resp.status == 400
    assert (await _error(resp))["code"] == "INVALID_ARGUMENT"


async def test_http_invalid_json_is_400(client: TestClient[Any, Any], user_token: str) -> None:
    resp = await client.post(
        "/v1/conversations/conv_1/runs",
        data=b"{not json",
        headers={"Authorization": f"Bearer {user_token}", "Content-Type": "application/json"},
    )
    assert resp.status == 400
    assert "not valid JSON" in (await _error(resp))["message"]


async def test_http_body_too_large_is_413(client: TestClient[Any, Any], user_token: str) -> None:
    resp = await client.post(
        "/v1/conversations/conv_1/runs",
        json={"text": "x" * 5000},
        headers={"Authorization": f"Bearer {user_token}"},
    )
    assert resp.status == 413
    assert (await _error(resp))["code"] == "PAYLOAD_TOO_LARGE"


async def test_http_missing_or_bad_token_is_401(client: TestClient[Any, Any]) -> None:
    resp = await client.get("/v1/runs/run_1")
    assert resp.status == 401
    resp = await client.get("/v1/runs/run_1", headers={"Authorization": "Bearer nope"})
    assert resp.status == 401
    assert (await _error(resp))["code"] == "UNAUTHENTICATED"


async def test_http_wrong_method_is_json_405(client: TestClient[Any, Any]) -> None:
    resp = await client.put("/v1/runs/run_1")
    assert resp.status == 405
    assert (await _error(resp))["code"] == "METHOD_NOT_ALLOWED"


async def test_dev_token_only_with_dev_login(make_client: Any) -> None:
    login = await make_client(dev_login=True)
    resp = await login.post("/v1/dev/token", json={"user": "alice"})
    assert resp.status == 201
    assert (await resp.json())["user"] == "alice"
    # TETHER_ENV=dev (or unset) alone does not open it: only `tether dev` sets the switch.
    for env in ("dev", "production"):
        plain = await make_client(env=env, dev_login=False)
        resp = await plain.post("/v1/dev/token", json={"user": "alice"})
        assert resp.status == 404, env


async def test_session_cookie_is_httponly_and_used_by_gets(
    client: TestClient[Any, Any], user_token: str
) -> None:
    resp = await client.post("/v1/session", headers={"Authorization": f"Bearer {user_token}"})
    assert resp.status == 200
    session = await resp.json()
    assert session["user"] and session["csrfToken"] and user_token not in str(session)
    cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/v1" in cookie
    # The cookie authenticates a GET (the runtime answers 404 for this unknown run) ...
    resp = await client.get("/v1/runs/run_missing")
    assert resp.status == 404
    # ... but a state-changing POST only with the session's CSRF token, from this origin.
    resp = await client.post("/v1/runs/run_missing/cancel", json={})
    assert resp.status == 403
    assert (await resp.json())["error"]["code"] == "CSRF_ORIGIN_REFUSED"
    same_site = {"Sec-Fetch-Site": "same-origin"}
    resp = await client.post("/v1/runs/run_missing/cancel", json={}, headers=same_site)
    assert resp.status == 403
    assert (await resp.json())["error"]["code"] == "CSRF_TOKEN_INVALID"
    with_token = {**same_site, "X-CSRF-Token": session["csrfToken"]}
    resp = await client.post("/v1/runs/run_missing/stream-token", json={}, headers=with_token)
    assert resp.status == 404


@pytest.mark.parametrize(
    "value", ["²", "٣", "1²", "9" * 5000, "-1", "0", "501", " 5", "5.0", "1e2", "", "ⅷ"]
)
async def test_http_bad_page_size_is_400(
    client: TestClient[Any, Any], user_token: str, value: str
) -> None:
    """`"²".isdigit()` is True and `int("²")` raises: the check must be one int() agrees with."""
    for path in ("/v1/conversations", "/v1/runs", "/v1/conversations/conv_1/messages"):
        resp = await client.get(
            path, params={"pageSize": value}, headers={"Authorization": f"Bearer {user_token}"}
        )
        assert resp.status == 400, (path, value, await resp.text())
        error = await _error(resp)
        assert error["code"] == "INVALID_ARGUMENT" and "pageSize" in error["message"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"[" * 60_000, "nested deeper than 64"),  # RecursionError inside json.loads before
        (b"[" * 65 + b"]" * 65, "nested deeper than 64"),
        (b'{"a":' * 65 + b"1" + b"}" * 65, "nested deeper than 64"),
        (b'{"text": "hi", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested deeper than 64"),
    ],
)
async def test_http_deeply_nested_body_is_400(
    make_client: Any, user_token: str, raw: bytes, message: str
) -> None:
    client = await make_client(max_body_bytes=64 * 1024)
    for path in ("/v1/conversations", "/v1/conversations/conv_1/runs", "/v1/runs/run_1/resume"):
        resp = await client.post(
            path,
            data=raw,
            headers={"Authorization": f"Bearer {user_token}", "Content-Type": "application/json"},
        )
        assert resp.status == 400, (path, await resp.text())
        error = await _error(resp)
        assert error["code"] == "INVALID_ARGUMENT" and message in error["message"]


def test_json_depth_counts_without_recursion() -> None:
    assert json_depth(1) == 0
    assert json_depth({"a": [1, {"b": []}]}) == 4
    assert json_depth([[]] * 3) == 2
    deep: list[Any] = []
    for _ in range(100_000):  # far past the interpreter's recursion limit
        deep = [deep]
    assert json_depth(deep) == MAX_JSON_DEPTH + 1  # stops counting past the limit


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
async def test_http_non_finite_numbers_are_400(
    client: TestClient[Any, Any], user_token: str, number: bytes
) -> None:
    """Python's parser takes NaN/Infinity (not JSON) and 1e999 (inf): a form's fill holding one
    failed re-encoding (json.dumps allow_nan=False) with a 500."""
    raw = b'{"interruptId":"i","decision":"respond","idempotencyKey":"k","fill":{"a":%s}}' % number
    resp = await client.post(
        "/v1/runs/run_1/resume",
        data=raw,
        headers={"Authorization": f"Bearer {user_token}", "Content-Type": "application/json"},
    )
    assert resp.status == 400, await resp.text()
    assert (await _error(resp))["code"] == "INVALID_ARGUMENT"


async def test_http_whitespace_body_is_400_and_no_body_is_empty(
    client: TestClient[Any, Any], user_token: str
) -> None:
    """Whitespace alone is not JSON (schemathesis sent `\\n\\n` and a conversation was made)."""
    headers = {"Authorization": f"Bearer {user_token}", "Content-Type": "application/json"}
    resp = await client.post("/v1/conversations/conv_1/runs", data=b"\n\n", headers=headers)
    assert resp.status == 400
    assert "not valid JSON" in (await _error(resp))["message"]
    resp = await client.post("/v1/conversations/conv_1/runs", data=b"", headers=headers)
    assert resp.status == 400
    assert "give field 'text' or field 'input'" in (await _error(resp))["message"]  # `{}`
