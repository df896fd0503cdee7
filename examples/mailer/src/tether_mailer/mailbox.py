"""The demo's mailbox: the SMTP sink as a process, with a page listing what it received.
`tether dev` starts it (`python -m tether_mailer.mailbox`); SMTP on MAILER_SMTP_HOST:PORT
(default 127.0.0.1:8025), the page on MAILER_SINK_HTTP (default 127.0.0.1:8026), both until
SIGTERM or Ctrl-C. Messages are kept in memory only: this is a sink, not a mail server."""

from __future__ import annotations

import asyncio
import html
import os
import signal
import time
from collections.abc import Mapping

from aiohttp import web

from tether_mailer.settings import SmtpSettings
from tether_mailer.sink import Sink, serve_smtp

SINK: web.AppKey[Sink] = web.AppKey("sink", Sink)


def _page(sink: Sink) -> str:
    rows = "".join(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td><pre>{}</pre></td></tr>".format(
            time.strftime("%H:%M:%S", time.localtime(m.at)),
            html.escape(", ".join(m.recipients)),
            html.escape(m.subject),
            html.escape(m.message_id),
            html.escape(m.text),
        )
        for m in reversed(sink.received)
    )
    counts = sink.per_recipient()
    twice = [r for r, n in counts.items() if n > 1]
    return f"""<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="3">
<title>Mail sink</title><style>body{{font:14px system-ui;margin:2em}}td{{vertical-align:top;
border-top:1px solid #ddd;padding:4px 8px}}pre{{margin:0;white-space:pre-wrap}}</style></head><body>
<h1>Mail sink</h1><p>{len(sink.received)} messages to {len(counts)} recipients
({len(twice)} received more than one). This page refreshes every 3 s.</p>
<table><tr><th>at</th><th>to</th><th>subject</th><th>Message-ID</th><th>text</th></tr>{rows}</table>
</body></html>"""


async def _index(request: web.Request) -> web.Response:
    return web.Response(text=_page(request.app[SINK]), content_type="text/html")


async def _messages(request: web.Request) -> web.Response:
    sink = request.app[SINK]
    return web.json_response({"messages": sink.as_json(), "per_recipient": sink.per_recipient()})


def app(sink: Sink) -> web.Application:
    application = web.Application()
    application[SINK] = sink
    application.router.add_get("/", _index)
    application.router.add_get("/messages", _messages)
    return application


async def serve(env: Mapping[str, str]) -> None:
    smtp = SmtpSettings.from_env(env)
    host, _, port = (env.get("MAILER_SINK_HTTP") or "127.0.0.1:8026").rpartition(":")
    sink = Sink()
    server = await serve_smtp(sink, smtp.host, smtp.port)
    runner = web.AppRunner(app(sink), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host or "127.0.0.1", int(port)).start()
    print(f"mail sink: SMTP on {smtp.host}:{smtp.port}, page on http://{host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        sink.release.set()
        server.close()
        await runner.cleanup()


def main() -> None:
    asyncio.run(serve(os.environ))


if __name__ == "__main__":
    main()
