"""`tether conformance AGENT`: prove an agent's write tools keep Tether's at-most-once promise
through a crash. For every write tool, each example argument set it declares and each kill point
(before, during, after the call), a run is driven to the tool on a scratch database, the runtime
is killed with SIGKILL, a fresh one takes the run over (a person's answer is given if it asks),
and the outcome is judged: at most one effect, the declared strategy followed, dense events, the
run ended. One table row per tool x example x kill point; exit 1 if any row fails.

Conformance cannot see the external system. It counts what it can (the tool function run to its
end with one idempotency key) and, given `--effects`, asks the external system itself how many
effects it holds for the key: only then is "at most one effect" measured, not inferred."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import re
import secrets
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from tether_common.config import Settings
from tether_sdk import Agent, Host, Tool

from tether_cli.crash_case import (
    Case,
    CaseError,
    EffectsProbe,
    Observed,
    Stores,
    prepare,
    run_case,
    scrub,
)

POINTS = ("before", "during", "after")
# The answer a person gives when a tool that cannot tell asks (outcome_unknown): at `before` the
# call never started, so retry is right and still leaves one effect; each answer is exercised.
ANSWERS = {"before": "retry", "during": "mark_done", "after": "abandon"}
TOLD = {"retry": ("ok", "error"), "mark_done": ("marked_done",), "abandon": ("abandoned",)}
_HOOK = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclass
class Row:
    tool: str
    example: int
    point: str
    by: str
    """How the tool declares it stays at-most-once: idempotent_by_key, reconcile, person."""
    engine: str = ""
    """What the engine did after the takeover."""
    runs: int = 0
    """Times the tool function ran to its end with the call's idempotency key."""
    effects: str = "not measurable (pass --effects)"
    events: str = ""
    run: str = ""
    ok: bool = False
    why: list[str] = field(default_factory=list)


def judge(tool: Tool, example: int, point: str, seen: Observed) -> Row:
    row = Row(tool.name, example, point, tool.at_most_once)
    why = row.why
    calls = [e for e in seen.journal if e["event"] in ("enter", "exit")]
    others = sorted({e["key"] for e in calls} - {seen.key})
    if others:
        why.append(f"called with another idempotency key than the call's: {others}")
    row.runs = sum(1 for e in calls if e["event"] == "exit" and e["key"] == seen.key)
    raised = seen.unknown_at >= 0
    before_answer = seen.journal[: seen.unknown_at] if raised else seen.journal
    own = sum(1 for e in before_answer if e["event"] == "enter" and e["pid"] != seen.killed_pid)
    checked = [
        e["status"]
        for e in before_answer
        if e["event"] == "reconcile" and e["pid"] != seen.killed_pid
    ]
    if row.by == "idempotent_by_key":
        again = "called it again with the same key" if point != "before" else "called it"
        row.engine = again if own else "did not call it"
    elif row.by == "reconcile":
        if not checked:
            why.append("reconcile was not consulted after the takeover")
            row.engine = "did not reconcile"
        else:
            row.engine = f"reconcile said {checked[0]}" + ("; called it" if own else "")
            if checked[0] == "done" and own:
                why.append("called again although reconcile said done")
    else:
        row.engine = "called it again on its own" if own else "did not call it again"
        if own:
            why.append(
                f"the engine called it again on its own ({own}x) although it can neither "
                "dedupe by key nor reconcile: only a person's retry may"
            )
        if not raised:
            why.append("no outcome_unknown was raised after a kill inside the call")
    if raised:
        row.engine += f"; outcome_unknown, answered {seen.answer}"
        later = sum(1 for e in seen.journal[seen.unknown_at :] if e["event"] == "enter")
        if seen.answer == "retry" and not later:
            why.append("the answer retry did not call the tool")
        if seen.answer != "retry" and later:
            why.append(f"the answer {seen.answer} called the tool anyway")
        if seen.outcome not in TOLD[seen.answer]:
            why.append(f"after {seen.answer} the model was told {seen.outcome!r}")
    by_person = raised and seen.answer == "retry"
    if row.runs > 1 and row.by != "idempotent_by_key" and not by_person:
        why.append(f"the tool ran to its end {row.runs} times with one idempotency key")
    if seen.effects is not None:
        row.effects = str(seen.effects)
        if seen.effects > 1:
            liar = row.by == "idempotent_by_key"
            claim = ", although it claims idempotent_by_key=True" if liar else ""
            why.append(
                f"{seen.effects} effects for one idempotency key{claim} (killed {point} the call)"
            )
    n = len(seen.sequences)
    if seen.sequences == list(range(1, n + 1)):
        row.events = f"dense 1..{n}"
    else:
        row.events = "gaps"
        why.append(f"event sequences are not 1..N: {seen.sequences}")
    row.run = "done" if seen.run_status == "completed" else seen.run_status
    if seen.run_status != "completed" or seen.last_event != "done":
        why.append(f"the run did not end done: {seen.run_status}, last event {seen.last_event}")
    row.ok = not why
    return row


def _with_database(dsn: str, name: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path="/" + name))


async def _admin(dsn: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def _copy(admin: str, template: str, name: str) -> str:
    """A case's own database, copied from the migrated and seeded template (fast, and each case
    starts from the same world: a restart already done would make the next recheck skip it)."""
    for attempt in range(50):
        try:
            await _admin(admin, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
            return _with_database(admin, name)
        except asyncpg.ObjectInUseError:
            await asyncio.sleep(0.1 * (attempt + 1))  # a closed session may linger a moment
    raise CaseError(f"the template database {template} stayed in use")


async def _template(admin: str, name: str, agent: Agent, env: Mapping[str, str]) -> str:
    """`tether migrate` (Tether's and every configured agent's migrations), the agent's seed,
    and a conformance user granted every write tool's action on '*'."""
    from tether_runtime.api import admin as runtime_admin

    await _admin(admin, f'CREATE DATABASE "{name}"')
    dsn = _with_database(admin, name)
    await runtime_admin.migrate(dsn, env)
    if agent.seed is not None:
        if agent.lifespan is None:
            await agent.seed(None)
        else:
            async with agent.lifespan(Host(database_url=dsn)) as state:
                await agent.seed(state)
    await runtime_admin.add_grants(
        dsn, [("conformance", t.action, "*") for t in agent.tools if t.effect == "write"]
    )
    return dsn


def load_probe(spec: str, agent: Agent) -> EffectsProbe:
    """`module:function(state, key) -> int` (sync or async; `state` is what the agent's lifespan
    yields on the case database), or SQL run on the case database with the key as $1."""
    if _HOOK.match(spec):
        module, _, attr = spec.partition(":")
        fn: Any = importlib.import_module(module)
        for part in attr.split("."):
            fn = getattr(fn, part)

        async def hook(dsn: str, key: str) -> int:
            life = agent.lifespan(Host(database_url=dsn)) if agent.lifespan else None
            async with life or contextlib.nullcontext() as state:
                n = fn(state, key)
                return int(await n if inspect.isawaitable(n) else n)

        return hook

    async def sql(dsn: str, key: str) -> int:
        conn = await asyncpg.connect(dsn)
        try:
            return int(await conn.fetchval(spec, key) or 0)
        finally:
            await conn.close()

    return sql


async def check(
    agent: Agent,
    admin: str,
    stores: Stores,
    env: Mapping[str, str],
    probe: EffectsProbe | None,
    only: set[str],
) -> tuple[list[Row], list[str]]:
    """Every case's row, and the write tools not checked (no examples). The next case is
    prepared (database copied, runtimes starting) while one runs."""
    unknown = only - {t.name for t in agent.tools if t.effect == "write"}
    if unknown:
        raise CaseError(f"agent {agent.name!r} has no write tool {', '.join(sorted(unknown))}")
    base = "tether_conf_" + secrets.token_hex(5)
    await _template(admin, base, agent, env)
    missing = [
        t.name
        for t in agent.tools
        if t.effect == "write" and not t.examples and (not only or t.name in only)
    ]
    specs = [
        (t, i, args, point, f"{base}_{n}")
        for n, (t, i, args, point) in enumerate(
            (t, i, args, point)
            for t in agent.tools
            if t.effect == "write" and (not only or t.name in only)
            for i, args in enumerate(t.examples)
            for point in POINTS
        )
    ]

    async def ready(k: int) -> Case:
        t, _, args, point, name = specs[k]
        dsn = await _copy(admin, base, name)
        return prepare(stores, dsn, agent.name, t.name, args, point, ANSWERS[point], name)

    rows: list[Row] = []
    secret = stores.base_env["TETHER_JWT_SECRET"]
    upcoming = asyncio.create_task(ready(0)) if specs else None
    try:
        for k, (t, i, _, point, name) in enumerate(specs):
            assert upcoming is not None
            this, upcoming = upcoming, None
            try:
                case = await this
                if k + 1 < len(specs):
                    upcoming = asyncio.create_task(ready(k + 1))
                row = judge(t, i, point, await run_case(case, secret, probe))
            except CaseError as err:
                row = Row(t.name, i, point, t.at_most_once, run="stuck", why=[str(err)])
                row.effects = row.events = "-"
            finally:
                await _admin(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            rows.append(row)
            _progress(row)
    finally:
        if upcoming is not None:
            with contextlib.suppress(Exception):
                for rt in (await upcoming).runtimes:
                    rt.kill()
        await _admin(admin, f'DROP DATABASE IF EXISTS "{base}" WITH (FORCE)')
        for _, _, _, _, name in specs:
            await _admin(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return rows, missing


def _progress(row: Row) -> None:
    print(
        f"  {row.tool} #{row.example} killed {row.point}: {'pass' if row.ok else 'FAIL'}",
        file=sys.stderr,
        flush=True,
    )


HEAD = (
    "TOOL",
    "EX",
    "KILLED",
    "AT-MOST-ONCE BY",
    "ENGINE AFTER THE TAKEOVER",
    "RAN",
    "EFFECTS",
    "EVENTS",
    "RUN",
    "RESULT",
)


def table(
    rows: list[Row], missing: list[str], allow_missing: bool, mcp: set[str] | None = None
) -> str:
    cells = [
        (
            r.tool,
            f"#{r.example}",
            r.point,
            r.by,
            r.engine,
            str(r.runs),
            r.effects,
            r.events,
            r.run,
            "pass" if r.ok else "FAIL",
        )
        for r in rows
    ]
    widths = [max(len(c[i]) for c in [HEAD, *cells]) for i in range(len(HEAD))]
    out = [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in [HEAD, *cells]
    ]
    for r in rows:
        for why in r.why:
            out.append(f"FAIL {r.tool} #{r.example} killed {r.point}: {why}")
    for name in missing:
        verdict = "allowed by --allow-missing-examples" if allow_missing else "FAIL"
        if name in (mcp or set()):
            # An MCP tool's arguments are the server's to define: say where examples come from.
            out.append(
                f"not exercised: {name}: no example arguments (its inputSchema gives no "
                f"examples or defaults; give MCPOverride(examples=[...])) ({verdict})"
            )
        else:
            out.append(f"not checked: {name}: declare examples=[...] on its @tool ({verdict})")
    return "\n".join(out)


def _agent(spec: str, env: dict[str, str]) -> Agent:
    """AGENT as the runtime loads it: a configured agent's name, or module:attribute (added to
    TETHER_AGENTS for the runtimes conformance starts)."""
    from tether_runtime.engine.agents import discover

    if ":" in spec:
        env["TETHER_AGENTS"] = ",".join(filter(None, [env.get("TETHER_AGENTS", ""), spec]))
    settings = Settings.from_env(env)
    found = {a.name: a for a, _ in discover(settings)}
    name = (
        spec
        if ":" not in spec
        else next((a.name for a, src in discover(settings) if src == f"TETHER_AGENTS={spec}"), "")
    )
    if name not in found:
        known = ", ".join(sorted(found)) or "none"
        raise CaseError(f"no agent {spec!r} is configured (loaded: {known})")
    return found[name]


async def _main(opts: Options) -> int:
    env = scrub(dict(opts.env))
    from tether_runtime.engine.agents import mcp_tool_names, with_mcp_tools

    agent = await with_mcp_tools(_agent(opts.agent, env), Settings.from_env(env))
    mcp = mcp_tool_names(agent)
    work = tempfile.mkdtemp(prefix="tether-conformance-")
    rows: list[Row] = []
    missing: list[str] = []
    finished = False
    try:
        stores = Stores(
            {
                **env,
                "REDIS_URL": opts.redis_url,
                "TETHER_ENV": "dev",
                "TETHER_JWT_SECRET": secrets.token_urlsafe(32),
                "TETHER_LEASE_TTL_S": "3",
                "TETHER_POLL_INTERVAL_S": "0.2",
                "TETHER_STREAM_QUIET_CHECK_S": "0.5",
                "TETHER_DRAIN_S": "2",
                "TETHER_SCRIPTED_DELAY_S": "0.002",
                "TETHER_RATE_LIMIT_PER_MIN": "0",
                "TETHER_MAX_STREAMS_PER_USER": "0",
                "TETHER_TOOL_DENY": "",  # the gate is an operator's switch; conformance tests the tool
                "TETHER_TOOL_ALLOW_GRANT": "",
            },
            Path(work),
        )
        probe = load_probe(opts.effects, agent) if opts.effects else None
        print(
            f"tether conformance: {agent.name}: SIGKILL before, during and after each write "
            "tool's call",
            file=sys.stderr,
            flush=True,
        )
        rows, missing = await check(agent, opts.database_url, stores, env, probe, opts.only)
        finished = True
    finally:
        if not finished or any(r.run == "stuck" for r in rows):
            print(f"runtime logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    passed = all(r.ok for r in rows) and (opts.allow_missing_examples or not missing)
    if opts.as_json:
        print(
            json.dumps(
                {
                    "agent": agent.name,
                    "passed": passed,
                    "rows": [asdict(r) for r in rows],
                    "not_checked": missing,
                    "mcp_tools": sorted(mcp),
                    "warnings": agent.warnings(),
                },
                indent=2,
            )
        )
    else:
        print(table(rows, missing, opts.allow_missing_examples, mcp))
        for warning in agent.warnings():  # not a failure: least privilege is the agent's call
            print(f"note: {warning}")
        print(
            f"\n{agent.name}: {'PASS' if passed else 'FAIL'} "
            f"({sum(r.ok for r in rows)}/{len(rows)} rows pass)"
        )
    return 0 if passed else 1


@dataclass(frozen=True)
class Options:
    agent: str
    database_url: str
    redis_url: str
    env: Mapping[str, str]
    effects: str = ""
    allow_missing_examples: bool = False
    as_json: bool = False
    only: set[str] = field(default_factory=set)


def run(opts: Options) -> int:
    from tether_runtime.engine.loaded_agent import AgentLoadError

    if opts.env.get("TETHER_ENV") == "production":
        print(
            "tether conformance: refused with TETHER_ENV=production: it starts runtimes that "
            "call the agent's write tools for real; point it at test systems",
            file=sys.stderr,
        )
        return 2
    try:
        return asyncio.run(_main(opts))
    except (AgentLoadError, CaseError) as err:
        print(f"tether conformance: {err}", file=sys.stderr)
        return 2
