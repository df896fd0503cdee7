"""Finding 8, Content-Security-Policy: the UI's page and files carry a strict policy (its own
scripts, styles and connections only; no inline code, no eval, never framed), and every API
answer (JSON, errors, SSE, metrics) `default-src 'none'`. A real gateway process; that the UI
works under its policy with no violation is the browser test's (test_gateway_browser.py)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import aiohttp
from tether_testkit.processes import Proc
from tether_testkit.security import bearer, new_user


def directives(policy: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for part in policy.split(";"):
        if part.strip():
            name, *values = part.split()
            out[name] = values
    return out


class InlineFinder(HTMLParser):
    """What a strict policy would block in a page: inline scripts, handlers and styles."""

    def __init__(self) -> None:
        super().__init__()
        self.inline: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {k for k, _ in attrs}
        if tag == "script" and "src" not in names:
            self.inline.append("inline <script>")
        if tag == "style":
            self.inline.append("<style> element")
        self.inline += [f"{tag} {k}=" for k in names if k == "style" or k.startswith("on")]
        if tag == "a" and any(v and v.startswith("javascript:") for _, v in attrs):
            self.inline.append("javascript: URL")


async def test_the_ui_has_a_strict_policy_and_nothing_inline(
    gateway: Proc, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{gateway.addr}/") as r:
        assert r.status == 200
        page = await r.text()
        policy = directives(r.headers["Content-Security-Policy"])
        assert r.headers["X-Frame-Options"] == "DENY"
    assert policy["default-src"] == ["'self'"]
    assert policy["script-src"] == ["'self'"], "no inline script, no eval, no other host"
    assert policy["style-src"] == ["'self'"]
    assert policy["connect-src"] == ["'self'"]
    assert policy["img-src"] == ["'self'", "data:"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["base-uri"] == ["'none'"]
    assert policy["form-action"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert not re.search(r"unsafe-(inline|eval|hashes)|\*", r.headers["Content-Security-Policy"])
    finder = InlineFinder()
    finder.feed(page)
    assert finder.inline == [], finder.inline
    for asset in ("/static/app.js", "/static/style.css", "/static/client/index.js"):
        async with http.get(f"{gateway.addr}{asset}") as r:
            assert r.status == 200, asset
            assert directives(r.headers["Content-Security-Policy"])["script-src"] == ["'self'"]
            assert r.headers["X-Content-Type-Options"] == "nosniff"


async def test_every_api_answer_loads_nothing(gateway: Proc, http: aiohttp.ClientSession) -> None:
    gw, user = gateway.addr, new_user("csp")
    async with http.post(f"{gw}/v1/conversations", json={}, headers=bearer(user)) as r:
        assert r.status == 201
        conv = (await r.json())["conversation"]["id"]
    answers = [
        ("GET", f"{gw}/v1/conversations", bearer(user)),  # JSON
        ("GET", f"{gw}/v1/conversations", {}),  # 401
        ("GET", f"{gw}/v1/runs/run_nope", bearer(user)),  # 404 from the runtime
        ("POST", f"{gw}/v1/conversations/{conv}/runs", bearer(user)),  # 400: no body
        ("GET", f"{gw}/nowhere", {}),  # the router's own 404
        ("GET", f"{gw}/healthz", {}),
        ("GET", f"{gw}/metrics", {}),
        ("GET", f"{gw}/openapi.json", {}),
    ]
    for method, url, headers in answers:
        async with http.request(method, url, headers=headers) as r:
            policy = r.headers.get("Content-Security-Policy", "")
            assert directives(policy).get("default-src") == ["'none'"], (url, r.status, policy)
            assert directives(policy)["frame-ancestors"] == ["'none'"]
            assert r.headers["X-Content-Type-Options"] == "nosniff"
    # A stream, whose headers leave before its handler returns.
    body = {"text": "hello"}
    sse = {**bearer(user), "Accept": "text/event-stream"}
    async with http.post(f"{gw}/v1/conversations/{conv}/runs", json=body, headers=sse) as r:
        assert r.status == 201 and r.content_type == "text/event-stream"
        assert directives(r.headers["Content-Security-Policy"])["default-src"] == ["'none'"]
