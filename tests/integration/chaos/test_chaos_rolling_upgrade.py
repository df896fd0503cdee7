"""A rolling upgrade with runs in flight (issue #33; README, "Upgrading"): a fleet of the previous
release (deploy/previous-release, built from its SHA by tether_testkit.releases: two runtimes, two
gateways, one database its own `tether migrate` made) carries runs in every state: streaming,
waiting at approval cards, inside a slow write tool. This version's `tether migrate` expands the
schema while they run; then the pods roll one by one (SIGTERM the old, start the new on its
address), versions mixed, cards approved on old and on new gateways, a new runtime stopped once
while an old one still runs (so an old pod takes over what a new one wrote). Every run must
complete, every card be decided once, no write run twice (the inventory's restart counter), and
every SSE client (reconnecting to either gateway with Last-Event-ID) end with exactly the stored
log. Which version held each run's lease, in turn, is sampled: runs must have passed both ways."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import secrets
import subprocess
import time
from dataclasses import dataclass, field

import aiohttp
import asyncpg
import pytest
from tether_testkit import releases, stores
from tether_testkit.history import History
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.processes import Proc, start_gateway, start_runtime, tether_cli

from chaos.kit import (
    CHAOS_ENV,
    TERMINAL_STATUSES,
    Procs,
    SseResult,
    check_histories,
    check_log,
    compare,
    expected_frames,
    follow_sse,
    http_approve,
    http_new_run,
    http_session,
    is_terminal,
    run_statuses,
    size,
    stored_events,
    wait_for,
)

# In `make chaos` (170 runs in flight). `make test` runs the rule it proves instead: the previous
# release's own tests on this schema (test_release_compat.py).
pytestmark = [
    pytest.mark.chaos,
    pytest.mark.chaos_full,
    pytest.mark.slow,
    pytest.mark.timeout(size(600, 1200)),
]

PER_KIND = size(18, 50)  # streaming, waiting at a card, inside a write tool: 3 x PER_KIND runs
LATE_RUNS = size(6, 20)  # started on a new gateway while the versions are mixed
STREAM_N = size(500, 1500)
DEADLINE_S = size(240, 600)
ENV = {
    **CHAOS_ENV,
    "TETHER_ENV": "dev",
    "TETHER_DEFAULT_AGENT": "opspilot",
    "TETHER_SCRIPTED_DELAY_S": "0.02",
    "TETHER_DEMO_TOOL_DELAY_S": "3",
    "TETHER_LEASE_TTL_S": "3",
    "TETHER_POLL_INTERVAL_S": "0.5",
    "TETHER_STREAM_QUIET_CHECK_S": "0.5",
    "TETHER_DRAIN_S": "4",
    "TETHER_SSE_HEARTBEAT_S": "2",
}


@dataclass
class Fleet:
    """Two runtime slots and two gateway slots, each on a fixed address; a slot's process is of
    the old or the new version. Which version each process is, by pid, for the lease sampler."""

    release: releases.Release
    env: dict[str, str]
    procs: Procs
    rt_addrs: list[str] = field(default_factory=list)
    gw_ports: list[int] = field(default_factory=list)
    runtimes: list[Proc | None] = field(default_factory=lambda: [None, None])
    gateways: list[Proc | None] = field(default_factory=lambda: [None, None])
    version_of: dict[int, str] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)
    exits: list[tuple[str, int]] = field(default_factory=list)

    @property
    def target(self) -> str:
        return "ipv4:" + ",".join(self.rt_addrs)

    def gw(self, i: int) -> str:
        return f"http://127.0.0.1:{self.gw_ports[i]}"

    async def start_runtime(self, i: int, version: str) -> None:
        rel = self.release if version == "old" else None
        p = await asyncio.to_thread(
            start_runtime, self.env, name=f"upgrade-rt{i}-{version}", addr=self.rt_addrs[i],
            release=rel, timeout=90,
        )  # fmt: skip
        self.procs.add(p)
        self.runtimes[i] = p
        self.version_of[p.pid] = version

    async def start_gateway(self, i: int, version: str) -> None:
        rel = self.release if version == "old" else None
        p = await asyncio.to_thread(
            start_gateway, self.env, self.target, name=f"upgrade-gw{i}-{version}",
            port=self.gw_ports[i], release=rel, timeout=90,
        )  # fmt: skip
        self.procs.add(p)
        self.gateways[i] = p

    async def stop(self, kind: str, i: int) -> None:
        """SIGTERM, as a rollout does: the pod drains, then exits."""
        p = (self.runtimes if kind == "rt" else self.gateways)[i]
        assert p is not None
        code = await asyncio.to_thread(p.terminate, 60)
        self.exits.append((p.name, code))

    async def roll(self, kind: str, i: int, version: str) -> None:
        began = time.monotonic()
        await self.stop(kind, i)
        if kind == "rt":
            await self.start_runtime(i, version)
        else:
            await self.start_gateway(i, version)
        self.steps.append(f"{kind}{i} -> {version} ({time.monotonic() - began:.1f}s)")


class LeaseSampler:
    """Which version held each run's lease, in the order they held it (sampled every 0.1 s)."""

    def __init__(self, db: asyncpg.Pool, fleet: Fleet, run_ids: list[str]) -> None:
        self.db, self.fleet, self.run_ids = db, fleet, run_ids
        self.holders: dict[str, list[str]] = {}

    async def sample_forever(self) -> None:
        while True:
            rows = await self.db.fetch(
                "SELECT id, lease_owner FROM run WHERE id = ANY($1::text[]) AND status = 'running'"
                " AND lease_owner IS NOT NULL",
                self.run_ids,
            )
            for r in rows:
                parts = (r["lease_owner"] or "").split(":")
                if len(parts) < 2 or not parts[1].isdigit():
                    continue
                version = self.fleet.version_of.get(int(parts[1]))
                if version is None:
                    continue
                seen = self.holders.setdefault(r["id"], [])
                if not seen or seen[-1] != version:
                    seen.append(version)
            await asyncio.sleep(0.1)

    def passed(self, a: str, b: str) -> int:
        return sum(
            1
            for seen in self.holders.values()
            if any(x == a and y == b for x, y in itertools.pairwise(seen))
        )

    async def held_by(self, pid: int) -> int:
        return int(
            await self.db.fetchval(
                "SELECT count(*) FROM run WHERE id = ANY($1::text[]) AND status = 'running'"
                " AND lease_owner LIKE $2",
                self.run_ids,
                f"%:{pid}:%",
            )
        )


async def _old_database(admin_dsn: str, release: releases.Release) -> str:
    """A database migrated and seeded by the previous release's own commands."""
    name = "tether_upgrade_" + secrets.token_hex(5)
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    dsn = stores.with_database(admin_dsn, name)
    for verb in ("migrate", "seed-demo"):
        done = await asyncio.to_thread(
            subprocess.run,
            [release.python, "-m", "tether_cli.main", verb],
            env=release.env(DATABASE_URL=dsn, TETHER_ENV="dev"),
            cwd=release.src, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, f"{release.name} tether {verb}: {done.stderr}"
    return dsn


async def _pending(db: asyncpg.Pool, run_ids: list[str]) -> dict[str, str]:
    rows = await db.fetch(
        "SELECT id, run_id FROM interrupt WHERE status = 'pending' AND run_id = ANY($1::text[])",
        run_ids,
    )
    return {r["run_id"]: r["id"] for r in rows}


async def _approve(
    http: aiohttp.ClientSession, base: str, run_id: str, interrupt_id: str, record: History
) -> str:
    """Approve through one gateway, retrying (with the same key) while that pod is replaced; each
    decision sent goes into `record` (the history checker sees each applied once)."""
    key = f"upgrade-{interrupt_id}"
    for _ in range(60):
        status = 0
        with contextlib.suppress(aiohttp.ClientError, OSError):
            status = await http_approve(http, base, run_id, interrupt_id, key)
        outcome = {202: "accepted", 409: "resolved"}.get(status, "error")
        record.decision(run_id, interrupt_id, key, outcome=outcome)
        if status in (202, 409):
            return base
        await asyncio.sleep(0.5)
    raise AssertionError(f"approval of {interrupt_id} on {base} never answered")


async def test_rolling_upgrade_from_the_previous_release_with_runs_in_flight(
    admin_dsn: str, redis_url: str, procs: Procs, chaos_table
) -> None:
    release = await asyncio.to_thread(releases.build_previous)
    dsn = await _old_database(admin_dsn, release)
    db = await asyncpg.create_pool(dsn, min_size=1, max_size=6)
    try:
        await _scenario(release, dsn, redis_url, db, procs, chaos_table)
    finally:
        await db.close()
        procs.cleanup()
        await stores.drop_database(admin_dsn, dsn)


async def _scenario(  # type: ignore[no-untyped-def]
    release: releases.Release,
    dsn: str,
    redis_url: str,
    db: asyncpg.Pool,
    procs: Procs,
    chaos_table,
) -> None:
    from tether_testkit.processes import free_port
    from tether_testkit.secrets import TEST_SECRET

    env = {**ENV, "DATABASE_URL": dsn, "REDIS_URL": redis_url, "TETHER_JWT_SECRET": TEST_SECRET}
    fleet = Fleet(release, env, procs)
    fleet.rt_addrs = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    fleet.gw_ports = [free_port() for _ in range(2)]
    began = time.monotonic()
    await asyncio.gather(fleet.start_runtime(0, "old"), fleet.start_runtime(1, "old"))
    await asyncio.gather(fleet.start_gateway(0, "old"), fleet.start_gateway(1, "old"))

    kinds: dict[str, str] = {}  # run id -> stream | card | write | late
    targets: dict[str, str] = {}  # run id -> the instance it restarts
    results: dict[str, SseResult] = {}
    followers: list[asyncio.Task[SseResult]] = []
    histories: list[History] = []  # one per SSE client, and one for the approvals
    approvals_record = History("approver")
    async with http_session() as http:

        def follow(run_id: str) -> None:
            res = results[run_id] = SseResult(run_id)
            first = len(results) % 2
            record = History(f"sse-{run_id}")
            histories.append(record)
            followers.append(
                asyncio.create_task(
                    follow_sse(
                        http,
                        lambda attempt: fleet.gw((first + attempt) % 2),
                        run_id,
                        deadline_s=DEADLINE_S,
                        max_reconnects=200,
                        result=res,
                        record=record,
                    )  # fmt: skip
                )
            )

        # -- runs in every state on the old fleet ------------------------------------------
        for i in range(3 * PER_KIND):
            kind = ("stream", "card", "write")[i % 3]
            if kind == "stream":
                text = f"stream {STREAM_N} deltas"
            else:
                service, instance = await abnormal_service(db, prefix="upg")
                text = f"restart the abnormal {service} instance"
            run_id = await http_new_run(http, fleet.gw(i % 2), text)
            kinds[run_id] = kind
            if kind != "stream":
                targets[run_id] = instance
            follow(run_id)
        carded = [r for r, k in kinds.items() if k in ("card", "write")]
        await wait_for(
            "every card and write run at its card",
            lambda: _all_pending(db, carded),
            timeout=120,
        )
        statuses = await run_statuses(db, list(kinds))
        in_flight = {
            "streaming": sum(
                1 for r, k in kinds.items() if k == "stream" and statuses[r] == "running"
            ),
            "at a card": len(await _pending(db, list(kinds))),
        }
        sampler = LeaseSampler(db, fleet, list(kinds))
        sampling = asyncio.create_task(sampler.sample_forever())
        approvals: dict[str, int] = {"old": 0, "new": 0}
        gw_version = ["old", "old"]

        async def approve_group(run_ids: list[str], gw_slots: list[int]) -> None:
            pending = await _pending(db, run_ids)
            jobs = []
            for n, run_id in enumerate(run_ids):
                slot = gw_slots[n % len(gw_slots)]
                approvals[gw_version[slot]] += 1
                jobs.append(
                    _approve(http, fleet.gw(slot), run_id, pending[run_id], approvals_record)
                )
            await asyncio.gather(*jobs)

        try:
            # -- expand: this version's migrations, the old pods running ---------------------
            migrated = await asyncio.to_thread(
                tether_cli, "migrate", env={"DATABASE_URL": dsn, "TETHER_ENV": "dev"}
            )
            assert migrated.returncode == 0, migrated.stderr
            new_schema = sorted(
                r["name"]
                for r in await db.fetch("SELECT name FROM schema_migration WHERE version > 20")
            )
            assert new_schema, "the upgrade applied no migration: the release is not older"
            fleet.steps.append(f"expand: {', '.join(new_schema)}")
            # An old pod's init container still finds its schema current (newer is fine).
            check = await asyncio.to_thread(
                subprocess.run,
                [release.python, "-m", "tether_cli.main", "migrate", "--check"],
                env=release.env(DATABASE_URL=dsn, TETHER_ENV="dev"),
                cwd=release.src, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert check.returncode == 0, f"{release.name} migrate --check: {check.stderr}"

            # -- the write runs approved on the old gateways: inside their tool --------------
            writes = [r for r, k in kinds.items() if k == "write"]
            await approve_group(writes, [0, 1])
            await wait_for(
                "write runs inside their tool",
                lambda: _executing(db, writes),
                timeout=60,
                interval=0.05,
            )
            in_flight["inside a write tool"] = await _executing(db, writes)

            # -- roll runtime 0, then gateway 0: versions mixed ------------------------------
            await fleet.roll("rt", 0, "new")
            await fleet.roll("gw", 0, "new")
            gw_version[0] = "new"
            cards = [r for r, k in kinds.items() if k == "card"]
            half = len(cards) // 2
            await approve_group(cards[:half], [1, 0])  # old gateway 1 and new gateway 0
            for n in range(LATE_RUNS):  # new pods start runs too
                run_id = await http_new_run(http, fleet.gw(n % 2), f"stream {STREAM_N} deltas")
                kinds[run_id] = "late"
                follow(run_id)
            sampler.run_ids = list(kinds)

            # -- a new runtime stops while an old one runs: the old takes over its runs -----
            new_rt = fleet.runtimes[0]
            assert new_rt is not None
            held = await _holding(sampler, new_rt.pid)
            in_flight["held by a new runtime stopped mid-roll"] = held
            await fleet.roll("rt", 0, "new")

            # -- the rest of the fleet -------------------------------------------------------
            await fleet.roll("rt", 1, "new")
            await fleet.roll("gw", 1, "new")
            gw_version[1] = "new"
            await approve_group(cards[half:], [0, 1])

            # -- every run to its end; a card the upgrade raised (none expected) is decided --
            deadline = time.monotonic() + DEADLINE_S
            extra_cards = 0
            while time.monotonic() < deadline:
                statuses = await run_statuses(db, list(kinds))
                if all(s in TERMINAL_STATUSES for s in statuses.values()):
                    break
                for run_id, interrupt_id in (await _pending(db, list(kinds))).items():
                    extra_cards += 1
                    await _approve(http, fleet.gw(0), run_id, interrupt_id, approvals_record)
                await asyncio.sleep(0.5)
            elapsed = time.monotonic() - began
        finally:
            sampling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampling
        got = await asyncio.gather(*followers)

    # -- the checks ------------------------------------------------------------------------
    run_ids = list(kinds)
    statuses = await run_statuses(db, run_ids)
    problems = [f"{r}: {s}" for r, s in statuses.items() if s != "completed"]
    lost = dup = events = old_rendered = 0
    for res in got:
        stored = await stored_events(db, res.run_id)
        gaps, dups = check_log(stored)
        c_lost, c_dup = compare(res.ids, [e.sequence for e in stored])
        lost += gaps + c_lost
        dup += dups + c_dup
        events += len(stored)
        if sum(is_terminal(e) for e in stored) != 1 or not is_terminal(stored[-1]):
            problems.append(f"{res.run_id}: log does not end in one terminal event")
        older = _older_renderings(res.frames, expected_frames(stored))
        if older is None:
            problems.append(
                f"{res.run_id} ({kinds[res.run_id]}): SSE client differs from the log "
                f"({len(res.frames)} frames, {len(stored)} stored, {res.reconnects} reconnects, "
                f"{res.error})"
            )
        else:
            old_rendered += older
    cards_left = await db.fetchval(
        "SELECT count(*) FROM interrupt WHERE run_id = ANY($1::text[]) AND status <> 'resolved'",
        run_ids,
    )
    decided = await db.fetchval(
        "SELECT count(*) FROM interrupt WHERE run_id = ANY($1::text[]) AND status = 'resolved'",
        run_ids,
    )
    double = 0
    for run_id, instance in targets.items():
        n = await executions(db, instance)
        approvals_record.effect(run_id, instance, n)
        if n != 1:
            double += n > 1
            problems.append(f"{run_id}: {instance} restarted {n} times (approved once)")
    # Every pod of either version ran clean: no error logged, each SIGTERM a clean exit.
    logged = {
        p.name: n
        for p in procs.started
        if (n := _error_lines(p.log(), previous_release=p.name.endswith("-old")))
    }
    old_to_new, new_to_old = sampler.passed("old", "new"), sampler.passed("new", "old")
    reconnects = sum(r.reconnects for r in got)
    print(
        f"\n[rolling upgrade {release.name} -> this version] {len(run_ids)} runs"
        f" (in flight: {in_flight}; {LATE_RUNS} started on new pods mid-roll);"
        f" steps: {'; '.join(fleet.steps)}; approvals on old gateways {approvals['old']},"
        f" on new {approvals['new']}; cards decided {decided}, left {cards_left}, raised by the"
        f" upgrade {extra_cards}; runs passed old->new {old_to_new}, new->old {new_to_old};"
        f" SSE reconnects {reconnects}, frames in the old rendering {old_rendered};"
        f" {events} events, lost {lost}, duplicated {dup}, double"
        f" executions {double}; {elapsed:.1f}s; exits {fleet.exits}"
    )
    report = await check_histories(db, [*histories, approvals_record], run_ids)
    chaos_table(
        f"rolling upgrade {release.name} -> new",
        report=report,
        runs=len(run_ids),
        events=events,
        lost=lost,
        duplicated=dup,
        double_exec=double,
        recovery=f"roll {'; '.join(s for s in fleet.steps if s.startswith(('rt', 'gw')))}",
    )
    assert report.ok, report.explain()
    assert not problems, "\n".join(problems[:20])
    assert not logged, f"errors logged by pods: {logged}"
    assert all(code == 0 for _, code in fleet.exits), fleet.exits
    assert lost == 0 and dup == 0 and double == 0
    assert cards_left == 0 and extra_cards == 0
    assert old_to_new > 0, f"no run passed from an old pod to a new one: {sampler.holders}"
    assert new_to_old > 0, f"no run passed from a new pod to an old one: {sampler.holders}"


async def _holding(sampler: LeaseSampler, pid: int) -> int:
    """Runs the runtime `pid` holds, once it holds several (or, after 20 s, at least one)."""
    began = time.monotonic()
    while True:
        held = await sampler.held_by(pid)
        waited = time.monotonic() - began
        if held >= 3 or (held and waited > 20):
            return held
        assert waited < 90, "the new runtime never held a run"
        await asyncio.sleep(0.1)


async def _all_pending(db: asyncpg.Pool, run_ids: list[str]) -> bool:
    return len(await _pending(db, run_ids)) == len(run_ids)


async def _executing(db: asyncpg.Pool, run_ids: list[str]) -> int:
    return int(
        await db.fetchval(
            "SELECT count(DISTINCT run_id) FROM tool_call WHERE run_id = ANY($1::text[])"
            " AND status = 'executing'",
            run_ids,
        )
    )


# What the previous release logged as an error and this one no longer does: a transaction whose
# cached statement the expand step's new column invalidated ("cached plan must not change result
# type") was answered INTERNAL; the client retried it, and what was lost or applied twice is
# counted above either way. This release runs such a transaction again (store/db.py RETRYABLE;
# services/runtime/tests/store/test_migrations_live_fleet.py), so its pods may not log it.
_FIXED_SINCE_THE_PREVIOUS_RELEASE = ("InvalidCachedStatementError",)


def _error_lines(log: str, *, previous_release: bool) -> int:
    return sum(
        1
        for line in log.splitlines()
        if ('"level": "error"' in line or "Traceback" in line)
        and not (
            previous_release and any(known in line for known in _FIXED_SINCE_THE_PREVIOUS_RELEASE)
        )
    )


def _older_renderings(
    frames: list[tuple[int, str, str]], expected: list[tuple[int, str, str]]
) -> int | None:
    """How many of a client's frames an old gateway rendered, or None if any frame is not the
    stored event. Each frame must be the event this version renders (id, type, every field) or
    that rendering without fields this version added (those are null for these runs: a newer
    field is absent in the previous release's JSON, never different)."""
    if [f[:2] for f in frames] != [e[:2] for e in expected]:
        return None
    older = 0
    for (_, _, got), (_, _, want) in zip(frames, expected, strict=True):
        if got == want:
            continue
        if not _without_added_nulls(json.loads(got), json.loads(want)):
            return None
        older += 1
    return older


def _without_added_nulls(got: object, want: object) -> bool:
    if isinstance(got, dict) and isinstance(want, dict):
        if set(got) - set(want):
            return False
        return all(
            _without_added_nulls(got[k], v) if k in got else v is None for k, v in want.items()
        )
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(
            _without_added_nulls(a, b) for a, b in zip(got, want, strict=True)
        )
    return got == want
