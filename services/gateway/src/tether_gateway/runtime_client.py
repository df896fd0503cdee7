"""The gateway's gRPC channel to the runtime, on tether_client: its channel settings (round_robin,
keepalive, message size) and its typed calls (`RuntimeApi`). The gateway keeps its own policy:
each call forwards the browser's bearer token (or, for a stream token's reader, the gateway's
service identity on the user's behalf, service_identity.py), unary calls get the gateway's deadline, and a
failed call stays a `grpc.aio.AioRpcError` for the error middleware to map to HTTP."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tether.runtime.v1 import events_pb2
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_client import channel as client_channel
from tether_client.rpc import EOF_MARK, EventCall, RuntimeApi, StartStreamCall
from tether_common.backoff import NO_JITTER, Backoff, Retries
from tether_common.config import Settings
from tether_common.errors import Unavailable
from tether_common.quiet_clock import QuietClock
from tether_common.tracing import inject_carrier
from tether_proto import wire

from tether_gateway.forwarding import forwarded_for
from tether_gateway.service_identity import ON_BEHALF_HEADER, OnBehalf, ServiceIdentity

log = logging.getLogger(__name__)

# A stream that has sent nothing this long (TETHER_FEED_QUIET_REOPEN_S) is reopened from the last
# sequence the gateway has, doubling while the run stays quiet (a card waiting for a person),
# up to QUIET_REOPEN_MAX_S; any event brings it back. The runtime's own positioning check finds a
# lost publish within about a second; this catches a runtime stream that stalls for any other
# reason (twice seen in the network-fault suite, unexplained), at the cost of a replay read per
# quiet stream per interval.
QUIET_REOPEN_S = 15.0
QUIET_REOPEN_MAX_S = 300.0

UNARY_DEADLINE_S = 5.0
HEALTH_DEADLINE_S = 1.0

Metadata = tuple[tuple[str, str], ...]
# Who a runtime call is made as: the caller's own bearer token, or the gateway's service
# identity on behalf of a user (a stream token's, which the runtime cannot verify).
Credential = str | OnBehalf


class RuntimeClient:
    """Typed calls with the metadata that forwards the caller's bearer token."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        deadline_s: float = UNARY_DEADLINE_S,
        identity: ServiceIdentity | None = None,
        quiet_reopen_s: float = QUIET_REOPEN_S,
    ) -> None:
        self.channel = channel
        self.deadline_s = deadline_s
        self.identity = identity
        self.quiet_reopen_s = quiet_reopen_s  # follow_events: see QUIET_REOPEN_S
        self.api = RuntimeApi(channel)
        self._health = health_pb2_grpc.HealthStub(channel)

    async def metadata(self, credential: Credential) -> Metadata:
        # The current trace (the browser's request) continues in the runtime, and the audit log
        # learns the browser's address (forwarding.py).
        trace = tuple(inject_carrier().items())
        forwarded = forwarded_for.get()
        extra = (("x-forwarded-for", forwarded),) if forwarded else ()
        if isinstance(credential, str):
            return (("authorization", f"Bearer {credential}"), *trace, *extra)
        if self.identity is None:
            raise Unavailable("the gateway has no service identity to read this run with")
        service = await self.identity.token()
        return (
            ("authorization", f"Bearer {service}"),
            (ON_BEHALF_HEADER, credential.user_id),
            *trace,
            *extra,
        )

    async def create_conversation(
        self, request: rs.CreateConversationRequest, token: Credential
    ) -> rs.CreateConversationResponse:
        return await self.api.create_conversation(
            request, metadata=await self.metadata(token), timeout=self.deadline_s
        )

    async def get_conversation(
        self, request: rs.GetConversationRequest, token: Credential
    ) -> rs.GetConversationResponse:
        return await self.api.get_conversation(
            request, metadata=await self.metadata(token), timeout=self.deadline_s
        )

    async def delete_conversation(
        self, request: rs.DeleteConversationRequest, token: Credential
    ) -> rs.DeleteConversationResponse:
        return await self.api.delete_conversation(
            request, metadata=await self.metadata(token), timeout=self.deadline_s
        )

    async def list_conversations(
        self, request: rs.ListConversationsRequest, token: Credential
    ) -> rs.ListConversationsResponse:
        return await self.api.list_conversations(
            request, metadata=await self.metadata(token), timeout=self.deadline_s
        )

    async def list_messages(
        self, request: rs.ListMessagesRequest, token: Credential
    ) -> rs.ListMessagesResponse:
        return await self.api.list_messages(
            request, metadata=await self.metadata(token), timeout=self.deadline_s
        )

    async def start_run(
        self, request: rs.StartRunRequest, token: Credential
    ) -> rs.StartRunResponse:
        return await self.api.start_run(
            request, metadata=await self.metadata(token), timeout=self.deadline_s
        )

    async def resume_run(
        self, request: rs.ResumeRunRequest, token: Credential
    ) -> rs.ResumeRunResponse:
        return await self.api.resume_run(
            request, metadata=await self.metadata(token), timeout=self.deadline_s
        )

    async def get_run(self, request: rs.GetRunRequest, token: Credential) -> rs.GetRunResponse:
        return await self.api.get_run(
            request, metadata=await self.metadata(token), timeout=self.deadline_s
        )

    async def run_positions(self, run_ids: list[str]) -> dict[str, int]:
        """GetRunPositions as the gateway itself (its service identity, which may read every
        run): the last sequence of each run, for the runs it follows on the bus."""
        if self.identity is None:
            raise Unavailable("the gateway has no service identity to read run positions with")
        service = await self.identity.token()
        resp = await self.api.get_run_positions(
            rs.GetRunPositionsRequest(run_ids=run_ids),
            metadata=(("authorization", f"Bearer {service}"),),
            timeout=self.deadline_s,
        )
        return dict(resp.last_sequences)

    async def cancel_run(
        self, request: rs.CancelRunRequest, token: Credential
    ) -> rs.CancelRunResponse:
        return await self.api.cancel_run(
            request, metadata=await self.metadata(token), timeout=self.deadline_s
        )

    async def list_runs(
        self, request: rs.ListRunsRequest, token: Credential
    ) -> rs.ListRunsResponse:
        return await self.api.list_runs(
            request, metadata=await self.metadata(token), timeout=self.deadline_s
        )

    async def list_audit_records(
        self, request: rs.ListAuditRecordsRequest, token: Credential
    ) -> rs.ListAuditRecordsResponse:
        return await self.api.list_audit_records(
            request, metadata=await self.metadata(token), timeout=self.deadline_s
        )

    async def list_pending_approvals(
        self, token: Credential, page_size: int = 0, page_token: str = ""
    ) -> rs.ListPendingApprovalsResponse:
        return await self.api.list_pending_approvals(
            rs.ListPendingApprovalsRequest(page_size=page_size, page_token=page_token),
            metadata=await self.metadata(token),
            timeout=self.deadline_s,
        )

    async def list_agents(self, token: Credential) -> rs.ListAgentsResponse:
        return await self.api.list_agents(
            rs.ListAgentsRequest(), metadata=await self.metadata(token), timeout=self.deadline_s
        )

    async def stream_events(
        self, request: rs.StreamRunEventsRequest, token: Credential
    ) -> EventCall:
        # No deadline: the stream lives as long as the run; keepalive detects dead peers.
        return self.api.stream_run_events(request, metadata=await self.metadata(token))

    async def start_run_streaming(
        self, request: rs.StartRunAndStreamEventsRequest, token: Credential
    ) -> OpenedRun:
        """StartRunAndStreamEvents up to its first message (the run as started), within the
        unary deadline; the call then streams on without one, as StreamRunEvents does."""
        call = self.api.start_run_and_stream_events(request, metadata=await self.metadata(token))
        try:
            async with asyncio.timeout(self.deadline_s):
                first = await call.read()
        except TimeoutError:
            call.cancel()
            raise Unavailable("the runtime did not answer in time") from None
        except BaseException:
            call.cancel()
            raise
        if first is EOF_MARK:  # a runtime never ends this call before its first message
            raise Unavailable("the runtime ended the call before starting the run")
        assert isinstance(first, rs.StartRunAndStreamEventsResponse)
        return OpenedRun(first, call)

    async def serving(self) -> bool:
        try:
            resp = await self._health.Check(
                health_pb2.HealthCheckRequest(service=""), timeout=HEALTH_DEADLINE_S
            )
        except grpc.aio.AioRpcError:
            return False
        return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)


def open_channel(settings: Settings) -> grpc.aio.Channel:
    """tether_client's channel: round_robin over a DNS name's pods, keepalive, 16 MiB; TLS
    verified against TETHER_RUNTIME_TLS_CA_FILE when it is set."""
    if not settings.runtime_tls_ca_file:
        return client_channel.open_channel(settings.runtime_target)
    return client_channel.open_channel(
        settings.runtime_target,
        client_channel.tls_credentials(settings.runtime_tls_ca_file),
        client_channel.tls_options(settings.runtime_tls_server_name),
    )


@dataclass
class OpenedRun:
    """A started run's event stream, its first message read (it carries the run)."""

    first: rs.StartRunAndStreamEventsResponse
    call: StartStreamCall

    def close(self) -> None:
        self.call.cancel()


# A runtime pod that drains ends its streams (UNAVAILABLE / CANCELLED): reopen on another pod.
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})
REOPEN = Backoff(0.1, 0.5, jitter=NO_JITTER)  # 0.1 s, doubling, at most 0.5 s
# How long a stream keeps trying to reopen without one event: longer than a runtime takes to
# come back or another to take its runs over (a lease, 3 s by default), so that losing one
# runtime costs a browser's stream a pause, not its end. (It was 5 tries, about 1.7 s.)
REOPEN_WINDOW_S = 10.0
# How long a call whose run has ended may take to send its status before it is cancelled.
FINISH_S = 1.0


async def follow_events(
    client: Callable[[], RuntimeClient],
    run_id: str,
    token: Credential,
    position: Callable[[], int],
    opened: OpenedRun | None = None,
) -> AsyncGenerator[Sequence[events_pb2.RunEvent], None]:
    """The run's events as StreamRunEvents batches, surviving the end of one runtime's stream:
    each (re)open resumes after `position()`, the last sequence the caller consumed. `opened`,
    a StartRunAndStreamEvents call, is followed first. The caller stops iterating at the
    terminal event; a stream that ends before it (the pod drained, died) is reopened until
    REOPEN_WINDOW_S pass without an event, and one that stays silent is reopened after the
    client's quiet interval (QUIET_REOPEN_S)."""
    retries = Retries(REOPEN, REOPEN_WINDOW_S)
    quiet = Backoff(client().quiet_reopen_s, QUIET_REOPEN_MAX_S, jitter=NO_JITTER)
    silences = 0  # quiet intervals in a row without an event
    while True:
        call: EventCall | StartStreamCall
        if opened is not None:
            call, head = opened.call, opened.first.events
            opened = None
        else:
            request = rs.StreamRunEventsRequest(run_id=run_id, after_sequence=position())
            call, head = await client().stream_events(request, token), None
        ended = False  # the last batch yielded carries the run's terminal event
        # One timer for the call, none per read: a silence cancels the call, and its read ends.
        silence = _Silence(call, quiet.delay(silences + 1))
        try:
            if head:
                ended = ends_run(head)
                yield head
            while True:
                batch = await silence.read()
                if batch is EOF_MARK:
                    break
                retries.reset()
                if silences:
                    silences = 0
                    silence.clock.first_s = quiet.delay(1)
                events = batch.events  # type: ignore[attr-defined]
                ended = ends_run(events)
                yield events
        except TimeoutError:
            silences += 1
            log.info(
                "run stream silent for %.0fs: reopened", quiet.delay(silences),
                extra={"run_id": run_id, "after": position()},
            )  # fmt: skip
            continue
        except grpc.aio.AioRpcError as err:
            if err.code() not in RETRYABLE:
                raise
            if not await retries.pause():
                raise
            continue
        except GeneratorExit:
            if not ended:
                raise
            # The caller stopped at the run's end, and the runtime ends the call right after
            # it: reading its status is cheaper for both sides than cancelling (RST_STREAM, and
            # the runtime's cancellation handling).
            await finish(call)
            raise
        finally:
            silence.clock.close()
            call.cancel()  # a no-op once the call has its status
        if not await retries.pause():
            return


class _Silence:
    """A followed call's quiet interval: once nothing came for the interval (counted from the
    last batch, on one QuietClock for the call), the call is cancelled and `read` raises
    TimeoutError. Before, each read armed and cancelled a timer of its own."""

    def __init__(self, call: EventCall | StartStreamCall, interval_s: float) -> None:
        self.call = call
        self.silent = False
        self.clock = QuietClock(interval_s, self._quiet)
        self.clock.start()

    async def read(self) -> object:
        try:
            batch = await self.call.read()
        except asyncio.CancelledError:
            # grpc.aio raises it from the read of a call cancelled here; a cancel of the task
            # itself (the caller's) is not ours to turn into a silence.
            task = asyncio.current_task()
            if not self.silent or (task is not None and task.cancelling()):
                raise
            raise TimeoutError from None
        self.clock.heard()
        return batch

    def _quiet(self, _quiet_s: float) -> None:
        self.silent = True
        self.call.cancel()


def ends_run(events: Sequence[events_pb2.RunEvent]) -> bool:
    """The batch ends the run: its last event is terminal, or a `reset` to a finished run."""
    if not events:
        return False
    last = events[-1]
    kind = last.WhichOneof("event")
    if kind == "reset":
        return last.reset.run.status in wire.TERMINAL_RUN_STATUS_VALUES
    return kind in wire.TERMINAL_EVENT_TYPES


async def finish(call: EventCall | StartStreamCall) -> None:
    """Wait for the status of a call the runtime is ending, within FINISH_S (then the caller
    cancels it). The status is awaited, not read for: grpc.aio receives it on its own from the
    call's start, while one more read would be one more operation in gRPC core."""
    try:
        async with asyncio.timeout(FINISH_S):
            await call.code()
    except (TimeoutError, grpc.aio.AioRpcError):
        pass  # cancelled by the caller's `finally`
