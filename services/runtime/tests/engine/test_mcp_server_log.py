"""A server's log lines into the run's log (engine/mcp/server_log.py): the run's ids while one call
is in flight, none otherwise, masked, and a flood bounded with the dropped counted."""

from __future__ import annotations

import logging

import mcp_types
import pytest
from tether_runtime.engine.mcp.server_log import BURST, CallOf, ServerLog

CALL = CallOf("run_1", "conv_1", "send")
NAME = "tether_runtime.engine.mcp.server_log"


def _params(data: str, level: str = "info") -> mcp_types.LoggingMessageNotificationParams:
    return mcp_types.LoggingMessageNotificationParams(level=level, data=data)  # type: ignore[arg-type]


def test_a_line_is_the_runs_masked(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=NAME)
    ServerLog("web").line(_params("token sk-live-0123456789abcdef", "error"), [CALL])
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.run_id == "run_1" and record.conversation_id == "conv_1"  # type: ignore[attr-defined]
    assert record.mcp_server == "web" and record.tool == "send"  # type: ignore[attr-defined]
    assert "sk-live" not in record.getMessage() and "***" in record.getMessage()


def test_with_two_calls_in_flight_a_line_is_no_runs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=NAME)
    ServerLog("web").line(_params("hello"), [CALL, CallOf("run_2", "conv_2", "send")])
    (record,) = caplog.records
    assert not hasattr(record, "run_id")
    assert "2 calls in flight: not a run's" in record.getMessage()


def test_a_flood_is_bounded_and_the_dropped_counted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=NAME)
    log = ServerLog("web")
    sent = BURST * 4
    for i in range(sent):
        log.line(_params(f"line {i}"), [CALL])
    log.flush(CALL)  # the call ended
    kept = [r for r in caplog.records if " logged: " in r.getMessage()]
    counts = [
        int(r.getMessage().split(": ", 1)[1].split(" ", 1)[0])
        for r in caplog.records
        if "log lines dropped" in r.getMessage()
    ]
    assert BURST <= len(kept) < sent
    assert len(kept) + sum(counts) == sent
    assert all(r.run_id == "run_1" for r in caplog.records)  # type: ignore[attr-defined]
