"""LangGraph's error shape on the mount: `{"detail": message}`, with the status LangGraph gives
(bad input 422, unknown thread or run 404, a busy thread 409). The statuses and messages are the
gateway's own mapping (tether_gateway.errors): the same masking, no trace, no token."""

from __future__ import annotations

import json
import logging

import grpc
from aiohttp import web
from aiohttp.typedefs import Handler
from tether_common.errors import TetherError

from tether_gateway.errors import from_rpc_error, tether_error_response

log = logging.getLogger(__name__)


def _detail(resp: web.Response) -> web.Response:
    """The gateway's `{"error": {code, message}}` answer as `{"detail": message}`."""
    error = json.loads(resp.text or "{}").get("error", {})
    status = 422 if resp.status == 400 else resp.status
    headers = {k: v for k, v in resp.headers.items() if k.lower() in ("retry-after", "allow")}
    body = {"detail": error.get("message", ""), "code": error.get("code", "")}
    return web.json_response(body, status=status, headers=headers)


@web.middleware
async def detail_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except TetherError as err:
        return _detail(tether_error_response(err))
    except grpc.aio.AioRpcError as err:
        return _detail(tether_error_response(from_rpc_error(err)))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        status = 422 if exc.status == 400 else exc.status
        return web.json_response({"detail": exc.reason}, status=status)
