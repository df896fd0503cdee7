"""The demo customers (`tether seed-demo` runs this through the agent's `seed`). Idempotent."""

from __future__ import annotations

from tether_mailer.delivery import MailerState

CUSTOMERS = [
    # email, name, segment
    ("ada@example.com", "Ada", "trial"),
    ("grace@example.com", "Grace", "trial"),
    ("linus@example.com", "Linus", "trial"),
    ("barbara@example.com", "Barbara", "enterprise"),
    ("ken@example.com", "Ken", "enterprise"),
    ("margaret@example.com", "Margaret", "churned"),
]


async def seed_customers(state: MailerState) -> None:
    async with state.pool.acquire() as conn:
        await conn.executemany(
            "INSERT INTO mail_customer (email, name, segment) VALUES ($1, $2, $3) "
            "ON CONFLICT (email) DO NOTHING",
            CUSTOMERS,
        )
