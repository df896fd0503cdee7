"""Watch the workers' shared statement: each call of the fenced append (event_log's
`append_as_lease_holders`, through the EventSink) is recorded with how many runs it carried, so a
test can tell that a write rode in the shared statement and did not take a transaction of its own."""

from __future__ import annotations

from typing import Any

import pytest
from tether_runtime.store import event_log
from tether_runtime.streams import event_sink


def count_shared_appends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The runs per fenced append, one entry per call, from now until the test ends."""
    shared: list[int] = []
    real = event_log.append_as_lease_holders

    async def counted(conn: Any, appends: Any) -> dict[str, bool]:
        shared.append(len(appends))
        return await real(conn, appends)

    monkeypatch.setattr(event_sink.event_log, "append_as_lease_holders", counted)
    return shared
