"""The mailer's send path in-process, against real Postgres and a real SMTP server (the sink):
one email per recipient with its deterministic Message-ID, nothing sent twice for one key, a
recipient left `sending` never sent again, and reconcile telling done / not done / in doubt."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from tether_mailer import delivery, store
from tether_mailer.delivery import DeliveryInDoubt, MailerState
from tether_mailer.seed import CUSTOMERS
from tether_mailer.settings import SmtpSettings
from tether_sdk import TransientError

TRIAL = [email for email, _, segment in CUSTOMERS if segment == "trial"]
SUBJECT = "The new pricing"
BODY = "Hello {name},\n\nprices change.\n"


@pytest.fixture
async def pool(mailer_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    p = await asyncpg.create_pool(mailer_dsn, min_size=1, max_size=4)
    yield p
    await p.close()


def _state(pool: asyncpg.Pool, port: int, **kw: float) -> MailerState:
    return MailerState(pool, SmtpSettings(port=port, **kw))  # type: ignore[arg-type]


class _Progress:
    def __init__(self) -> None:
        self.seen: list[tuple[float, str]] = []

    async def __call__(self, fraction: float, text: str) -> None:
        self.seen.append((fraction, text))


async def _statuses(db: asyncpg.Connection, key: str) -> dict[str, str]:
    return {d.email: d.status for d in await store.deliveries(db, key)}


async def test_one_email_per_recipient_and_never_twice_for_a_key(pool, sink, db):
    state, progress = _state(pool, sink.port), _Progress()
    assert await delivery.reconcile(pool, "k1", "trial") == ("not_done", None)

    report = await delivery.send_campaign(state, "k1", "trial", SUBJECT, BODY, progress)

    result = report.result()
    assert result.ok and result.data["sent"] == TRIAL and result.data["in_doubt"] == []
    assert result.summary == "sent the email to 3 of 3 recipients in segment trial"
    assert sink.sink.per_recipient() == {r: 1 for r in TRIAL}
    got = {m.recipients[0]: m for m in sink.sink.received}
    for email in TRIAL:
        assert got[email].message_id == store.message_id("k1", email)
        assert got[email].subject == SUBJECT
    assert got["ada@example.com"].text.startswith("Hello Ada,")
    assert progress.seen == [(1 / 3, "sent 1 of 3"), (2 / 3, "sent 2 of 3"), (1.0, "sent 3 of 3")]
    # The same key again (the engine calling after a crash): nothing is sent twice.
    again = await delivery.send_campaign(state, "k1", "trial", SUBJECT, BODY, progress)
    assert again.result().ok and again.sent_now == set()
    assert sink.sink.per_recipient() == {r: 1 for r in TRIAL}
    status, found = await delivery.reconcile(pool, "k1", "trial")
    assert status == "done" and found is not None and found.result().ok
    # Another key is another campaign, with other Message-IDs.
    await delivery.send_campaign(state, "k2", "trial", SUBJECT, BODY, progress)
    assert sink.sink.per_recipient() == {r: 2 for r in TRIAL}
    assert len({m.message_id for m in sink.sink.received}) == 6


async def test_a_recipient_in_doubt_is_named_and_never_sent_again(pool, sink, db):
    state = _state(pool, sink.port)
    await store.start_campaign(pool, "k3", "trial", SUBJECT, BODY)
    await store.mark(pool, "k3", TRIAL[0], "sent")
    # As a process killed between handing grace's message over and recording the answer leaves it.
    await store.mark(pool, "k3", TRIAL[1], "sending")
    status, found = await delivery.reconcile(pool, "k3", "trial")
    assert status == "unknown" and found is not None and found.emails("sending") == [TRIAL[1]]

    report = await delivery.send_campaign(state, "k3", "trial", SUBJECT, BODY, _Progress())

    assert sink.sink.per_recipient() == {TRIAL[2]: 1}, "only linus, who certainly had nothing"
    result = report.result()
    assert not result.ok
    assert result.data["in_doubt"] == [TRIAL[1]] and result.data["sent_now"] == [TRIAL[2]]
    assert "in doubt, not sent again: grace@example.com" in result.summary
    assert await _statuses(db, "k3") == dict(zip(TRIAL, ["sent", "sending", "sent"], strict=True))


async def test_partly_sent_with_nothing_in_doubt_is_safe_to_call_again(pool, sink):
    await store.start_campaign(pool, "k4", "trial", SUBJECT, BODY)
    await store.mark(pool, "k4", TRIAL[0], "sent")
    status, _ = await delivery.reconcile(pool, "k4", "trial")
    assert status == "not_done"
    await delivery.send_campaign(_state(pool, sink.port), "k4", "trial", SUBJECT, BODY, _Progress())
    assert sink.sink.per_recipient() == {TRIAL[1]: 1, TRIAL[2]: 1}


async def test_no_answer_to_the_message_leaves_the_recipient_in_doubt(pool, sink, db):
    sink.sink.hold_for = {TRIAL[1]}
    state = _state(pool, sink.port, timeout_s=0.5)
    with pytest.raises(DeliveryInDoubt, match="grace@example.com"):
        await delivery.send_campaign(state, "k5", "trial", SUBJECT, BODY, _Progress())
    # The server has grace's message; the mailer cannot know it and says so.
    assert sink.sink.per_recipient() == {TRIAL[0]: 1, TRIAL[1]: 1}
    assert await _statuses(db, "k5") == dict(
        zip(TRIAL, ["sent", "sending", "pending"], strict=True)
    )
    assert (await delivery.reconcile(pool, "k5", "trial"))[0] == "unknown"


async def test_an_unreachable_server_sends_nothing_and_may_be_retried(pool, db):
    from tether_testkit.processes import free_port

    state = _state(pool, free_port())
    with pytest.raises(TransientError, match="cannot reach the SMTP server"):
        await delivery.send_campaign(state, "k6", "trial", SUBJECT, BODY, _Progress())
    assert set((await _statuses(db, "k6")).values()) == {"pending"}
    assert (await delivery.reconcile(pool, "k6", "trial"))[0] == "not_done"
