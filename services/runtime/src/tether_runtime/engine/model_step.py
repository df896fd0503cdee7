"""One model step of a run: stream the model's answer into text deltas, collect the tool calls
and questions it asks for and the tokens it used, and survive a provider's transient failures.

A transient error (429, 5xx, timeout, a dropped stream) is retried with bounded exponential
backoff and jitter, never shorter than the provider's Retry-After. Text a failed attempt already
streamed is never streamed twice: a model that can continue text (the providers) is asked to
continue from it; any other model is deterministic by contract (ScriptedModel), so the repeat of
what was shown is skipped by length, as after a crash. A permanent error ends the run with its
code and a message for a person."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from tether_common.backoff import HALF_JITTER, Backoff
from tether_sdk import ModelError, ModelRequest, ProvideInput, SelectOption, ToolCall, Usage

from tether_runtime import metrics
from tether_runtime.domain import events as ev
from tether_runtime.engine import questions
from tether_runtime.engine.run_context import StepRun
from tether_runtime.engine.run_outcomes import RunFailure
from tether_runtime.store import event_log

log = logging.getLogger(__name__)


@dataclass
class StepCall:
    name: str
    args: dict[str, Any]
    invalid: str = ""
    """Why the model's arguments could not be read; the call is answered with an error."""
    raw_args: str = ""


@dataclass
class StepResult:
    text: str
    calls: list[StepCall] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0


def backoff_s(attempt: int, first: float, ceiling: float, retry_after: float | None) -> float:
    """Full jitter over a doubling window, at least what the provider asked for."""
    wait = Backoff(first, ceiling, jitter=HALF_JITTER).delay(attempt)
    if retry_after is not None:
        wait = max(wait, retry_after)
    return wait


def _as_model_error(err: BaseException) -> ModelError | None:
    """A custom model's network failure is the model's, not the store's: without this, an
    OSError from a model would be taken for a store outage and the run handed back forever."""
    if isinstance(err, ModelError):
        return err
    if isinstance(err, OSError | TimeoutError):
        return ModelError(
            "MODEL_UNAVAILABLE",
            f"the model could not be reached ({type(err).__name__})",
            retryable=True,
        )
    return None


class ModelStep:
    def __init__(self, x: StepRun, request: ModelRequest, skip: int) -> None:
        self.x = x
        self.request = request
        self.skip = skip
        """Text an earlier, crashed worker already streamed for this step."""
        self.model = x.loaded.model
        self.continues = bool(getattr(self.model, "continues_text", False))
        self.provider, self.model_name = x.loaded.provider
        self.text = ""
        self.sent = 0
        self.result = StepResult("")
        self._last_flush = time.monotonic()

    async def run(self) -> StepResult:
        limits = self.x.loaded.agent.limits
        attempt = 0
        if self.skip and self.continues:
            await self._recover_shown_text()
        while True:
            try:
                await self._attempt()
                self.result.text = self.text
                return self.result
            except Exception as raw:  # noqa: BLE001 - sorted into model errors below
                err = _as_model_error(raw)
                if err is None:
                    raise
            await self._flush()  # what arrived before the failure is the user's already
            agent = self.x.loaded.name
            wait = backoff_s(
                attempt + 1, limits.model_backoff_s, limits.model_backoff_max_s, err.retry_after_s
            )
            if not err.retryable or attempt >= limits.model_retries or wait >= self.x.time_left():
                metrics.MODEL_FAILURES.labels(agent, self.provider, err.code).inc()
                # A failed step's tokens were spent all the same.
                self.x.count_usage(self.result.input_tokens, self.result.output_tokens)
                raise RunFailure(err.code, self._message(err, attempt))
            attempt += 1
            metrics.MODEL_RETRIES.labels(agent, self.provider, err.code).inc()
            log.warning(
                "model step failed, retrying",
                extra={
                    "run_id": self.x.run_id,
                    "provider": self.provider,
                    "model": self.model_name,
                    "code": err.code,
                    "status": err.status,
                    "attempt": attempt,
                    "wait_s": round(wait, 3),
                },
            )
            await asyncio.sleep(wait)

    async def _recover_shown_text(self) -> None:
        """A crashed worker streamed part of this step. A provider would not answer the same
        words again, so skipping by length would garble the text: it continues from exactly
        what the browsers were shown, read back from the event log."""
        cp = self.x.checkpoint
        async with self.x.pool.acquire() as conn:
            shown = await event_log.streamed_text(conn, self.x.run.id, cp.message_id)
        self.text = shown[len(cp.text) :]
        self.sent = len(self.text)
        self.skip = 0

    def _message(self, err: ModelError, retries: int) -> str:
        after = f" (after {retries} retries)" if retries else ""
        return f"{err.message}{after}"

    async def _attempt(self) -> None:
        request = self.request
        if self.text and self.continues:
            request = dataclasses.replace(request, continue_from=self.text)
        elif not self.continues:
            # A deterministic model repeats itself: skip what was shown, by length.
            self.skip = max(self.skip, self.sent)
            self.text = ""
        self.result.calls = []
        coalesce = self.x.coalesce_s
        async for chunk in self.model.stream(request):
            if isinstance(chunk, str):
                self.text += chunk
                if time.monotonic() - self._last_flush >= coalesce:
                    await self._flush()
            elif isinstance(chunk, Usage):
                self.result.input_tokens += chunk.input_tokens
                self.result.output_tokens += chunk.output_tokens
            elif isinstance(chunk, ToolCall):
                self.result.calls.append(
                    StepCall(chunk.name, dict(chunk.args), chunk.invalid, chunk.raw_args)
                )
            elif isinstance(chunk, SelectOption | ProvideInput):
                self.result.calls.append(StepCall(*questions.as_call(chunk)))
        await self._flush()

    async def _flush(self) -> None:
        start = max(self.sent, self.skip)
        if len(self.text) > start:
            piece = self.text[start:]
            await self.x.emit(
                [ev.text_delta(self.x.checkpoint.message_id, piece)], streamed=len(piece)
            )
            await self.x.stop_if_cancelled()
        self.sent = max(self.sent, len(self.text))
        self._last_flush = time.monotonic()
