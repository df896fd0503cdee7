"""Ids sort by creation; `new_id_after` sorts after a given id even within one millisecond or
when the clock stepped back."""

from __future__ import annotations

import pytest
from tether_common import ids
from tether_common.ids import has_prefix, new_id, new_id_after


def test_new_id_after_sorts_after_in_the_same_millisecond(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_764_500_000_000_000_000)
    for _ in range(2_000):  # about half the plain ids of one millisecond sort before
        earlier = new_id("msg")
        later = new_id_after("msg", earlier)
        assert later > earlier and has_prefix(later, "msg") and len(later) == len(earlier)


def test_new_id_after_survives_a_clock_step_back(monkeypatch: pytest.MonkeyPatch) -> None:
    earlier = new_id("msg")
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_000_000_000_000_000_000)  # 2001
    later = new_id_after("msg", earlier)
    assert later > earlier and len(later) == len(earlier)
