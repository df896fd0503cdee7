"""The history checker (tether_testkit.history) fed bad histories: each kind of fault a chaos or
soak client could meet is caught and counted where the chaos table reads it; a good history
passes."""

from __future__ import annotations

from tether.runtime.v1 import events_pb2
from tether_testkit.history import History, Truth, check

RUN = "run-1"


def log(*kinds: str, run_id: str = RUN) -> list[events_pb2.RunEvent]:
    """A stored log: one event per kind, sequences 1..N ("interrupt:X" / "resolved:X" name it)."""
    out = []
    for i, kind in enumerate(kinds, start=1):
        ev = events_pb2.RunEvent(run_id=run_id, sequence=i)
        name, _, iid = kind.partition(":")
        if name == "started":
            ev.run_started.conversation_id = "c"
        elif name == "delta":
            ev.text_delta.delta = "x"
        elif name == "interrupt":
            ev.interrupt.interrupt_id = iid
        elif name == "resolved":
            ev.interrupt_resolved.interrupt_id = iid
        elif name == "done":
            ev.done.SetInParent()
        else:
            raise ValueError(kind)
        out.append(ev)
    return out


GOOD = ("started", "delta", "interrupt:i1", "resolved:i1", "delta", "done")


def follower(evs: list[events_pb2.RunEvent], *, name: str = "c1", skip: int = 0) -> History:
    """A client that followed the whole run (dropping the event `skip`), reconnecting once."""
    h = History(name)
    h.start(RUN, "k1")
    h.attach(RUN, 0)
    for e in evs[:3]:
        if e.sequence != skip:
            h.event(RUN, e.sequence, e.WhichOneof("event") or "")
    h.attach(RUN, 3)
    h.decision(RUN, "i1", "approve-i1", outcome="accepted")
    for e in evs[3:]:
        if e.sequence != skip:
            h.event(RUN, e.sequence, e.WhichOneof("event") or "")
    h.status(RUN, "queued")
    h.status(RUN, "interrupted")
    h.effect(RUN, "svc-1", 1)
    return h


def truth(evs: list[events_pb2.RunEvent], status: str = "completed") -> Truth:
    return Truth(logs={RUN: evs}, statuses={RUN: status})


def test_a_good_history_passes() -> None:
    evs = log(*GOOD)
    report = check([follower(evs)], truth(evs))
    assert report.ok, report.explain()
    assert (report.runs, report.events) == (1, 6)
    assert (report.lost, report.duplicated, report.double_exec, report.illegal) == (0, 0, 0, 0)


def test_a_gap_in_the_log_is_lost() -> None:
    evs = log(*GOOD)
    del evs[2]
    report = check([], truth(evs))
    assert report.kinds()["gap"] == 1 and report.lost == 1


def test_an_event_a_client_never_received_is_lost() -> None:
    evs = log(*GOOD)
    report = check([follower(evs, skip=5)], truth(evs))
    assert report.kinds()["lost"] == 1 and report.lost == 1


def test_a_reattach_past_what_was_received_is_caught() -> None:
    evs = log(*GOOD)
    h = History("c1")
    h.attach(RUN, 0)
    h.event(RUN, 1, "run_started")
    h.attach(RUN, 2)  # claims to have 2, never received it
    for e in evs[2:]:
        h.event(RUN, e.sequence, e.WhichOneof("event") or "")
    report = check([h], truth(evs))
    assert report.lost >= 1 and "lost" in report.kinds()


def test_a_duplicate_is_caught_in_the_log_and_in_a_view() -> None:
    evs = log(*GOOD)
    stored_twice = [*evs[:2], evs[1], *evs[2:]]
    assert check([], truth(stored_twice)).duplicated == 1
    h = follower(evs)
    h.event(RUN, 6, "done")  # the terminal event received again
    report = check([h], truth(evs))
    assert report.kinds()["duplicate"] == 1 and report.duplicated == 1


def test_an_event_after_done_is_caught() -> None:
    evs = log(*GOOD, "delta")
    report = check([], truth(evs))
    assert report.kinds()["after_terminal"] == 1 and report.duplicated == 1
    evs = log(*GOOD)
    h = follower(evs)
    h.event(RUN, 7, "text_delta")
    report = check([h], truth(evs))
    assert report.kinds()["after_terminal"] == 1


def test_an_event_the_log_does_not_hold_is_caught() -> None:
    evs = log(*GOOD)
    h = follower(evs)
    h.ops[2] = type(h.ops[2])(h.ops[2].at, "c1", "event", RUN, {"seq": 2, "type": "done"})
    report = check([h], truth(evs))
    assert report.kinds()["phantom"] == 1


def test_a_decision_applied_twice_is_a_double_execution() -> None:
    evs = log("started", "interrupt:i1", "resolved:i1", "resolved:i1", "done")
    report = check([], truth(evs))
    assert report.kinds()["decision_twice"] == 1 and report.double_exec == 1


def test_an_accepted_decision_the_log_never_applied_is_caught() -> None:
    evs = log("started", "interrupt:i1", "done")
    h = History("c1")
    h.decision(RUN, "i1", "k", outcome="accepted")
    assert check([h], truth(evs)).kinds()["decision_lost"] == 1


def test_a_double_effect_is_a_double_execution() -> None:
    evs = log(*GOOD)
    h = follower(evs)
    h.effect(RUN, "svc-1", 2)
    report = check([h], truth(evs))
    assert report.kinds()["double_effect"] == 1 and report.double_exec == 1


def test_an_illegal_transition_is_caught() -> None:
    evs = log(*GOOD)
    h = follower(evs)
    h.status(RUN, "completed")
    h.status(RUN, "running")  # out of a terminal status
    report = check([h], truth(evs))
    assert report.kinds()["illegal_transition"] >= 1 and report.illegal >= 1
    # The final status must be the one the log's terminal event leaves.
    report = check([follower(evs)], truth(evs, status="failed"))
    assert report.illegal == 1


def test_a_run_that_never_ended_is_caught_unless_allowed() -> None:
    evs = log("started", "delta")
    assert check([], truth(evs, status="running")).kinds()["unfinished"] == 1
    assert check([], truth(evs, status="running"), require_end=False).ok
