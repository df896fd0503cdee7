"""`make run` on a machine with neither Postgres nor Redis configured: embedded stores, one full run
through the browser API, a mailer campaign approved and counted at the demo's SMTP sink (its page),
then Ctrl-C stops every process it started."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
from pathlib import Path

import aiohttp
import psutil
import pytest
from tether_testkit.ports import free_port

REPO = Path(__file__).resolve().parents[2]
TOKEN_LINE = re.compile(r"^export TETHER_TOKEN=(\S+)$", re.M)
# Everything a parent shell could leak into `make run` that would point it elsewhere.
SCRUBBED = ("DATABASE_URL", "REDIS_URL", "TETHER_ENV", "TETHER_RUNTIME_TARGET", "TETHER_JWT_SECRET",
            "TETHER_EMBEDDED_STORES", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")  # fmt: skip


class Output:
    """Drains the process's output (so it never blocks on a full pipe) and lets a test wait for a
    pattern."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.text = ""
        self._changed = asyncio.Event()
        self.task = asyncio.create_task(self._read(stream))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.text += line.decode(errors="replace")
            self._changed.set()
        self._changed.set()

    async def wait_for(self, pattern: re.Pattern[str]) -> re.Match[str]:
        while True:
            if match := pattern.search(self.text):
                return match
            if self.task.done():
                raise AssertionError("make run exited before it was ready:\n" + self.text)
            self._changed.clear()
            await self._changed.wait()


async def _sse_until(resp: aiohttp.ClientResponse, stop: str) -> list[dict[str, object]]:
    """Events in order until one of type `stop` or a terminal event."""
    seen: list[dict[str, object]] = []
    async for raw in resp.content:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("data:"):
            seen.append(json.loads(line[5:].strip()))
            if seen[-1]["type"] in (stop, "done", "error", "cancelled"):
                return seen
    return seen


async def _sse_types(resp: aiohttp.ClientResponse) -> list[str]:
    """Event types in order until a terminal event."""
    seen: list[str] = []
    async for raw in resp.content:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("data:"):
            event = json.loads(line[5:].strip())
            seen.append(event["type"])
            if event["type"] in ("done", "error", "cancelled"):
                return seen
    return seen


async def _mailer_campaign(base: str, token: str, printed: str) -> None:
    """The mailer, loaded by `make run` through TETHER_AGENTS: a card with the recipient count,
    approval, and the three trial customers' emails on the sink's page."""
    sink = re.search(r"^  Mail sink  (http://\S+?)/? ", printed, re.M)
    assert sink, printed
    auth = {"Authorization": f"Bearer {token}"}
    async with asyncio.timeout(60), aiohttp.ClientSession(headers=auth) as client:
        async with client.post(f"{base}/v1/conversations", json={}) as resp:
            conversation = (await resp.json())["conversation"]["id"]
        text = "email the trial segment about the new pricing"
        async with client.post(
            f"{base}/v1/conversations/{conversation}/runs", json={"text": text, "agent": "mailer"}
        ) as resp:
            assert resp.status == 201, await resp.text()
            run = (await resp.json())["run"]["id"]
        sse = {"Accept": "text/event-stream"}
        async with client.get(f"{base}/v1/runs/{run}/events", headers=sse) as resp:
            card = (await _sse_until(resp, "interrupt"))[-1]
        assert card["type"] == "interrupt", card
        assert card["payload"]["target"] == "segment trial (3 recipients)", card  # type: ignore[index]
        answer = {"interruptId": card["interruptId"], "decision": "approve", "idempotencyKey": run}
        async with client.post(f"{base}/v1/runs/{run}/resume", json=answer) as resp:
            assert resp.status == 202, await resp.text()
        async with client.get(
            f"{base}/v1/runs/{run}/events?after={card['sequence']}", headers=sse
        ) as resp:
            rest = [e["type"] for e in await _sse_until(resp, "done")]
        assert "tool_progress" in rest and rest[-1] == "done", rest
        async with client.get(f"{sink.group(1)}/messages") as resp:
            received = await resp.json()
        assert received["per_recipient"] == {
            "ada@example.com": 1,
            "grace@example.com": 1,
            "linus@example.com": 1,
        }, received


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_make_run_serves_a_run_and_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    http = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env |= {
        "TETHER_DEV_DIR": str(tmp_path / "dev"),
        "TETHER_HTTP_ADDR": http,
        "TETHER_GRPC_ADDR": f"127.0.0.1:{free_port()}",
        "TETHER_DRAIN_S": "5",
    }
    proc = await asyncio.create_subprocess_exec(
        # `-o` the proto stamp: this session already imports the generated code, which a `make gen`
        # triggered by a newer pyproject.toml would delete and rewrite under the other tests.
        "make", "--no-print-directory", "-o", "libs/proto/src/tether/.generated", "run",
        cwd=REPO, env=env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # its own process group, as a terminal would give it
    )  # fmt: skip
    out = Output(proc.stdout)  # type: ignore[arg-type]
    started: list[psutil.Process] = []
    try:
        # Cold start: uv sync (no-op here), initdb, migrate, seed, two services.
        async with asyncio.timeout(180):
            token = (await out.wait_for(TOKEN_LINE)).group(1)
        started = psutil.Process(proc.pid).children(recursive=True)
        names = " ".join(" ".join(p.cmdline()) for p in started if p.is_running())
        for expected in ("postgres", "redis-server", "tether_cli.main runtime",
                         "tether_cli.main gateway", "tether_mailer.mailbox"):  # fmt: skip
            assert expected in names, f"{expected} not running under make run: {names}"

        base = f"http://{http}"
        auth = {"Authorization": f"Bearer {token}"}
        async with asyncio.timeout(60), aiohttp.ClientSession(headers=auth) as client:
            async with client.get(f"{base}/readyz") as resp:
                assert resp.status == 200
            async with client.post(f"{base}/v1/conversations", json={}) as resp:
                assert resp.status == 201, await resp.text()
                conversation = (await resp.json())["conversation"]["id"]
            text = "show me the recent errors of payment-api"
            async with client.post(
                f"{base}/v1/conversations/{conversation}/runs", json={"text": text}
            ) as resp:
                assert resp.status == 201, await resp.text()
                run = (await resp.json())["run"]["id"]
            async with client.get(
                f"{base}/v1/runs/{run}/events", headers={"Accept": "text/event-stream"}
            ) as resp:
                assert resp.status == 200, await resp.text()
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                types = await _sse_types(resp)
        assert types[0] == "run_started" and types[-1] == "done", types
        assert "text_delta" in types, types
        await _mailer_campaign(base, token, out.text)
    finally:
        # Ctrl-C in a terminal: SIGINT to the whole foreground process group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await out.task

    assert "Tether stopped." in out.text, out.text
    _, alive = psutil.wait_procs(started, timeout=10)
    leftovers = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not leftovers, f"still running after Ctrl-C: {leftovers}\n{out.text}"
    assert (tmp_path / "dev" / "postgres" / "pgdata" / "PG_VERSION").exists()
