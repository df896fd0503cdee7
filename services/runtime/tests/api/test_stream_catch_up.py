"""How a live stream turns what Redis delivered meanwhile into messages (event_stream._live)."""

from __future__ import annotations

from tether_runtime.api.event_stream import _live
from tether_runtime.domain import events as ev


def batch(*seqs: int, done_at: int | None = None) -> bytes:
    out = []
    for s in seqs:
        e = ev.done("m") if s == done_at else ev.text_delta("m", f"d{s}")
        e.sequence = s
        out.append(e.SerializeToString())
    return ev.batch_from_encoded(out)


def sequences(pieces: list[bytes]) -> list[int]:
    return [e.sequence for e in ev.split_batch(b"".join(pieces))]


def test_batches_queued_meanwhile_go_out_as_one_message_as_published() -> None:
    a, b = batch(4, 5), batch(6, 7, 8)
    pieces, last, end, gap = _live([a, b], 3)
    assert pieces == [a, b]  # passed through untouched; joined they are one valid message
    assert sequences(pieces) == [4, 5, 6, 7, 8] and last == 8 and not end and not gap


def test_what_was_already_sent_is_dropped() -> None:
    pieces, last, _, gap = _live([batch(2, 3), batch(4, 5, 6)], 4)
    assert sequences(pieces) == [5, 6] and last == 6 and not gap


def test_a_gap_or_a_nudge_asks_for_postgres_after_what_was_sent() -> None:
    pieces, last, _, gap = _live([batch(4, 5), batch(7, 8), batch(9)], 3)
    assert sequences(pieces) == [4, 5] and last == 5 and gap
    pieces, last, _, gap = _live([batch(4), b"", batch(5)], 3)
    assert sequences(pieces) == [4] and last == 4 and gap


def test_the_terminal_event_ends_the_stream() -> None:
    pieces, last, end, gap = _live([batch(4, 5, done_at=5), batch(6)], 3)
    assert sequences(pieces) == [4, 5] and last == 5 and end and not gap
