"""Provider failures as the engine handles them: every exception the official SDKs (or the HTTP
layer under them) raise becomes a `ModelError` with a code, a retry decision and a short message
a person can act on. Messages never carry the key, headers or the request body; the provider's
own explanation is kept only after redaction."""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import anthropic
import anyio
import httpx2
import openai
from tether_sdk import ModelError

from tether_runtime.models.keys import Secret, redact

UNAVAILABLE = "MODEL_UNAVAILABLE"
AUTH_FAILED = "MODEL_AUTH_FAILED"
NOT_FOUND = "MODEL_NOT_FOUND"
REJECTED = "MODEL_REJECTED_REQUEST"
TRUNCATED = "MODEL_OUTPUT_TRUNCATED"
PROTOCOL = "MODEL_PROTOCOL_ERROR"

_DETAIL_MAX = 300


@dataclass(frozen=True)
class Origin:
    """Who failed, for the message: the provider's display name, the agent and its model. The
    key is here only so that it can be scrubbed from what the provider says."""

    provider: str
    model: str
    agent: str = ""
    key: Secret = Secret("")

    @property
    def agent_part(self) -> str:
        return f" for agent {self.agent}" if self.agent else ""


def retry_after_s(headers: Mapping[str, str] | None) -> float | None:
    """The provider's requested wait: `retry-after-ms` (OpenAI), else `retry-after` in seconds
    or as an HTTP date. None when absent or unreadable."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def truncated(origin: Origin, limit: int | None) -> ModelError:
    bound = f" ({limit} tokens)" if limit else ""
    return ModelError(
        TRUNCATED,
        f"The model's answer{origin.agent_part} hit the output token limit{bound} and was cut "
        "off: raise max_output_tokens or ask for less.",
    )


def protocol_error(origin: Origin, what: str) -> ModelError:
    return ModelError(
        PROTOCOL,
        f"The model provider ({origin.provider}) sent a stream Tether cannot read: {what}.",
    )


def dropped(origin: Origin, what: str = "broke off the stream mid-answer") -> ModelError:
    """A retryable failure; `what` is a verb phrase ("ended the stream early")."""
    return ModelError(
        UNAVAILABLE, f"The model provider ({origin.provider}) {what}; retrying.", retryable=True
    )


def to_model_error(err: BaseException, origin: Origin) -> ModelError:
    """Map an exception raised while calling or streaming from a provider."""
    if isinstance(err, ModelError):
        return err
    if isinstance(err, openai.APIStatusError | anthropic.APIStatusError):
        body = err.body
        if isinstance(err, anthropic.APIStatusError) and err.status_code < 400:
            # An `event: error` inside a 200 stream: the status is the stream's, not the error's.
            return _typed_error(origin, body)
        return _status_error(origin, err.status_code, err.response.headers, body)
    if isinstance(err, openai.APITimeoutError | anthropic.APITimeoutError):
        return ModelError(
            UNAVAILABLE,
            f"The model provider ({origin.provider}) did not answer in time; retrying.",
            retryable=True,
        )
    if isinstance(err, openai.APIConnectionError | anthropic.APIConnectionError):
        return _transport_error(origin, err.__cause__ or err)
    if isinstance(err, openai.APIResponseValidationError | anthropic.APIResponseValidationError):
        return protocol_error(origin, "an answer that does not fit the API's schema")
    if isinstance(err, openai.APIError):
        # An error object in the middle of an OpenAI stream (no HTTP status of its own).
        return _typed_error(origin, err.body)
    if isinstance(err, json.JSONDecodeError):
        return protocol_error(origin, "a chunk that is not JSON")
    if isinstance(err, httpx2.HTTPError | anyio.EndOfStream | ssl.SSLError | OSError):
        return _transport_error(origin, err)
    return ModelError(
        UNAVAILABLE,
        f"The model provider ({origin.provider}) call failed ({type(err).__name__}); retrying.",
        retryable=True,
    )


def _transport_error(origin: Origin, cause: BaseException) -> ModelError:
    if isinstance(cause, httpx2.TimeoutException | TimeoutError):
        what = "did not answer in time"
    elif isinstance(cause, httpx2.ConnectError | ConnectionRefusedError):
        what = "could not be reached"
    else:
        # RemoteProtocolError (incomplete chunked read, server disconnected), ReadError, a reset:
        # the connection went away, usually mid-stream.
        what = f"dropped the connection ({type(cause).__name__})"
    return ModelError(
        UNAVAILABLE, f"The model provider ({origin.provider}) {what}; retrying.", retryable=True
    )


def _status_error(
    origin: Origin, status: int, headers: Mapping[str, str], body: object
) -> ModelError:
    kind, detail = _error_fields(body)
    said = _said(origin, detail)
    head = f"The model provider ({origin.provider}) answered {status}"
    wait = retry_after_s(headers)
    if status in (401, 403):
        return ModelError(
            AUTH_FAILED,
            f"{head}: check the API key configured{origin.agent_part}.{said}",
            status=status,
        )
    if status == 404:
        return ModelError(
            NOT_FOUND,
            f"{head}: check the model name ({origin.model}) and base URL configured"
            f"{origin.agent_part}.{said}",
            status=status,
        )
    if status == 402 or kind in ("insufficient_quota", "billing_error"):
        return ModelError(
            UNAVAILABLE,
            f"{head}: the account's quota or billing stops this request{origin.agent_part}.{said}",
            status=status,
        )
    retryable = status in (408, 409, 429) or status >= 500
    if headers.get("x-should-retry") == "false":
        retryable = False
    if retryable:
        why = "rate limited" if status == 429 else "unavailable"
        return ModelError(
            UNAVAILABLE,
            f"{head} ({why}); retrying.{said}",
            retryable=True,
            retry_after_s=wait,
            status=status,
        )
    return ModelError(
        REJECTED if status < 500 else UNAVAILABLE,
        f"{head}: it refused the request{origin.agent_part}.{said}",
        status=status,
    )


_TYPE_CODES: dict[str, tuple[str, bool]] = {
    "authentication_error": (AUTH_FAILED, False),
    "permission_error": (AUTH_FAILED, False),
    "invalid_api_key": (AUTH_FAILED, False),
    "not_found_error": (NOT_FOUND, False),
    "model_not_found": (NOT_FOUND, False),
    "invalid_request_error": (REJECTED, False),
    "request_too_large": (REJECTED, False),
    "insufficient_quota": (UNAVAILABLE, False),
    "billing_error": (UNAVAILABLE, False),
}


def _typed_error(origin: Origin, body: object) -> ModelError:
    """An error reported inside a stream, classified by the provider's error type: overloaded,
    rate limit, server errors (and anything unknown) are worth another try."""
    kind, detail = _error_fields(body)
    code, retryable = _TYPE_CODES.get(kind, (UNAVAILABLE, True))
    tail = "; retrying." if retryable else f"{origin.agent_part}."
    name = f" ({kind})" if kind else ""
    return ModelError(
        code,
        f"The model provider ({origin.provider}) reported an error mid-stream{name}{tail}"
        f"{_said(origin, detail)}",
        retryable=retryable,
    )


def _error_fields(body: object) -> tuple[str, str]:
    """(type or code, message) from either provider's error body: OpenAI's SDK hands over the
    inner `error` object, Anthropic's the whole `{"type": "error", "error": {...}}`."""
    if not isinstance(body, dict):
        return "", ""
    inner: Any = body.get("error", body)
    if not isinstance(inner, dict):
        return "", str(inner) if isinstance(inner, str) else ""
    kind = inner.get("code") if isinstance(inner.get("code"), str) else None
    kind = kind or inner.get("type")
    message = inner.get("message")
    return (kind if isinstance(kind, str) else ""), (message if isinstance(message, str) else "")


def _said(origin: Origin, detail: str) -> str:
    if not detail:
        return ""
    clean = " ".join(redact(detail, origin.key).split())
    if len(clean) > _DETAIL_MAX:
        clean = clean[: _DETAIL_MAX - 1] + "…"
    return f' Provider said: "{clean}"'
