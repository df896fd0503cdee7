"""JSON logs through one setup: each line carries run/conversation/trace ids and is redacted."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from typing import Any

from tether_common.redaction import redact, redact_value

run_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("run_id", default="")
conversation_id_var: contextvars.ContextVar[str] = contextvars.ContextVar(
    "conversation_id", default=""
)

_STD_ATTRS = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def _trace_id() -> str:
    try:
        from opentelemetry import trace

        ctx = trace.get_current_span().get_span_context()
        return format(ctx.trace_id, "032x") if ctx.is_valid else ""
    except Exception:  # noqa: BLE001 - logging must never fail
        return ""


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        for key, var in (("run_id", run_id_var), ("conversation_id", conversation_id_var)):
            value = getattr(record, key, None) or var.get()
            if value:
                out[key] = value
        trace_id = _trace_id()
        if trace_id:
            out["trace_id"] = trace_id
        extra = {
            key: value
            for key, value in record.__dict__.items()
            if key not in _STD_ATTRS and key not in out and not key.startswith("_")
        }
        # The same masking as events: strings inside nested extras, secret-named fields whole.
        out.update(redact_value(extra))
        if record.exc_info:
            out["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(out, default=str)


def setup_logging(service: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
