"""One client session per MCP server per runtime process, shared by every run of the process:
connected when the agent loads, connected again after the server dies or the connection drops
(at the next call), closed when the process stops (a stdio server's process with it: its stdin
closed, then SIGTERM and SIGKILL to its process group; a runtime killed outright leaves the server
its stdin's end of file, on which a stdio server exits).

The official `mcp` SDK's client does the protocol. A client is entered and left by one task
(anyio's rule), so each connection lives in a task of its own, and calls from any run's task go
through it."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from tether_common.backoff import Backoff
from tether_common.redaction import redact
from tether_sdk import IDEMPOTENCY_META_KEY, MCPServer
from tether_sdk._context import Ask

from tether_runtime.engine.mcp.server_log import CallOf, ServerLog

log = logging.getLogger(__name__)

CONNECTION_CLOSED = mcp_types.CONNECTION_CLOSED
LISTEN_BACKOFF = Backoff(first_s=1.0, cap_s=60.0)
"""Between attempts to open a dropped `subscriptions/listen` stream again."""
LOG_LEVEL: mcp_types.LoggingLevel = "info"
"""The least severe of a server's log lines the runtime asks for (server_log.py bounds them)."""
Progress = ProgressFnT


class Unavailable(Exception):
    """The server could not be reached: the request was never sent, so nothing happened."""


class ConnectionLost(Exception):
    """The connection dropped while the request was out: the server may or may not have acted."""


def headers_for(server: MCPServer, environ: dict[str, str] | None = None) -> dict[str, str]:
    """An http server's headers: as written, then from the runtime's variables, then from the
    secret file (`Header: value` lines; '#' comments). A variable or file named but missing is
    Unavailable (never a call without its credentials)."""
    env = os.environ if environ is None else environ
    out = dict(server.headers)
    for header, var in server.headers_from_env.items():
        value = env.get(var)
        if not value:
            raise Unavailable(f"MCP server {server.name!r}: ${var} (header {header}) is not set")
        out[header] = value
    if server.headers_file:
        try:
            text = Path(server.headers_file).read_text()
        except OSError as err:
            raise Unavailable(
                f"MCP server {server.name!r}: cannot read its headers file: {err.strerror}"
            ) from None
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, value = line.partition(":")
            if not sep or not name.strip():
                raise Unavailable(
                    f"MCP server {server.name!r}: its headers file has a line that is not "
                    "'Header: value'"
                )
            out[name.strip()] = value.strip()
    return out


def stdio_parameters(
    server: MCPServer, environ: dict[str, str] | None = None
) -> StdioServerParameters:
    env = os.environ if environ is None else environ
    child = dict(server.env)
    for name, var in server.env_from.items():
        value = env.get(var)
        if value is None:
            raise Unavailable(f"MCP server {server.name!r}: ${var} (for its {name}) is not set")
        child[name] = value
    return StdioServerParameters(
        command=server.command[0], args=list(server.command[1:]), env=child, cwd=server.cwd
    )


class _NoteRefusals(httpx2.AsyncHTTPTransport):
    """httpx's own transport, noting each request that could not even connect (ConnectError:
    no byte of it reached the server) by the Tether key in its `_meta`: a write whose request
    was refused is known not to have happened (MCP_SERVER_UNAVAILABLE), unlike one whose
    connection was lost after it was sent (Uncertain)."""

    def __init__(self, refused: set[str]) -> None:
        super().__init__()
        self.refused = refused

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await super().handle_async_request(request)
        except httpx2.ConnectError:
            key = _key_of(request)
            if key is not None:
                self.refused.add(key)
            raise


def _key_of(request: httpx2.Request) -> str | None:
    try:
        body = json.loads(request.content or b"null")
        found = body["params"]["_meta"][IDEMPOTENCY_META_KEY]
    except (ValueError, TypeError, KeyError, httpx2.RequestNotRead):
        return None
    return found if isinstance(found, str) else None


class Connection:
    """A server's session in this process. `call` and `list_tools` connect first if needed."""

    def __init__(
        self,
        server: MCPServer,
        on_tools_changed: Callable[[], None] | None = None,
    ) -> None:
        self.server = server
        self.on_tools_changed = on_tools_changed
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self._broken = False
        self._askers: dict[int, Ask | None] = {}
        """Calls in flight (by a number of this process), each with its way to ask a person."""
        self._calls = 0
        self._whose: dict[int, CallOf] = {}
        """Calls in flight: whose run each is (a server's log line goes to that run's log)."""
        self._log = ServerLog(server.name)
        self._refused: set[str] = set()
        """Keys of calls whose request could not connect (http: _NoteRefusals)."""
        self.connects = 0
        """How many times this process connected (1 at load; more after reconnections)."""

    # -- the connection's own task ------------------------------------------------------------

    def _client_for(self, http: Any) -> Client:
        s = self.server
        common: dict[str, Any] = {
            "message_handler": self._on_message,
            "logging_callback": self._on_log,
            # From 2026-07-28 on a server logs only for requests that opt in, at this level up.
            "log_level": LOG_LEVEL,
            # Declares the elicitation capability: a server's question is put to a person.
            "elicitation_callback": self._on_elicit,
            "client_info": mcp_types.Implementation(name="tether", version="0.1.0"),
            "cache": None,  # a tools/call is never served from a cache
        }
        if s.transport == "stdio":
            return Client(stdio_parameters(s), **common)
        return Client(streamable_http_client(s.url, http_client=http), **common)

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Enter the client, hand it over, hold it until told to stop (or the task is
        cancelled), then leave it: in one task, as anyio requires."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                http = None
                if self.server.transport == "http":
                    # The SDK's client (create_mcp_http_client: its timeouts, no redirects
                    # followed) over a transport that notes refused requests.
                    made = httpx2.AsyncClient(
                        headers=headers_for(self.server),
                        timeout=httpx2.Timeout(
                            MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT
                        ),
                        transport=_NoteRefusals(self._refused),
                    )
                    http = await stack.enter_async_context(made)
                client = await stack.enter_async_context(self._client_for(http))
                if not ready.done():
                    ready.set_result(client)
                heard = asyncio.get_running_loop().create_task(self._listen(client))
                try:
                    await stop.wait()
                finally:
                    heard.cancel()
                    with contextlib.suppress(BaseException):
                        await heard
        except BaseException as err:  # noqa: BLE001 - handed to whoever waits for the connection
            if not ready.done():
                ready.set_exception(err if isinstance(err, Exception) else Unavailable("stopped"))
            if isinstance(err, asyncio.CancelledError):
                raise
            if ready.done() and not isinstance(err, Unavailable):
                log.info("MCP server %r: its session ended: %s", self.server.name, err)

    async def _listen(self, client: Client) -> None:
        """Hear the server say its tools changed. From protocol 2026-07-28 on, a server says so
        only on a `subscriptions/listen` stream (to every session listening, so every runtime
        hears it); before, as a notification (`_on_message`). A stream that drops is opened
        again (with backoff) and the tools listed again, since a change may have been missed
        meanwhile. Each stream is entered and left in this one task."""
        failures = 0
        while True:
            try:
                async with client.listen(tools_list_changed=True) as sub:
                    if failures:
                        self._tools_changed()  # what changed while nobody listened
                    failures = 0
                    async for _ in sub:
                        self._tools_changed()
                return  # the server closed the stream gracefully: the session is ending
            except ListenNotSupportedError:
                return  # an older protocol: notifications/tools/list_changed comes as a message
            except (MCPError, SubscriptionLost, TimeoutError, OSError) as err:
                failures += 1
                log.info(
                    "MCP server %r: tool list changes not heard (%s); listening again",
                    self.server.name,
                    err,
                )
                await LISTEN_BACKOFF.pause(failures)

    def _tools_changed(self) -> None:
        log.info("MCP server %r: its tools changed", self.server.name)
        if self.on_tools_changed is not None:
            self.on_tools_changed()

    async def _connect(self, within_s: float) -> Client:
        await self._drop()
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        stop = asyncio.Event()
        # A context of its own: the connection outlives the run whose call (re)connected it, and
        # what it logs (a server's log line) must not carry that run's ids.
        task = loop.create_task(
            self._hold(ready, stop), name=f"mcp-{self.server.name}", context=contextvars.Context()
        )
        self._task, self._stop = task, stop
        try:
            async with asyncio.timeout(within_s):
                client = await asyncio.shield(ready)
        except TimeoutError:
            await self._drop()
            raise Unavailable(
                f"MCP server {self.server.name!r} did not answer within {within_s:g} s"
            ) from None
        except Unavailable:
            await self._drop()
            raise
        except Exception as err:  # noqa: BLE001 - a server that cannot be started or reached
            await self._drop()
            raise Unavailable(
                f"MCP server {self.server.name!r} cannot be reached: {redact(str(err))[:300]}"
            ) from None
        self._client, self._broken = client, False
        self.connects += 1
        log.info(
            "MCP server %r connected (%s, protocol %s)",
            self.server.name,
            self.server.transport,
            client.protocol_version,
        )
        if self.connects > 1:
            self._tools_changed()  # a server that came back may list other tools
        return client

    async def _drop(self) -> None:
        """Leave the current client, if any (a stdio server's process stops with it)."""
        task, stop = self._task, self._stop
        self._client, self._task, self._stop = None, None, None
        if task is None or stop is None:
            return
        stop.set()
        try:
            async with asyncio.timeout(10):
                await asyncio.shield(task)
        except (TimeoutError, asyncio.CancelledError, Exception):  # noqa: BLE001
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    def _usable(self) -> Client | None:
        client = self._client
        if client is None or self._broken or self._task is None or self._task.done():
            return None
        # The SDK's dispatcher knows the connection ended (end of file, a dead process) before
        # any call fails on it: a call is then never sent on a dead connection.
        dispatcher = getattr(client.session, "_dispatcher", None)
        if getattr(dispatcher, "_closed", False):
            return None
        return client

    async def client(self, within_s: float) -> Client:
        """A live client, connecting (again) first if needed; Unavailable if it cannot."""
        client = self._usable()
        if client is not None:
            return client
        async with self._lock:
            client = self._usable()
            if client is not None:
                return client
            return await self._connect(min(within_s, self.server.connect_timeout_s))

    # -- what the server tells us -------------------------------------------------------------

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            log.warning("MCP server %r: transport error: %s", self.server.name, message)
            return
        root = getattr(message, "root", message)
        if isinstance(root, mcp_types.ToolListChangedNotification):
            self._tools_changed()

    async def _on_log(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        self._log.line(params, list(self._whose.values()))

    async def _on_elicit(
        self, context: Any, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        """`elicitation/create`: a provide_input card for a person (held_questions.py), its form
        the requested schema; their answer goes back as MCP's accept, decline or cancel. MCP
        does not say which call a server's request belongs to: it is put to a person only while
        one call is in flight on this connection (else cancelled, and said so in the log)."""
        name = self.server.name
        if not isinstance(params, mcp_types.ElicitRequestFormParams):
            log.warning("MCP server %r asked for a URL elicitation: not supported, cancelled", name)
            return mcp_types.ElicitResult(action="cancel")
        askers = list(self._askers.values())
        if len(askers) != 1 or askers[0] is None:
            log.warning(
                "MCP server %r asked a question while %d calls were in flight: it cannot be "
                "told whose run it belongs to; cancelled",
                name,
                len(askers),
            )
            return mcp_types.ElicitResult(action="cancel")
        action, content = await askers[0](
            f"{name} asks",
            redact(params.message)[:2000],
            dict(params.requested_schema),
            self.server.elicitation_timeout_s,
        )
        if action != "accept":
            return mcp_types.ElicitResult(action=action)  # type: ignore[arg-type]
        return mcp_types.ElicitResult(action="accept", content=content)

    # -- calls ----------------------------------------------------------------------------------

    async def list_tools(self, within_s: float) -> list[mcp_types.Tool]:
        client = await self.client(within_s)
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        async with asyncio.timeout(within_s):
            for _ in range(100):  # a paginator that never ends cannot hang a load
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        return tools

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        meta: dict[str, Any],
        within_s: float,
        progress: Progress | None = None,
        ask: Ask | None = None,
    ) -> mcp_types.CallToolResult:
        """One `tools/call`. Unavailable: never sent. ConnectionLost: sent, and the connection
        dropped before the answer. MCPError: the server answered with a protocol error. `ask`:
        how the call puts a server's question to a person."""
        client = await self.client(within_s)
        self._calls += 1
        number = self._calls
        self._askers[number] = ask
        self._whose[number] = whose = CallOf.current(name)
        key = meta.get(IDEMPOTENCY_META_KEY)
        try:
            return await client.call_tool(
                name,
                arguments,
                progress_callback=progress,
                meta=meta,  # type: ignore[arg-type]
            )
        except MCPError as err:
            if err.code == CONNECTION_CLOSED:
                self._broken = True
                if key in self._refused:
                    raise Unavailable(
                        f"MCP server {self.server.name!r} refused the connection: the call was "
                        "not sent"
                    ) from None
                raise ConnectionLost(
                    f"the connection to MCP server {self.server.name!r} closed during the call"
                ) from None
            raise
        except (OSError, EOFError) as err:
            self._broken = True
            raise ConnectionLost(
                f"the connection to MCP server {self.server.name!r} failed during the call: "
                f"{type(err).__name__}"
            ) from None
        finally:
            self._askers.pop(number, None)
            self._whose.pop(number, None)
            self._refused.discard(key)
            self._log.flush(whose)

    async def close(self) -> None:
        async with self._lock:
            await self._drop()
