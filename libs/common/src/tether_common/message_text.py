"""The text of a user's message inside a LangGraph-style input (`{"messages": [...]}`): what a
Tether run stores as the user's message, read the same way by the gateway's LangGraph API and
the runtime's StartRun."""

from __future__ import annotations

from typing import Any

USER_ROLES = frozenset({"user", "human"})


def content_text(content: object) -> str:
    """A message's text: a string, or the text blocks of a list of content blocks, joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            b if isinstance(b, str) else str(b.get("text") or "")
            for b in content
            if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")
        )
    return ""


def user_text_of(graph_input: dict[str, Any]) -> str:
    """The text of the last user message of `graph_input["messages"]`, "" without one. A message
    is LangGraph's dict (`{"role": "user"|"human", "content": ...}` or `{"type": "human", ...}`),
    a `(role, content)` pair, or a bare string (a user's); its content a string or a list of
    content blocks."""
    messages = graph_input.get("messages")
    if isinstance(messages, dict | str):
        messages = [messages]
    if not isinstance(messages, list):
        return ""
    for m in reversed(messages):
        if isinstance(m, str):
            return m
        if isinstance(m, dict) and (m.get("role") in USER_ROLES or m.get("type") in USER_ROLES):
            return content_text(m.get("content"))
        if isinstance(m, list | tuple) and len(m) == 2 and m[0] in USER_ROLES:
            return content_text(m[1])
    return ""
