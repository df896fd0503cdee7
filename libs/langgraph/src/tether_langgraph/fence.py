"""The run fence of a checkpoint write (DESIGN invariant 2): a write is made only while the run's
`lease_epoch` is still the writer's, checked under a share lock in the write's transaction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

RUN_ID_KEY = "tether_run_id"
EPOCH_KEY = "tether_epoch"


class LeaseLost(Exception):
    """The run's lease was taken over (its epoch moved on): this checkpoint write did nothing.
    The runtime's graph driver meets it as any lost lease (its `event_log.Fenced`): this package
    imports nothing of the runtime, so an agent package depends on it without the engine."""

    def __init__(self, run_id: str, epoch: int) -> None:
        super().__init__(run_id, epoch)
        self.run_id = run_id
        self.epoch = epoch

    def __str__(self) -> str:
        return (
            f"run {self.run_id}: lease epoch {self.epoch} is no longer the run's "
            "(taken over); the LangGraph checkpoint write was not made"
        )


@dataclass(frozen=True)
class RunFence:
    """Writes are conditional on `run.lease_epoch == epoch` for run `run_id`."""

    run_id: str
    epoch: int

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ValueError(f"{RUN_ID_KEY} must be a non-empty string, not {self.run_id!r}")
        if isinstance(self.epoch, bool) or not isinstance(self.epoch, int) or self.epoch < 0:
            raise ValueError(f"{EPOCH_KEY} must be a non-negative integer, not {self.epoch!r}")

    async def hold(self, conn: asyncpg.Connection) -> None:
        """Inside the write's transaction: lock the run row FOR SHARE if the epoch is still
        ours (a takeover's claim then waits for, or skips past, this commit), else raise
        LeaseLost. A run that no longer exists is lost too."""
        held = await conn.fetchval(
            "SELECT 1 FROM run WHERE id = $1 AND lease_epoch = $2 FOR SHARE",
            self.run_id,
            self.epoch,
        )
        if held is None:
            raise LeaseLost(self.run_id, self.epoch)


def fence_of(configurable: Mapping[str, Any] | None, default: RunFence | None) -> RunFence | None:
    """The fence a call's `configurable` names (both keys, or neither), else `default`."""
    if not configurable:
        return default
    run_id = configurable.get(RUN_ID_KEY)
    epoch = configurable.get(EPOCH_KEY)
    if run_id is None and epoch is None:
        return default
    if run_id is None or epoch is None:
        raise ValueError(f"a fenced checkpoint write needs both {RUN_ID_KEY} and {EPOCH_KEY}")
    return RunFence(run_id, epoch)
