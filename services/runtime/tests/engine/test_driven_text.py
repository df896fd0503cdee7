"""A driven (graph) agent's text on its host (engine/driven.py DrivenRun.text), without
processes: deltas are coalesced, but never across a change of the graph's message, node or
namespace; each text_delta carries where the graph says its text belongs; after a takeover the
text already streamed is skipped by length whatever message it belonged to."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tether_runtime.domain import events as ev
from tether_runtime.engine.driven import DrivenRun


class Host:
    """The fields of the engine's DrivenHost that text() and flush() use."""

    def __init__(self, resume_skip: int = 0) -> None:
        self.resume_skip = resume_skip
        self.coalesce_s = 3600.0  # nothing is flushed by time: only by a change or flush()
        self.checkpoint = SimpleNamespace(text="", message_id="msg_1")
        self.emitted: list[Any] = []

    async def emit(self, events: list[Any], streamed: int = 0) -> None:
        self.emitted.extend(events)

    async def stop_if_cancelled(self) -> None:
        return None


def said(host: Host) -> list[tuple[str, str, str, str, str]]:
    return [
        (d.message_id, d.delta, d.graph_message_id, d.graph_node, d.graph_namespace)
        for d in (e.text_delta for e in host.emitted if ev.kind_of(e) == "text_delta")
    ]


async def test_text_is_coalesced_per_graph_message_and_node() -> None:
    host = Host()
    run = DrivenRun(host)  # type: ignore[arg-type]
    for piece in ("I ", "will "):
        await run.text(piece, message_id="lc_1", node="model", namespace="model:a")
    await run.text("email.", message_id="lc_1", node="model", namespace="model:a")
    await run.text("Sent", message_id="lc_2", node="model", namespace="model:b")  # flushes
    await run.text(" it", message_id="lc_2", node="summary", namespace="summary:c")  # flushes
    await run.flush()
    assert said(host) == [
        ("msg_1", "I will email.", "lc_1", "model", "model:a"),
        ("msg_1", "Sent", "lc_2", "model", "model:b"),
        ("msg_1", " it", "lc_2", "summary", "summary:c"),
    ]
    assert host.checkpoint.text == "I will email.Sent it"


async def test_after_a_takeover_the_streamed_text_is_skipped_by_length() -> None:
    host = Host(resume_skip=5)
    run = DrivenRun(host)  # type: ignore[arg-type]
    await run.text("I will", message_id="lc_9", node="model")
    await run.text(" email.", message_id="lc_9", node="model")
    await run.flush()
    assert said(host) == [("msg_1", "l email.", "lc_9", "model", "")]


async def test_a_native_style_text_carries_no_graph_fields() -> None:
    host = Host()
    run = DrivenRun(host)  # type: ignore[arg-type]
    await run.text("plain")
    await run.flush()
    assert said(host) == [("msg_1", "plain", "", "", "")]
