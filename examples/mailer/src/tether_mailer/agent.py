"""The mailer, defined on the public SDK: drafts an email to a customer segment and, once a
person approves the card, sends it through SMTP. Loaded only when the configuration names it:
TETHER_AGENTS=tether_mailer:agent (it declares no `tether.agents` entry point)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from tether_sdk import Agent, Host, Limits, ScriptedModel

from tether_mailer import policy, tools
from tether_mailer.delivery import MailerState
from tether_mailer.seed import seed_customers
from tether_mailer.settings import SmtpSettings


@asynccontextmanager
async def mailer_state(host: Host) -> AsyncIterator[MailerState]:
    """The mailer's tables live in Tether's database (its migrations); SMTP from MAILER_SMTP_*."""
    smtp = SmtpSettings.from_env()
    # Behind a transaction pooler, no statement cache (a cached statement may be missing on the
    # next server connection).
    cache = 0 if host.transaction_pooler else 100
    pool = await asyncpg.create_pool(
        host.database_url, min_size=1, max_size=4, statement_cache_size=cache
    )
    try:
        yield MailerState(pool, smtp)
    finally:
        await pool.close()


agent = Agent(
    name="mailer",
    description="Emails a customer segment: drafts the email, shows who gets it, sends once each.",
    instructions=(
        "You send emails to customer segments. Look the segment up, draft the email, then "
        "propose sending it; a person approves the card. Never send to a recipient twice."
    ),
    model=ScriptedModel(policy.decide),
    tools=[tools.find_segment, tools.draft_email, tools.send_campaign],
    limits=Limits(max_steps=8, run_deadline_s=1800, tool_timeout_s=30),
    migrations="tether_mailer:migrations",
    lifespan=mailer_state,
    seed=seed_customers,
)
