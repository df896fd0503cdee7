"""Issue 31 against the real thing from npm: `@modelcontextprotocol/server-filesystem`,
unmodified (package.json's devDependencies, `npm ci`), over stdio, as the `fileops` test agent's
tools (tests/tether_testkit/mcp_agent.py), on a temporary directory.

The annotations the package declares (its dist/index.js, version 2026.8.31), and so the effects:
- read_file: readOnlyHint true: a read, runs at once;
- write_file: readOnlyHint false, idempotentHint true, destructiveHint true: a write (card, risk
  high); after a crash inside it, called again with the same arguments;
- move_file: readOnlyHint false, idempotentHint false, destructiveHint true: a write (card, risk
  high); after a crash inside it, outcome_unknown.

One stack for the module: a database, two runtimes (each with its own filesystem server) and a
gateway on each. Writes started on one gateway are approved on the other. The last test
SIGKILLs the runtime inside write_file: the other runtime takes the run over and calls it again
(idempotentHint), and the file holds its content once."""

from __future__ import annotations

import array
import asyncio
import fcntl
import json
import os
import signal
import subprocess
import termios
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import psutil
import pytest
from tether.runtime.v1 import events_pb2, resources_pb2
from tether_runtime.store import grants
from tether_testkit import stores
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.ledger import TESTS_DIR
from tether_testkit.mcp_agent import FS_SERVER
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.security import bearer

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(240)]


@dataclass
class Stack:
    env: dict[str, str]
    root: Path
    rts: list[Proc]
    gws: list[Proc]


@pytest.fixture(scope="module")
async def stack(
    base_env: dict[str, str], admin_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("mcp-fs").resolve()
    dsn = await stores.create_fresh_database(admin_dsn)
    procs: list[Proc] = []
    try:
        conn = await asyncpg.connect(dsn)
        try:
            await grants.add(conn, "alice", "mcp.fs", "*")
        finally:
            await conn.close()
        env = {
            **base_env,
            "DATABASE_URL": dsn,
            "TETHER_AGENTS": "tether_testkit.mcp_agent:fileops",
            "TETHER_DEFAULT_AGENT": "fileops",
            "MCP_FS_ROOT": str(root),
            "PYTHONPATH": os.pathsep.join(
                filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH", "")])
            ),
        }
        rts = list(
            await asyncio.gather(
                *(asyncio.to_thread(start_runtime, env, name=f"mcp-fs-rt-{i}") for i in (1, 2))
            )
        )
        procs.extend(rts)
        gws = list(
            await asyncio.gather(
                *(
                    asyncio.to_thread(start_gateway, env, rt.addr, name=f"mcp-fs-gw-{i}")
                    for i, rt in enumerate(rts)
                )
            )
        )
        procs.extend(gws)
        yield Stack(env, root, rts, gws)
    finally:
        for p in procs:
            p.kill()
        await stores.drop_database(admin_dsn, dsn)


def _call(tool: str, **args: Any) -> str:
    return f"call {tool} {json.dumps(args)}"


def _said(evs: list[events_pb2.RunEvent]) -> str:
    return "".join(e.text_delta.delta for e in evs if types([e]) == ["text_delta"])


def _fs_servers(proc: Proc) -> list[psutil.Process]:
    return [
        p
        for p in psutil.Process(proc.pid).children(recursive=True)
        if str(FS_SERVER) in " ".join(p.cmdline())
    ]


async def _http(
    http: aiohttp.ClientSession, method: str, url: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    async with http.request(method, url, json=body, headers=bearer("alice")) as r:
        return r.status, await r.json(content_type=None)


async def _start_on(http: aiohttp.ClientSession, gw: Proc, text: str) -> str:
    status, data = await _http(http, "POST", f"{gw.addr}/v1/conversations", {"title": "t"})
    assert status == 201, data
    conv = data["conversation"]["id"]
    body = {"text": text, "idempotencyKey": uuid.uuid4().hex}
    status, data = await _http(http, "POST", f"{gw.addr}/v1/conversations/{conv}/runs", body)
    assert status == 201, data
    return str(data["run"]["id"])


async def _approve_on(http: aiohttp.ClientSession, gw: Proc, run_id: str, card: Any) -> None:
    answer = {
        "interruptId": card.interrupt_id,
        "decision": "approve",
        "idempotencyKey": uuid.uuid4().hex,
    }
    status, data = await _http(http, "POST", f"{gw.addr}/v1/runs/{run_id}/resume", answer)
    assert status == 202, data


def test_server_filesystem_is_the_npm_package() -> None:
    """The server under test is the published package as npm installed it (not a copy)."""
    meta = json.loads((FS_SERVER.parents[1] / "package.json").read_text())
    assert meta["name"] == "@modelcontextprotocol/server-filesystem", meta
    assert "node_modules" in FS_SERVER.parts
    lock = json.loads((FS_SERVER.parents[4] / "package-lock.json").read_text())
    locked = lock["packages"]["node_modules/@modelcontextprotocol/server-filesystem"]
    assert locked["version"] == meta["version"] and locked["integrity"], locked
    out = subprocess.run(["node", "--version"], check=True, capture_output=True, text=True)
    assert out.stdout.startswith("v"), out


async def test_read_at_once_writes_by_card_approved_on_the_other_gateway(stack: Stack) -> None:
    root, (gw_a, gw_b) = stack.root, stack.gws
    (root / "notes.txt").write_text("hello from the disk\n")
    c = Client(stack.rts[0].addr, token(TEST_SECRET, "alice"))
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    try:
        # The tools as ListAgents shows them: effects from the package's annotations.
        status, listing = await _http(http, "GET", f"{gw_a.addr}/v1/agents")
        assert status == 200, listing
        tools = {t["name"]: t for a in listing["agents"] for t in a["tools"]}
        assert tools["fs__read_file"]["effect"] == "read"
        assert "readOnlyHint: true" in tools["fs__read_file"]["origin"], tools["fs__read_file"]
        for name in ("fs__write_file", "fs__move_file"):
            assert tools[name]["effect"] == "write" and tools[name]["action"] == "mcp.fs"
        assert "idempotentHint: true" in tools["fs__write_file"]["origin"]
        assert "idempotentHint: false" in tools["fs__move_file"]["origin"]

        # A read runs at once.
        conv = await c.conversation()
        run = (await c.start(conv, _call("fs__read_file", path=str(root / "notes.txt")))).run
        evs = await c.events(run.id)
        assert types(evs)[-1] == "done" and "interrupt" not in types(evs), types(evs)
        assert "fs__read_file ended: ok: hello from the disk" in _said(evs), _said(evs)
        assert_dense(evs)

        # Writes: a card each (started on gateway A), nothing done before the approval (given
        # on gateway B), done once after it.
        target, moved = root / "out.txt", root / "moved.txt"
        writes = [
            ("fs__write_file", {"path": str(target), "content": "written by tether"}),
            ("fs__move_file", {"source": str(target), "destination": str(moved)}),
        ]
        for tool, args in writes:
            run_id = await _start_on(http, gw_a, _call(tool, **args))
            evs = await c.events(run_id, until="interrupt")
            card = evs[-1].interrupt
            assert card.kind == resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION, types(evs)
            assert card.payload.tool == tool
            assert card.payload.risk == "high"  # destructiveHint: true
            assert card.payload.title == {"fs__write_file": "Write File"}.get(tool, "Move File")
            if tool == "fs__write_file":
                assert not target.exists(), "nothing written before the approval"
            else:
                assert target.exists() and not moved.exists(), "nothing moved before it"
            await _approve_on(http, gw_b, run_id, card)
            rest = await c.events(run_id, after=evs[-1].sequence)
            assert types(rest)[-1] == "done", types(rest)
            assert f"{tool} ended: ok: Successfully" in _said(rest), _said(rest)
        assert not target.exists()
        assert moved.read_text() == "written by tether"
    finally:
        await http.close()
        await c.close()


def _unread_stdin(pid: int) -> int:
    """Bytes waiting in a process's stdin, read without taking them. asyncio gives a child's
    stdin a socket pair: its receive queue, as `ss` shows it for the socket's inode; a pipe:
    FIONREAD on the same pipe, opened through /proc."""
    target = os.readlink(f"/proc/{pid}/fd/0")
    if target.startswith("socket:["):
        inode = target[len("socket:[") : -1]
        listing = subprocess.run(["ss", "-xn"], capture_output=True, text=True, check=True)
        for line in listing.stdout.splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 6 and fields[5] == inode:
                return int(fields[2])
        return 0
    fd = os.open(f"/proc/{pid}/fd/0", os.O_RDONLY | os.O_NONBLOCK)
    try:
        waiting = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, waiting)
        return waiting[0]
    finally:
        os.close(fd)


async def test_runtime_killed_inside_write_file_the_call_is_made_again(stack: Stack) -> None:
    """Each runtime's filesystem server stopped (SIGSTOP) so that the approved write_file is
    in flight (its tool_call `executing`, the request in the server's stdin) when the runtime
    holding the run is SIGKILLed; the servers continue (SIGCONT): the dead runtime's acts on what
    it was sent and exits. The other runtime takes the run over once its lease runs out and,
    write_file being idempotent by its annotations, calls it again with the same arguments, no
    person asked (the first write had happened: it is written again, over itself): the file holds
    its content once, no temporary file left. The last test on the
    module's stack (it kills one of its runtimes)."""
    root, rts, gws = stack.root, stack.rts, stack.gws
    target = root / "report.txt"
    content = "line one\nline two\n"
    servers = {rt.pid: _fs_servers(rt) for rt in rts}
    assert all(len(s) == 1 for s in servers.values()), servers
    c = Client(rts[0].addr, token(TEST_SECRET, "alice"))
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    db = await asyncpg.connect(stack.env["DATABASE_URL"])
    stopped: list[psutil.Process] = []
    try:
        run_id = await _start_on(
            http, gws[0], _call("fs__write_file", path=str(target), content=content)
        )
        evs = await c.events(run_id, until="interrupt")
        card = evs[-1]
        for s in servers.values():
            s[0].send_signal(signal.SIGSTOP)
            stopped.append(s[0])
        await _approve_on(http, gws[1], run_id, card.interrupt)
        deadline = time.monotonic() + 30
        while (
            await db.fetchval("SELECT status FROM tool_call WHERE run_id = $1", run_id)
            != "executing"
        ):
            assert time.monotonic() < deadline, "the call never started"
            await asyncio.sleep(0.05)
        owner = str(await db.fetchval("SELECT lease_owner FROM run WHERE id = $1", run_id))
        dead = next(rt for rt in rts if owner.split(":")[1] == str(rt.pid))
        live = next(rt for rt in rts if rt is not dead)
        # `executing` is written when the call is claimed, before the request is sent: wait
        # until the request is in the (stopped) server's stdin, then kill inside the call.
        while _unread_stdin(servers[dead.pid][0].pid) == 0:
            assert time.monotonic() < deadline, "the request never reached the server"
            await asyncio.sleep(0.02)
        dead.kill()  # SIGKILL, inside write_file
        for p in stopped:
            p.send_signal(signal.SIGCONT)
        stopped.clear()
        _, alive = psutil.wait_procs(servers[dead.pid], timeout=20)
        assert not alive, "the dead runtime's server exited (its stdin's end), no orphan"
        # The dead runtime's server acted on the request it had been sent: the file is there.
        assert target.read_text() == content

        await c.close()
        c = Client(live.addr, token(TEST_SECRET, "alice"))
        rest = await c.events(run_id, after=card.sequence, timeout=40)
        assert types(rest)[-1] == "done", types(rest)
        assert "interrupt" not in types(rest), "no person was needed: " + str(types(rest))
        assert "fs__write_file ended: ok: Successfully wrote" in _said(rest), _said(rest)
        assert target.read_text() == content
        assert sorted(p.name for p in root.iterdir() if p.name.startswith("report")) == [
            "report.txt"
        ], "no temporary file left"
        status = await db.fetchval("SELECT status FROM tool_call WHERE run_id = $1", run_id)
        assert status == "succeeded", status
    finally:
        for p in stopped:
            p.send_signal(signal.SIGCONT)
        await db.close()
        await http.close()
        await c.close()
