"""`tether chat` driven through a real terminal (pexpect, a pty) against a real runtime and gateway
on a database of this module's own: an approval, a rejection, a choice and a form answered
inline (bad answers asked again, the gateway's 422 included), Ctrl-C cancelling a run, and the
gateway SIGKILLed mid-answer and restarted on its port while the chat reconnects: the whole
transcript shows every piece of text once and no line twice. Then `--json` for scripts and
`tether runs get|list|cancel|events`."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import asyncpg
import pexpect
import pytest
from tether_testkit import stores
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.processes import Proc, start_gateway, start_runtime, tether_cli

pytestmark = pytest.mark.timeout(180)

# Slow enough that a gateway restart lands in the middle of an answer's text.
DELAY_S = "0.05"


class System:
    """This module's runtime and gateway; the gateway may be replaced on the same port."""

    def __init__(self, env: dict[str, str], runtime: Proc, gateway: Proc) -> None:
        self.env = env
        self.runtime = runtime
        self.gateway = gateway

    @property
    def url(self) -> str:
        return self.gateway.addr

    def restart_gateway(self) -> None:
        self.gateway.kill()
        port = int(self.url.rsplit(":", 1)[1])
        self.gateway = start_gateway(self.env, self.runtime.addr, name="gateway-chat", port=port)

    def sql(self, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        async def go() -> Any:
            conn = await asyncpg.connect(self.env["DATABASE_URL"])
            try:
                return await fn(conn)
            finally:
                await conn.close()

        return asyncio.run(go())


@pytest.fixture(scope="module")
def system(admin_dsn: str, base_env: dict[str, str]) -> Iterator[System]:
    dsn = asyncio.run(stores.create_fresh_database(admin_dsn))
    env = {**base_env, "DATABASE_URL": dsn, "TETHER_SCRIPTED_DELAY_S": DELAY_S}
    runtime = start_runtime(env, name="runtime-chat")
    gateway = start_gateway(env, runtime.addr, name="gateway-chat")
    sys_ = System(env, runtime, gateway)
    yield sys_
    sys_.gateway.terminate()
    runtime.terminate()
    asyncio.run(stores.drop_database(admin_dsn, dsn))


class Session:
    """One `tether chat` in a pty, with everything it printed kept."""

    def __init__(self, system: System, *args: str) -> None:
        self.log = io.StringIO()
        env = {**os.environ, **system.env, "NO_COLOR": "1", "TERM": "dumb"}
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "tether_cli.main", "chat", "--url", system.url, "--user", "alice", *args],
            env=env,
            encoding="utf-8",
            timeout=40,
            dimensions=(50, 250),
        )
        self.child.logfile_read = self.log

    def expect(self, pattern: str) -> str:
        """Wait for `pattern` (a literal); the text printed before it."""
        self.child.expect_exact(pattern)
        return str(self.child.before).replace("\r\n", "\n")

    def send(self, line: str) -> None:
        self.child.sendline(line)

    def leave(self) -> int:
        self.child.sendeof()
        self.child.expect(pexpect.EOF, timeout=20)
        self.child.close()
        return int(self.child.exitstatus if self.child.exitstatus is not None else -1)

    def transcript(self) -> str:
        return self.log.getvalue().replace("\r\n", "\n")


def _unique_lines(text: str) -> None:
    lines = [ln for ln in text.split("\n") if ln.strip()]
    repeated = {ln for ln in lines if lines.count(ln) > 1}
    assert not repeated, f"lines printed twice: {repeated}\n{text}"


def test_approve_inline(system: System) -> None:
    service, instance = system.sql(lambda c: abnormal_service(c, prefix="chat"))
    s = Session(system)
    s.expect("you> ")
    s.send(f"restart the abnormal {service} instance")
    card = s.expect("approve? [y/n] ")
    assert "approval needed: Restart instance  [risk: high]" in card
    assert f"target:  instance {instance} ({service}/prod)" in card
    assert f"find_instances: 1 instance(s): {instance} (abnormal)" in card
    s.send("y")
    after = s.expect("you> ")
    assert "→ approved" in after
    assert f"opspilot> Done: restarted {instance}; it is healthy." in after
    assert "(done · 3 model steps" in after
    assert s.leave() == 0
    assert system.sql(lambda c: executions(c, instance)) == 1
    _unique_lines(s.transcript())


def test_reject_inline(system: System) -> None:
    service, instance = system.sql(lambda c: abnormal_service(c, prefix="chat"))
    s = Session(system)
    s.expect("you> ")
    s.send(f"restart the abnormal {service} instance")
    s.expect("approve? [y/n] ")
    s.send("maybe")
    s.expect("answer y (approve) or n (reject)")
    s.expect("approve? [y/n] ")
    s.send("n")
    after = s.expect("you> ")
    assert "→ rejected" in after
    assert (
        f"opspilot> Understood: I did not touch instance {instance}. Nothing was changed." in after
    )
    assert s.leave() == 0
    assert system.sql(lambda c: executions(c, instance)) == 0
    status = system.sql(
        lambda c: c.fetchval("SELECT status FROM inv_instance WHERE id = $1", instance)
    )
    assert status == "abnormal"


def test_pick_an_option_and_fill_a_form_inline(system: System) -> None:
    service, first = system.sql(lambda c: abnormal_service(c, prefix="chat"))
    second = f"{service}-2"
    system.sql(
        lambda c: c.execute(
            "INSERT INTO inv_instance (id, service, env, status) "
            "VALUES ($1, $2, 'prod', 'abnormal')",
            second,
            service,
        )
    )
    s = Session(system)
    s.expect("you> ")
    s.send(f"restart the abnormal {service} instance")
    card = s.expect("pick one [1-2] ")
    assert f"choose one: Restart which {service} instance?" in card
    assert f"1) {first} (abnormal, 0 restarts)" in card
    assert f"2) {second} (abnormal, 0 restarts)" in card
    s.send("3")
    s.expect("give a number from 1 to 2")
    s.expect("pick one [1-2] ")
    s.send("2")
    card = s.expect("approve? [y/n] ")
    assert f"instance {second}" in card
    s.send("y")
    s.expect(f"Done: restarted {second}; it is healthy.")
    s.expect("you> ")
    assert system.sql(lambda c: executions(c, second)) == 1
    assert system.sql(lambda c: executions(c, first)) == 0

    # A form: a value that is not a number and one out of range are asked again here; a JSON
    # answer goes to the gateway unchecked and its 422 INVALID_ANSWER is asked again too.
    s.send(f"scale {service}")
    question = "replicas (integer, 0-50, required) the new replica count (0-50): "
    card = s.expect(question)
    assert f"input needed: Scale {service}" in card
    s.send("lots")
    s.expect("'lots' is not a whole number")
    s.expect(question)
    s.send("51")
    s.expect("at most 50")
    s.expect(question)
    s.send('{"replicas": 99}')
    s.expect("not accepted: replicas: 99 is greater than the maximum of 50")
    s.expect(question)
    s.send("3")
    s.expect("→ responded")
    card = s.expect("approve? [y/n] ")
    assert "1 replicas now -> 3" in card
    s.send("y")
    s.expect("(done ·")
    s.expect("you> ")
    assert s.leave() == 0
    replicas = system.sql(
        lambda c: c.fetchval("SELECT replicas FROM inv_service WHERE name = $1", service)
    )
    assert replicas == 3


def test_gateway_restart_mid_answer_shows_nothing_twice(system: System) -> None:
    n = 100
    s = Session(system)
    s.expect("you> ")
    s.send(f"stream {n} deltas")
    s.expect("opspilot> ")
    s.expect("t10 ")
    system.restart_gateway()  # SIGKILL, then a new gateway on the same port
    s.expect("reconnected: continuing after event")
    s.expect("(done ·")
    s.expect("you> ")
    assert s.leave() == 0
    text = s.transcript()
    _unique_lines(text)
    assert "connection lost" in text
    # Every piece of the answer once, in order, whatever lines the notices split it into.
    answer = text[text.index("opspilot> ") + len("opspilot> ") : text.index("(done ·")]
    pieces = re.findall(r"t\d+ ", answer)
    assert pieces == [f"t{i} " for i in range(n)], answer
    # The restart landed mid-answer: text came both before and after the reconnect.
    before, _, rest = answer.partition("reconnected:")
    assert re.findall(r"t\d+ ", before) and re.findall(r"t\d+ ", rest.split("\n", 1)[1])


def test_ctrl_c_offers_to_cancel_the_run(system: System) -> None:
    s = Session(system)
    s.expect("you> ")
    s.send("stream 400 deltas")
    s.expect("t5 ")
    s.child.sendintr()
    s.expect("? [y/N] ")
    s.send("y")
    after = s.expect("you> ")
    assert "cancelled: cancelled from tether chat" in after
    assert s.leave() == 4  # the last run was cancelled
    assert "t399 " not in s.transcript()


def _json_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_json_mode_and_the_runs_verbs(system: System) -> None:
    service, instance = system.sql(lambda c: abnormal_service(c, prefix="chat"))
    cli = {**system.env, "NO_COLOR": "1"}
    base = ["--url", system.url, "--user", "alice"]
    text = f"restart the abnormal {service} instance"
    done = tether_cli("chat", *base, "--json", "--approve", "--once", text, env=cli)
    assert done.returncode == 0, done.stderr
    evs = _json_lines(done.stdout)  # stdout is JSON only; the card went to stderr
    assert [e["sequence"] for e in evs] == list(range(1, len(evs) + 1))
    kinds = [e["type"] for e in evs]
    assert kinds[0] == "run_started" and kinds[-1] == "done"
    assert {"interrupt", "interrupt_resolved", "tool_finished", "text_delta"} <= set(kinds)
    assert next(e for e in evs if e["type"] == "interrupt_resolved")["decision"] == "approved"
    assert "approval needed: Restart instance" in done.stderr
    assert system.sql(lambda c: executions(c, instance)) == 1
    run_id, conv = evs[0]["runId"], evs[0]["conversationId"]

    got = tether_cli("runs", "get", run_id, *base, "--json", env=cli)
    run = json.loads(got.stdout)["run"]
    assert (run["status"], run["lastSequence"], run["conversationId"]) == (
        "completed",
        len(evs),
        conv,
    )
    human = tether_cli("runs", "get", run_id, *base, env=cli).stdout
    assert f"{run_id}  completed" in human and "usage:         3 model steps" in human

    logged = tether_cli("runs", "events", run_id, *base, "--json", env=cli)
    assert _json_lines(logged.stdout) == evs
    tail = tether_cli("runs", "events", run_id, *base, "--after", str(len(evs) - 1), env=cli)
    assert tail.stdout.split()[:1] == [str(len(evs))] and " done " in tail.stdout

    # A run left waiting (the input ends before the question is answered): exit 3, listed as
    # interrupted with its question, cancelled from `tether runs`, followed to its end.
    waiting = tether_cli(
        "chat", *base, "--json", "--conversation", conv, "--once", "scale " + service, env=cli
    )
    assert waiting.returncode == 3, waiting.stderr
    asked = _json_lines(waiting.stdout)[-1]
    assert (asked["type"], asked["kind"]) == ("interrupt", "provide_input")
    listed = json.loads(
        tether_cli("runs", "list", *base, "--conversation", conv, "--json", env=cli).stdout
    )["runs"]
    assert [r["id"] for r in listed] == [asked["runId"], run_id]
    table = tether_cli("runs", "list", *base, "--status", "interrupted", env=cli).stdout
    assert asked["runId"] in table and "provide_input" in table and run_id not in table
    cancelled = tether_cli("runs", "cancel", asked["runId"], *base, "--reason", "not now", env=cli)
    assert cancelled.stdout.strip() == f"cancelled: {asked['runId']}", cancelled.stderr
    followed = tether_cli(
        "runs", "events", asked["runId"], *base, "--follow", "--json", "--after", "1", env=cli
    )
    last = _json_lines(followed.stdout)[-1]
    assert (last["type"], last["reason"]) == ("cancelled", "not now")
    assert (
        json.loads(tether_cli("runs", "get", asked["runId"], *base, "--json", env=cli).stdout)[
            "run"
        ]["status"]
        == "cancelled"
    )
    missing = tether_cli("runs", "get", "run_nope", *base, env=cli)
    assert missing.returncode == 2 and "RUN_NOT_FOUND" in missing.stderr


def test_script_answers_from_stdin(system: System) -> None:
    """Without a terminal, each question's answer is the next line of stdin."""
    service, _ = system.sql(lambda c: abnormal_service(c, prefix="chat"))
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "tether_cli.main", "chat", "--url", system.url, "--user", "alice"],
        input=f"scale {service}\n7\ny\n",
        env={**os.environ, **system.env, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "→ responded" in proc.stdout and "→ approved" in proc.stdout
    assert "1 replicas now -> 7" in proc.stdout
    replicas = system.sql(
        lambda c: c.fetchval("SELECT replicas FROM inv_service WHERE name = $1", service)
    )
    assert replicas == 7
