"""A LangGraph resume (`command={"resume": value}`) as a Tether answer to the run's pending
interrupt, by the interrupt's kind (tether_langgraph's convention: a confirmation returns True or
False, a choice its value, a form its object), and the idempotency key that makes a doubled
resume one answer."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from tether.runtime.v1 import events_pb2, resources_pb2
from tether_common.errors import InvalidArgument

_YES = (True, "approve", "approved", "yes", "accept")
_NO = (False, "reject", "rejected", "no", "deny")
_OUTCOME = {
    "retry": events_pb2.DECISION_RETRY,
    "mark_done": events_pb2.DECISION_MARK_DONE,
    "abandon": events_pb2.DECISION_ABANDON,
}


@dataclass(frozen=True)
class Answer:
    decision: int
    input: str = ""
    value_json: str = ""  # a graph interrupt's exact resume value


def answer(interrupt: resources_pb2.Interrupt, value: Any) -> Answer:
    kind = interrupt.kind
    if interrupt.payload.value_json:
        # A graph's own interrupt: `interrupt()` returns exactly the value resumed with. A
        # confirmation's True / False stay approve / reject, which the runtime checks the
        # approver's grant for.
        if kind == resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION and isinstance(value, bool):
            return Answer(events_pb2.DECISION_APPROVED if value else events_pb2.DECISION_REJECTED)
        return Answer(events_pb2.DECISION_RESPONDED, value_json=_compact(value))
    if kind == resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION:
        if isinstance(value, dict):
            value = value.get("approved", value.get("decision", value.get("type")))
        if value in _YES and value is not False:
            return Answer(events_pb2.DECISION_APPROVED)
        if value in _NO and value is not True:
            return Answer(events_pb2.DECISION_REJECTED)
        raise InvalidArgument("this interrupt is a confirmation: resume with true or false")
    if kind == resources_pb2.INTERRUPT_KIND_SELECT_OPTION:
        if not isinstance(value, str):
            raise InvalidArgument("this interrupt is a choice: resume with an option's value")
        return Answer(events_pb2.DECISION_RESPONDED, value)
    if kind == resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN:
        if value not in _OUTCOME:
            raise InvalidArgument("resume with retry, mark_done or abandon")
        return Answer(_OUTCOME[value])
    if isinstance(value, str):
        value = {"text": value}
    if not isinstance(value, dict):
        raise InvalidArgument("this interrupt is a form: resume with an object or a text")
    return Answer(events_pb2.DECISION_RESPONDED, _compact(value))


def _compact(value: Any) -> str:
    try:
        return json.dumps(
            value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
        )
    except ValueError as err:
        raise InvalidArgument("the resume value is not plain JSON") from err


def idempotency_key(thread_id: str, interrupt_id: str, value: Any) -> str:
    """The same resume of the same interrupt is the same key: retried or doubled, one answer
    (the runtime returns the first); another value is another key, which the runtime's claim
    on the interrupt refuses (409)."""
    digest = hashlib.sha256(f"{thread_id}\0{interrupt_id}\0{_compact(value)}".encode()).hexdigest()
    return f"lg-resume:{digest[:48]}"
