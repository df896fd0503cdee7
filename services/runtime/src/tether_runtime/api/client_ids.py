"""The caller's own ids for conversations and runs (CreateConversationRequest.client_id,
StartRunRequest / ResumeRunRequest.client_run_id, GetRunRequest.client_run_id): a frontend
protocol whose client names its threads and runs (AG-UI) finds them again through these, on any
gateway pod. An id names one thing for good; giving it to another is CLIENT_ID_TAKEN, refused
before anything changes."""

from __future__ import annotations

from dataclasses import dataclass

from tether_common.auth import Principal
from tether_common.errors import ClientIdTaken, InvalidArgument, NotFound, TetherError
from tether_common.input_parsers import MAX_IDEMPOTENCY_KEY, storable

from tether_runtime.api import runs as runs_api
from tether_runtime.domain.records import ConversationRow
from tether_runtime.domain.views import RunView
from tether_runtime.store import client_refs
from tether_runtime.store.client_refs import RunRef
from tether_runtime.store.db import Pool

MAX_CLIENT_ID = MAX_IDEMPOTENCY_KEY


class _Lost(Exception):
    """A concurrent call gave the id to its own new conversation first."""


def checked(client_id: str, name: str) -> str:
    if not 1 <= len(client_id) <= MAX_CLIENT_ID or not storable(client_id):
        raise InvalidArgument(f"{name} must be 1 to {MAX_CLIENT_ID} storable characters")
    return client_id


async def create_conversation(
    pool: Pool, principal: Principal, client_id: str, title: str
) -> tuple[ConversationRow, bool]:
    """The caller's conversation named `client_id`, made now if there is none: (it, existed)."""
    checked(client_id, "client_id")
    user = principal.user_id
    for _ in range(2):
        async with pool.acquire() as conn:
            found = await client_refs.conversation_of(conn, user, client_id)
            if found is not None:
                conv = await runs_api.owned_conversation(conn, principal, found)
                return conv, True
            try:
                async with conn.transaction():
                    made = await runs_api.new_conversation(conn, principal, title)
                    if not await client_refs.take_conversation(conn, user, client_id, made.id):
                        raise _Lost  # undoes the new conversation
                return made, False
            except _Lost:
                continue
    raise TetherError("the conversation's client id could not be settled")


async def get_conversation(pool: Pool, principal: Principal, client_id: str) -> ConversationRow:
    checked(client_id, "client_id")
    async with pool.acquire() as conn:
        found = await client_refs.conversation_of(conn, principal.user_id, client_id)
        if found is None:
            raise NotFound("conversation not found", reason="CONVERSATION_NOT_FOUND")
        return await runs_api.owned_conversation(conn, principal, found)


async def check_start(pool: Pool, principal: Principal, client_run_id: str, conv_id: str) -> str:
    """Before a start: the run the id already names on this conversation (a repeat), or ""."""
    checked(client_run_id, "client_run_id")
    async with pool.acquire() as conn:
        ref = await client_refs.run_of(conn, principal.user_id, client_run_id)
    if ref is None:
        return ""
    if ref.interrupt_id or ref.conversation_id != conv_id:
        raise ClientIdTaken("client_run_id already names another run")
    return ref.run_id


async def check_resume(
    pool: Pool, principal: Principal, client_run_id: str, run_id: str, interrupt_id: str
) -> None:
    """Before an answer: the id names nothing yet, or this very answer (a repeat)."""
    checked(client_run_id, "client_run_id")
    async with pool.acquire() as conn:
        ref = await client_refs.run_of(conn, principal.user_id, client_run_id)
    if ref is not None and (ref.run_id, ref.interrupt_id) != (run_id, interrupt_id):
        raise ClientIdTaken("client_run_id already names another run")


async def name_run(
    pool: Pool, principal: Principal, client_run_id: str, view: RunView, interrupt_id: str = ""
) -> None:
    """After a start or an answer: the id names it (once; a concurrent twin's claim must agree)."""
    ref = RunRef(view.conversation_id, view.id, interrupt_id)
    async with pool.acquire() as conn:
        taken = await client_refs.take_run(conn, principal.user_id, client_run_id, ref)
    if taken != ref:
        raise ClientIdTaken("client_run_id already names another run")


@dataclass(frozen=True)
class Found:
    run: RunView
    answered_interrupt_id: str  # "" for the run's start
    client_conversation_id: str  # the conversation's client id, "" for none


async def find_run(pool: Pool, principal: Principal, client_run_id: str) -> Found:
    """The run the caller's id names, the interrupt it was given with, its thread's id."""
    checked(client_run_id, "client_run_id")
    async with pool.acquire() as conn:
        ref = await client_refs.run_of(conn, principal.user_id, client_run_id)
        if ref is None:
            raise NotFound("run not found", reason="RUN_NOT_FOUND")
        thread = await client_refs.client_id_of(conn, principal.user_id, ref.conversation_id)
    run = await runs_api.get_run(pool, principal, ref.run_id)
    return Found(run, ref.interrupt_id, thread)
