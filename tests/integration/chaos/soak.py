"""The soak (`make soak`): N minutes (SOAK_MINUTES, default 30) of mixed load against a real fleet
(two runtimes, two gateways that each reach both, Postgres, a Redis of its own), sampling every
process's resources every ~10 s, then one verdict:

- the load: short runs; long streams read by clients that drop the connection and re-attach with
  Last-Event-ID on the other gateway; approvals decided on the other pod than the one streaming,
  each write effect counted by the inventory; sign-outs (a token revoked on one gateway, refused
  on the other). Every client records a history (tether_testkit.history) and the checker reads
  them all against the Postgres log at the end: zero violations required.
- the samples: RSS and open files (/proc/PID) of every process, DB connections per runtime
  (pg_stat_activity by application_name), Redis's used memory (INFO memory), and the event-loop
  lag seen from outside (the latency of a gateway's /healthz and a runtime's gRPC health check:
  the services export no loop-lag metric).
- the verdict: a least-squares slope per process and metric over the second half of the run
  (after warm-up), each against its bound (BOUNDS, per minute); one above fails the soak.

Prints a JSON document and a table; writes them to .tether/soak.json (with every sample) and
.tether/soak.md."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import aiohttp
import asyncpg
import grpc
import redis.asyncio as aioredis
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tether_common.auth import issue_token
from tether_testkit import history, stores
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET

from chaos import kit

# The bound on each metric's slope over the second half, per minute of soak, per process.
# RSS: each runtime serves ~110 runs a minute here, so 1 MiB/min fails a leak of 10 KB per run;
# open files and DB connections must not climb under a steady load (the bound is the noise of
# streams and pool connections open at the moment sampled); Redis must stay flat (revoked tokens
# expire with their tokens); event-loop lag must not creep up. Measured: docs/capacity.md, "8".
BOUNDS = {
    "rss_mib": 1.0,
    "open_files": 0.5,
    "db_connections": 0.2,
    "redis_used_mib": 1.0,
    "loop_lag_ms": 2.0,
}
UNITS = {
    "rss_mib": "MiB",
    "open_files": "files",
    "db_connections": "conns",
    "redis_used_mib": "MiB",
    "loop_lag_ms": "ms",
}
OUT = Path(__file__).resolve().parents[3] / ".tether" / "soak.json"


@dataclass
class Settings:
    minutes: float = 30.0
    sample_s: float = 10.0
    short_lanes: int = 3
    stream_lanes: int = 2
    approval_lanes: int = 2
    revocation_lanes: int = 1
    stream_deltas: int = 1500
    drain_s: float = 180.0
    # Bounds are a verdict only for a run long enough to fit a slope over (a short run is the
    # test that keeps the code working; its slopes are printed, not judged).
    judge: bool = True
    progress: bool = False  # a line a minute on stderr

    @classmethod
    def from_env(cls) -> Settings:
        minutes = float(os.environ.get("SOAK_MINUTES", "30"))
        return cls(
            minutes=minutes,
            sample_s=float(os.environ.get("SOAK_SAMPLE_S", "10")),
            judge=minutes >= 5,
            progress=True,
        )


# -- the fleet --------------------------------------------------------------------------------


def _with_app_name(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    query = (parts.query + "&" if parts.query else "") + urlencode({"application_name": name})
    return urlunsplit(parts._replace(query=query))


@dataclass
class Fleet:
    runtimes: list[Proc]
    gateways: list[Proc]
    redis: kit.PrivateRedis
    dsn: str

    @property
    def bases(self) -> list[str]:
        return [g.addr for g in self.gateways]

    def processes(self) -> dict[str, int]:
        named = {p.name: p.pid for p in [*self.runtimes, *self.gateways]}
        if self.redis.proc is not None:
            named["redis"] = self.redis.proc.pid
        return named


def start_fleet(env: dict[str, str], procs: kit.Procs, folder: str) -> Fleet:
    redis = kit.PrivateRedis(folder)
    redis.start()
    base = {
        **env,
        **kit.CHAOS_ENV,
        "REDIS_URL": redis.url,
        "TETHER_SCRIPTED_DELAY_S": "0.01",
        "TETHER_DEMO_TOOL_DELAY_S": "0.5",
    }
    runtimes = [
        procs.add(
            start_runtime(
                {**base, "DATABASE_URL": _with_app_name(env["DATABASE_URL"], f"soak-rt{i}")},
                name=f"soak-rt{i}",
            )
        )
        for i in (1, 2)
    ]
    target = "ipv4:" + ",".join(r.addr for r in runtimes)
    gateways = [procs.add(start_gateway(base, target, name=f"soak-gw{i}")) for i in (1, 2)]
    return Fleet(runtimes, gateways, redis, env["DATABASE_URL"])


# -- the load ---------------------------------------------------------------------------------


@dataclass
class Load:
    fleet: Fleet
    http: aiohttp.ClientSession
    db: asyncpg.Pool
    stop: asyncio.Event
    histories: list[history.History] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    deltas: int = 1500

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def history(self, name: str) -> history.History:
        h = history.History(name)
        self.histories.append(h)
        return h

    def other(self, base: str) -> str:
        return next(b for b in self.fleet.bases if b != base)

    async def status(self, h: history.History, base: str, run_id: str) -> None:
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            async with self.http.get(f"{base}/v1/runs/{run_id}", headers=kit.headers()) as r:
                if r.status == 200:
                    h.status(run_id, (await r.json())["run"]["status"])

    async def start(self, h: history.History, base: str, text: str) -> str:
        for attempt in range(20):
            try:
                run_id = await kit.http_new_run(self.http, base, text)
                h.start(run_id)
                return run_id
            except (aiohttp.ClientError, OSError, AssertionError):
                # AssertionError: a 503 while a pod is busy; a new key, a new run: nothing was
                # started under the old one that the checker would not also see.
                if attempt == 19:
                    raise
                await asyncio.sleep(0.5)
        raise AssertionError("unreachable")

    async def follow(
        self,
        h: history.History,
        run_id: str,
        bases: Callable[[int], str],
        *,
        drop_every: int = 0,
        on_event: Callable[[str, dict[str, Any]], Any] | None = None,
    ) -> kit.SseResult:
        """Follow to the end; with `drop_every`, the client drops the connection after that many
        events and re-attaches (Last-Event-ID) on `bases(attempt)`."""
        received = 0

        async def each(kind: str, data: dict[str, Any]) -> None:
            nonlocal received
            received += 1
            if on_event is not None:
                await on_event(kind, data)
            if drop_every and received % drop_every == 0 and kind not in kit.TERMINAL_TYPES:
                self.count("reattach")
                raise ConnectionError("the client drops the stream")

        res = await kit.follow_sse(
            self.http, bases, run_id, deadline_s=300, max_reconnects=10_000, on_event=each,
            record=h,
        )  # fmt: skip
        if not res.finished:
            self.problems.append(f"{run_id}: stream not finished ({res.error or 'deadline'})")
        return res

    async def short_runs(self, lane: int) -> None:
        h = self.history(f"short{lane}")
        i = 0
        while not self.stop.is_set():
            base = self.fleet.bases[i % 2]
            run_id = await self.start(h, base, "show recent errors of payment-api")
            await self.follow(h, run_id, lambda _a, base=base: base)
            await self.status(h, base, run_id)
            self.count("short runs")
            i += 1
            await asyncio.sleep(1.0)

    async def long_streams(self, lane: int) -> None:
        h = self.history(f"stream{lane}")
        i = 0
        while not self.stop.is_set():
            first = self.fleet.bases[i % 2]
            run_id = await self.start(h, first, f"stream {self.deltas} deltas")
            await self.status(h, first, run_id)
            await self.follow(
                h, run_id, lambda a, i=i: self.fleet.bases[(i + a) % 2], drop_every=20
            )
            await self.status(h, self.other(first), run_id)
            self.count("long streams")
            i += 1

    async def approvals(self, lane: int) -> None:
        h = self.history(f"approve{lane}")
        i = 0
        while not self.stop.is_set():
            here = self.fleet.bases[i % 2]
            there = self.other(here)
            service, inst = await abnormal_service(self.db, prefix="soak")
            run_id = await self.start(h, here, f"restart the abnormal {service} instance")
            approve = kit.approver(self.http, lambda there=there: there, run_id, record=h)

            async def on_event(
                kind: str,
                data: dict[str, Any],
                run_id: str = run_id,
                here: str = here,
                approve: Callable[[str, dict[str, Any]], Any] = approve,
            ) -> None:
                if kind == "interrupt":
                    await self.status(h, here, run_id)
                    self.count("approvals across pods")
                await approve(kind, data)

            await self.follow(h, run_id, lambda _a, here=here: here, on_event=on_event)
            h.effect(run_id, inst, await executions(self.db, inst))
            await self.status(h, there, run_id)
            i += 1
            await asyncio.sleep(0.5)

    async def revocations(self, lane: int) -> None:
        i = 0
        while not self.stop.is_set():
            here = self.fleet.bases[i % 2]
            there = self.other(here)
            # A short-lived session: its revocation entry in Redis expires with it.
            token = issue_token(TEST_SECRET, kit.USER, ttl_s=90)
            auth = {"Authorization": f"Bearer {token}"}
            try:
                async with self.http.get(f"{there}/v1/session", headers=auth) as r:
                    ok_before = r.status == 200
                async with self.http.delete(f"{here}/v1/session", headers=auth) as r:
                    signed_out = r.status == 204
                refused = False
                for _ in range(150):  # a loaded machine: up to ~15 s for the channel
                    async with self.http.get(f"{there}/v1/session", headers=auth) as r:
                        if r.status == 401:
                            refused = True
                            break
                    await asyncio.sleep(0.1)
            except (aiohttp.ClientError, OSError):
                await asyncio.sleep(1)
                continue
            if not (ok_before and signed_out and refused):
                self.problems.append(
                    f"revocation {i}: valid before {ok_before}, signed out {signed_out}, "
                    f"refused on the other pod {refused}"
                )
            self.count("revocations")
            i += 1
            await asyncio.sleep(2)


# -- the samples ------------------------------------------------------------------------------


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Sampler:
    def __init__(self, fleet: Fleet, http: aiohttp.ClientSession, db: asyncpg.Pool) -> None:
        self.fleet = fleet
        self.http = http
        self.db = db
        self.samples: list[dict[str, Any]] = []  # {"t": minutes, "proc": {metric: value}}
        self.began = time.monotonic()
        self.redis = aioredis.from_url(fleet.redis.url)
        self.channels = {r.name: grpc.aio.insecure_channel(r.addr) for r in fleet.runtimes}

    async def close(self) -> None:
        await self.redis.aclose()
        for ch in self.channels.values():
            await ch.close()

    async def _lag_ms(self, name: str, proc: Proc) -> float:
        """The median of three round trips to a cheap endpoint: what the process's event loop
        adds shows here (a blocked loop answers late)."""
        times = []
        for _ in range(3):
            t = time.perf_counter()
            with contextlib.suppress(Exception):
                if name in self.channels:
                    stub = health_pb2_grpc.HealthStub(self.channels[name])
                    await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
                else:
                    async with self.http.get(f"{proc.addr}/healthz") as r:
                        await r.read()
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times)

    async def sample(self) -> dict[str, Any]:
        conns = {
            r["application_name"]: r["n"]
            for r in await self.db.fetch(
                "SELECT application_name, count(*) AS n FROM pg_stat_activity "
                "WHERE application_name LIKE 'soak-rt%' AND datname = current_database() "
                "GROUP BY application_name"
            )
        }
        info = await self.redis.info("memory")
        row: dict[str, Any] = {"t": (time.monotonic() - self.began) / 60, "proc": {}}
        for proc in [*self.fleet.runtimes, *self.fleet.gateways]:
            m = {
                "rss_mib": _rss_mib(proc.pid),
                "open_files": _open_files(proc.pid),
                "loop_lag_ms": await self._lag_ms(proc.name, proc),
            }
            if proc in self.fleet.runtimes:
                m["db_connections"] = conns.get(proc.name, 0)
            row["proc"][proc.name] = m
        redis_pid = self.fleet.processes()["redis"]
        row["proc"]["redis"] = {
            "rss_mib": _rss_mib(redis_pid),
            "open_files": _open_files(redis_pid),
            "redis_used_mib": int(info["used_memory"]) / 2**20,
        }
        self.samples.append(row)
        return row

    async def run(self, stop: asyncio.Event, every_s: float) -> None:
        while not stop.is_set():
            await self.sample()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points."""
    if len(points) < 2:
        return 0.0
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def slopes(samples: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per process and metric: the slope (per minute) over the second half, and the first and
    last values of that half."""
    if not samples:
        return {}
    half = samples[-1]["t"] / 2
    late = [s for s in samples if s["t"] >= half]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name in late[0]["proc"]:
        for metric in late[0]["proc"][name]:
            pts = [(s["t"], float(s["proc"][name][metric])) for s in late]
            out.setdefault(name, {})[metric] = {
                "slope_per_min": slope(pts),
                "from": pts[0][1],
                "to": pts[-1][1],
                "bound_per_min": BOUNDS[metric],
            }
    return out


def over_bounds(fitted: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """Each process and metric whose slope is above its bound."""
    return [
        f"{name} {metric} {v['slope_per_min']:+.3f}/min > {v['bound_per_min']}"
        for name, metrics in fitted.items()
        for metric, v in metrics.items()
        if v["slope_per_min"] > v["bound_per_min"]
    ]


# -- the soak ---------------------------------------------------------------------------------


async def soak(env: dict[str, str], procs: kit.Procs, settings: Settings) -> dict[str, Any]:
    """Start the fleet, load it for `settings.minutes`, let the runs in flight end, check the
    histories and fit the slopes. The result document (`ok` is the verdict)."""
    folder = tempfile.mkdtemp(prefix="tether-soak-")
    fleet = await asyncio.to_thread(start_fleet, env, procs, folder)
    db = await asyncpg.create_pool(env["DATABASE_URL"], min_size=1, max_size=4)
    stop, sampling = asyncio.Event(), asyncio.Event()
    try:
        async with kit.http_session() as http:
            load = Load(fleet, http, db, stop, deltas=settings.stream_deltas)
            sampler = Sampler(fleet, http, db)
            lanes = (
                [load.short_runs(i) for i in range(settings.short_lanes)]
                + [load.long_streams(i) for i in range(settings.stream_lanes)]
                + [load.approvals(i) for i in range(settings.approval_lanes)]
                + [load.revocations(i) for i in range(settings.revocation_lanes)]
            )
            tasks = [asyncio.create_task(c) for c in lanes]
            sampler_task = asyncio.create_task(sampler.run(sampling, settings.sample_s))
            began = time.monotonic()
            end = began + settings.minutes * 60
            said = began
            while time.monotonic() < end:
                if settings.progress and time.monotonic() - said >= 60 and sampler.samples:
                    said = time.monotonic()
                    last = sampler.samples[-1]
                    rss = {n: round(m["rss_mib"], 1) for n, m in last["proc"].items()}
                    print(
                        f"[soak] {last['t']:.1f} min: load {load.counts}; RSS MiB {rss}",
                        file=sys.stderr,
                        flush=True,
                    )
                for t in tasks:
                    if t.done() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
                await asyncio.sleep(min(5, max(0.1, end - time.monotonic())))
            sampling.set()
            await sampler_task
            loaded_s = time.monotonic() - began
            # No new work; the runs in flight end (their clients follow them to the end).
            stop.set()
            done, pending = await asyncio.wait(tasks, timeout=settings.drain_s)
            for t in pending:
                t.cancel()
                load.problems.append("a client still busy after the drain")
            for t in done:
                if t.exception() is not None:
                    load.problems.append(f"a client failed: {t.exception()!r}")
            await sampler.close()
            report = await kit.check_histories(db, load.histories)
            fitted = slopes(sampler.samples)
    finally:
        await db.close()
        fleet.redis.stop()
    over = over_bounds(fitted)
    ok = report.ok and not load.problems and (not settings.judge or not over)
    return {
        "ok": ok,
        "minutes": round(loaded_s / 60, 2),
        "samples": len(sampler.samples),
        "judged": settings.judge,
        "load": load.counts,
        "checker": report.summary(),
        "problems": load.problems[:20],
        "over_bound": over,
        "slopes": fitted,
        "bounds_per_min": BOUNDS,
        "series": sampler.samples,
    }


def table(doc: dict[str, Any]) -> str:
    metrics = list(BOUNDS)
    head = ["process", *(f"{m} /min (bound)" for m in metrics)]
    rows = []
    for name, ms in doc["slopes"].items():
        cells = [name]
        for m in metrics:
            v = ms.get(m)
            cells.append(
                "-" if v is None else f"{v['slope_per_min']:+.3f} ({v['bound_per_min']:g})"
            )
        rows.append(cells)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *rows]]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    c = doc["checker"]
    lines.append(
        f"\n{doc['minutes']} min, {doc['samples']} samples, load {doc['load']}; checker: "
        f"{c['runs']} runs, {c['events']} events, lost {c['lost']}, duplicated {c['duplicated']}, "
        f"double executions {c['double_exec']}, illegal transitions {c['illegal_transitions']}, "
        f"violations {c['violations']}; verdict: {'PASS' if doc['ok'] else 'FAIL'}"
        + ("" if doc["judged"] else " (slopes not judged: a run under 5 minutes)")
    )
    return "\n".join(lines)


def write(doc: dict[str, Any]) -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=2))
    OUT.with_suffix(".md").write_text(table(doc) + "\n")


async def _soak_on(admin: str, shared_redis: str, settings: Settings) -> dict[str, Any]:
    procs = kit.Procs()
    dsn = await stores.create_fresh_database(admin)
    env = {
        "DATABASE_URL": dsn,
        "REDIS_URL": shared_redis,  # replaced by the soak's own Redis
        "TETHER_JWT_SECRET": TEST_SECRET,
        "TETHER_ENV": "dev",
        "TETHER_DEFAULT_AGENT": "opspilot",
        "TETHER_LEASE_TTL_S": "3",
        "TETHER_POLL_INTERVAL_S": "0.5",
    }
    try:
        return await soak(env, procs, settings)
    finally:
        procs.cleanup()
        await stores.drop_database(admin, dsn)


def main() -> int:
    settings = Settings.from_env()
    # The stores' context managers run their own event loops when they close: outside ours.
    with stores.postgres_admin_dsn() as admin, stores.redis_url() as shared_redis:
        doc = asyncio.run(_soak_on(admin, shared_redis, settings))
    write(doc)
    print(json.dumps({k: v for k, v in doc.items() if k != "series"}, indent=2))
    print(table(doc))
    print(f"written to {OUT}")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
