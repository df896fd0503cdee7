"""Counting what a redis.asyncio client sends as pipelines."""

from __future__ import annotations

from typing import Any


def count_pipelines(client: Any) -> list[int]:
    """From now on, the number of commands in each pipeline `client` executes, in order."""
    pipelines: list[int] = []
    real = client.pipeline

    def counted(*args: Any, **kw: Any) -> Any:
        pipe = real(*args, **kw)
        execute = pipe.execute

        async def execute_counted(*a: Any, **k: Any) -> Any:
            pipelines.append(len(pipe.command_stack))
            return await execute(*a, **k)

        pipe.execute = execute_counted
        return pipe

    client.pipeline = counted
    return pipelines
