"""The mailer's effects probe for `tether conformance mailer --effects
tether_mailer.effects:count`: for one campaign key, the most copies of its email any one recipient
received, counted at the mail sink by Message-ID (which the key and the recipient determine).
At most once per recipient means this is at most 1."""

from __future__ import annotations

import os

import aiohttp

from tether_mailer.delivery import MailerState
from tether_mailer.store import message_id


async def count(state: MailerState, idempotency_key: str) -> int:
    async with state.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT email FROM mail_delivery WHERE campaign_key = $1", idempotency_key
        )
    if not rows:
        return 0
    page = os.environ.get("MAILER_SINK_HTTP") or "127.0.0.1:8026"
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        session.get(f"http://{page}/messages") as resp,
    ):
        received = (await resp.json())["messages"]
    wanted = {message_id(idempotency_key, r["email"]): r["email"] for r in rows}
    copies: dict[str, int] = {}
    for m in received:
        if m["message_id"] in wanted:
            copies[m["message_id"]] = copies.get(m["message_id"], 0) + 1
    return max(copies.values(), default=0)
