"""Context assembly within the token budget, the summary plan, and the background summary
(agent/context.py, agent/summaries.py), against the session's real Postgres."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import asyncpg
import pytest
from tether_common.ids import new_id, new_id_after
from tether_runtime.engine.agent import context
from tether_runtime.engine.agent.context import SUMMARY_LABEL, budget_for, initial_context
from tether_runtime.engine.agent.summaries import Summaries
from tether_runtime.engine.agent.tokens import ESTIMATE
from tether_runtime.engine.loaded_agent import LoadedAgent
from tether_runtime.store import conversations
from tether_runtime.store.db import create_pool
from tether_sdk import Agent, Limits, ModelError, ModelRequest, Usage

BUDGET = 1000


class Recorder:
    """A model that writes what it is told to and remembers every request."""

    def __init__(self, answer: str = "", fail: BaseException | None = None) -> None:
        self.answer = answer
        self.fail = fail
        self.requests: list[ModelRequest] = []
        self.hang = False

    async def stream(self, request: ModelRequest) -> AsyncIterator[object]:
        self.requests.append(request)
        yield Usage(input_tokens=5)
        if self.hang:
            await asyncio.sleep(3600)
        if self.fail is not None:
            raise self.fail
        yield self.answer[:10]
        yield Usage(output_tokens=3)
        yield self.answer[10:]


def loaded(model: Recorder, budget: int = BUDGET) -> LoadedAgent:
    agent = Agent(
        name="ctx",
        description="-",
        instructions="Answer briefly.",
        model=model,
        limits=Limits(context_tokens=budget),
    )
    return LoadedAgent(agent, "test", model)


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(database_url, min_size=1, max_size=2)
    yield p
    await p.close()


async def conversation(pool: asyncpg.Pool, turns: int, size: int = 120) -> tuple[str, list[str]]:
    """A conversation of `turns` question/answer pairs; returns its id and the message ids."""
    ids: list[str] = []
    async with pool.acquire() as conn:
        conv = await conversations.create(conn, "alice", "ctx")
        for n in range(turns):
            for role in ("user", "assistant"):
                text = f"{role} turn {n}: " + "x" * size
                # In order, as a run's answer follows its question (ids made in the same
                # millisecond would not sort by creation otherwise).
                mid = new_id_after("msg", ids[-1]) if ids else new_id("msg")
                await conversations.add_message(conn, conv.id, role, text, message_id=mid)
                ids.append(mid)
    return conv.id, ids


async def _own(conn: asyncpg.Connection, conv_id: str, ids: list[str], text: str) -> str:
    """The run's own message, stored after the conversation's (as StartRun stores it)."""
    own = new_id_after("msg", ids[-1])
    await conversations.add_message(conn, conv_id, "user", text, message_id=own)
    return own


async def test_recent_turns_fill_the_budget_newest_first_and_the_own_message_is_last(
    pool: asyncpg.Pool,
) -> None:
    conv_id, ids = await conversation(pool, 40)
    budget = budget_for(loaded(Recorder()))
    async with pool.acquire() as conn:
        own = await _own(conn, conv_id, ids, "what now?")
        messages, _ = await initial_context(conn, conv_id, own, budget=budget)
        conv = await conversations.get(conn, conv_id)
    assert conv is not None
    assert messages[-1] == {"role": "user", "content": "what now?"}
    earlier = messages[:-1]
    # Verbatim, contiguous and ending with the newest turn.
    assert earlier[-1]["content"].startswith("assistant turn 39:")
    first = int(earlier[0]["content"].split("turn ")[1].split(":")[0])
    assert 20 < first < 39, "the window should hold some but not all turns"
    system = context.system_text(conv, budget)
    used = budget.fixed + ESTIMATE.count(system) + ESTIMATE.count_messages(messages)
    assert used <= BUDGET - budget.reserve
    # One more turn would not have fitted.
    assert used + 40 > BUDGET - budget.reserve


async def test_a_stored_own_message_is_read_by_id_and_later_messages_are_not_included(
    pool: asyncpg.Pool,
) -> None:
    conv_id, ids = await conversation(pool, 6, size=10)
    own = ids[6]  # turn 3's question: what came after belongs to other runs
    async with pool.acquire() as conn:
        messages, _ = await initial_context(
            conn, conv_id, own, budget=budget_for(loaded(Recorder()))
        )
    assert [m["content"].split(":")[0] for m in messages] == [
        f"{role} turn {n}" for n in range(3) for role in ("user", "assistant")
    ] + ["user turn 3"]


async def test_an_own_message_over_the_budget_is_cut_and_kept_alone(pool: asyncpg.Pool) -> None:
    conv_id, ids = await conversation(pool, 3)
    budget = budget_for(loaded(Recorder()))
    huge = "please read this. " * 1000
    async with pool.acquire() as conn:
        own = await _own(conn, conv_id, ids, huge)
        messages, _ = await initial_context(conn, conv_id, own, budget=budget)
    assert len(messages) == 1
    assert messages[0]["content"].endswith("[...truncated]")
    assert huge.startswith(messages[0]["content"].removesuffix(" [...truncated]"))
    assert ESTIMATE.count_messages(messages) <= BUDGET


async def test_the_system_context_labels_the_summary_and_caps_it(pool: asyncpg.Pool) -> None:
    conv_id, ids = await conversation(pool, 1)
    async with pool.acquire() as conn:
        assert await conversations.store_summary(conn, conv_id, "s " * 5000, ids[-1], "")
        conv = await conversations.get(conn, conv_id)
    assert conv is not None
    text = context.system_text(conv, budget_for(loaded(Recorder())))
    assert f"{SUMMARY_LABEL}: s s" in text and "Known facts" in text
    assert ESTIMATE.count(text) < BUDGET // 4 + 100


async def test_no_summary_is_planned_until_the_turns_out_of_the_window_are_worth_it(
    pool: asyncpg.Pool,
) -> None:
    budget = budget_for(loaded(Recorder()))
    conv_id, _ = await conversation(pool, 10)  # about all in the window
    async with pool.acquire() as conn:
        assert await context.summary_plan(conn, conv_id, budget) is None
    conv_id, ids = await conversation(pool, 40)
    async with pool.acquire() as conn:
        plan = await context.summary_plan(conn, conv_id, budget)
    assert plan is not None
    assert plan.expected_through == "" and plan.previous == ""
    assert plan.turns[0]["content"].startswith("user turn 0:")
    assert plan.through == ids[len(plan.turns) - 1]
    assert ESTIMATE.count_messages(plan.turns) <= BUDGET // 2 + 10


async def test_the_model_writes_the_summary_and_it_is_stored_with_its_cursor(
    pool: asyncpg.Pool,
) -> None:
    conv_id, _ = await conversation(pool, 40)
    model = Recorder("Earlier: the user walked through turns zero to twelve.")
    agent = loaded(model)
    summaries = Summaries(pool)
    assert await summaries.update(conv_id, agent) is True
    (request,) = model.requests
    assert request.purpose == "summary" and request.tools == [] and request.context == ""
    assert request.messages[0]["content"].startswith("user turn 0:")
    async with pool.acquire() as conn:
        conv = await conversations.get(conn, conv_id)
    assert conv is not None
    assert conv.summary == "Earlier: the user walked through turns zero to twelve."  # no usage
    assert conv.summary_through  # the cursor moved
    assert conv.facts == {}  # never merged into the facts
    # The next round folds what follows, with the summary so far as its context.
    assert await summaries.update(conv_id, agent) is True
    second = model.requests[1]
    assert second.context == conv.summary
    last = request.messages[-1]["content"]
    assert second.messages[0]["content"] != last and last not in [
        m["content"] for m in second.messages
    ]
    rounds = 2
    while await summaries.update(conv_id, agent):
        rounds += 1
    assert rounds < 10  # it ends: what is left is in the window or under the threshold


async def test_an_older_summary_never_replaces_a_newer_one(pool: asyncpg.Pool) -> None:
    conv_id, ids = await conversation(pool, 4)
    async with pool.acquire() as conn:
        assert await conversations.store_summary(conn, conv_id, "newer", ids[5], "")
        # A slower pod planned from the empty summary and folded less: its write loses.
        assert not await conversations.store_summary(conn, conv_id, "older", ids[3], "")
        # Nor may a summary move the cursor backwards, even from the current one.
        assert not await conversations.store_summary(conn, conv_id, "older", ids[3], ids[5])
        conv = await conversations.get(conn, conv_id)
    assert conv is not None and (conv.summary, conv.summary_through) == ("newer", ids[5])


async def test_a_failing_summariser_is_logged_without_details_and_changes_nothing(
    pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    conv_id, _ = await conversation(pool, 40)
    summaries = Summaries(pool)
    with caplog.at_level(logging.WARNING):
        crash = loaded(Recorder(fail=RuntimeError("key sk-secret-123 rejected")))
        assert await summaries.update(conv_id, crash) is False
        busy = loaded(Recorder(fail=ModelError("MODEL_UNAVAILABLE", "overloaded", retryable=True)))
        assert await summaries.update(conv_id, busy) is False
        assert await summaries.update(conv_id, loaded(Recorder(""))) is False  # empty text
    logged = [r for r in caplog.records if "summary failed" in r.getMessage()]
    assert len(logged) == 3
    assert all(r.exc_info is None for r in logged)
    assert "sk-secret" not in caplog.text
    assert [getattr(r, "error", "") for r in logged] == [
        "RuntimeError",
        "overloaded",
        "the model wrote an empty summary",
    ]
    async with pool.acquire() as conn:
        conv = await conversations.get(conn, conv_id)
    assert conv is not None and (conv.summary, conv.summary_through) == ("", "")


async def test_background_summaries_run_one_at_a_time_and_stop_on_close(
    pool: asyncpg.Pool,
) -> None:
    conv_id, _ = await conversation(pool, 40)
    model = Recorder("never")
    model.hang = True
    summaries = Summaries(pool)
    summaries.run_completed(conv_id, loaded(model))
    summaries.run_completed(conv_id, loaded(model))  # one task per conversation
    for _ in range(100):
        if model.requests:
            break
        await asyncio.sleep(0.02)
    assert len(model.requests) == 1
    (task,) = summaries._tasks.values()
    await asyncio.wait_for(summaries.close(), 5)
    assert task.cancelled()
    summaries.run_completed(conv_id, loaded(model))  # closed: nothing starts
    assert not summaries._tasks


async def test_a_huge_old_turn_is_folded_by_its_beginning(pool: asyncpg.Pool) -> None:
    conv_id, _ = await conversation(pool, 1, size=40_000)  # far more than a budget
    async with pool.acquire() as conn:
        for n in range(30):
            for role in ("user", "assistant"):
                await conversations.add_message(
                    conn, conv_id, role, f"{role} later {n}: " + "y" * 120
                )
                await asyncio.sleep(0.002)  # ids sort by creation across milliseconds
        plan = await context.summary_plan(conn, conv_id, budget_for(loaded(Recorder())))
    assert plan is not None
    assert plan.turns[0]["content"].startswith("user turn 0: xxx")
    assert plan.turns[0]["content"].endswith("[...truncated]")
    assert ESTIMATE.count_messages(plan.turns[:1]) <= BUDGET // 2 + 10
