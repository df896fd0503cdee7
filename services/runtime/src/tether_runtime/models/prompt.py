"""What both providers put around the conversation: the system text, the summary request, and
the request to continue an answer the user has partly seen."""

from __future__ import annotations

import json

from tether_sdk import ModelRequest

CONTINUE_INSTRUCTION = (
    "Your previous answer was cut off by a connection problem; the user has already seen it. "
    "Continue it exactly where it stopped, mid-word or mid-sentence if need be. Do not repeat "
    "any of it and do not comment on the interruption."
)

SUMMARY_INSTRUCTION = (
    "Summarise the conversation below for your own later use: what the user asked, what was "
    "done and found (tool results), decisions made, and anything still open. Keep facts, names "
    "and numbers exact. Answer with the summary only, in at most 200 words."
)


def system_text(request: ModelRequest) -> str:
    return "\n\n".join(p for p in (request.instructions, request.context) if p)


def summary_transcript(request: ModelRequest) -> str:
    """The turns to summarise as plain text: a summary request sends no tools, and both APIs
    refuse tool calls or results in a request without tools, so they are written out."""
    lines: list[str] = []
    for m in request.messages:
        role = m.get("role")
        content = str(m.get("content") or "")
        if role == "tool":
            lines.append(f"[tool result {m.get('name') or ''}] {content}")
            continue
        if content:
            lines.append(f"[{role}] {content}")
        for call in m.get("tool_calls") or []:
            args = json.dumps(call.get("args") or {}, ensure_ascii=False, sort_keys=True)
            lines.append(f"[{role} called {call.get('name')}] {args}")
    return SUMMARY_INSTRUCTION + "\n\n" + "\n".join(lines)
