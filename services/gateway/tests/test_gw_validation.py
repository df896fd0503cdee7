"""Request validation: JSON objects with known string fields, size limits, auth first."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from tether_common.errors import InvalidArgument
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
        ({}, "'text' is required"),
        ({"text": "   "}, "must not be empty"),
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


async def test_dev_token_only_in_dev(make_client: Any) -> None:
    dev = await make_client()
    resp = await dev.post("/v1/dev/token", json={"user": "alice"})
    assert resp.status == 201
    assert (await resp.json())["user"] == "alice"
    prod = await make_client(env="production")
    resp = await prod.post("/v1/dev/token", json={"user": "alice"})
    assert resp.status == 404


async def test_session_cookie_is_httponly_and_used_by_gets(
    client: TestClient[Any, Any], user_token: str
) -> None:
    resp = await client.post("/v1/session", headers={"Authorization": f"Bearer {user_token}"})
    assert resp.status == 204
    cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/v1" in cookie
    # The cookie authenticates a GET (the runtime answers 404 for this unknown run) ...
    resp = await client.get("/v1/runs/run_missing")
    assert resp.status == 404
    # ... but never a state-changing POST (no CSRF through the cookie).
    resp = await client.post("/v1/runs/run_missing/cancel", json={})
    assert resp.status == 401
