"""The gateway's HTTP API as `tether chat` and `tether runs` use it: JSON calls that retry what is
safe to retry (connection errors and 502/503/504, with the same idempotency key), an SSE reader,
and `follow`, a run's events that survive a gateway restart: each reconnect sends Last-Event-ID,
the last sequence handed out, so no event is ever given twice and none is skipped."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from tether_common import backoff as policy
from tether_proto import wire

TERMINAL_TYPES = wire.TERMINAL_EVENT_TYPES
TERMINAL_STATUSES = wire.TERMINAL_RUN_STATUSES
# Statuses after which the same request may simply be sent again (the gateway or its runtime was
# restarting, or busy); every write here carries an idempotency key, so a repeat is harmless.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    ConnectionError,
    TimeoutError,
)
# No byte for this long on an SSE stream (the gateway sends a heartbeat every 15 s): reconnect.
IDLE_TIMEOUT_S = 45.0

Event = dict[str, Any]
Notice = Callable[[str], None]


class ApiError(Exception):
    """The gateway answered with an error: `{"error": {"code", "message"}}` and its status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class GaveUp(Exception):
    """The gateway stayed unreachable for longer than the caller's patience."""


RETRY = policy.Backoff(0.25, 5.0, jitter=policy.NO_JITTER)


@dataclass
class Backoff:
    """0.25 s doubling to 5 s between attempts; gives up after `patience_s` without success
    (counted from the first failure since the last success)."""

    patience_s: float = 120.0
    _retries: policy.Retries | None = None

    @property
    def attempt(self) -> int:
        return self._retries.failures if self._retries else 0

    def reset(self) -> None:
        self._retries = None

    def next_delay(self, err: BaseException) -> float:
        if self._retries is None:
            self._retries = policy.Retries(RETRY, self.patience_s)
        delay = self._retries.next_delay()
        if delay is None:
            raise GaveUp(f"the gateway is unreachable ({describe(err)})") from err
        return delay


def describe(err: BaseException) -> str:
    """A failure in a few words (the operator needs what happened, not aiohttp's internals)."""
    if isinstance(err, ApiError):
        return f"HTTP {err.status} {err.code}"
    if isinstance(err, aiohttp.ClientConnectorError):
        return "cannot connect"
    if isinstance(err, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return "the gateway dropped the connection"
    if isinstance(err, TimeoutError):
        return "no answer in time"
    text = str(err).strip()
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def retryable(err: BaseException) -> bool:
    if isinstance(err, ApiError):
        return err.status in RETRY_STATUSES
    return isinstance(err, CONNECTION_ERRORS)


async def error_of(resp: aiohttp.ClientResponse) -> ApiError:
    try:
        body = await resp.json(content_type=None)
        err = body["error"]
        return ApiError(resp.status, str(err["code"]), str(err["message"]))
    except (ValueError, KeyError, TypeError, aiohttp.ClientError):
        return ApiError(resp.status, "HTTP_ERROR", resp.reason or "")


class GatewayApi:
    """One session against one gateway URL with one bearer token."""

    def __init__(
        self, url: str, token: str, *, notice: Notice | None = None, patience_s: float = 120.0
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.notice = notice or (lambda _text: None)
        self.patience_s = patience_s
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # Per request: connecting and the first byte are bounded; an SSE body is not.
            timeout = aiohttp.ClientTimeout(total=None, connect=10, sock_connect=10)
            self._session = aiohttp.ClientSession(timeout=timeout)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", **extra}

    async def _send(
        self, method: str, path: str, *, body: Any = None, query: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """One JSON call, repeated on connection errors and 429/502/503/504 with backoff."""
        backoff = Backoff(self.patience_s)
        while True:
            try:
                async with asyncio.timeout(30):
                    async with self.session.request(
                        method, self.url + path, json=body, params=query, headers=self._headers()
                    ) as resp:
                        if resp.status >= 400:
                            raise await error_of(resp)
                        if resp.status == 204:
                            return resp.status, None
                        return resp.status, await resp.json(content_type=None)
            except Exception as err:
                if not retryable(err):
                    raise
                delay = backoff.next_delay(err)
                self.notice(f"{method} {path}: {describe(err)}; retrying in {delay:g} s")
                await asyncio.sleep(delay)

    async def create_conversation(self, title: str = "") -> dict[str, Any]:
        _, body = await self._send(
            "POST", "/v1/conversations", body={"title": title} if title else {}
        )
        conversation: dict[str, Any] = body["conversation"]
        return conversation

    async def get_conversation(self, conversation_id: str) -> dict[str, Any]:
        _, body = await self._send("GET", f"/v1/conversations/{conversation_id}")
        conversation: dict[str, Any] = body["conversation"]
        return conversation

    async def get_run(self, run_id: str) -> dict[str, Any]:
        _, body = await self._send("GET", f"/v1/runs/{run_id}")
        run: dict[str, Any] = body["run"]
        return run

    async def list_runs(
        self,
        *,
        conversation_id: str = "",
        status: str = "",
        page_size: int = 0,
        page_token: str = "",
    ) -> tuple[list[dict[str, Any]], str | None]:
        query = {
            k: v
            for k, v in (
                ("conversationId", conversation_id),
                ("status", status),
                ("pageSize", str(page_size) if page_size else ""),
                ("pageToken", page_token),
            )
            if v
        }
        _, body = await self._send("GET", "/v1/runs", query=query)
        return list(body["runs"]), body.get("nextPageToken")

    async def cancel_run(self, run_id: str, reason: str = "") -> tuple[int, dict[str, Any]]:
        """(200 cancelled now | 202 recorded, ends at the worker's next step, the run)."""
        status, body = await self._send(
            "POST", f"/v1/runs/{run_id}/cancel", body={"reason": reason} if reason else {}
        )
        return status, body["run"]

    async def resume(self, run_id: str, answer: dict[str, Any]) -> dict[str, Any]:
        """POST resume with `answer` (interruptId, decision, option/fill, idempotencyKey): the
        key stays the same across this call's retries, so a repeat is the same decision."""
        _, body = await self._send("POST", f"/v1/runs/{run_id}/resume", body=answer)
        run: dict[str, Any] = body["run"]
        return run

    async def list_agents(self) -> dict[str, Any]:
        _, body = await self._send("GET", "/v1/agents")
        agents: dict[str, Any] = body
        return agents

    async def start_run_stream(
        self, conversation_id: str, text: str, key: str, agent: str = ""
    ) -> tuple[str, aiohttp.ClientResponse]:
        """POST a run with Accept: text/event-stream: (its id, the open SSE response). Repeated
        on connection errors with the same idempotency key: the gateway answers a repeat with
        the first run's stream, so a restart during the POST never starts a second run."""
        body: dict[str, str] = {"text": text, "idempotencyKey": key}
        if agent:
            body["agent"] = agent
        backoff = Backoff(self.patience_s)
        path = f"/v1/conversations/{conversation_id}/runs"
        while True:
            try:
                resp = await self.session.post(
                    self.url + path,
                    json=body,
                    headers=self._headers(Accept="text/event-stream"),
                )
                if resp.status >= 400:
                    err = await error_of(resp)
                    resp.release()
                    raise err
                run_id = resp.headers.get("X-Run-Id", "")
                if not run_id:
                    resp.release()
                    raise ApiError(resp.status, "NO_RUN_ID", "the gateway named no run")
                return run_id, resp
            except Exception as err:
                if not retryable(err):
                    raise
                delay = backoff.next_delay(err)
                self.notice(f"starting the run: {describe(err)}; retrying in {delay:g} s")
                await asyncio.sleep(delay)

    async def open_events(self, run_id: str, after: int) -> aiohttp.ClientResponse | None:
        """GET the run's SSE stream after `after` (Last-Event-ID); None when the run is over
        with nothing after it (204)."""
        resp = await self.session.get(
            f"{self.url}/v1/runs/{run_id}/events",
            headers=self._headers(Accept="text/event-stream", **{"Last-Event-ID": str(after)}),
        )
        if resp.status == 204:
            resp.release()
            return None
        if resp.status >= 400:
            err = await error_of(resp)
            resp.release()
            raise err
        return resp

    async def follow(
        self, run_id: str, after: int, opened: aiohttp.ClientResponse | None = None
    ) -> AsyncGenerator[Event, None]:
        """The run's events after `after`, to its terminal event, across gateway restarts and
        dropped connections: each reconnect resumes after the last sequence handed out (and
        skips anything at or below it), with backoff; GaveUp past the patience. `opened` is a
        response already streaming this run (the POST that started it)."""
        last = after
        backoff = Backoff(self.patience_s)
        lost = False
        reauthenticated = False  # the last connection ended with `reauthenticate`, no event since
        while True:
            resp = opened
            opened = None
            try:
                if resp is None:
                    resp = await self.open_events(run_id, last)
                    if resp is None:
                        return
                if lost:
                    self.notice(f"reconnected: continuing after event {last}")
                    lost = False
                backoff.reset()
                async for ev in sse_events(resp):
                    if ev.get("type") == "reauthenticate":
                        # The token expired or was revoked: the gateway ends the stream. One
                        # reconnect at once (a revoked or expired token is then a 401).
                        if reauthenticated:
                            raise ApiError(401, "UNAUTHENTICATED", "the stream's token ended")
                        reauthenticated = True
                        break
                    if ev.get("type") == "reset":
                        # The stream restarted from the run's state: the log continues after it.
                        run = ev.get("run") or {}
                        last = int(run.get("lastSequence") or last)
                        yield ev
                        if run.get("status") in TERMINAL_STATUSES:
                            return
                        continue
                    seq = int(ev.get("sequence") or 0)
                    if seq <= last:
                        continue  # already handed out: never twice
                    last = seq
                    reauthenticated = False
                    yield ev
                    if ev.get("type") in TERMINAL_TYPES:
                        return
                else:
                    raise ConnectionResetError("the gateway ended the stream before the run ended")
                self.notice(f"the stream's token ended: reconnecting after event {last}")
            except Exception as err:
                if not retryable(err):
                    raise
                delay = backoff.next_delay(err)
                lost = True
                self.notice(
                    f"connection lost ({describe(err)}); reconnecting in {delay:g} s "
                    f"(attempt {backoff.attempt})"
                )
                await asyncio.sleep(delay)
            finally:
                if resp is not None:
                    resp.close()


async def sse_events(resp: aiohttp.ClientResponse) -> AsyncGenerator[Event, None]:
    """The `data:` JSON of each SSE message of `resp`, as the spec splits them: lines end in LF,
    CRLF or CR, a blank line ends a message, `:` lines are comments, data lines join with LF."""
    buf = ""
    data: list[str] = []
    pending_cr = False
    reader = resp.content
    decoder = _Utf8()
    while True:
        async with asyncio.timeout(IDLE_TIMEOUT_S):
            chunk = await reader.readany()
        if not chunk:
            return
        text = decoder.feed(chunk)
        if pending_cr and text.startswith("\n"):
            text = text[1:]
        pending_cr = text.endswith("\r")
        buf += text
        lines = buf.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        buf = lines.pop()
        for line in lines:
            if line == "":
                if data:
                    yield json.loads("\n".join(data))
                    data = []
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            if name == "data":
                data.append(value[1:] if value.startswith(" ") else value)


class _Utf8:
    """Incremental UTF-8: a character split across two chunks is decoded once both arrived."""

    def __init__(self) -> None:
        import codecs

        self._dec = codecs.getincrementaldecoder("utf-8")()

    def feed(self, chunk: bytes) -> str:
        return str(self._dec.decode(chunk))
