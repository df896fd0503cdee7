"""The mailer as a user runs it: loaded only because TETHER_AGENTS names it, migrated by `tether
migrate`, and a whole run on a real runtime process: find the segment, draft, a card showing the
recipient count and a preview, approval, one email per recipient counted at the real SMTP sink,
progress streamed as it sends."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from tether.runtime.v1 import resources_pb2
from tether_mailer.seed import CUSTOMERS
from tether_testkit import stores
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.processes import start_runtime, tether_cli
from tether_testkit.secrets import TEST_SECRET

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TRIAL = [email for email, _, segment in CUSTOMERS if segment == "trial"]
MAILER_ENV = {"TETHER_AGENTS": "tether_mailer:agent"}
ASK = "email the trial segment about the new pricing"


def text_of(evs: list) -> str:
    return "".join(e.text_delta.delta for e in evs if types([e]) == ["text_delta"])


async def test_approve_sends_one_email_per_recipient_with_progress(env, procs, sink):
    proc = start_runtime(env, name="runtime-mailer")
    procs.append(proc)
    c = Client(proc.addr, token(TEST_SECRET, "alice"))
    try:
        conv = await c.conversation()
        run = (await c.start(conv, ASK, agent="mailer")).run
        evs = await c.events(run.id, until="interrupt")
        assert [e.tool_finished.tool for e in evs if types([e]) == ["tool_finished"]] == [
            "find_segment",
            "draft_email",
        ]
        card = evs[-1].interrupt
        assert card.kind == resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION
        assert card.payload.tool == "send_campaign"
        assert card.payload.title == "Email 3 recipients in segment trial"
        assert card.payload.target == "segment trial (3 recipients)"
        assert card.payload.parameter_summary == "3 recipients; subject: The new pricing"
        assert card.payload.details == "Recipients: " + ", ".join(TRIAL)
        assert card.payload.preview.startswith(
            "From: news@example.com\nSubject: The new pricing\n\nHello Ada,\n"
        )
        assert sink.sink.received == [], "nothing is sent before a person approves"

        await c.resume(run.id, card.interrupt_id)
        rest = await c.events(run.id, after=evs[-1].sequence)

        assert types(rest)[-1] == "done", types(rest)
        assert_dense(evs + rest)
        progress = [
            (e.tool_progress.fraction, e.tool_progress.text)
            for e in rest
            if types([e]) == ["tool_progress"]
        ]
        assert progress == [(1 / 3, "sent 1 of 3"), (2 / 3, "sent 2 of 3"), (1.0, "sent 3 of 3")]
        assert "Done: I sent the email to 3 of 3 recipients in segment trial." in text_of(rest)
        assert sink.sink.per_recipient() == {r: 1 for r in TRIAL}
        assert {m.subject for m in sink.sink.received} == {"The new pricing"}
    finally:
        await c.close()


async def test_a_user_without_the_grant_is_refused_and_nothing_is_sent(env, procs, sink):
    proc = start_runtime(env, name="runtime-mailer-denied")
    procs.append(proc)
    c = Client(proc.addr, token(TEST_SECRET, "carol"))
    try:
        run = (await c.start(await c.conversation(), ASK, agent="mailer")).run
        evs = await c.events(run.id)
        assert types(evs)[-1] == "done" and "interrupt" not in types(evs)
        assert "You may not email segment trial" in text_of(evs)
        assert sink.sink.received == []
    finally:
        await c.close()


async def test_tether_migrate_applies_the_mailers_migrations_only_when_configured(
    admin_dsn, base_env
):
    dsn = await stores.create_fresh_database(admin_dsn)  # Tether's and the default agents' only
    conn = await asyncpg.connect(dsn)
    try:
        plain = {**base_env, "DATABASE_URL": dsn}
        # No entry point: the default configuration neither lists nor migrates the mailer.
        listing = await asyncio.to_thread(lambda: tether_cli("agents", env=plain))
        assert listing.returncode == 0, listing.stderr
        assert "mailer" not in listing.stdout
        out = await asyncio.to_thread(lambda: tether_cli("migrate", env=plain))
        assert out.returncode == 0, out.stderr
        assert await conn.fetchval("SELECT to_regclass('mail_customer')") is None

        configured = {**plain, **MAILER_ENV}
        for _ in range(2):  # once each
            out = await asyncio.to_thread(lambda: tether_cli("migrate", env=configured))
            assert out.returncode == 0, out.stderr
        rows = await conn.fetch("SELECT version, name FROM agent_migration WHERE agent = 'mailer'")
        assert [tuple(r) for r in rows] == [(1, "0001_mailer.sql")]
        for table in ("mail_customer", "mail_campaign", "mail_delivery"):
            assert await conn.fetchval("SELECT to_regclass($1)", table) == table
        for _ in range(2):  # idempotent
            out = await asyncio.to_thread(lambda: tether_cli("seed-demo", env=configured))
            assert out.returncode == 0, out.stderr
        trial = await conn.fetch(
            "SELECT email FROM mail_customer WHERE segment = 'trial' ORDER BY id"
        )
        assert [r["email"] for r in trial] == TRIAL
    finally:
        await conn.close()
        await stores.drop_database(admin_dsn, dsn)
