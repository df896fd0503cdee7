"""LangGraph's clients send their credential as `X-Api-Key` (the SDKs' `api_key`, Agent Chat
UI's "LangSmith API key" field); Tether's is a bearer token. On the mount, a request without an
`Authorization` header and with an `X-Api-Key` is read as `Authorization: Bearer <that key>`: the
key is a Tether token (the dev issuer's or the IdP's), verified like any other. Both headers at
once: the `Authorization` one is used and the key ignored, as LangGraph's own server does with a
custom auth handler that reads the bearer."""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler
from multidict import CIMultiDict

HEADER = "X-Api-Key"


@web.middleware
async def api_key_as_bearer(request: web.Request, handler: Handler) -> web.StreamResponse:
    key = request.headers.get(HEADER)
    if key is None or "Authorization" in request.headers:
        return await handler(request)
    headers = CIMultiDict(request.headers)
    del headers[HEADER]
    headers["Authorization"] = f"Bearer {key.strip()}"
    return await handler(request.clone(headers=headers))
