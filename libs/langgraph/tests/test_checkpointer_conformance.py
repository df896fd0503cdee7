"""LangGraph's own conformance suite for checkpointers (langgraph-checkpoint-conformance), every
capability, against TetherCheckpointer on a fresh, migrated database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import Capability
from tether_langgraph.checkpointer import TetherCheckpointer


@pytest.mark.parametrize("capability", [c.value for c in Capability])
async def test_conformance(pool: asyncpg.Pool, capability: str) -> None:
    async def saver() -> AsyncIterator[TetherCheckpointer]:
        yield TetherCheckpointer(pool)

    registered = checkpointer_test(name="TetherCheckpointer")(saver)
    report = await validate(registered, capabilities={capability})
    result = report.results[capability]
    assert result.detected, f"{capability}: not implemented by TetherCheckpointer"
    assert result.passed, f"{capability}: {result.tests_failed} failed: {result.failures}"
    assert result.tests_passed > 0 and result.tests_failed == 0
