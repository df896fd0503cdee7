"""A question a tool asks a person during its call (an MCP server's `elicitation/create`): a
provide_input card whose form is the requested schema, persisted before it is shown and
answerable from any pod, while the call waits for it in its worker.

    the card (a question call `proposed`, the interrupt, the run `interrupted` with the worker's
    lease kept: runs.hold) in one transaction -> the call waits at most `wait_s` (then the card
    expires), woken by the answer's NOTIFY (held_wakes.py) -> the answer (resume.py, any pod: respond / reject /
    abandon, or an expiry or a cancel) gives the run back to the waiting worker (runs.unhold) ->
    the call goes on with the person's answer: accept with the content, decline, or cancel.

If the waiting worker dies, its lease runs out: the card is expired by the next sweep of any
worker (`interrupts.orphaned_held`), which queues the run; the worker that takes it finds the
call in progress and follows the rules of any call a worker died inside (a read is called
again; a write is called again with its key if idempotent, else outcome_unknown)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tether_common.event_wait import wait_set
from tether_common.ids import new_id

from tether_runtime.engine import cards, questions, resume
from tether_runtime.engine.checkpoint import PendingCall
from tether_runtime.engine.run_context import ToolRun
from tether_runtime.store import interrupts
from tether_runtime.store.db import Conn
from tether_runtime.store.event_log import Fenced

log = logging.getLogger(__name__)

# What the call goes on with, by the card's decision.
_ACTIONS = {"responded": "accept", "rejected": "decline"}


async def ask(
    x: ToolRun,
    call: PendingCall,
    tool: str,
    title: str,
    prompt: str,
    schema: dict[str, Any],
    wait_s: float,
) -> tuple[str, dict[str, Any] | None]:
    """Ask, wait, and return (action, content): ("accept", the answer), ("decline", None) or
    ("cancel", None). A question that cannot be put to a person (its schema is no JSON schema of
    type object) is cancelled at once."""
    args = {"prompt": prompt, "title": title, "schema": schema}
    problem = questions.problem("provide_input", args)
    if problem is not None:
        log.warning("%s asked a question that cannot be shown: %s", tool, problem)
        return "cancel", None
    payload = questions.payload("provide_input", args)
    payload[questions.ASKED_DURING] = tool
    question_id = f"{call.call_id}.{new_id('ask')}"
    run_id = x.run_id

    async def propose(conn: Conn) -> None:
        await interrupts.propose_call(
            conn, run_id, question_id, "provide_input", args, f"{run_id}:{question_id}"
        )

    # Not a tool call's card: the events name no call for it (the call it is asked in was
    # announced by its own tool_started).
    interrupt_id = await cards.show(
        x, question_id, "provide_input", payload, propose, held_s=wait_s, tool_call=False
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(wait_s, x.interrupt_ttl_s)
    with x.held.waiting(run_id) as woken:
        while True:
            async with x.pool.acquire() as conn:
                intr = await interrupts.get_interrupt(conn, interrupt_id)
            assert intr is not None
            if intr.status != "pending":
                break
            left = deadline - loop.time()
            if left <= 0:
                await resume.expire_interrupt(x.pool, x.bus, intr)  # whoever gets there first
                continue
            # Woken by the answer's NOTIFY (any pod); the card read again at least this often.
            await wait_set(woken, min(left, x.held.fallback_s))
            woken.clear()
    action = _ACTIONS.get(intr.decision or "", "cancel")
    content: dict[str, Any] | None = None
    if action == "accept":
        async with x.pool.acquire() as conn:
            row = await interrupts.get_call(conn, run_id, question_id)
        assert row is not None and row.result is not None
        content = row.result["data"]["fill"]
    try:
        await x.rejoin()
    except Fenced:
        # Cancelled (or taken over) meanwhile: the server is told so; whatever the call does
        # next cannot be written under this lease.
        return "cancel", None
    return action, content
