"""What every RuntimeService call does around the servicer: its trace span, the caller's
authentication, the latency metric and the error contract (TetherError -> status + ErrorInfo;
the only catch-all, which logs and answers INTERNAL without details)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeAlias

import asyncpg
import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry import trace
from tether_common.auth import TokenVerifier
from tether_common.errors import (
    ERROR_DOMAIN,
    STATUS_BY_REASON,
    InvalidArgument,
    TetherError,
    Unavailable,
)
from tether_common.tracing import context_from

from tether_runtime import metrics
from tether_runtime.api.caller import authenticate, set_caller
from tether_runtime.store.db import STORE_DOWN

log = logging.getLogger(__name__)
tracer = trace.get_tracer("tether.runtime")
SERVICE = "tether.runtime.v1.RuntimeService"

# Type aliases: the runtime classes are not generic (only their stubs are).
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


async def abort(context: Context, err: TetherError) -> None:
    """Ends the call with the error's canonical code and its ErrorInfo (raises AbortError)."""
    code_name, _ = STATUS_BY_REASON.get(err.reason, ("INTERNAL", 500))
    info = error_details_pb2.ErrorInfo(
        reason=err.reason, domain=ERROR_DOMAIN, metadata=err.metadata
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(
        code=getattr(code_pb2, code_name), message=err.message, details=[detail]
    )
    await context.abort_with_status(rpc_status.to_status(status))  # type: ignore[attr-defined]


class _Opening:
    """A call's span and latency. They cover a unary call whole, and a stream's opening only
    (authentication and the first read, up to `opened()`): a stream lasts as long as its
    client stays, which is no latency."""

    def __init__(self, name: str, context: Context) -> None:
        self.name = name
        self.start = time.perf_counter()
        parent = context_from(context.invocation_metadata() or ())
        span = tracer.start_span(
            f"RuntimeService/{name}", context=parent, kind=trace.SpanKind.SERVER
        )
        self._scope = contextlib.ExitStack()
        self._scope.enter_context(trace.use_span(span, end_on_exit=True))
        self.open = True

    def close(self, code: str, err: BaseException | None = None) -> None:
        if not self.open:
            return
        self.open = False
        # As a `with trace.use_span(...)` block that the error leaves: recorded on the span.
        self._scope.__exit__(type(err) if err else None, err, err.__traceback__ if err else None)
        metrics.GRPC_LATENCY.labels(method=self.name, code=code).observe(
            time.perf_counter() - self.start
        )


_OPENING: ContextVar[_Opening] = ContextVar("tether_opening")


def opened() -> None:
    """A streaming method says its stream is open: its span and latency end here (else they end
    with the first message)."""
    _OPENING.get().close("OK")


# Errors with an answer of their own; any other is a bug, logged with its traceback.
_EXPECTED = (TetherError, asyncpg.CharacterNotInRepertoireError)


def _refusal(err: Exception) -> TetherError:
    """What the caller is told of an error: its own kind, else UNAVAILABLE or INTERNAL."""
    if isinstance(err, TetherError):
        return err
    if isinstance(err, asyncpg.CharacterNotInRepertoireError):
        # A NUL in a text field: Postgres text cannot hold it. The caller's input, not our bug.
        return InvalidArgument("a text field holds a character that cannot be stored (NUL)")
    if isinstance(err, STORE_DOWN):
        return Unavailable("the store is unavailable; retry")
    return TetherError("internal error")


class RuntimeInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Wraps each RuntimeService method handler (other services pass through): the servicer's
    methods only translate and call the engine; they read the caller with `caller.caller()`."""

    def __init__(self, verifier: TokenVerifier) -> None:
        self.verifier = verifier

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(handler_call_details)
        service, _, name = handler_call_details.method.lstrip("/").partition("/")
        if handler is None or service != SERVICE:
            return handler
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(name, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(name, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # RuntimeService has no client-streaming method

    def _begin(self, name: str, context: Context) -> _Opening:
        call = _Opening(name, context)
        _OPENING.set(call)  # each call runs in a task, and so a context, of its own
        return call

    async def _refuse(self, call: _Opening, context: Context, err: Exception) -> None:
        refusal = _refusal(err)
        call.close(refusal.reason, err)  # the metric's code label: the reason answered
        if isinstance(err, STORE_DOWN):
            log.warning("%s: store unavailable: %s", call.name, err)
        elif not isinstance(err, _EXPECTED):
            log.exception("%s failed", call.name)
        await abort(context, refusal)

    def _unary(self, name: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def unary(request: Any, context: Context) -> Any:
            call = self._begin(name, context)
            try:
                set_caller(await authenticate(self.verifier, context.invocation_metadata(), name))
                return await behavior(request, context)
            except Exception as err:
                await self._refuse(call, context, err)
                raise  # abort raises; this keeps the type checker honest
            finally:
                call.close("OK")

        return unary

    def _stream(self, name: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def stream(request: Any, context: Context) -> AsyncIterator[Any]:
            call = self._begin(name, context)
            try:
                set_caller(await authenticate(self.verifier, context.invocation_metadata(), name))
                async for item in behavior(request, context):
                    call.close("OK")
                    yield item
            except Exception as err:
                if call.open:
                    await self._refuse(call, context, err)
                elif isinstance(err, STORE_DOWN):
                    # The store went away for longer than the stream's own retries: the caller
                    # resumes from its last sequence (the gateway does so transparently on
                    # UNAVAILABLE).
                    log.warning("event stream: store unavailable: %s", err)
                    await abort(
                        context, Unavailable("the store is unavailable; resume from the last event")
                    )
                raise
            finally:
                call.close("OK")

        return stream
