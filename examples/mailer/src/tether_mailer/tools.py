"""The mailer's tools: look a segment up, draft the email, and send it (a write: a grant on the
segment, a card with the recipient count and a preview, at most one email per recipient)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from tether_sdk import Confirmation, Reconciled, ToolContext, ToolResult, tool

from tether_mailer import delivery, store
from tether_mailer.delivery import MailerState, personalize

Segment = Annotated[
    str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$"), "a customer segment, e.g. trial"
]
Subject = Annotated[str, Field(min_length=1, max_length=200), "the email's subject"]
Body = Annotated[
    str, Field(min_length=1, max_length=20000), "the email's text; {name} becomes each name"
]
PREVIEW_RECIPIENTS = 5


def _state(ctx: ToolContext) -> MailerState:
    state = ctx.state
    assert isinstance(state, MailerState), "the mailer's lifespan did not run"
    return state


@tool(effect="read")
async def find_segment(ctx: ToolContext, segment: Segment) -> ToolResult:
    """Count a customer segment's recipients (who an email to the segment would reach)."""
    async with _state(ctx).pool.acquire() as conn:
        customers = await store.segment_customers(conn, segment)
        known = await store.segment_sizes(conn) if not customers else {}
    if not customers:
        others = ", ".join(f"{s} ({n})" for s, n in known.items()) or "none"
        return ToolResult(
            f"segment {segment} has no recipients (segments: {others})",
            {"segment": segment, "recipients": 0, "segments": known},
        )
    return ToolResult(
        f"segment {segment}: {len(customers)} recipients",
        {"segment": segment, "recipients": len(customers)},
        {"segment": segment},
    )


def draft(segment: str, topic: str) -> tuple[str, str]:
    topic = topic.strip().rstrip(".") or "some news"
    subject = f"{topic[:1].upper()}{topic[1:]}"[:200]
    body = (
        "Hello {name},\n\n"
        f"as one of our {segment} customers, you are among the first to hear about {topic}.\n"
        "Reply to this email if you have any question; a person reads every answer.\n\n"
        "Best regards,\nThe Example team\n"
    )
    return subject, body


@tool(effect="read")
async def draft_email(
    segment: Segment, topic: Annotated[str, Field(max_length=200), "what the email is about"]
) -> ToolResult:
    """Draft an email to a segment about a topic: a subject and a body ({name} is replaced by
    each recipient's name). Sends nothing."""
    subject, body = draft(segment, topic)
    return ToolResult(
        f"drafted '{subject}' for segment {segment}",
        {"segment": segment, "subject": subject, "body": body},
    )


@tool(
    effect="write",
    action="email.send",
    scope="segment/{segment}",
    summary="segment={segment}, subject={subject}",
    risk="medium",
    # A large segment takes a while; the engine's own deadline still bounds the run.
    timeout_s=900,
    examples=[{"segment": "trial", "subject": "New pricing", "body": "Hello {name}, ..."}],
)
async def send_campaign(
    ctx: ToolContext, segment: Segment, subject: Subject, body: Body
) -> ToolResult:
    """Send an email to every customer of a segment, at most once each. Needs a person's
    approval and the email.send grant on the segment."""
    report = await delivery.send_campaign(
        _state(ctx), ctx.idempotency_key, segment, subject, body, ctx.progress
    )
    return report.result()


@send_campaign.confirmation
async def _card(ctx: ToolContext, segment: str, subject: str, body: str) -> Confirmation:
    async with _state(ctx).pool.acquire() as conn:
        customers = await store.segment_customers(conn, segment)
    shown = ", ".join(c.email for c in customers[:PREVIEW_RECIPIENTS])
    more = len(customers) - PREVIEW_RECIPIENTS
    first = customers[0].name if customers else "{name}"
    return Confirmation(
        title=f"Email {len(customers)} recipients in segment {segment}",
        target=f"segment {segment} ({len(customers)} recipients)",
        summary=f"{len(customers)} recipients; subject: {subject}",
        risk="medium",
        details=f"Recipients: {shown}" + (f" and {more} more" if more > 0 else ""),
        preview=f"From: {_state(ctx).smtp.sender}\nSubject: {subject}\n\n{personalize(body, first)}",
    )


@send_campaign.recheck
async def _still_someone(ctx: ToolContext, segment: str, subject: str, body: str) -> str | None:
    async with _state(ctx).pool.acquire() as conn:
        have = await store.segment_customers(conn, segment)
    return None if have else f"segment {segment} has no recipients any more"


@send_campaign.reconcile
async def _what_was_sent(ctx: ToolContext, segment: str, subject: str, body: str) -> Reconciled:
    status, report = await delivery.reconcile(_state(ctx).pool, ctx.idempotency_key, segment)
    if status == "unknown" and report is not None:
        doubt = ", ".join(report.emails("sending"))
        return Reconciled.unknown(
            f"SMTP cannot tell whether {doubt} received the email: the send stopped after "
            "the server may have accepted it and before its answer was recorded "
            f"({len(report.emails('sent'))} of {len(report.deliveries)} certainly sent; "
            "retry sends only to those who certainly did not get it)"
        )
    if status == "done" and report is not None:
        return Reconciled.done(report.result())
    return Reconciled.not_done()
