"""The gateway's error boundary: gRPC status + ErrorInfo reason -> `{"error": {code, message}}`."""

from __future__ import annotations

import json
import logging

import grpc
from aiohttp import web
from aiohttp.typedefs import Handler
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from tether_client.errors import reason_of
from tether_common.errors import STATUS_BY_REASON, TetherError
from tether_common.redaction import redact

log = logging.getLogger(__name__)

# A gRPC error without an ErrorInfo reason is mapped by its canonical code alone.
_REASON_BY_CODE: dict[grpc.StatusCode, str] = {
    grpc.StatusCode.INVALID_ARGUMENT: "INVALID_ARGUMENT",
    grpc.StatusCode.OUT_OF_RANGE: "INVALID_ARGUMENT",
    grpc.StatusCode.UNAUTHENTICATED: "UNAUTHENTICATED",
    grpc.StatusCode.PERMISSION_DENIED: "PERMISSION_DENIED",
    grpc.StatusCode.NOT_FOUND: "NOT_FOUND",
    grpc.StatusCode.FAILED_PRECONDITION: "FAILED_PRECONDITION",
    grpc.StatusCode.ABORTED: "FAILED_PRECONDITION",
    grpc.StatusCode.ALREADY_EXISTS: "FAILED_PRECONDITION",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "RATE_LIMITED",
    grpc.StatusCode.UNAVAILABLE: "UNAVAILABLE",
    grpc.StatusCode.DEADLINE_EXCEEDED: "UNAVAILABLE",
    grpc.StatusCode.CANCELLED: "UNAVAILABLE",
}
# Reasons whose gRPC details may name hosts or internals: the client gets a fixed sentence.
_FIXED_MESSAGES = {
    "INTERNAL": "internal error",
    "UNAVAILABLE": "the runtime is unavailable, retry shortly",
}
# HTTP statuses the gateway itself answers (aiohttp's own exceptions) and their codes.
_CODE_BY_HTTP = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    429: "RATE_LIMITED",
}


class UpstreamError(TetherError):
    """A runtime error as the browser sees it: its reason, and the HTTP status chosen for it."""

    def __init__(
        self, message: str, *, reason: str, status: int, metadata: dict[str, str] | None = None
    ) -> None:
        super().__init__(message, reason=reason)
        self.status = status
        self.metadata = metadata or {}


def _error_metadata(err: grpc.aio.AioRpcError) -> dict[str, str]:
    """The ErrorInfo metadata the runtime chose to send (e.g. RUN_ACTIVE's `activeRunId`)."""
    try:
        status = rpc_status.from_call(err)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a malformed status is just no metadata
        return {}
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return dict(info.metadata)
    return {}


# Reasons only the gateway gives (never a runtime's): csrf.py's refusals.
_GATEWAY_STATUS = {"CSRF_TOKEN_INVALID": 403, "CSRF_ORIGIN_REFUSED": 403}


def http_status(reason: str) -> int:
    if reason in _GATEWAY_STATUS:
        return _GATEWAY_STATUS[reason]
    return STATUS_BY_REASON.get(reason, ("INTERNAL", 500))[1]


def from_rpc_error(err: grpc.aio.AioRpcError) -> UpstreamError:
    code = err.code()
    by_code = _REASON_BY_CODE.get(code, "INTERNAL")
    reason = reason_of(err) or by_code
    message = _FIXED_MESSAGES.get(reason) or redact(err.details() or reason.lower())
    # A reason the shared table doesn't know still gets the status its gRPC code implies.
    status = http_status(reason) if reason in STATUS_BY_REASON else http_status(by_code)
    return UpstreamError(message, reason=reason, status=status, metadata=_error_metadata(err))


def error_response(
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    metadata: dict[str, str] | None = None,
) -> web.Response:
    error: dict[str, object] = {"code": code, "message": message}
    if metadata:
        error["metadata"] = metadata
    body = json.dumps({"error": error})
    return web.Response(status=status, text=body, content_type="application/json", headers=headers)


def tether_error_response(err: TetherError) -> web.Response:
    status = err.status if isinstance(err, UpstreamError) else http_status(err.reason)
    headers = None
    retry_after = getattr(err, "retry_after_s", None)
    if isinstance(retry_after, int | float):
        headers = {"Retry-After": str(max(1, int(retry_after + 0.999)))}
    message = err.message if status < 500 or err.reason in _FIXED_MESSAGES else "internal error"
    metadata = err.metadata if status < 500 else None
    return error_response(status, err.reason, message, headers, metadata)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The only catch-all: every failure leaves as the JSON error shape, never a trace or token."""
    try:
        return await handler(request)
    except TetherError as err:
        return tether_error_response(err)
    except grpc.aio.AioRpcError as err:
        return tether_error_response(from_rpc_error(err))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _CODE_BY_HTTP.get(exc.status, "INTERNAL" if exc.status >= 500 else "BAD_REQUEST")
        message = exc.reason if exc.status != 413 else "request body too large"
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return error_response(exc.status, code, message, headers)
    except Exception:
        log.exception("unhandled error", extra={"path": request.path})
        return error_response(500, "INTERNAL", "internal error")
