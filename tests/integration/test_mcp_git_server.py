"""Issue 31 against the real thing: `mcp-server-git` from PyPI, unmodified, over stdio, as the
`gitops` test agent's tools (tests/tether_testkit/mcp_agent.py), on a temporary repository.

- git_status and git_log (readOnlyHint: true) run at once, no card;
- git_commit and git_create_branch (readOnlyHint: false, idempotentHint: false) raise cards,
  approved through another gateway pod than the one that started the run: one commit, one branch;
- git_reset, denied by the agent's override, is neither offered nor callable;
- the runtime SIGKILLed inside three git_commit calls (a pre-commit hook holds them): the new
  runtime raises outcome_unknown for each, never calls again on its own, and each answer (retry,
  mark done, abandon) ends its run as it says; the dead runtime's git server exits (its stdin's
  end of file), no orphan."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
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
from tether_testkit.processes import Proc, start_gateway, start_runtime, tether_cli
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.security import bearer

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(240)]

HOOK = """#!/bin/sh
# Holds a commit open while the test's hold file exists, after saying it started.
echo started >> "{marks}"
while [ -e "{hold}" ]; do sleep 0.1; done
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.email", "t@example.com")
    _git(path, "config", "user.name", "Tether Test")
    (path / "README").write_text("hello\n")
    _git(path, "add", "README")
    _git(path, "commit", "-qm", "first")
    hook = path / ".git" / "hooks" / "pre-commit"
    hook.write_text(HOOK.format(marks=tmp_path / "marks", hold=tmp_path / "hold"))
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
async def env(
    base_env: dict[str, str], admin_dsn: str, repo: Path
) -> AsyncIterator[dict[str, str]]:
    dsn = await stores.create_fresh_database(admin_dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await grants.add(conn, "alice", "mcp.git", "*")
    finally:
        await conn.close()
    yield {
        **base_env,
        "DATABASE_URL": dsn,
        "TETHER_AGENTS": "tether_testkit.mcp_agent:gitops",
        "TETHER_DEFAULT_AGENT": "gitops",
        "MCP_GIT_REPO": str(repo),
        "PYTHONPATH": os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH", "")])),
    }
    await stores.drop_database(admin_dsn, dsn)


def _call(tool: str, **args: Any) -> str:
    return f"call {tool} {json.dumps(args)}"


def _said(evs: list[events_pb2.RunEvent]) -> str:
    """What the model answered (its streamed text)."""
    return "".join(e.text_delta.delta for e in evs if types([e]) == ["text_delta"])


def _commits(repo: Path, message: str) -> int:
    return _git(repo, "log", "--format=%s", "main").splitlines().count(message)


def _git_servers(proc: Proc) -> list[psutil.Process]:
    return [
        p
        for p in psutil.Process(proc.pid).children(recursive=True)
        if "mcp_server_git" in " ".join(p.cmdline())
    ]


async def _http(
    http: aiohttp.ClientSession, method: str, url: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    async with http.request(method, url, json=body, headers=bearer("alice")) as r:
        return r.status, await r.json(content_type=None)


async def test_reads_at_once_writes_by_card_approved_on_another_gateway(env, procs, repo):
    rt = start_runtime(env, name="mcp-git-rt")
    procs.append(rt)
    gw_a, gw_b = await asyncio.gather(
        asyncio.to_thread(start_gateway, env, rt.addr, name="mcp-git-gw-a"),
        asyncio.to_thread(start_gateway, env, rt.addr, name="mcp-git-gw-b"),
    )
    procs.extend([gw_a, gw_b])
    c = Client(rt.addr, token(TEST_SECRET, "alice"))
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    try:
        # The agent's tools, as ListAgents shows them: the server's, namespaced, with their
        # derived effects; git_reset (denied) is not among them.
        status, listing = await _http(http, "GET", f"{gw_a.addr}/v1/agents")
        assert status == 200, listing
        tools = {t["name"]: t for a in listing["agents"] for t in a["tools"]}
        assert tools["git__git_status"]["effect"] == "read"
        assert tools["git__git_commit"]["effect"] == "write"
        assert tools["git__git_commit"]["action"] == "mcp.git"
        # Where each came from (AgentTool.origin): the server, and what set its effect.
        assert tools["git__git_status"]["origin"].startswith(
            "MCP stdio server 'git', tool 'git_status': effect read (readOnlyHint: true)"
        ), tools["git__git_status"]
        assert "git__git_reset" not in tools

        # Reads run at once.
        for tool in ("git__git_status", "git__git_log"):
            conv = await c.conversation()
            run = (await c.start(conv, _call(tool, repo_path=str(repo)))).run
            evs = await c.events(run.id)
            assert types(evs)[-1] == "done", types(evs)
            assert "interrupt" not in types(evs)
            finished = next(e.tool_finished for e in evs if types([e]) == ["tool_finished"])
            assert finished.status == events_pb2.TOOL_STATUS_SUCCESS, finished
            assert_dense(evs)
        # A denied tool is blocked by the gate, never called.
        conv = await c.conversation()
        run = (await c.start(conv, _call("git__git_reset", repo_path=str(repo)))).run
        evs = await c.events(run.id)
        assert "ended: blocked" in _said(evs), _said(evs)

        # Writes raise cards; started on gateway A, approved on gateway B.
        writes = [
            ("git__git_commit", {"repo_path": str(repo), "message": "by tether"}),
            ("git__git_create_branch", {"repo_path": str(repo), "branch_name": "feature-x"}),
        ]
        (repo / "README").write_text("changed\n")
        _git(repo, "add", "README")
        for tool, args in writes:
            status, data = await _http(
                http, "POST", f"{gw_a.addr}/v1/conversations", {"title": "t"}
            )
            assert status == 201, data
            conv = data["conversation"]["id"]
            body = {"text": _call(tool, **args), "idempotencyKey": uuid.uuid4().hex}
            status, data = await _http(
                http, "POST", f"{gw_a.addr}/v1/conversations/{conv}/runs", body
            )
            assert status == 201, data
            run_id = data["run"]["id"]
            evs = await c.events(run_id, until="interrupt")
            card = evs[-1].interrupt
            assert card.kind == resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION
            assert card.payload.tool == tool
            assert card.payload.target == tool.removeprefix("git__")
            assert "repo_path=" in card.payload.parameter_summary
            assert "MCP server 'git'" in card.payload.details
            # Nothing happened before the approval.
            if tool == "git__git_commit":
                assert _commits(repo, "by tether") == 0
            answer = {
                "interruptId": card.interrupt_id,
                "decision": "approve",
                "idempotencyKey": uuid.uuid4().hex,
            }
            status, data = await _http(http, "POST", f"{gw_b.addr}/v1/runs/{run_id}/resume", answer)
            assert status == 202, data
            rest = await c.events(run_id, after=evs[-1].sequence)
            assert types(rest)[-1] == "done", types(rest)
            assert f"{tool} ended: ok" in _said(rest), _said(rest)
            # A second click changes nothing.
            status, _ = await _http(http, "POST", f"{gw_b.addr}/v1/runs/{run_id}/resume", answer)
            assert status in (200, 202, 409)
        assert _commits(repo, "by tether") == 1
        assert "feature-x" in _git(repo, "branch", "--list", "feature-x")
    finally:
        await http.close()
        await c.close()


async def test_runtime_killed_inside_git_commit_outcome_unknown_and_each_answer(env, procs, repo):
    hold, marks = repo.parent / "hold", repo.parent / "marks"
    hold.touch()
    first = start_runtime(env, name="mcp-git-rt-1")
    procs.append(first)
    c = Client(first.addr, token(TEST_SECRET, "alice"))
    db = await asyncpg.connect(env["DATABASE_URL"])
    paused = []
    for n in (1, 2, 3):
        (repo / f"f{n}").write_text(f"{n}\n")
        _git(repo, "add", f"f{n}")
        conv = await c.conversation()
        run = (
            await c.start(conv, _call("git__git_commit", repo_path=str(repo), message=f"c{n}"))
        ).run
        evs = await c.events(run.id, until="interrupt")
        paused.append((run.id, evs[-1]))
    for run_id, intr in paused:
        await c.resume(run_id, intr.interrupt.interrupt_id)
    deadline = time.monotonic() + 30
    while not (
        marks.exists()
        and await db.fetchval("SELECT count(*) FROM tool_call WHERE status = 'executing'") == 3
    ):
        assert time.monotonic() < deadline, "the commits never started"
        await asyncio.sleep(0.05)
    servers = _git_servers(first)
    assert len(servers) == 1, "one session (one server process) for every run"
    first.kill()  # SIGKILL, inside git_commit
    await c.close()
    hold.unlink()  # the dead runtime's server may finish what it holds; nobody knows
    _, alive = psutil.wait_procs(servers, timeout=20)
    assert not alive, "the dead runtime's git server exited (stdin closed), no orphan"
    before = {n: _commits(repo, f"c{n}") for n in (1, 2, 3)}

    second = start_runtime(env, name="mcp-git-rt-2")
    procs.append(second)
    c = Client(second.addr, token(TEST_SECRET, "alice"))
    try:
        unknown = {}
        for run_id, intr in paused:
            rest = await c.events(run_id, after=intr.sequence, until="interrupt")
            raised = rest[-1].interrupt
            assert raised.kind == resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN, raised
            assert raised.payload.tool == "git__git_commit"
            assert "cannot tell" in raised.payload.details
            unknown[run_id] = rest[-1]
        # Never called again on the engine's own initiative.
        await asyncio.sleep(1)
        assert {n: _commits(repo, f"c{n}") for n in (1, 2, 3)} == before
        (r1, _), (r2, _), (r3, _) = paused
        decisions = {
            r1: events_pb2.DECISION_RETRY,
            r2: events_pb2.DECISION_MARK_DONE,
            r3: events_pb2.DECISION_ABANDON,
        }
        # Whatever the dead server committed, something is staged for the retry to commit.
        (repo / "f4").write_text("4\n")
        _git(repo, "add", "f4")
        for run_id, decision in decisions.items():
            await c.resume(run_id, unknown[run_id].interrupt.interrupt_id, decision)
        ends = {}
        for run_id in decisions:
            rest = await c.events(run_id, after=unknown[run_id].sequence)
            assert types(rest)[-1] == "done", types(rest)
            assert "tool_finished" in types(rest)
            ends[run_id] = _said(rest)
        assert "ended: ok" in ends[r1], ends[r1]
        assert "ended: marked_done" in ends[r2], ends[r2]
        assert "ended: abandoned" in ends[r3], ends[r3]
        after = {n: _commits(repo, f"c{n}") for n in (1, 2, 3)}
        # Retry: called once more (GitPython commits the index as it is, one commit); the
        # others: never again.
        assert after[2] == before[2] and after[3] == before[3]
        assert after[1] == before[1] + 1
        statuses = dict(await db.fetch("SELECT run_id, status FROM tool_call"))
        assert [statuses[r] for r in (r1, r2, r3)] == ["succeeded", "succeeded", "rejected"]
    finally:
        await c.close()
        await db.close()


def test_mcp_server_git_is_the_pypi_package() -> None:
    """The server under test is the published one, run as its module (not a copy)."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import mcp_server_git, importlib.metadata as m; "
            "print(m.version('mcp-server-git'), mcp_server_git.__file__)",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "site-packages" in out, out


def test_tether_agents_lists_mcp_tools_with_effects_and_origins(env) -> None:
    """`tether agents` connects the agent's MCP servers as the runtime does (the git server
    started and stopped again) and lists their tools: each derived effect, its grant, what
    happens after a crash, and where it came from; a denied tool is not listed."""
    out = tether_cli("agents", "--json", env=env)
    assert out.returncode == 0, out.stderr
    (agent,) = [a for a in json.loads(out.stdout)["agents"] if a["name"] == "gitops"]
    tools = {t["name"]: t for t in agent["tools"]}
    assert "git__git_reset" not in tools
    status, commit = tools["git__git_status"], tools["git__git_commit"]
    assert status["effect"] == "read" and "effect read (readOnlyHint: true)" in status["origin"]
    assert commit["effect"] == "write" and commit["action"] == "mcp.git"
    assert commit["at_most_once"], commit
    assert commit["origin"].startswith("MCP stdio server 'git', tool 'git_commit': effect write")
    assert "after a crash outcome_unknown" in commit["origin"], commit["origin"]
    text = tether_cli("agents", env=env)
    assert text.returncode == 0, text.stderr
    assert "from: MCP stdio server 'git', tool 'git_commit'" in text.stdout, text.stdout
