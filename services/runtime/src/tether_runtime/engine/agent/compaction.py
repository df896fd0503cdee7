"""In-run compaction: a run whose transcript outgrows the budget (many or large tool results)
keeps going with the oldest tool results cut to their outcome and summary. It works on the
checkpoint's own messages, so the saved checkpoint stays bounded too.

What is never touched: the newest KEEP_RESULTS tool results (the model is working on them), the
run's own user message, and the structure of assistant tool calls (a provider refuses a tool
result whose call is gone, and the engine matches results to calls by id). If that is not enough,
the turns before the run's own message (the recent turns it started with) go, oldest first."""

from __future__ import annotations

import json
from typing import Any

from tether_runtime.engine.agent.tokens import REPLY_OVERHEAD, TokenCounter, truncate

KEEP_RESULTS = 2
SUMMARY_TOKENS = 60
"""A compacted result keeps at most this much of its summary."""


def _cost(counter: TokenCounter, m: dict[str, Any]) -> int:
    return counter.count_messages([m]) - REPLY_OVERHEAD


def compacted(content: str, counter: TokenCounter) -> str | None:
    """A tool result's content as {ok, outcome, summary, compacted: true} (its data and facts
    dropped), or None if it already is."""
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    if isinstance(body, dict):
        if body.get("compacted"):
            return None
        ok, outcome, summary = body.get("ok"), body.get("outcome", ""), body.get("summary", "")
    else:
        ok, outcome, summary = None, "", content
    short = truncate(str(summary or ""), SUMMARY_TOKENS, counter)
    return json.dumps({"ok": ok, "outcome": outcome, "summary": short, "compacted": True})


def _own_message(messages: list[dict[str, Any]]) -> int:
    """Index of the run's own user message (its last one; -1 if none)."""
    return max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)


def compact(messages: list[dict[str, Any]], budget: int, counter: TokenCounter) -> bool:
    """Bring `messages` within `budget` tokens, in place: compact the oldest tool results first,
    then drop turns before the run's own message. True if anything changed."""
    total = counter.count_messages(messages)
    if total <= budget:
        return False
    changed = False
    results = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
    for i in results[: max(0, len(results) - KEEP_RESULTS)]:
        if total <= budget:
            return changed
        m = messages[i]
        short = compacted(str(m.get("content") or ""), counter)
        if short is None:
            continue
        before = _cost(counter, m)
        messages[i] = {**m, "content": short}
        after = _cost(counter, messages[i])
        if after >= before:  # already small: keep it as it was
            messages[i] = m
            continue
        total += after - before
        changed = True
    own = _own_message(messages)
    drop = 0
    while total > budget and drop < own:
        total -= _cost(counter, messages[drop])
        drop += 1
    if drop:
        del messages[:drop]
        changed = True
    return changed
