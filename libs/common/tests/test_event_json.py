"""The browser JSON of events: the hand-written fast paths must say exactly what protobuf would."""

from __future__ import annotations

import json
import random

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from tether.runtime.v1 import events_pb2
from tether_common.event_json import sse_frame, timestamp_json

MAX_SECONDS = 253402300799  # 9999-12-31T23:59:59Z, protobuf's upper bound
MIN_SECONDS = -62135596800  # 0001-01-01T00:00:00Z


def test_timestamp_json_is_protobufs_to_json_string() -> None:
    rng = random.Random(7)
    checked = 0
    for _ in range(50_000):
        seconds = rng.choice(
            [rng.randint(MIN_SECONDS, MAX_SECONDS), 1_764_500_000 + rng.randint(0, 60), 0]
        )
        nanos = rng.choice(
            [
                0,
                rng.randint(0, 999) * 1_000_000,
                rng.randint(0, 999_999) * 1_000,
                rng.randint(0, 999_999_999),
            ]
        )
        ts = Timestamp(seconds=seconds, nanos=nanos)
        if seconds == 0 and nanos == 0:
            assert timestamp_json(ts) is None  # unset
            continue
        assert timestamp_json(ts) == ts.ToJsonString(), (seconds, nanos)
        checked += 1
    assert checked > 40_000
    for seconds in (MIN_SECONDS, MAX_SECONDS, -1, 1):
        ts = Timestamp(seconds=seconds, nanos=999_999_999)
        assert timestamp_json(ts) == ts.ToJsonString()


@pytest.mark.parametrize(
    "text", ["line\nbreak", "cr\rlf\r\n", "sep\u2028para\u2029", "nul\x00", "tab\t", "é😀"]
)
def test_frame_data_is_one_line_and_round_trips(text: str) -> None:
    ev = events_pb2.RunEvent(
        run_id="run_1", sequence=3, text_delta=events_pb2.TextDelta(delta=text)
    )
    ev.time.FromNanoseconds(1_764_500_000_123_456_789)
    frame = sse_frame(ev)
    head, _, rest = frame.partition(b"data: ")
    assert head == b"id: 3\nevent: text_delta\n"
    data, sep, tail = rest.partition(b"\n")
    assert sep and tail == b"\n"  # exactly one data line, then the blank line
    assert b"\r" not in data
    body = json.loads(data)
    assert body["delta"] == text and body["time"] == ev.time.ToJsonString()
