"""A batch of a run's events on the wire: the bytes of a StreamRunEventsResponse, built from
events already encoded (the runtime's published and streamed batches), read back by whoever
follows them (a runtime's stream, a gateway's feed)."""

from __future__ import annotations

from collections.abc import Sequence

from tether.runtime.v1 import events_pb2, runtime_service_pb2


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def batch_from_encoded(encoded: Sequence[bytes]) -> bytes:
    """The bytes of a StreamRunEventsResponse whose `events` (field 1) are these encoded RunEvents,
    built by concatenation: no decode, no re-encode."""
    return b"".join(b"\x0a" + _varint(len(e)) + e for e in encoded)


def split_batch(data: bytes) -> list[events_pb2.RunEvent]:
    """The events of a batch's bytes."""
    return list(runtime_service_pb2.StreamRunEventsResponse.FromString(data).events)


def following(events: Sequence[events_pb2.RunEvent], last: int) -> list[events_pb2.RunEvent] | None:
    """The events of one published batch that follow `last`: empty when it brings nothing new (a
    publish repeated), None when it does not go on at `last + 1` (a publish before it was lost).
    A batch is one commit's events of one run, dense in itself."""
    fresh = [e for e in events if e.sequence > last]
    if fresh and fresh[0].sequence != last + 1:
        return None
    return fresh
