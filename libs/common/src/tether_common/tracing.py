"""OpenTelemetry set-up, once per process. Exporters follow the standard `OTEL_*` variables (OTLP
over HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set); `TETHER_TRACE_FILE` writes spans as JSON lines
(dev and tests); `TETHER_TRACE_CONSOLE=1` prints them. Context crosses gRPC metadata and the queue
as W3C `traceparent` carriers."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import IO

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

log = logging.getLogger(__name__)
_configured = False


class JsonLinesExporter(SpanExporter):
    """One JSON object per line; safe for several processes appending to one file."""

    def __init__(self, path: str) -> None:
        self._out: IO[str] = open(path, "a", buffering=1)  # noqa: SIM115 - lives with the process

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            self._out.write(span.to_json(indent=None) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._out.close()


def enabled() -> bool:
    return (
        bool(
            os.environ.get("TETHER_TRACE_FILE")
            or os.environ.get("TETHER_TRACE_CONSOLE")
            or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        )
        and os.environ.get("OTEL_SDK_DISABLED", "").lower() != "true"
    )


def setup_tracing(service_name: str) -> None:
    """Install a TracerProvider if any exporter is configured; otherwise tracing stays a no-op,
    so the event hot path pays nothing for it."""
    global _configured
    if _configured or not enabled():
        return
    _configured = True
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    path = os.environ.get("TETHER_TRACE_FILE")
    if path:
        provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(path)))
    if os.environ.get("TETHER_TRACE_CONSOLE"):
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    ):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _instrument_clients()


def _instrument_clients() -> None:
    try:
        from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor

        AsyncPGInstrumentor().instrument()  # type: ignore[no-untyped-call]
    except Exception as err:  # noqa: BLE001 - tracing must never stop a service
        log.warning("asyncpg instrumentation unavailable: %s", err)
    try:
        from opentelemetry.instrumentation.redis import RedisInstrumentor

        RedisInstrumentor().instrument()
    except Exception as err:  # noqa: BLE001
        log.warning("redis instrumentation unavailable: %s", err)


def inject_carrier() -> dict[str, str]:
    """The current context as a `traceparent` carrier (for metadata or a queued run)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def context_from(carrier: Mapping[str, str] | Iterable[tuple[str, str]]) -> otel_context.Context:
    items = dict(carrier) if not isinstance(carrier, Mapping) else carrier
    return propagate.extract({k.lower(): v for k, v in items.items() if isinstance(v, str)})


def span_context_from(carrier: Mapping[str, str]) -> trace.SpanContext | None:
    ctx = trace.get_current_span(context_from(carrier)).get_span_context()
    return ctx if ctx.is_valid else None
