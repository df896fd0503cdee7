"""A driven agent's tool announcements on its host (engine/driven.py), without processes: each
call id's tool_started and tool_finished once, sent with the checkpoint that records it (the
node's end commits them); a finish the engine announces for a call a person settled is
committed before the graph gets the result, since the graph will not call the tool again."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tether_runtime.domain import events as ev
from tether_runtime.engine.driven import DrivenRun
from tether_runtime.engine.write_call import Write


class Host:
    """The fields of the engine's DrivenHost that the announcements use."""

    def __init__(self) -> None:
        self.resume_skip = 0
        self.coalesce_s = 3600.0
        self.checkpoint = SimpleNamespace(text="", message_id="msg_1", driver={})
        self.sent: list[tuple[list[str], Any]] = []
        self.committed: list[tuple[list[str], Any]] = []

    def save(self) -> dict[str, Any]:
        return {k: list(v) for k, v in self.checkpoint.driver.items()}

    def send(self, events: list[Any], apply: Any) -> None:
        self.sent.append(([ev.kind_of(e) for e in events], apply))

    async def commit(self, events: list[Any], apply: Any = None) -> None:
        self.committed.append(([ev.kind_of(e) for e in events], apply))

    async def emit(self, events: list[Any], streamed: int = 0) -> None:
        raise AssertionError("no text was pending")

    async def stop_if_cancelled(self) -> None:
        return None


async def _never(key: str, approver: str | None, attempt: int) -> dict[str, Any]:
    raise AssertionError("not called")


def _write(call_id: str) -> Write:
    return Write(call_id, "send_email", {}, "mail.send", "bob", "high", "to bob", _never)


async def test_each_announcement_once_sent_with_the_checkpoint_that_records_it() -> None:
    host = Host()
    run = DrivenRun(host)  # type: ignore[arg-type]
    for _ in range(2):  # the graph re-emits its update: announced once
        await run.tool_started("c1", "lookup", {"q": "x"})
        await run.tool_finished("c1", "lookup", True, "found")
    assert host.committed == []
    assert host.sent == [
        (["tool_started"], {"started": ["c1"]}),
        (["tool_finished"], {"started": ["c1"], "finished": ["c1"]}),
    ]


async def test_a_finish_settled_by_a_person_is_committed_before_the_graph_goes_on() -> None:
    host = Host()
    run = DrivenRun(host)  # type: ignore[arg-type]
    body = {"ok": True, "summary": "marked done"}
    await run._announce_finish(_write("c9"), body)  # never started: nothing to finish
    assert host.committed == [] and host.sent == []
    await run.tool_started("c9", "send_email", {})
    for _ in range(2):
        await run._announce_finish(_write("c9"), body)
    assert host.committed == [(["tool_finished"], {"started": ["c9"], "finished": ["c9"]})]
    assert host.sent == [(["tool_started"], {"started": ["c9"]})]
