"""`TetherClient`: Tether's runtime from Python, asyncio first.

    async with TetherClient("localhost:50051", token=token) as client:
        conv = await client.create_conversation("ops")
        run = await client.start(conv.id, "restart payment-api-2 in prod")
        async for event in client.stream(run.id):
            if event.WhichOneof("event") == "interrupt":
                await client.approve(run.id, event.interrupt.interrupt_id)

What it does for you:
- **Idempotency.** `start` sends a key generated per call (or yours) and reuses it across its
  own retries, so a retried start never starts a second run. `resume`/`approve`/`reject`/
  `answer` derive their key from the decision itself (run, interrupt, decision, answer): the
  same decision sent twice, from two tasks or two processes of one user, is one decision and
  both get its answer; a different decision on a decided interrupt is
  `InterruptAlreadyResolved`.
- **Retries.** Calls that are safe to repeat are retried on UNAVAILABLE with backoff
  (`RetryPolicy`); streams reconnect on their own (`EventStream`).
- **Deadlines.** Every unary call has one: `deadline_s` (default 10 s) per try unless a call
  passes `deadline_s=`. Streams have none.
- **Errors** are `TetherError` subclasses chosen by the runtime's ErrorInfo reason
  (`tether_client.errors`).
- **Channel** settings match the runtime's (`tether_client.channel`): round_robin over a DNS
  name's addresses, 3 s keepalive, 16 MiB messages.
- **Tracing.** With `opentelemetry` installed and a current span, its trace context goes with
  every call (`traceparent` metadata); nothing otherwise.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import grpc
from tether.runtime.v1 import resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_proto import wire

from tether_client._metadata import ON_BEHALF_METADATA, TokenProvider, call_metadata
from tether_client.channel import DEFAULT_DEADLINE_S, open_channel, tls_from_env
from tether_client.errors import InvalidArgument, from_rpc_error
from tether_client.retry import NO_RETRY, RetryPolicy, unary_retryable
from tether_client.rpc import EventCall, RuntimeApi
from tether_client.stream import EventStream

T = TypeVar("T")

# The names a decision goes by ("approve" -> DECISION_APPROVED, from the protos); the proto enum
# values are accepted as they are.
DECISIONS: Mapping[str, int] = wire.ANSWERS


def decision_key(
    run_id: str, interrupt_id: str, decision: int, answer: str, value_json: str = ""
) -> str:
    """The idempotency key of one decision: the same decision gives the same key anywhere."""
    parts: list[object] = [run_id, interrupt_id, decision, answer]
    if value_json:
        parts.append({"value": value_json})
    digest = hashlib.sha256(json.dumps(parts).encode())
    return f"tc-decision-{digest.hexdigest()[:40]}"


class _NoValue:
    """`resume`'s `value` left out (None is a value: JSON null)."""

    def __repr__(self) -> str:
        return "NO_VALUE"


NO_VALUE = _NoValue()


def graph_json(value: object, name: str) -> str:
    """A graph's input or resume value as the compact JSON text the runtime reads
    (`input_json`, `value_json`); InvalidArgument when it is not JSON."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise InvalidArgument(f"{name} is not JSON: {err}") from err


class TetherClient:
    """One channel to the runtime, used by any number of tasks at once.

    `target`: `host:port` (a DNS name is balanced round_robin over its addresses), or any gRPC
    target (`ipv4:a:1,b:2`, `dns:///...`, `unix:...`). Authenticate with `token` (a JWT sent as
    `authorization: Bearer`) or `token_provider` (called before every try, sync or async, for
    tokens that expire). `secure=True` uses TLS with the system's roots; `credentials` picks
    your own; with neither, TETHER_RUNTIME_TLS_CA_FILE (if set) makes it TLS trusting that CA.
    `metadata` is added to every call; `options` replace channel options of the same
    key (`tether_client.channel.channel_options`). `on_behalf_of`: a service whose token carries
    the on-behalf capability acts as this user (it still cannot approve)."""

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        token_provider: TokenProvider | None = None,
        secure: bool = False,
        credentials: grpc.ChannelCredentials | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S,
        retry: RetryPolicy | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        options: Sequence[tuple[str, Any]] = (),
        on_behalf_of: str = "",
    ) -> None:
        if token is not None and token_provider is not None:
            raise ValueError("give token or token_provider, not both")
        self.target = target
        self.deadline_s = deadline_s
        self.retry = retry or RetryPolicy()
        self._token = token
        self._token_provider = token_provider
        env_tls, env_options = (None, ()) if credentials or secure else tls_from_env()
        self._credentials = (
            credentials or (grpc.ssl_channel_credentials() if secure else None) or env_tls
        )
        self._extra = tuple(metadata)
        if on_behalf_of:
            self._extra += ((ON_BEHALF_METADATA, on_behalf_of),)
        self._options = (*env_options, *options)
        self._channel: grpc.aio.Channel | None = None
        self._api: RuntimeApi | None = None

    # -- lifecycle --

    @property
    def api(self) -> RuntimeApi:
        """The typed raw calls on this client's channel (opened on first use, inside a loop)."""
        if self._api is None:
            self._channel = open_channel(self.target, self._credentials, self._options)
            self._api = RuntimeApi(self._channel)
        return self._api

    async def close(self) -> None:
        channel, self._channel, self._api = self._channel, None, None
        if channel is not None:
            await channel.close(None)

    async def __aenter__(self) -> TetherClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _metadata(self) -> tuple[tuple[str, str], ...]:
        return await call_metadata(self._token, self._token_provider, self._extra)

    async def _unary(
        self,
        call: Callable[[tuple[tuple[str, str], ...], float], Awaitable[T]],
        deadline_s: float | None,
        *,
        retry: bool = True,
    ) -> T:
        policy = self.retry if retry else NO_RETRY
        deadline = self.deadline_s if deadline_s is None else deadline_s
        attempt = 1
        while True:
            try:
                return await call(await self._metadata(), deadline)
            except grpc.aio.AioRpcError as err:
                if attempt >= policy.attempts or not unary_retryable(err):
                    raise from_rpc_error(err) from err
            await asyncio.sleep(policy.backoff(attempt))
            attempt += 1

    # -- conversations --

    async def create_conversation(
        self, title: str = "", *, deadline_s: float | None = None
    ) -> resources_pb2.Conversation:
        """A new conversation of the caller's. Not retried (it has no idempotency key)."""
        req = pb.CreateConversationRequest(title=title)
        resp = await self._unary(
            lambda md, t: self.api.create_conversation(req, metadata=md, timeout=t),
            deadline_s,
            retry=False,
        )
        return resp.conversation

    async def get_conversation(
        self, conversation_id: str, *, deadline_s: float | None = None
    ) -> resources_pb2.Conversation:
        req = pb.GetConversationRequest(conversation_id=conversation_id)
        resp = await self._unary(
            lambda md, t: self.api.get_conversation(req, metadata=md, timeout=t), deadline_s
        )
        return resp.conversation

    async def list_conversations(
        self, *, page_size: int = 0, page_token: str = "", deadline_s: float | None = None
    ) -> pb.ListConversationsResponse:
        """Newest first; `next_page_token` is empty on the last page."""
        req = pb.ListConversationsRequest(page_size=page_size, page_token=page_token)
        return await self._unary(
            lambda md, t: self.api.list_conversations(req, metadata=md, timeout=t), deadline_s
        )

    async def list_runs(
        self,
        *,
        conversation_id: str = "",
        status: int = 0,
        page_size: int = 0,
        page_token: str = "",
        deadline_s: float | None = None,
    ) -> pb.ListRunsResponse:
        """The caller's runs, newest first (in one conversation; of one `resources_pb2.RunStatus`:
        0 is any); `next_page_token` is empty on the last page."""
        req = pb.ListRunsRequest(
            conversation_id=conversation_id,
            status=status,  # type: ignore[arg-type]
            page_size=page_size,
            page_token=page_token,
        )
        return await self._unary(
            lambda md, t: self.api.list_runs(req, metadata=md, timeout=t), deadline_s
        )

    async def list_messages(
        self,
        conversation_id: str,
        *,
        page_size: int = 0,
        page_token: str = "",
        deadline_s: float | None = None,
    ) -> pb.ListMessagesResponse:
        """Oldest first; `next_page_token` is empty on the last page."""
        req = pb.ListMessagesRequest(
            conversation_id=conversation_id, page_size=page_size, page_token=page_token
        )
        return await self._unary(
            lambda md, t: self.api.list_messages(req, metadata=md, timeout=t), deadline_s
        )

    # -- runs --

    async def start(
        self,
        conversation_id: str,
        text: str = "",
        *,
        input: Mapping[str, Any] | None = None,
        agent: str = "",
        idempotency_key: str | None = None,
        deadline_s: float | None = None,
    ) -> resources_pb2.Run:
        """Store `text` as the user's message and queue a run for it; returns the run at once
        (follow it with `stream`). `input`: a graph agent's input whole, a JSON object of its
        input schema (`{"messages": [{"role": "user", "content": "hi"}]}`), sent as
        `input_json`; `text` may then be empty (a native agent takes its last user message).
        `agent` names one of `list_agents`, its default when empty. The key (generated when not
        given) is reused across this call's retries: a repeat returns the first run instead of
        starting another."""
        if input is not None and not isinstance(input, Mapping):
            raise InvalidArgument("input must be a mapping (a JSON object)")
        if not text and not input:
            raise InvalidArgument("give text or input")
        req = pb.StartRunRequest(
            conversation_id=conversation_id,
            text=text,
            agent=agent,
            idempotency_key=idempotency_key or f"tc-start-{uuid.uuid4().hex}",
            input_json=graph_json(dict(input), "input") if input else "",
        )
        resp = await self._unary(
            lambda md, t: self.api.start_run(req, metadata=md, timeout=t), deadline_s
        )
        return resp.run

    async def get_run(self, run_id: str, *, deadline_s: float | None = None) -> resources_pb2.Run:
        """The run with its status, last sequence and pending interrupt (if interrupted)."""
        req = pb.GetRunRequest(run_id=run_id)
        resp = await self._unary(
            lambda md, t: self.api.get_run(req, metadata=md, timeout=t), deadline_s
        )
        return resp.run

    def stream(self, run_id: str, after: int = 0) -> EventStream:
        """The run's events after sequence `after` (0: from the start) up to its terminal event,
        reconnecting on its own with no gap and no duplicate (see `EventStream`)."""

        async def open_call(request: pb.StreamRunEventsRequest) -> EventCall:
            return self.api.stream_run_events(request, metadata=await self._metadata())

        return EventStream(run_id, after, open_call, self.get_run, self.retry)

    async def resume(
        self,
        run_id: str,
        interrupt_id: str,
        decision: str | int,
        *,
        input: str = "",
        value: object = NO_VALUE,
        idempotency_key: str | None = None,
        deadline_s: float | None = None,
    ) -> resources_pb2.Run:
        """Answer the run's pending interrupt: `decision` is approve, reject, respond, retry,
        mark_done or abandon (or a `DECISION_*` value); `input` is a response's content.
        `value` (any JSON, None too), with `respond`: the exact value a graph's `interrupt()`
        returns (LangGraph's `Command(resume=value)`), sent as `value_json`; not with `input`.
        The key defaults to one derived from the decision (`decision_key`), so repeating the
        same decision returns its first answer. Returns the run as the decision left it."""
        code = DECISIONS.get(decision) if isinstance(decision, str) else decision
        if code is None:
            raise InvalidArgument(f"unknown decision {decision!r}: one of {', '.join(DECISIONS)}")
        value_json = ""
        if value is not NO_VALUE:
            if code != DECISIONS["respond"]:
                raise InvalidArgument("value answers only with decision 'respond'")
            if input:
                raise InvalidArgument("give input or value, not both")
            value_json = graph_json(value, "value")
        key = idempotency_key or decision_key(run_id, interrupt_id, code, input, value_json)
        req = pb.ResumeRunRequest(
            run_id=run_id,
            interrupt_id=interrupt_id,
            decision=code,  # type: ignore[arg-type]
            input=input,
            idempotency_key=key,
            value_json=value_json,
        )
        resp = await self._unary(
            lambda md, t: self.api.resume_run(req, metadata=md, timeout=t), deadline_s
        )
        return resp.run

    async def approve(
        self, run_id: str, interrupt_id: str, *, idempotency_key: str | None = None
    ) -> resources_pb2.Run:
        """Approve a confirm_action interrupt (the action runs, with the caller's grant)."""
        return await self.resume(run_id, interrupt_id, "approve", idempotency_key=idempotency_key)

    async def reject(
        self, run_id: str, interrupt_id: str, *, idempotency_key: str | None = None
    ) -> resources_pb2.Run:
        """Reject a confirm_action interrupt (the action does not run; the run goes on)."""
        return await self.resume(run_id, interrupt_id, "reject", idempotency_key=idempotency_key)

    async def answer(
        self,
        run_id: str,
        interrupt_id: str,
        *,
        option: str | None = None,
        fill: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> resources_pb2.Run:
        """Answer a question: `option`, the chosen value of a select_option interrupt, or
        `fill`, a provide_input's object (valid against its `input_schema_json`). An answer
        that does not fit is `InvalidAnswer`."""
        if (option is None) == (fill is None):
            raise InvalidArgument("give exactly one of option, fill")
        text = option if option is not None else json.dumps(fill, separators=(",", ":"))
        return await self.resume(
            run_id, interrupt_id, "respond", input=text, idempotency_key=idempotency_key
        )

    async def cancel(
        self, run_id: str, reason: str = "", *, deadline_s: float | None = None
    ) -> resources_pb2.Run:
        """Cancel a queued, running or interrupted run. A queued or interrupted one is cancelled
        at once; a running one gets `cancel_requested` and ends at its worker's next step
        (follow the stream to its `cancelled` event). Cancelling twice is cancelling once."""
        req = pb.CancelRunRequest(run_id=run_id, reason=reason)
        resp = await self._unary(
            lambda md, t: self.api.cancel_run(req, metadata=md, timeout=t), deadline_s
        )
        return resp.run

    async def list_agents(self, *, deadline_s: float | None = None) -> pb.ListAgentsResponse:
        """The agents the runtime has loaded (`agents`, with their tools) and `default_agent`."""
        req = pb.ListAgentsRequest()
        return await self._unary(
            lambda md, t: self.api.list_agents(req, metadata=md, timeout=t), deadline_s
        )
