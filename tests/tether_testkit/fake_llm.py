"""Fake hosted LLMs for tests: real HTTP servers on 127.0.0.1 (a free port) that speak the
OpenAI chat-completions and Anthropic Messages streaming protocols as the providers document
them. A test scripts what the "model" answers (a list of `Reply`, or a `brain` that sees each
request body) and reads back every request it received. This module holds what both share;
`fake_openai` and `fake_anthropic` hold the wire formats.

    async with FakeOpenAI([Reply(text="Hi there"), Reply(status=429, retry_after="2")]) as llm:
        ...  # point the client at llm.base_url; llm.requests[0].body["messages"]"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import secrets
import string
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class FakeCall:
    """A tool call the fake model makes. `args` as a dict is sent as JSON; as a str it is sent
    verbatim (malformed arguments). Arguments stream in `pieces` fragments. No `id`: the
    server makes one in the provider's style (a test may repeat an id on purpose)."""

    name: str
    args: dict[str, Any] | str = field(default_factory=dict)
    id: str = ""
    pieces: int = 3

    def arguments(self) -> str:
        return self.args if isinstance(self.args, str) else json.dumps(self.args)


@dataclass(frozen=True)
class Reply:
    """One answer of the fake model: a stream, or a failure.

    Stream: `text` (a str streams word by word; a sequence streams the pieces as given),
    then `calls`; `stop` is "end", "tool" or "length" (mapped to each provider's own reason;
    any other value is sent as is), derived when empty; `usage` is (input, output) tokens,
    estimated when None.
    Failures: `status` >= 400 answers with the provider's JSON error body (`error_message`,
    `error_type` override the defaults) and `headers`/`retry_after`; `drop_after=N` closes the
    connection after N stream events (no clean end: an incomplete chunked body); `error_after=N`
    sends the provider's in-stream error event after N events; `garbage_after=N` sends a data
    line that is not JSON."""

    text: str | Sequence[str] = ""
    calls: Sequence[FakeCall] = ()
    stop: str = ""
    usage: tuple[int, int] | None = None
    status: int = 200
    error_message: str = ""
    error_type: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    retry_after: str = ""
    drop_after: int | None = None
    error_after: int | None = None
    garbage_after: int | None = None
    delay_s: float = 0.0

    def pieces(self) -> list[str]:
        if isinstance(self.text, str):
            return re.findall(r"\S+\s*|\s+", self.text)
        return [str(p) for p in self.text]

    def stop_reason(self) -> str:
        return self.stop or ("tool" if self.calls else "end")

    def tokens(self, body: Mapping[str, Any]) -> tuple[int, int]:
        if self.usage is not None:
            return self.usage
        sent = len(json.dumps(body.get("messages", []))) + len(str(body.get("system", "")))
        made = sum(map(len, self.pieces())) + sum(len(c.arguments()) for c in self.calls)
        return max(sent // 4, 1), max(made // 4, 1)


def split(text: str, pieces: int) -> list[str]:
    """`text` in `pieces` fragments (the way providers split tool arguments)."""
    if pieces <= 1 or len(text) < 2:
        return [text]
    size = max(-(-len(text) // pieces), 1)
    return [text[i : i + size] for i in range(0, len(text), size)]


def random_id(prefix: str, length: int = 24) -> str:
    alphabet = string.ascii_letters + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


def mask(key: str) -> str:
    """How providers echo a wrong key in a 401: a prefix and the last four characters."""
    return key[:3] + "*" * max(len(key) - 7, 3) + key[-4:] if len(key) > 8 else "***"


@dataclass
class Recorded:
    """One request the fake received: path, headers (lower-cased names) and JSON body."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


Brain = Callable[[dict[str, Any]], "Reply | str | Awaitable[Reply | str]"]


class Dropped(Exception):
    """The handler closed the connection on purpose."""


class Ended(Exception):
    """The stream ends here (after an in-stream error event)."""


class FakeLLM:
    """The shared server: lifecycle, request recording, the script, key checks and the
    stream pacing. Subclasses define the routes and the wire format."""

    paths: tuple[str, ...] = ()
    garbage = b'data: {"this is": not json\n\n'
    """A frame the client cannot parse (for `garbage_after`)."""

    def __init__(
        self,
        replies: Iterable[Reply | str] = (),
        *,
        brain: Brain | None = None,
        api_key: str | None = None,
        echo_key_in_errors: bool = False,
    ) -> None:
        """`api_key`: when set, a request carrying another key gets the provider's 401 (with
        the key masked as providers do, or whole with `echo_key_in_errors`, as a careless
        compatible server might). Replies are used in order, then `brain`, if any."""
        self.replies: list[Reply | str] = list(replies)
        self.brain = brain
        self.api_key = api_key
        self.echo_key_in_errors = echo_key_in_errors
        self.requests: list[Recorded] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    # Lifecycle ---------------------------------------------------------------------------

    async def start(self) -> FakeLLM:
        app = web.Application()
        for path in self.paths:
            app.router.add_post(path, self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and isinstance(server, asyncio.base_events.Server)
        self.port = int(server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeLLM:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.origin

    # Requests ----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.requests.append(
            Recorded(request.path, headers, body if isinstance(body, dict) else {})
        )
        if not isinstance(body, dict):
            return self.error(400, "", "the request body is not a JSON object", {})
        if self.api_key is not None:
            sent = self.sent_key(headers)
            if sent != self.api_key:
                shown = (sent or "") if self.echo_key_in_errors else mask(sent or "")
                return self.error(401, "", self.wrong_key_message(shown), {})
        problem = self.validate(body)
        if problem:
            return self.error(400, "", problem, {})
        reply = await self._next(body)
        if reply.status >= 400:
            extra = dict(reply.headers)
            if reply.retry_after:
                extra["retry-after"] = reply.retry_after
            return self.error(reply.status, reply.error_type, reply.error_message, extra)
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                **reply.headers,
            }
        )
        await resp.prepare(request)
        sender = Sender(request, resp, reply, self.stream_error(reply), self.garbage)
        try:
            await self.stream(sender, reply, body)
        except Dropped:
            return resp
        except Ended:
            pass
        await resp.write_eof()
        return resp

    async def _next(self, body: dict[str, Any]) -> Reply:
        if self.replies:
            got: Reply | str = self.replies.pop(0)
        elif self.brain is not None:
            answer = self.brain(body)
            got = await answer if inspect.isawaitable(answer) else answer
        else:
            n = len(self.requests)
            return Reply(
                status=400, error_message=f"fake server: no reply scripted for request #{n}"
            )
        return Reply(text=got) if isinstance(got, str) else got

    # Provider specifics ------------------------------------------------------------------

    def sent_key(self, headers: Mapping[str, str]) -> str | None:
        auth = headers.get("authorization", "")
        return auth[7:] if auth.lower().startswith("bearer ") else None

    def wrong_key_message(self, shown: str) -> str:
        return f"Incorrect API key provided: {shown}."

    def validate(self, body: dict[str, Any]) -> str:
        """What the real API would refuse with a 400, as its message; "" when fine."""
        return ""

    def error(
        self, status: int, kind: str, message: str, headers: Mapping[str, str]
    ) -> web.Response:
        raise NotImplementedError

    def stream_error(self, reply: Reply) -> bytes:
        """The provider's in-stream error event (for `error_after`)."""
        raise NotImplementedError

    async def stream(self, out: Sender, reply: Reply, body: dict[str, Any]) -> None:
        raise NotImplementedError


class Sender:
    """Writes SSE events, counting them, and carries out the reply's scripted stream failure
    at the right event."""

    def __init__(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        reply: Reply,
        error_frame: bytes,
        garbage_frame: bytes,
    ) -> None:
        self.request = request
        self.resp = resp
        self.reply = reply
        self.error_frame = error_frame
        self.garbage_frame = garbage_frame
        self.sent = 0

    async def event(self, data: object, event: str | None = None) -> None:
        r = self.reply
        if r.drop_after is not None and self.sent >= r.drop_after:
            await self._drop()
        if r.garbage_after is not None and self.sent == r.garbage_after:
            await self.raw(self.garbage_frame)
        if r.error_after is not None and self.sent == r.error_after:
            await self.raw(self.error_frame)
            raise Ended
        if r.delay_s:
            await asyncio.sleep(r.delay_s)
        await self.raw(frame(data, event))

    async def raw(self, data: bytes) -> None:
        self.sent += 1
        await self.resp.write(data)

    async def _drop(self) -> None:
        # close(), not abort(): what was written is flushed, then the connection ends without
        # the chunked body's terminator, as when a proxy or the provider goes away.
        transport = self.request.transport
        if transport is not None:
            transport.close()
        raise Dropped


def frame(data: object, event: str | None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()
