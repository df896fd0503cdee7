"""The checkpoint's stored form: encoded without asdict's deep copy, field for field the same, and
read back whole."""

from __future__ import annotations

import json
from dataclasses import asdict

from tether_runtime.engine.checkpoint import Checkpoint, PendingCall


def test_the_shallow_encoding_equals_the_dataclass_form_and_reads_back() -> None:
    cp = Checkpoint(
        "msg_1",
        [{"role": "user", "content": "restart it"}, {"role": "tool", "content": "{}"}],
        [PendingCall("call_1_0", "restart_instance", {"id": "i-1"}, "intr_1", "")],
        "text so far",
        2,
        1.5,
        True,
        30,
        7,
        [[20, 4], [10, 3]],
        False,
        {"announced": ["call_1_0"]},
    )
    stored = json.loads(cp.to_json())
    assert stored == {"v": 2, **asdict(cp)}
    again = Checkpoint.from_json(stored)
    assert again == cp
    # Encoding shares, never changes, the live transcript.
    assert cp.messages[0] == {"role": "user", "content": "restart it"}
    assert isinstance(cp.pending[0], PendingCall)
