"""The mailer's scripted brain (no network): "email the trial segment about the new pricing"
finds the segment, drafts the email, proposes to send it (a person approves the card), then says
how it went. The same transcript always gives the same step."""

from __future__ import annotations

import re

from tether_sdk import ModelRequest, ToolCall, ToolOutcome

_SEGMENT = re.compile(r"\b(?:the\s+)?([a-z0-9][a-z0-9-]*)\s+(?:segment|customers|users)\b")
_TOPIC = re.compile(r"\babout\s+(.+?)\s*[.!?]*$")

HELP = (
    "I send emails to customer segments. Ask me, for example: "
    "'email the trial segment about the new pricing'."
)


def decide(req: ModelRequest) -> str | ToolCall:
    text = req.last_user_text().strip()
    lower = text.lower()
    seg = _SEGMENT.search(lower)
    if not seg or not re.search(r"\b(email|mail|write|send)\b", lower):
        return HELP
    segment = seg.group(1)
    topic_m = _TOPIC.search(text)
    topic = topic_m.group(1) if topic_m else "our latest news"
    results = {r.tool: r for r in req.results()}
    found = results.get("find_segment")
    if found is None:
        return ToolCall("find_segment", {"segment": segment})
    if not found.ok or not found.data.get("recipients"):
        return f"I did not send anything: {found.summary}."
    drafted = results.get("draft_email")
    if drafted is None:
        return ToolCall("draft_email", {"segment": segment, "topic": topic})
    sent = results.get("send_campaign")
    if sent is None:
        return ToolCall(
            "send_campaign",
            {
                "segment": segment,
                "subject": drafted.data["subject"],
                "body": drafted.data["body"],
            },
        )
    return _after_send(sent, segment)


def _after_send(r: ToolOutcome, segment: str) -> str:
    if r.outcome == "ok":
        return f"Done: I {r.summary}."
    if r.outcome == "rejected":
        return f"Understood: I did not email segment {segment}."
    if r.outcome == "expired":
        return "Nobody approved the email in time, so I sent nothing."
    if r.outcome == "denied":
        return f"You may not email segment {segment}, so I sent nothing."
    if r.outcome == "skipped":
        return f"I did not send: {r.summary}."
    if r.outcome == "marked_done":
        return f"Noted: the email to segment {segment} was handled, as you confirmed."
    if r.outcome == "abandoned":
        return (
            f"Understood: I will not send the email to segment {segment} again; some "
            "recipients may or may not have received it."
        )
    return f"The email to segment {segment} did not fully go out: {r.summary}."
