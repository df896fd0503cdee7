"""Context assembly as in the seed, within the agent's token budget (Limits.context_tokens):
confirmed facts, a summary of earlier turns written by the model (never taken for a fact), and
the recent turns verbatim, newest first until the budget is spent.

What a step sends is: the agent's instructions and tool schemas (fixed), the system context
(facts, summary, guidance), and the run's transcript: the recent turns it started with, its own
message, and its own steps. A quarter of the budget is held back at the start for the run's own
steps; past the budget, old tool results are compacted (compaction.py)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from tether_runtime.domain.records import ConversationRow, MessageRow
from tether_runtime.engine.agent.compaction import compact
from tether_runtime.engine.agent.tokens import (
    ESTIMATE,
    REPLY_OVERHEAD,
    TokenCounter,
    counter_for,
    truncate,
)
from tether_runtime.engine.loaded_agent import LoadedAgent
from tether_runtime.store import conversations
from tether_runtime.store.db import Conn, Pool

RESERVE_SHARE = 4
"""1/RESERVE_SHARE of the budget is kept free at a run's start for its own steps and answer."""
SUMMARY_SHARE = 4
"""The summary gets at most 1/SUMMARY_SHARE of the budget in a step's context."""
SUMMARY_THRESHOLD_SHARE = 4
"""Turns that fell out of the recent window are summarised once they exceed this share."""
FOLD_SHARE = 2
"""One summary request folds at most this share of the budget of turns."""
PAGE = conversations.TURNS_PAGE
FOLD_MAX_ROWS = 200
SUMMARY_LABEL = "Summary of earlier turns (written by the model; not confirmed facts)"


@dataclass(frozen=True)
class Budget:
    """An agent's token budget and how to count against it."""

    tokens: int
    counter: TokenCounter
    fixed: int = 0
    """Tokens every step sends whatever the conversation: instructions and tool schemas."""

    @property
    def reserve(self) -> int:
        return self.tokens // RESERVE_SHARE


DEFAULT_BUDGET = Budget(8000, ESTIMATE)


def counter_of(loaded: LoadedAgent) -> TokenCounter:
    """The counter for the agent's model: its provider's tokenizer, else the estimator."""
    return counter_for(*loaded.provider)


def budget_for(loaded: LoadedAgent) -> Budget:
    """The agent's budget, computed once per process (every run start and step asks for it)."""
    cached = loaded.cache.get("budget")
    if isinstance(cached, Budget):
        return cached
    agent = loaded.agent
    counter = counter_of(loaded)
    tools = json.dumps([asdict(t.schema()) for t in agent.tools], default=str)
    fixed = counter.count(agent.instructions) + (counter.count(tools) if agent.tools else 0)
    budget = Budget(agent.limits.context_tokens, counter, fixed)
    loaded.cache["budget"] = budget
    return budget


def system_text(conv: ConversationRow, budget: Budget = DEFAULT_BUDGET) -> str:
    """The system context: confirmed facts, the model's summary (labelled as such and capped),
    and guidance."""
    summary = truncate(conv.summary, budget.tokens // SUMMARY_SHARE, budget.counter)
    return (
        f"Known facts (confirmed by tools): {json.dumps(conv.facts, sort_keys=True)}\n"
        f"{SUMMARY_LABEL}: {summary or '(none)'}\n"
        'Use the recent verbatim turns to understand who "it" / "the one just now" refers to; '
        "don't guess by keywords. The summary may be wrong: check it against the facts and the "
        "turns. Mutating tools need a person's approval."
    )


def turn_room(budget: Budget, system: str) -> int:
    """Tokens left for the recent turns at a run's start."""
    return budget.tokens - budget.fixed - budget.counter.count(system) - budget.reserve


def _cost(counter: TokenCounter, role: str, content: str) -> int:
    return counter.count_messages([{"role": role, "content": content}]) - REPLY_OVERHEAD


async def _window(
    conn: Pool | Conn, conversation_id: str, before_id: str | None, room: int, counter: TokenCounter
) -> list[MessageRow]:
    return (await _window_cut(conn, conversation_id, before_id, room, counter))[0]


async def _window_cut(
    conn: Pool | Conn,
    conversation_id: str,
    before_id: str | None,
    room: int,
    counter: TokenCounter,
    first_page: list[MessageRow] | None = None,
) -> tuple[list[MessageRow], bool]:
    """The newest turns (before `before_id`; None: all) whose messages fit in `room` tokens
    together, newest first; stops at the first that does not fit (the window has no holes).
    And whether older turns were left out. `first_page`: the first PAGE turns, already read."""
    out: list[MessageRow] = []
    used = 0
    while True:
        if first_page is not None:
            page, first_page = first_page, None
        else:
            page = await conversations.turns_before(conn, conversation_id, None, before_id, PAGE)
        for m in page:
            cost = _cost(counter, m.role, m.content)
            if used + cost > room:
                return out, True
            out.append(m)
            used += cost
        if len(page) < PAGE:
            return out, False
        before_id = page[-1].id


async def initial_context(
    db: Pool | Conn,
    conversation_id: str,
    user_message_id: str,
    *,
    budget: Budget = DEFAULT_BUDGET,
) -> tuple[list[dict[str, Any]], bool]:
    """`starting_context` from one read of the conversation, the run's own message and the turns
    before it (what the worker's claim reads with a run not yet started, read here when it was
    not)."""
    conv, turns = await conversations.get_with_turns(db, conversation_id, user_message_id, PAGE + 1)
    return await starting_context(db, conv, conversation_id, user_message_id, turns, budget=budget)


async def starting_context(
    db: Pool | Conn,
    conv: ConversationRow | None,
    conversation_id: str,
    user_message_id: str,
    turns: list[MessageRow],
    *,
    budget: Budget = DEFAULT_BUDGET,
) -> tuple[list[dict[str, Any]], bool]:
    """(transcript, cut): the run's starting transcript, and whether older turns fell out of it
    (only then can the conversation need a summary when the run ends). `turns`: the run's own
    message, then the newest turns before it, newest first, as read together (at most PAGE + 1:
    more are read from `db` only when those fit in the budget whole).

    The run's starting transcript: the recent turns verbatim before its own message, newest
    last, within the budget less the instructions and tools, the system context and the reserve;
    then its own message, always there (cut only if it alone exceeds its room)."""
    counter = budget.counter
    own_stored = bool(turns) and turns[0].id == user_message_id
    text = turns[0].content if own_stored else ""
    earlier = turns[1:] if own_stored else turns
    room = turn_room(budget, system_text(conv, budget) if conv is not None else "")
    own_room = max(room, budget.tokens // RESERVE_SHARE) - REPLY_OVERHEAD
    own = truncate(text, own_room - _cost(counter, "user", ""), counter)
    left = room - REPLY_OVERHEAD - _cost(counter, "user", own)
    window, cut = await _window_cut(db, conversation_id, user_message_id, left, counter, earlier)
    out = [{"role": m.role, "content": m.content} for m in reversed(window)]
    return [*out, {"role": "user", "content": own}], cut


def step_context(loaded: LoadedAgent, conv: ConversationRow, messages: list[dict[str, Any]]) -> str:
    """A step's system context, with the run's transcript (`messages`, the checkpoint's own)
    compacted in place if together they would exceed the budget."""
    budget = budget_for(loaded)
    system = system_text(conv, budget)
    compact(messages, budget.tokens - budget.fixed - budget.counter.count(system), budget.counter)
    return system


@dataclass(frozen=True)
class SummaryPlan:
    """Turns to fold into the summary, and the cursor the stored summary must still have."""

    conversation_id: str
    previous: str
    expected_through: str
    turns: list[dict[str, Any]]
    through: str


async def summary_plan(conn: Conn, conversation_id: str, budget: Budget) -> SummaryPlan | None:
    """What to summarise now, or None: the turns older than the recent window that no summary
    covers yet, once they exceed a share of the budget (cheap: a few bounded reads)."""
    conv = await conversations.get(conn, conversation_id)
    if conv is None:
        return None
    counter = budget.counter
    room = turn_room(budget, system_text(conv, budget)) - REPLY_OVERHEAD
    window = await _window(conn, conversation_id, None, room, counter)
    start = window[-1].id if window else None  # the window is newest first: its oldest turn
    pending = await conversations.turns_between(
        conn, conversation_id, conv.summary_through, start, FOLD_MAX_ROWS
    )
    costs = [_cost(counter, m.role, m.content) for m in pending]
    if sum(costs) <= budget.tokens // SUMMARY_THRESHOLD_SHARE:
        return None
    limit = budget.tokens // FOLD_SHARE
    take, used = 0, 0
    for cost in costs:
        if take and used + cost > limit:
            break
        take, used = take + 1, used + cost
    folded = pending[:take]
    return SummaryPlan(
        conversation_id,
        conv.summary,
        conv.summary_through,
        # A turn longer than a summary request may carry is folded by its beginning.
        [{"role": m.role, "content": truncate(m.content, limit, counter)} for m in folded],
        folded[-1].id,
    )
