"""Sending a campaign through SMTP, at most once per recipient whatever crashes.

Each recipient's state is committed before each step: `sending` just before the message is
handed over (SMTP DATA), `sent` once the server answered 250. A recipient already `sent` is never
sent again. One left in `sending` is in doubt: the process stopped (or the connection broke)
after the server may have accepted the message but before its reply was recorded, and SMTP has
no way to ask afterwards. The mailer never sends such a recipient again on its own; reconcile
names them and a person decides."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.policy import SMTP
from typing import Any

import aiosmtplib
import asyncpg
from tether_sdk import ToolError, ToolResult, TransientError

from tether_mailer import store
from tether_mailer.settings import SmtpSettings
from tether_mailer.store import Delivery

Progress = Callable[[float, str], Awaitable[None]]


@dataclass(frozen=True)
class MailerState:
    """What the mailer's lifespan yields: every tool's `ctx.state`."""

    pool: asyncpg.Pool
    smtp: SmtpSettings


class DeliveryInDoubt(Exception):
    """The connection broke while the server held a message: it may have been delivered.
    Deliberately not a ToolError ("nothing happened"): the engine then asks `reconcile`, which
    finds the recipient in doubt, and a person decides."""


def personalize(body: str, name: str) -> str:
    return body.replace("{name}", name)


def compose(sender: str, d: Delivery, subject: str, body: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = d.email
    msg["Subject"] = subject
    msg["Message-ID"] = d.message_id
    msg.set_content(personalize(body, d.name))
    return msg


@dataclass(frozen=True)
class Report:
    """Where a campaign stands, for the model and for people."""

    segment: str
    deliveries: list[Delivery]
    sent_now: set[str] = field(default_factory=set)

    def emails(self, status: str) -> list[str]:
        return [d.email for d in self.deliveries if d.status == status]

    @property
    def complete(self) -> bool:
        return all(d.status == "sent" for d in self.deliveries)

    def result(self) -> ToolResult:
        sent, doubt, failed = self.emails("sent"), self.emails("sending"), self.emails("failed")
        total = len(self.deliveries)
        earlier = [e for e in sent if e not in self.sent_now]
        text = f"sent the email to {len(sent)} of {total} recipients in segment {self.segment}"
        if earlier and self.sent_now:
            text += f" ({len(self.sent_now)} now, {len(earlier)} before)"
        if doubt:
            text += (
                f"; in doubt, not sent again: {', '.join(doubt)} (the SMTP server may have "
                "accepted the message before the crash, and SMTP cannot tell)"
            )
        if failed:
            text += f"; refused by the server: {', '.join(failed)}"
        data: dict[str, Any] = {
            "segment": self.segment,
            "recipients": total,
            "sent": sent,
            "sent_now": sorted(self.sent_now),
            "in_doubt": doubt,
            "failed": failed,
        }
        ok = self.complete
        return ToolResult(text, data, {"segment": self.segment} if ok else {}, ok=ok)


async def send_campaign(
    state: MailerState, key: str, segment: str, subject: str, body: str, progress: Progress
) -> Report:
    deliveries = await store.start_campaign(state.pool, key, segment, subject, body)
    if not deliveries:
        raise ToolError(f"segment {segment} has no recipients; nothing was sent")
    todo = [d for d in deliveries if d.status == "pending"]
    sent_now: set[str] = set()
    if todo:
        await _send_all(state, key, subject, body, deliveries, todo, sent_now, progress)
    async with state.pool.acquire() as conn:
        return Report(segment, await store.deliveries(conn, key), sent_now)


async def _send_all(
    state: MailerState,
    key: str,
    subject: str,
    body: str,
    deliveries: list[Delivery],
    todo: list[Delivery],
    sent_now: set[str],
    progress: Progress,
) -> None:
    cfg = state.smtp
    total = len(deliveries)
    done = sum(1 for d in deliveries if d.status == "sent")
    every = max(1, total // 20)  # about twenty progress events per campaign at most
    smtp = aiosmtplib.SMTP(
        hostname=cfg.host,
        port=cfg.port,
        timeout=cfg.timeout_s,
        local_hostname="tether-mailer",  # not the FQDN: that is a blocking DNS lookup
        start_tls=False,
    )
    try:
        await smtp.connect()
    except (aiosmtplib.SMTPException, OSError) as err:
        raise TransientError(
            f"cannot reach the SMTP server at {cfg.host}:{cfg.port}: {err}"
        ) from err
    try:
        for i, d in enumerate(todo):
            if i and cfg.send_delay_s:
                await asyncio.sleep(cfg.send_delay_s)
            msg = compose(cfg.sender, d, subject, body)
            if await _send_one(smtp, state.pool, key, cfg.sender, d, msg, done, total):
                sent_now.add(d.email)
                done += 1
                if done % every == 0 or done == total:
                    await progress(done / total, f"sent {done} of {total}")
    finally:
        if smtp.is_connected:
            try:
                await smtp.quit()
            except (aiosmtplib.SMTPException, OSError):
                smtp.close()


async def _send_one(
    smtp: aiosmtplib.SMTP,
    pool: asyncpg.Pool,
    key: str,
    sender: str,
    d: Delivery,
    msg: EmailMessage,
    done: int,
    total: int,
) -> bool:
    """One SMTP transaction; True when the server accepted the message."""
    so_far = f"{done} of {total} sent so far; calling again sends only the rest"
    try:
        await smtp.mail(sender)
        await smtp.rcpt(d.email)
    except aiosmtplib.SMTPResponseException as err:
        # The server refused the envelope: nothing was handed over.
        if err.code >= 500:
            await smtp.rset()
            await store.mark(pool, key, d.email, "failed", f"{err.code} {err.message}"[:500])
            return False
        raise TransientError(
            f"{d.email}: the server said {err.code} {err.message}; {so_far}"
        ) from err
    except (aiosmtplib.SMTPException, OSError) as err:
        raise TransientError(f"{d.email}: the SMTP connection failed ({err}); {so_far}") from err
    # The point of no return: from here on the server may deliver the message.
    await store.mark(pool, key, d.email, "sending")
    try:
        await smtp.data(msg.as_bytes(policy=SMTP))
    except aiosmtplib.SMTPResponseException as err:
        # The server answered, and the answer was no: it did not take the message.
        if err.code >= 500:
            await store.mark(pool, key, d.email, "failed", f"{err.code} {err.message}"[:500])
            return False
        await store.mark(pool, key, d.email, "pending")
        raise TransientError(
            f"{d.email}: the server said {err.code} {err.message}; {so_far}"
        ) from err
    except (aiosmtplib.SMTPException, OSError) as err:
        raise DeliveryInDoubt(
            f"{d.email}: the connection broke before the server answered the message ({err})"
        ) from err
    await store.mark(pool, key, d.email, "sent")
    return True


async def reconcile(pool: asyncpg.Pool, key: str, segment: str) -> tuple[str, Report | None]:
    """What the campaign of `key` did: "not_done" (nothing in doubt, something left to send:
    calling again sends only the rest), "done", or "unknown" (some recipient in doubt)."""
    async with pool.acquire() as conn:
        found = await store.deliveries(conn, key)
    if not found:
        return "not_done", None
    report = Report(segment, found)
    if report.emails("sending"):
        return "unknown", report
    if report.emails("pending"):
        return "not_done", report
    return "done", report
