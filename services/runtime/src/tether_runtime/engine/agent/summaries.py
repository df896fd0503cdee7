"""The conversation's summary of earlier turns, written by the agent's model in the background.

When a run completes, the engine checks (off the run's path) whether the turns that fell out of
the recent window and no summary covers yet exceed a share of the budget; if so it asks the
model, with purpose="summary", to fold them into the summary so far, and stores the result with
a compare-and-set on the summary's cursor. A summary is notes for the model, shown as such,
never merged into the confirmed facts. A failed summary is logged and tried again at the next
run's end; it never fails a run."""

from __future__ import annotations

import asyncio
import logging

from tether_sdk import Model, ModelError, ModelRequest

from tether_runtime import metrics
from tether_runtime.engine.agent import context
from tether_runtime.engine.agent.context import SUMMARY_SHARE, Budget, SummaryPlan
from tether_runtime.engine.agent.tokens import truncate
from tether_runtime.engine.loaded_agent import LoadedAgent
from tether_runtime.store import conversations
from tether_runtime.store.db import Pool

log = logging.getLogger(__name__)

SUMMARY_TIMEOUT_S = 120.0
MAX_ROUNDS = 4
"""Summary requests per task: a backlog (after failures) is folded a budget's share at a time."""


def instructions(budget: Budget) -> str:
    words = max(50, budget.tokens // SUMMARY_SHARE * 3 // 4)
    return (
        "You keep the running summary of a conversation between a user and an assistant. The "
        "context holds the summary so far (it may be empty); the messages are the turns that "
        "follow it. Write one updated summary that folds them in: the names, identifiers, "
        "codenames and numbers the user referred to, what was asked, answered, decided and done, "
        f"and what is still open. At most {words} words. Write only the summary, no preamble. "
        "It is shown to the model as unconfirmed notes, never as facts."
    )


async def summarise(model: Model, plan: SummaryPlan, budget: Budget) -> str:
    """The model's summary of `plan` (its text only; usage chunks and anything else ignored)."""
    request = ModelRequest(
        instructions=instructions(budget),
        context=plan.previous,
        messages=plan.turns,
        tools=[],
        purpose="summary",
    )
    parts: list[str] = []
    async with asyncio.timeout(SUMMARY_TIMEOUT_S):
        async for chunk in model.stream(request):
            if isinstance(chunk, str):
                parts.append(chunk)
    text = "".join(parts).strip()
    if not text:
        raise ModelError("MODEL_PROTOCOL_ERROR", "the model wrote an empty summary")
    return truncate(text, budget.tokens // SUMMARY_SHARE, budget.counter)


class Summaries:
    """Background summary tasks, one at a time per conversation, owned by the Engine (which
    keeps the references and cancels them on shutdown)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._closed = False

    def run_completed(self, conversation_id: str, loaded: LoadedAgent) -> None:
        """A run of `loaded` completed in the conversation: check in the background whether to
        summarise. Returns at once; never raises."""
        if self._closed:
            return
        if conversation_id in self._tasks:
            self._again.add(conversation_id)  # the running task checks once more when done
            return
        task = asyncio.create_task(
            self._run(conversation_id, loaded), name=f"summary {conversation_id}"
        )
        self._tasks[conversation_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(conversation_id, None))

    async def _run(self, conversation_id: str, loaded: LoadedAgent) -> None:
        rounds = 0
        while rounds < MAX_ROUNDS:
            self._again.discard(conversation_id)
            stored = await self.update(conversation_id, loaded)
            rounds += 1
            if not stored and conversation_id not in self._again:
                return

    async def update(self, conversation_id: str, loaded: LoadedAgent) -> bool:
        """One round: plan, ask the model, store. True if a summary was stored."""
        budget = context.budget_for(loaded)
        try:
            async with self.pool.acquire() as conn:
                plan = await context.summary_plan(conn, conversation_id, budget)
            if plan is None:
                return False
            text = await summarise(loaded.model, plan, budget)
            async with self.pool.acquire() as conn:
                stored = await conversations.store_summary(
                    conn, conversation_id, text, plan.through, plan.expected_through
                )
        except Exception as err:  # noqa: BLE001 - logged; the next run's end tries again
            metrics.CONVERSATION_SUMMARIES.labels(result="failed").inc()
            detail = {"conversation_id": conversation_id, "agent": loaded.name}
            if isinstance(err, ModelError):  # its message never holds a key
                detail |= {"code": err.code, "error": err.message}
            else:  # other messages may quote anything: the type only
                detail |= {"error": type(err).__name__}
            log.warning(
                "conversation summary failed; tried again at the next run's end", extra=detail
            )
            return False
        metrics.CONVERSATION_SUMMARIES.labels(result="stored" if stored else "superseded").inc()
        return stored

    async def close(self) -> None:
        """Cancel the summaries under way and wait for them (process shutdown)."""
        self._closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
