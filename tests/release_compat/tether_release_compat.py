"""A pytest plugin for the PREVIOUS release's own test suite, loaded into it by this version's
compatibility check (`-p tether_release_compat`, tests/integration/test_release_compat.py): every
database the release's tests make is first migrated by THIS version's code, then prepared by the
release's own (its migrations are all applied already, so that only seeds). The release's tests
then run against the schema this version leaves, as its pods would during a rolling upgrade.

TETHER_COMPAT_MIGRATE: the command that migrates (a JSON list; the DSN is added as its last
argument). TETHER_COMPAT_LOG: a file each migration's output is appended to."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from typing import Any


def pytest_configure(config: Any) -> None:
    from tether_runtime import provision

    command = json.loads(os.environ["TETHER_COMPAT_MIGRATE"])
    log = os.environ["TETHER_COMPAT_LOG"]
    release_prepare = provision.prepare

    async def prepare(dsn: str, *args: Any, **kwargs: Any) -> Any:
        proc = await asyncio.create_subprocess_exec(
            *command, dsn, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        out, _ = await proc.communicate()
        with open(log, "ab") as f:
            f.write(out)
        if proc.returncode != 0:
            raise RuntimeError(f"this version's migrations failed:\n{out.decode()}")
        return await release_prepare(dsn, *args, **kwargs)

    provision.prepare = prepare
