"""The LangGraph ids of Tether's resources, computed the same on every gateway pod: an agent's
assistant id (uuid5 of its name), the run id of each stretch of a Tether run (the Tether run's
own id for its first stretch, uuid5 of `{run id}/{n}` for the n-th resume), and the SSE ids
`{sequence}-{k}`: the k-th LangGraph event made from the Tether event of that sequence."""

from __future__ import annotations

import re
import uuid

from tether_common.errors import InvalidArgument

# Fixed forever: changing it changes every id a client may hold.
NAMESPACE = uuid.UUID("5f0c4d6e-8a41-4f7e-9d0b-3c2e1a7b9f10")

_EVENT_ID = re.compile(r"(\d{1,18})(?:-(\d{1,6}))?")
_UUID5 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")

Cursor = tuple[int, int]
START: Cursor = (0, -1)  # before every event: `Last-Event-ID: 0`, or none


def assistant_id(agent: str) -> str:
    return str(uuid.uuid5(NAMESPACE, f"assistant:{agent}"))


def stretch_run_id(tether_run_id: str, stretch: int) -> str:
    if stretch == 0:
        return tether_run_id
    return str(uuid.uuid5(NAMESPACE, f"{tether_run_id}/{stretch}"))


def stretch_of(tether_run_id: str, run_id: str, most: int) -> int | None:
    """Which stretch of the Tether run `run_id` names, looking at the first `most` + 1. Only a
    uuid5 can name a later stretch: any other id (a Tether run's own) is not looked for among
    them (a thread's runs times their events' uuid5s, for a join of an older run)."""
    if run_id == tether_run_id:
        return 0
    if _UUID5.fullmatch(run_id) is None:
        return None
    for n in range(1, most + 1):
        if stretch_run_id(tether_run_id, n) == run_id:
            return n
    return None


def task_id(interrupt_id: str, n: int) -> str:
    """The id of the n-th task of a state at an interrupt that is not the one that asked (that
    one's id is the interrupt's), in LangGraph's 32 hex digits."""
    return uuid.uuid5(NAMESPACE, f"task:{interrupt_id}/{n}").hex


def event_id(sequence: int, k: int) -> str:
    return f"{sequence}-{k}"


def cursor(last_event_id: str | None) -> Cursor:
    """Where a join resumes: after the event `Last-Event-ID` names; from the start for none, `0`
    (as LangGraph's own server) or `-1` (what the JS SDK's `useStream` rejoins with). 422 for
    anything that is not an id this gateway sent."""
    raw = (last_event_id or "").strip()
    if raw in ("", "0", "-1"):
        return START
    match = _EVENT_ID.fullmatch(raw)
    if match is None:
        raise InvalidArgument("Last-Event-ID is not an event id of this stream")
    return int(match[1]), int(match[2] or 0)
