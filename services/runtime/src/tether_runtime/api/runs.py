"""StartRun, GetRun, ListAgents and the conversation calls: ownership checks, then the store."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial

import asyncpg
from tether_common.auth import Principal
from tether_common.errors import ClientIdTaken, InvalidArgument, NotFound, PermissionDenied
from tether_common.ids import made_lately, new_id, new_id_after
from tether_common.input_parsers import encode_page_token, idempotency_key, page_token

from tether_runtime import metrics
from tether_runtime.api.run_input import run_input
from tether_runtime.domain import events as ev
from tether_runtime.domain.records import ConversationRow, MessageRow
from tether_runtime.domain.views import AgentView, RunView
from tether_runtime.engine import concurrent_runs
from tether_runtime.engine.agents import AgentRegistry
from tether_runtime.engine.checkpoint import pending as pending_checkpoint
from tether_runtime.engine.driven import is_driven
from tether_runtime.engine.resume import load_owned_run, request_hash, stored_answer
from tether_runtime.store import (
    conversations,
    event_log,
    event_partitions,
    idempotency,
    interrupts,
    run_admission,
    runs,
)
from tether_runtime.store.db import Conn, Pool

MAX_TITLE = 200
# How far a caller's own run id (StartRunRequest.run_id) may be from this runtime's clock.
RUN_ID_CLOCK_S = 300.0
# Until agents carry their own description (the SDK's Agent does), the one shipped agent's.


def _acting(principal: Principal) -> None:
    if not principal.may_act():
        raise PermissionDenied("this token may only read a stream")


def callers_run_id(value: str) -> str:
    """A run id the caller made for its new run (it listens for the run's batches before the run
    exists); INVALID_ARGUMENT unless it is made as new_id makes them, at about this time."""
    if not made_lately(value, "run", RUN_ID_CLOCK_S):
        raise InvalidArgument(
            "run_id must be made as run ids are: 'run_' and 26 lower-case Crockford base32"
            " characters, its time part within 5 minutes of now"
        )
    return value


async def owned_conversation(conn: Conn, principal: Principal, conv_id: str) -> ConversationRow:
    conv = await conversations.get(conn, conv_id)
    if conv is None or conv.user_id != principal.user_id:
        raise NotFound("conversation not found", reason="CONVERSATION_NOT_FOUND")
    return conv


async def create_conversation(pool: Pool, principal: Principal, title: str) -> ConversationRow:
    async with pool.acquire() as conn:
        return await new_conversation(conn, principal, title)


async def new_conversation(conn: Conn, principal: Principal, title: str) -> ConversationRow:
    _acting(principal)
    if len(title) > MAX_TITLE:
        raise InvalidArgument(f"title is longer than {MAX_TITLE} characters")
    return await conversations.create(conn, principal.user_id, title.strip() or "New conversation")


async def get_conversation(pool: Pool, principal: Principal, conv_id: str) -> ConversationRow:
    _acting(principal)
    async with pool.acquire() as conn:
        return await owned_conversation(conn, principal, conv_id)


async def list_conversations(
    pool: Pool, principal: Principal, page_size: int, token: str
) -> tuple[list[ConversationRow], str]:
    _acting(principal)
    size = min(max(page_size or 50, 1), 200)
    async with pool.acquire() as conn:
        rows = await conversations.list_for_user(
            conn, principal.user_id, size + 1, _after(token, f"conversations:{principal.user_id}")
        )
    more = len(rows) > size
    rows = rows[:size]
    bound = f"conversations:{principal.user_id}"
    return rows, encode_page_token({"id": rows[-1].id}, bound) if more else ""


async def list_messages(
    pool: Pool, principal: Principal, conv_id: str, page_size: int, token: str
) -> tuple[list[MessageRow], str]:
    _acting(principal)
    size = min(max(page_size or 100, 1), 500)
    async with pool.acquire() as conn:
        await owned_conversation(conn, principal, conv_id)
        rows = await conversations.messages(
            conn, conv_id, size + 1, _after(token, f"messages:{conv_id}")
        )
    more = len(rows) > size
    rows = rows[:size]
    return rows, encode_page_token({"id": rows[-1].id}, f"messages:{conv_id}") if more else ""


def _after(token: str, bound: str) -> str | None:
    """The id a page of conversations or messages continues after: a token this API issued for
    the same listing (a raw id, or one from another listing, is INVALID_ARGUMENT)."""
    position = page_token(token, bound, ("id",))
    return None if position is None else position["id"]


@dataclass
class StreamedStart:
    """A start whose caller streams the run from its first event (StartRunAndStreamEvents).
    `ready` (the stream's subscription being confirmed) is awaited just before the run is
    stored: when it says yes, every batch published after the commit reaches the stream, so the
    run's first event, encoded once here, is handed back in `first` and the stream need not read
    it back from Postgres. Left None for a replayed start, or when `ready` said no."""

    ready: asyncio.Future[bool]
    first: bytes | None = field(default=None, init=False)

    async def confirmed(self) -> bool:
        return await asyncio.shield(self.ready)  # a retried start awaits the same answer

    @classmethod
    def listening(cls) -> StreamedStart:
        """For a caller that subscribed before it called (StartRun with its own `run_id`)."""
        ready = asyncio.get_running_loop().create_future()
        ready.set_result(True)
        return cls(ready)


async def start_run(
    pool: Pool,
    agents: AgentRegistry,
    principal: Principal,
    conv_id: str,
    text: str,
    key: str,
    agent: str,
    trace_context: dict[str, str],
    *,
    run_id: str = "",
    streamed: StreamedStart | None = None,
    input_json: str = "",
    admissions: run_admission.Admissions | None = None,
) -> tuple[RunView, bool, list[str]]:
    """The run, whether it is a replay of an earlier start with the same key, and the runs of
    the conversation that were active when it was stored (none for a replay). `input_json`: a
    graph agent's input (run_input.py). `admissions`: the process's batcher, for a start with
    no key (None: a statement of its own)."""
    _acting(principal)
    if not text.strip() and not input_json:
        raise InvalidArgument("text or input_json is required")
    idempotency_key(key, required=False)
    agent = agents.resolve(agent)  # AGENT_NOT_FOUND, never a fallback
    rhash = request_hash(conv_id, text.strip(), agent, *([input_json] if input_json else []))
    text, graph_input = run_input(text, input_json, graph=is_driven(agents.get(agent).agent))
    scope = f"start:{principal.user_id}"
    run_id = run_id or new_id("run")  # a caller already listening for the run names it
    message_id = new_id("msg")
    # The first event commits with the run itself: a client's stream has something at once,
    # whatever the workers are doing.
    ((_, _, kind, encoded),) = event_log.stamp(run_id, 1, [ev.run_started(conv_id)])
    # The run's answer id (sorting after the question) is stored with it; its context is built
    # by the worker from the turns its claim reads (checkpoint.pending).
    checkpoint = pending_checkpoint(new_id_after("msg", message_id))
    start = run_admission.Start(
        concurrent_runs.policy_of(agents.get(agent)),
        run_id,
        conv_id,
        principal.user_id,
        message_id,
        text,
        agent,
        trace_context,
        (kind, encoded),
        checkpoint,
        graph_input,
    )
    if admissions is not None and not key:
        # Without a key nothing else commits with the admission: it joins the process's next
        # batch of admissions (one statement for the starts that arrive together).
        confirmed = streamed is not None and await streamed.confirmed()
        admission = _found(await admissions.start(start))
        view = RunView.of(concurrent_runs.admitted(admission))
        return _started(view, streamed, confirmed, encoded), False, admission.active
    async with pool.acquire() as conn:
        if key:
            replay = await stored_answer(conn, scope, key, rhash)
            if replay is not None:
                return replay, True, []
        confirmed = streamed is not None and await streamed.confirmed()
        # The conversation is locked first, so the agent's concurrent_runs policy reads its
        # active runs exactly (store/run_admission.py): one statement, in autocommit unless an
        # idempotency key must commit with it.
        async with conn.transaction() if key else contextlib.nullcontext():
            admission = _found(await run_admission.start(conn, start))
            view = RunView.of(concurrent_runs.admitted(admission))
            if key and not await idempotency.store(
                conn, scope, key, rhash, {"run": view.to_json()}
            ):
                # A concurrent twin stored the key first: undo ours, answer with theirs.
                raise _Retry()
    return _started(view, streamed, confirmed, encoded), False, admission.active


@contextlib.contextmanager
def _taken_if_named(*, named: bool) -> Iterator[None]:
    """A run id the caller named that some run already has: CLIENT_ID_TAKEN, not a store error."""
    try:
        yield
    except asyncpg.UniqueViolationError as err:
        if named and err.constraint_name == "run_pkey":
            raise ClientIdTaken("run_id already names a run") from None
        raise


def _found(admission: run_admission.Admission | None) -> run_admission.Admission:
    if admission is None:
        raise NotFound("conversation not found", reason="CONVERSATION_NOT_FOUND")
    return admission


def _started(
    view: RunView, streamed: StreamedStart | None, confirmed: bool, encoded: bytes
) -> RunView:
    """A run just stored. Not published: no stream can be following a run whose id was unknown
    until now but the caller's own (handed the event in `streamed.first`), and any stream opened
    from here on reads Postgres (after its subscription is confirmed)."""
    if streamed is not None and confirmed:
        streamed.first = encoded
    metrics.RUNS_STARTED.inc()
    return view


class _Retry(Exception):
    pass


async def start_run_once(
    pool: Pool,
    agents: AgentRegistry,
    principal: Principal,
    conv_id: str,
    text: str,
    key: str,
    agent: str,
    trace_context: dict[str, str],
    *,
    run_id: str = "",
    streamed: StreamedStart | None = None,
    input_json: str = "",
    admissions: run_admission.Admissions | None = None,
) -> tuple[RunView, bool, list[str]]:
    attempt = partial(
        start_run,
        pool,
        agents,
        principal,
        conv_id,
        text,
        key,
        agent,
        trace_context,
        run_id=run_id,
        streamed=streamed,
        input_json=input_json,
        admissions=admissions,
    )
    with _taken_if_named(named=bool(run_id)):
        try:
            return await attempt()
        except _Retry:
            return await attempt()


MAX_POSITIONS = 1000


async def run_positions(pool: Pool, principal: Principal, run_ids: list[str]) -> dict[str, int]:
    """GetRunPositions: the last sequence of each run named that the caller may read (its own;
    every run for a service that may act on behalf of users, which could read each for its
    user), in one read."""
    if principal.scope == "stream":
        raise PermissionDenied("this token may only read a stream")
    if not 1 <= len(run_ids) <= MAX_POSITIONS:
        raise InvalidArgument(f"run_ids must name 1 to {MAX_POSITIONS} runs")
    every = principal.scope == "service" and principal.on_behalf
    async with pool.acquire() as conn:
        return await runs.last_sequences(
            conn, set(run_ids), user_id=None if every else principal.user_id
        )


async def get_run(pool: Pool, principal: Principal, run_id: str) -> RunView:
    async with pool.acquire() as conn:
        run = await load_owned_run(conn, principal, run_id)
        pending = await interrupts.pending_for_run(conn, run_id)
        # Retention drops only finished runs' events: one more query for those alone.
        expired = run.terminal and await event_partitions.events_expired(conn, run_id)
    return replace(RunView.of(run, pending), events_expired=expired)


def list_agents(agents: AgentRegistry, principal: Principal) -> tuple[list[AgentView], str]:
    """The loaded agents, sorted by name, and the default one: for any acting caller (a stream
    token reads one run only)."""
    _acting(principal)
    return agents.views(), agents.default
