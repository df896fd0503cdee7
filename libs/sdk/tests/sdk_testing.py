"""Helpers for the SDK's unit tests."""

from __future__ import annotations

import logging
import time

from tether_sdk import ToolContext


def make_ctx() -> ToolContext:
    """A tool context as the engine would pass, for calling a tool directly."""
    return ToolContext(
        run_id="run_1",
        conversation_id="conv_1",
        requester="alice",
        approver=None,
        idempotency_key="run_1:call_1",
        deadline=time.time() + 10,
        logger=logging.getLogger("test"),
    )
