"""One row of `tether conformance`: a write tool, one of its example argument sets and one kill
point. A runtime rigged by TETHER_CONFORMANCE_PLAN (tether_runtime/engine/conformance.py) drives a run to
the tool; the case approves the card, waits until the call holds at the kill point, SIGKILLs the
runtime, starts a fresh one that takes the run over, answers an `outcome_unknown` if one is
raised, and records what happened: the journal of calls, the run's events, the call's status."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tether.runtime.v1 import events_pb2, runtime_service_pb2_grpc
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_common.auth import issue_token
from tether_proto import wire

from tether_cli import forkserver

USER = "conformance"
# An outcome_unknown interrupt's answers.
DECISIONS = {a: wire.ANSWERS[a] for a in ("retry", "mark_done", "abandon")}
TERMINAL = wire.TERMINAL_RUN_STATUSES
EffectsProbe = Callable[[str, str], Awaitable[int]]
"""(case database DSN, idempotency key) -> effects the external system holds for the key."""


class CaseError(Exception):
    """The case could not reach the point it checks; the message says where it stopped."""


@dataclass
class Observed:
    """What one case saw; conformance.py judges it."""

    key: str = ""
    journal: list[dict[str, Any]] = field(default_factory=list)
    killed_pid: int = 0
    unknown_at: int = -1
    """Journal length when the outcome_unknown interrupt was seen (-1: none was raised)."""
    answer: str = ""
    run_status: str = ""
    last_event: str = ""
    sequences: list[int] = field(default_factory=list)
    call_status: str = ""
    outcome: str = ""
    """What the model was told: ok, error, marked_done, abandoned, ..."""
    effects: int | None = None


@dataclass(frozen=True)
class Stores:
    base_env: dict[str, str]
    """The environment every rigged runtime starts from (agents, timings, secret)."""
    workdir: Path


class Runtime:
    """One `python -m tether_runtime` on a free port, its output in a log file."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.addr = f"127.0.0.1:{s.getsockname()[1]}"
        self.log_path = log_path
        # Forked from a warm parent: a case starts two runtimes, a cold start costs seconds of
        # CPU in imports, and what is tested (a kill, a takeover) is the same in a forked one.
        self.popen = forkserver.spawn(
            "tether_runtime", [], {**env, "TETHER_GRPC_ADDR": self.addr}, log_path
        )

    async def ready(self, within: float = 60) -> None:
        deadline = time.monotonic() + within
        async with grpc.aio.insecure_channel(self.addr) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while time.monotonic() < deadline:
                if self.popen.poll() is not None:
                    raise CaseError(
                        f"the runtime exited with {self.popen.returncode}: {self.tail()}"
                    )
                try:
                    r = await stub.Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                    if r.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(0.05)
        self.kill()
        raise CaseError(f"the runtime was not serving within {within:g} s: {self.tail()}")

    def kill(self) -> None:
        """SIGKILL: no drain, no lease release, nothing flushed: a crash."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def read_journal(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def _until(what: str, check: Callable[[], Awaitable[Any]], within: float = 60) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise CaseError(f"timed out after {within:g} s waiting for {what}")


@dataclass
class Case:
    """One case, prepared ahead (its database copied, its two runtimes starting) so that process
    start-up overlaps the case before it."""

    name: str
    dsn: str
    agent: str
    tool: str
    args: dict[str, Any]
    point: str
    answer: str
    """Given if the run raises outcome_unknown."""
    journal: Path
    runtimes: list[Runtime]


def prepare(
    stores: Stores,
    dsn: str,
    agent: str,
    tool: str,
    args: dict[str, Any],
    point: str,
    answer: str,
    name: str,
) -> Case:
    """Two rigged runtimes on the case's database with the same plan: whichever executes the
    call holds at `point` (the journal records its pid) and is killed; the other takes over."""
    journal = stores.workdir / f"{name}.jsonl"
    plan = {"agent": agent, "tool": tool, "args": args, "journal": str(journal), "hold": point}
    env = {**stores.base_env, "DATABASE_URL": dsn, "TETHER_CONFORMANCE_PLAN": json.dumps(plan)}
    runtimes = [Runtime(env, stores.workdir / f"{name}-{i}.log") for i in (1, 2)]
    return Case(name, dsn, agent, tool, args, point, answer, journal, runtimes)


async def run_case(case: Case, secret: str, probe: EffectsProbe | None) -> Observed:
    """Drive the case's run through one kill and observe it."""
    md = (("authorization", f"Bearer {issue_token(secret, USER)}"),)
    seen = Observed()
    db = await asyncpg.connect(case.dsn)
    try:
        for rt in case.runtimes:
            await rt.ready()
        async with grpc.aio.insecure_channel(case.runtimes[0].addr) as ch:
            stub = runtime_service_pb2_grpc.RuntimeServiceStub(ch)  # type: ignore[no-untyped-call]
            conv = await stub.CreateConversation(
                pb.CreateConversationRequest(title=f"conformance {case.name}"),
                metadata=md,
                timeout=10,
            )
            started = await stub.StartRun(
                pb.StartRunRequest(
                    conversation_id=conv.conversation.id,
                    text=f"conformance: call {case.tool} with {json.dumps(case.args)}",
                    agent=case.agent,
                ),
                metadata=md,
                timeout=10,
            )
            run_id = started.run.id
            card = await _until("the confirmation card", lambda: _card_or_end(db, run_id))
            if card == "ended":
                raise CaseError(f"no confirmation card was raised; {await _story(db, run_id)}")
            await stub.ResumeRun(
                pb.ResumeRunRequest(
                    run_id=run_id,
                    interrupt_id=card,
                    decision=events_pb2.DECISION_APPROVED,
                    idempotency_key=f"conformance-approve-{case.name}",
                ),
                metadata=md,
                timeout=10,
            )
        mark = "returning" if case.point == "after" else "holding"
        where = await _until(
            f"the call to hold {case.point} the tool function",
            lambda: _held_or_end(db, run_id, case.journal, mark),
        )
        if where == "ended":
            raise CaseError(f"the tool was never called; {await _story(db, run_id)}")
        pid = next(e["pid"] for e in read_journal(case.journal) if e["event"] == mark)
        holder = next(rt for rt in case.runtimes if rt.popen.pid == pid)
        survivor = next(rt for rt in case.runtimes if rt is not holder)
        seen.killed_pid = pid
        if case.point == "after":
            await _kill_while_committing(db, case.dsn, run_id, case.journal, holder)
        else:
            holder.kill()
        state = await _until("the run to end or ask a person", lambda: _settled(db, run_id))
        if state != "ended":
            seen.unknown_at = len(read_journal(case.journal))
            seen.answer = case.answer
            async with grpc.aio.insecure_channel(survivor.addr) as ch:
                stub = runtime_service_pb2_grpc.RuntimeServiceStub(ch)  # type: ignore[no-untyped-call]
                await stub.ResumeRun(
                    pb.ResumeRunRequest(
                        run_id=run_id,
                        interrupt_id=state,
                        decision=DECISIONS[case.answer],
                        idempotency_key=f"conformance-answer-{case.name}",
                    ),
                    metadata=md,
                    timeout=10,
                )
            await _until("the run to end after the answer", lambda: _ended(db, run_id))
        survivor.stop()
        await _observe(db, run_id, seen)
        seen.journal = read_journal(case.journal)
        if probe is not None and seen.key:
            seen.effects = await probe(case.dsn, seen.key)
        return seen
    except CaseError as err:
        logs = ", ".join(str(rt.log_path) for rt in case.runtimes)
        raise CaseError(f"{err} (runtime logs: {logs})") from None
    finally:
        for rt in case.runtimes:
            rt.kill()
        await db.close()


async def _card_or_end(db: asyncpg.Connection, run_id: str) -> str | None:
    # The status first: the card and the `interrupted` status commit together, so a run seen
    # interrupted already has its interrupt row.
    status = await db.fetchval("SELECT status FROM run WHERE id = $1", run_id)
    if status not in (*TERMINAL, "interrupted"):
        return None
    intr = await db.fetchval(
        "SELECT id FROM interrupt WHERE run_id = $1 AND status = 'pending' "
        "AND kind = 'confirm_action'",
        run_id,
    )
    return str(intr) if intr else "ended"


async def _held_or_end(db: asyncpg.Connection, run_id: str, journal: Path, mark: str) -> str | None:
    if any(e["event"] == mark for e in read_journal(journal)):
        return "held"
    status = await db.fetchval("SELECT status FROM run WHERE id = $1", run_id)
    return "ended" if status in (*TERMINAL, "interrupted") else None


async def _settled(db: asyncpg.Connection, run_id: str) -> str | None:
    """'ended', the id of a pending outcome_unknown interrupt, or None (still working)."""
    if await _ended(db, run_id):
        return "ended"
    intr = await db.fetchrow(
        "SELECT id, kind FROM interrupt WHERE run_id = $1 AND status = 'pending'", run_id
    )
    if intr is None:
        return None
    if intr["kind"] != "outcome_unknown":
        raise CaseError(f"after the takeover the run asked a person: {intr['kind']}")
    return str(intr["id"])


async def _ended(db: asyncpg.Connection, run_id: str) -> bool:
    return await db.fetchval("SELECT status FROM run WHERE id = $1", run_id) in TERMINAL


async def _story(db: asyncpg.Connection, run_id: str) -> str:
    """How a run ended, for a person: its status, its call's status and result."""
    status = await db.fetchval("SELECT status FROM run WHERE id = $1", run_id)
    call = await db.fetchrow(
        "SELECT status, result_summary FROM tool_call WHERE run_id = $1", run_id
    )
    said = f"call {call['status']}: {call['result_summary'] or ''}" if call else "no call"
    text = await db.fetchval("SELECT checkpoint::text FROM run WHERE id = $1", run_id)
    told = ""
    for m in json.loads(text or "{}").get("messages", []):
        if m.get("role") == "tool":
            told = json.loads(m["content"]).get("summary", "")
    return f"the run is {status} ({said}{'; the model was told: ' + told if told else ''})"


async def _kill_while_committing(
    db: asyncpg.Connection, dsn: str, run_id: str, journal: Path, runtime: Runtime
) -> None:
    """The tool has returned; hold its tool_call row so the engine's commit of the result
    blocks, let the engine reach it, and kill the runtime there. The dead client never sends
    COMMIT, so the result is lost exactly as in a crash between return and commit."""
    lock = await asyncpg.connect(dsn)
    try:
        tx = lock.transaction()
        await tx.start()
        await lock.execute("SELECT 1 FROM tool_call WHERE run_id = $1 FOR UPDATE", run_id)
        await asyncio.to_thread(Path(str(journal) + ".go").touch)
        await _until(
            "the engine to commit the result",
            lambda: db.fetchval(
                "SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> $1",
                lock.get_server_pid(),
            ),
            within=30,
        )
        runtime.kill()
        await tx.rollback()
    finally:
        await lock.close()


async def _observe(db: asyncpg.Connection, run_id: str, seen: Observed) -> None:
    seen.run_status = await db.fetchval("SELECT status FROM run WHERE id = $1", run_id)
    rows = await db.fetch(
        "SELECT sequence, type FROM run_event WHERE run_id = $1 ORDER BY sequence", run_id
    )
    seen.sequences = [r["sequence"] for r in rows]
    seen.last_event = rows[-1]["type"] if rows else ""
    call = await db.fetchrow(
        "SELECT status, idempotency_key, result FROM tool_call WHERE run_id = $1", run_id
    )
    if call is not None:
        seen.key = call["idempotency_key"]
        seen.call_status = call["status"]
        result = call["result"]
        body = json.loads(result) if isinstance(result, str) else (result or {})
        seen.outcome = str(body.get("outcome", ""))
    if seen.call_status == "rejected" or not seen.outcome:
        # A call a person abandoned has no stored result; the model's message says what it was told.
        text = await db.fetchval("SELECT checkpoint::text FROM run WHERE id = $1", run_id)
        for m in json.loads(text or "{}").get("messages", []):
            if m.get("role") == "tool":
                seen.outcome = str(json.loads(m["content"]).get("outcome", ""))


def scrub(env: dict[str, str]) -> dict[str, str]:
    """The caller's environment minus what would make rigged runtimes collide with real ones."""
    out = dict(env)
    for name in ("TETHER_METRICS_ADDR", "TETHER_GRPC_ADDR", "TETHER_CONFORMANCE_PLAN"):
        out.pop(name, None)
    return out
