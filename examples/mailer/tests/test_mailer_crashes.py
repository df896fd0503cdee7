"""kill -9 during a campaign, counted at the real SMTP sink. Killed between two recipients, the
runtime that takes the run over sends only to those who did not get it: exactly one email each.
Killed while the SMTP server holds its answer to a message (received, not yet acknowledged), that
recipient is in doubt: the run asks a person (`outcome_unknown`, naming them), and retry sends only
to those who certainly had nothing, while mark done and abandon send nothing more."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from tether.runtime.v1 import events_pb2, resources_pb2
from tether_mailer import store
from tether_mailer.seed import CUSTOMERS
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.processes import start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TRIAL = [email for email, _, segment in CUSTOMERS if segment == "trial"]
ADA, GRACE, LINUS = TRIAL
ASK = "email the trial segment about the new pricing"


async def _wait(db: asyncpg.Connection, sql: str, n: int, timeout: float = 30) -> None:
    for _ in range(int(timeout / 0.05)):
        if await db.fetchval(sql) >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached {n}: {sql}")


async def _approved_runs(c: Client, n: int) -> list[tuple[str, events_pb2.RunEvent]]:
    """Start n campaigns to the trial segment and approve each card."""
    out = []
    for _ in range(n):
        run = (await c.start(await c.conversation(), ASK, agent="mailer")).run
        evs = await c.events(run.id, until="interrupt")
        assert types(evs)[-1] == "interrupt", types(evs)
        await c.resume(run.id, evs[-1].interrupt.interrupt_id)
        out.append((run.id, evs[-1]))
    return out


async def _per_campaign(db: asyncpg.Connection, sink, run_id: str) -> dict[str, int]:
    """Emails each recipient got from this run's campaign, counted at the sink by Message-ID
    (the campaign's key and the recipient give it)."""
    key = await db.fetchval(
        "SELECT idempotency_key FROM tool_call WHERE run_id = $1 AND tool = 'send_campaign'", run_id
    )
    ids = {store.message_id(key, email): email for email in TRIAL}
    counts = dict.fromkeys(TRIAL, 0)
    for m in sink.sink.received:
        if m.message_id in ids:
            counts[ids[m.message_id]] += 1
    return counts


async def test_kill_between_recipients_then_exactly_one_email_each(env, procs, sink, db):
    first = start_runtime({**env, "MAILER_SEND_DELAY_S": "8"}, name="runtime-mailer-1")
    procs.append(first)
    c = Client(first.addr, token(TEST_SECRET, "alice"))
    [(run_id, card)] = await _approved_runs(c, 1)
    # Ada's 250 is recorded; the tool now waits 8 s before Grace: kill it there.
    await _wait(db, "SELECT count(*) FROM mail_delivery WHERE status = 'sent'", 1)
    first.kill()
    await c.close()
    states = dict(await db.fetch("SELECT email, status FROM mail_delivery"))
    assert states == {ADA: "sent", GRACE: "pending", LINUS: "pending"}
    assert sink.sink.per_recipient() == {ADA: 1}

    second = start_runtime({**env, "MAILER_SEND_DELAY_S": "0"}, name="runtime-mailer-2")
    procs.append(second)
    c = Client(second.addr, token(TEST_SECRET, "alice"))
    try:
        rest = await c.events(run_id, after=card.sequence)
        assert types(rest)[-1] == "done", types(rest)
        assert "interrupt" not in types(rest)[1:], "nothing was in doubt: no person was needed"
        assert_dense(rest, start=card.sequence + 1)
        # The runtime that took over reconciled (not done: nothing in doubt), called the tool
        # again with the same key, and it sent only the rest, saying so as it went.
        progress = [e.tool_progress.text for e in rest if types([e]) == ["tool_progress"]]
        assert progress[-2:] == ["sent 2 of 3", "sent 3 of 3"]
        assert sink.sink.per_recipient() == {ADA: 1, GRACE: 1, LINUS: 1}
        assert await _per_campaign(db, sink, run_id) == {ADA: 1, GRACE: 1, LINUS: 1}
        final = "".join(e.text_delta.delta for e in rest if types([e]) == ["text_delta"])
        assert "sent the email to 3 of 3 recipients in segment trial (2 now, 1 before)" in final
    finally:
        await c.close()


async def test_kill_while_the_server_holds_a_message_asks_a_person(env, procs, sink, db):
    # The sink takes Grace's message and holds its answer: the mailer has handed it over and
    # waits for the 250 when the runtime dies.
    sink.sink.hold_for = {GRACE}
    first = start_runtime(env, name="runtime-mailer-doubt-1")
    procs.append(first)
    c = Client(first.addr, token(TEST_SECRET, "alice"))
    runs = await _approved_runs(c, 3)
    await _wait(db, "SELECT count(*) FROM mail_delivery WHERE status = 'sending'", 3)
    # `sending` is committed just before the message is handed over: wait until the server has
    # all three (and holds their answers), then kill.
    for _ in range(600):
        if sink.sink.per_recipient()[GRACE] == 3:
            break
        await asyncio.sleep(0.05)
    first.kill()
    await c.close()
    sink.sink.hold_for = set()
    assert sink.sink.per_recipient() == {ADA: 3, GRACE: 3}, "the server did receive Grace's"
    states = await db.fetch("SELECT email, status, count(*) FROM mail_delivery GROUP BY 1, 2")
    assert {(r["email"], r["status"]): r["count"] for r in states} == {
        (ADA, "sent"): 3,
        (GRACE, "sending"): 3,
        (LINUS, "pending"): 3,
    }

    second = start_runtime(env, name="runtime-mailer-doubt-2")
    procs.append(second)
    c = Client(second.addr, token(TEST_SECRET, "alice"))
    try:
        asked = []
        for run_id, card in runs:
            rest = await c.events(run_id, after=card.sequence, until="interrupt")
            raised = rest[-1].interrupt
            assert raised.kind == resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN
            assert raised.payload.tool == "send_campaign"
            assert raised.payload.title == "Did send_campaign happen?"
            assert f"SMTP cannot tell whether {GRACE} received the email" in raised.payload.details
            assert "1 of 3 certainly sent" in raised.payload.details
            asked.append(rest[-1])
        # Nothing was sent again on the engine's own initiative.
        assert sink.sink.per_recipient() == {ADA: 3, GRACE: 3}

        answers = [
            events_pb2.DECISION_RETRY,
            events_pb2.DECISION_MARK_DONE,
            events_pb2.DECISION_ABANDON,
        ]
        for (run_id, _), intr, answer in zip(runs, asked, answers, strict=True):
            await c.resume(run_id, intr.interrupt.interrupt_id, answer)
        finals = []
        for (run_id, _), intr in zip(runs, asked, strict=True):
            rest = await c.events(run_id, after=intr.sequence)
            assert types(rest)[0] == "interrupt_resolved"
            assert types(rest)[-1] == "done", types(rest)
            assert_dense(rest, start=intr.sequence + 1)
            finals.append("".join(e.text_delta.delta for e in rest if types([e]) == ["text_delta"]))
        (r1, _), (r2, _), (r3, _) = runs
        # Retry: only Linus, who certainly had nothing, gets it now; Grace is never sent twice.
        assert await _per_campaign(db, sink, r1) == {ADA: 1, GRACE: 1, LINUS: 1}
        assert f"in doubt, not sent again: {GRACE}" in finals[0]
        # Mark done and abandon: nothing more is sent.
        assert await _per_campaign(db, sink, r2) == {ADA: 1, GRACE: 1, LINUS: 0}
        assert "was handled, as you confirmed" in finals[1]
        assert await _per_campaign(db, sink, r3) == {ADA: 1, GRACE: 1, LINUS: 0}
        assert "I will not send the email to segment trial again" in finals[2]
        assert max(sink.sink.per_recipient().values()) <= 3, "at most one per campaign each"
    finally:
        await c.close()


async def _in_doubt_without_a_crash(env, procs, sink, name: str):
    """The server takes Grace's message and never answers within the mailer's SMTP timeout: the
    connection is given up with the message possibly delivered (no process dies)."""
    sink.sink.hold_for = {GRACE}
    proc = start_runtime({**env, "MAILER_SMTP_TIMEOUT_S": "1"}, name=name)
    procs.append(proc)
    c = Client(proc.addr, token(TEST_SECRET, "alice"))
    [(run_id, card)] = await _approved_runs(c, 1)
    rest = await c.events(run_id, after=card.sequence, until="interrupt")
    sink.sink.hold_for = set()
    return c, run_id, rest


async def test_no_answer_from_the_server_asks_a_person_and_retry_skips_the_doubt(
    env, procs, sink, db
):
    c, run_id, rest = await _in_doubt_without_a_crash(env, procs, sink, "runtime-mailer-noanswer")
    try:
        intr = rest[-1]
        assert intr.interrupt.kind == resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN
        assert sink.sink.per_recipient() == {ADA: 1, GRACE: 1}
        await c.resume(run_id, intr.interrupt.interrupt_id, events_pb2.DECISION_RETRY)
        after = await c.events(run_id, after=intr.sequence)
        assert types(after)[-1] == "done", types(after)
        assert await _per_campaign(db, sink, run_id) == {ADA: 1, GRACE: 1, LINUS: 1}
        final = "".join(e.text_delta.delta for e in after if types([e]) == ["text_delta"])
        assert f"in doubt, not sent again: {GRACE}" in final
    finally:
        await c.close()


async def test_the_card_names_the_recipient_in_doubt_without_a_crash(env, procs, sink):
    c, _, rest = await _in_doubt_without_a_crash(env, procs, sink, "runtime-mailer-noanswer-2")
    try:
        assert rest[-1].interrupt.kind == resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN
        assert GRACE in rest[-1].interrupt.payload.details, rest[-1].interrupt.payload.details
    finally:
        await c.close()
