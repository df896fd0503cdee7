"""The sampled access log: every answer of 400 and above, one in N of the others, over a real
aiohttp server and client."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from tether_gateway.access_log import access_log_class


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _missing(request: web.Request) -> web.Response:
    raise web.HTTPNotFound(text="no")


async def _serve(every: int) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/ok", _ok)
    app.router.add_get("/missing", _missing)
    runner = web.AppRunner(app, handle_signals=False, access_log_class=access_log_class(every))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def _lines(
    every: int, paths: list[str], session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> list[str]:
    runner, base = await _serve(every)
    try:
        with caplog.at_level(logging.INFO, logger="aiohttp.access"):
            caplog.clear()
            for path in paths:
                async with session.get(base + path) as resp:
                    await resp.read()
        return [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    finally:
        await runner.cleanup()


async def test_one_in_n_successes_and_every_error(
    session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    lines = await _lines(5, ["/ok"] * 10 + ["/missing"] * 3, session, caplog)
    assert sum('"GET /ok ' in line for line in lines) == 2  # the 1st and the 6th
    assert sum('"GET /missing ' in line and " 404 " in line for line in lines) == 3


async def test_one_logs_every_request(
    session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    lines = await _lines(1, ["/ok"] * 4 + ["/missing"], session, caplog)
    assert len(lines) == 5


async def test_zero_logs_errors_only(
    session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    lines = await _lines(0, ["/ok"] * 4 + ["/missing"] * 2, session, caplog)
    assert len(lines) == 2 and all(" 404 " in line for line in lines)


def test_negative_is_refused() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        access_log_class(-1)
