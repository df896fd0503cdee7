"""gRPC status + ErrorInfo reason -> the HTTP status and `{"error": {code, message}}` body."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from gw_fake_runtime import FakeRuntime
from tether_gateway.errors import error_middleware, from_rpc_error


def rpc_error(code: grpc.StatusCode, details: str, reason: str | None = None) -> Any:
    trailing = grpc.aio.Metadata()
    if reason is not None:
        info = any_pb2.Any()
        info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="tether.dev"))
        status = status_pb2.Status(code=code.value[0], message=details, details=[info])
        trailing.add("grpc-status-details-bin", status.SerializeToString())
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details=details)


@pytest.mark.parametrize(
    ("code", "reason", "status"),
    [
        (grpc.StatusCode.FAILED_PRECONDITION, "INTERRUPT_EXPIRED", 410),
        (grpc.StatusCode.FAILED_PRECONDITION, "INTERRUPT_ALREADY_RESOLVED", 409),
        (grpc.StatusCode.ALREADY_EXISTS, "IDEMPOTENCY_KEY_REUSED", 422),
        (grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND", 404),
        (grpc.StatusCode.NOT_FOUND, "INTERRUPT_NOT_FOUND", 404),
        (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED", 403),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED", 429),
        (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", 400),
        (grpc.StatusCode.INVALID_ARGUMENT, "AGENT_NOT_FOUND", 400),
        (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", 401),
    ],
)
def test_reason_decides_status(code: grpc.StatusCode, reason: str, status: int) -> None:
    err = from_rpc_error(rpc_error(code, "for a person", reason))
    assert (err.reason, err.status, err.message) == (reason, status, "for a person")


def test_code_alone_when_no_error_info() -> None:
    err = from_rpc_error(rpc_error(grpc.StatusCode.NOT_FOUND, "no such run"))
    assert (err.reason, err.status) == ("NOT_FOUND", 404)


def test_unknown_reason_keeps_code_and_takes_status_from_grpc_code() -> None:
    err = from_rpc_error(rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "x", "WORLD_CHANGED"))
    assert (err.reason, err.status) == ("WORLD_CHANGED", 409)


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED])
def test_unavailable_hides_addresses(code: grpc.StatusCode) -> None:
    err = from_rpc_error(rpc_error(code, "failed to connect to all addresses; 10.0.0.7:50051"))
    assert err.status == 503 and "10.0.0.7" not in err.message


def test_internal_hides_details() -> None:
    err = from_rpc_error(
        rpc_error(grpc.StatusCode.INTERNAL, "Traceback ... postgresql://u:p@db/x token=eyJabc")
    )
    assert (err.reason, err.status, err.message) == ("INTERNAL", 500, "internal error")


def test_tokens_in_details_are_redacted() -> None:
    err = from_rpc_error(
        rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "bad Bearer abc.def.ghi", "INVALID_ARGUMENT")
    )
    assert "abc.def" not in err.message


async def test_unhandled_exception_is_a_bare_500(aiohttp_client: Any) -> None:
    async def boom(request: web.Request) -> web.Response:
        raise RuntimeError("secret=hunter2 at postgresql://u:p@db/x")

    app = web.Application(middlewares=[error_middleware])
    app.router.add_get("/boom", boom)
    client = await aiohttp_client(app)
    resp = await client.get("/boom")
    assert resp.status == 500
    assert await resp.json() == {"error": {"code": "INTERNAL", "message": "internal error"}}


async def test_runtime_error_reaches_the_browser_mapped(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    resp = await client.post(
        "/v1/conversations", json={}, headers={"Authorization": f"Bearer {user_token}"}
    )
    assert resp.status == 403
    assert await resp.json() == {"error": {"code": "PERMISSION_DENIED", "message": "not for you"}}
    resp = await client.get("/v1/runs/run_x", headers={"Authorization": f"Bearer {user_token}"})
    assert resp.status == 404
    assert (await resp.json())["error"]["code"] == "RUN_NOT_FOUND"
    # The browser's token was forwarded as `authorization` metadata.
    assert fake_runtime[0].tokens[-1] == f"Bearer {user_token}"
