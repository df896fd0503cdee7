"""A runtime served in the test process, in the tests' event loop, on a free port (port 0): for
tests that talk gRPC to a runtime and never kill it. Tests about a process (SIGKILL, restarts,
signals, logging and tracing set-up) start one with processes.start_runtime."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

# What the runtime and the agents it loads read from the process's environment rather than from
# Settings: set from the runtime's environment while it serves here, as a process would have them.
PROCESS_ENV = (
    "TETHER_ENV",
    "TETHER_SCRIPTED_DELAY_S",
    "TETHER_DEMO_TOOL_DELAY_S",
    "TETHER_FAULT_DROP_PUBLISH_EVERY",
    "OPSPILOT_DATABASE_URL",
)


@dataclass(frozen=True)
class InProcessRuntime:
    """Where it serves: `addr` as processes.Proc has it."""

    port: int

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextlib.asynccontextmanager
async def in_process_runtime(env: Mapping[str, str]) -> AsyncIterator[InProcessRuntime]:
    """A runtime configured by `env` (as start_runtime's), serving until the block ends."""
    from tether_common.config import Settings
    from tether_runtime.server import serve
    from tether_runtime.transport import server_credentials

    settings = Settings.from_env({**env, "TETHER_GRPC_ADDR": "127.0.0.1:0"})
    settings.check()
    saved = {k: os.environ.get(k) for k in PROCESS_ENV}
    for k in PROCESS_ENV:
        if k in env:
            os.environ[k] = env[k]
    try:
        serving = await serve(settings, server_credentials(settings))
        try:
            yield InProcessRuntime(serving.port)
        finally:
            await serving.stop()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
