"""Security headers on every response the gateway sends (JSON, errors, SSE, the UI's files): a
strict Content-Security-Policy, no MIME sniffing, no referrer. Added when the response is
prepared, so streamed and error responses get them as well as handlers' own."""

from __future__ import annotations

from aiohttp import web

# The demo UI: only its own files. No inline script or style, no eval, no plugin, not framed.
UI_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "img-src 'self' data:",
        "object-src 'none'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'self'",
    )
)
# JSON, SSE, metrics: nothing in them may load or run anything, even if opened as a page.
API_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"


def is_ui_path(path: str) -> bool:
    return path == "/" or path.startswith("/static/")


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """An `on_response_prepare` hook: runs right before any response's headers are sent."""
    ui = is_ui_path(request.path)
    headers = response.headers
    headers.setdefault("Content-Security-Policy", UI_POLICY if ui else API_POLICY)
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("Referrer-Policy", "no-referrer")
    if ui:
        headers.setdefault("X-Frame-Options", "DENY")  # for browsers without frame-ancestors
