"""An SMTP sink for tests and the demo: a real SMTP server (aiosmtpd) that keeps every message it
receives (Message-ID, recipients, subject, text) instead of delivering it, so emails can be
counted per recipient where they arrive. It can hold its answer to a message open, as a slow or
stuck mail server does: the message is received, the sender is not yet told. `python -m
tether_mailer.sink` runs it with a page listing what it received."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default
from typing import Any

from aiosmtpd.smtp import SMTP, Envelope, Session


@dataclass(frozen=True)
class Received:
    message_id: str
    sender: str
    recipients: tuple[str, ...]
    subject: str
    text: str
    at: float


class Sink:
    """The aiosmtpd handler. `hold_for`: recipients whose message is received and recorded but
    answered only once `release` is set (or the connection drops)."""

    def __init__(self, *, hold_for: Iterable[str] = ()) -> None:
        self.received: list[Received] = []
        self.hold_for = {r.lower() for r in hold_for}
        self.release = asyncio.Event()

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or envelope.content or b""
        msg = message_from_bytes(raw if isinstance(raw, bytes) else raw.encode(), policy=default)
        assert isinstance(msg, EmailMessage)
        body = msg.get_body(("plain",))
        recipients = tuple(r.lower() for r in envelope.rcpt_tos)
        self.received.append(
            Received(
                message_id=str(msg.get("Message-ID", "")),
                sender=str(envelope.mail_from or ""),
                recipients=recipients,
                subject=str(msg.get("Subject", "")),
                text=body.get_content().replace("\r\n", "\n")[:4000]
                if isinstance(body, EmailMessage)
                else "",
                at=time.time(),
            )
        )
        if self.hold_for.intersection(recipients):
            await self.release.wait()
        return "250 Message accepted for delivery"

    def per_recipient(self) -> Counter[str]:
        """How many messages each recipient received."""
        return Counter(r for m in self.received for r in m.recipients)

    def as_json(self) -> list[dict[str, Any]]:
        return [asdict(m) for m in self.received]


async def serve_smtp(sink: Sink, host: str, port: int) -> asyncio.Server:
    """Listen for SMTP on the running loop; port 0 picks a free one (see `bound_port`)."""
    loop = asyncio.get_running_loop()
    # A fixed hostname: aiosmtpd's default is the FQDN, a blocking DNS lookup per connection.
    return await loop.create_server(
        lambda: SMTP(sink, hostname="tether-mailer-sink", ident="tether-mailer-sink"), host, port
    )


def bound_port(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])
