"""The side door (seed 001): a tool the operator switched off (TETHER_TOOL_DENY), reached through
the resume path from a saved checkpoint, is blocked in enforce mode and counted (then left to the
grant check) in observe mode; the model is never offered it."""

from __future__ import annotations

import json
import urllib.request

import pytest
from tether_testkit.client import Client, token, types
from tether_testkit.inventory import abnormal_service
from tether_testkit.processes import free_port, start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast


def violations(metrics_url: str, mode: str) -> float:
    body = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    total = 0.0
    for line in body.splitlines():
        if line.startswith("tether_tool_gate_violations_total{") and f'mode="{mode}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize("mode", ["enforce", "observe"])
async def test_side_door_through_resume(private_env, private_db, mode):
    db = private_db
    port = free_port()
    proc = start_runtime(
        {
            **private_env,
            "TETHER_TOOL_GATE": mode,
            "TETHER_TOOL_DENY": "opspilot:delete_instance",
            "TETHER_METRICS_ADDR": f"127.0.0.1:{port}",
        },
        name=f"runtime-gate-{mode}",
    )
    metrics_url = f"http://127.0.0.1:{port}/metrics"
    try:
        c = Client(proc.addr, token(TEST_SECRET, "alice"))
        service, instance = await abnormal_service(db)
        victim = (await abnormal_service(db))[1]
        conv = await c.conversation()
        run = (await c.start(conv, f"restart the abnormal {service} instance")).run
        evs = await c.events(run.id, until="interrupt")
        # The saved state is rebuilt on resume: tamper with it the way a bug or an attacker would.
        cp = json.loads(await db.fetchval("SELECT checkpoint::text FROM run WHERE id = $1", run.id))
        cp["pending"][0]["tool"] = "delete_instance"
        cp["pending"][0]["args"] = {"service": victim.rsplit("-", 1)[0], "instance_id": victim}
        await db.execute(
            "UPDATE run SET checkpoint = $2::jsonb WHERE id = $1", run.id, json.dumps(cp)
        )
        before = violations(metrics_url, mode)
        await c.resume(run.id, evs[-1].interrupt.interrupt_id)
        rest = await c.events(run.id, after=evs[-1].sequence)
        assert types(rest)[-1] == "done"
        assert violations(metrics_url, mode) == before + 1
        status = await db.fetchval("SELECT status FROM inv_instance WHERE id = $1", victim)
        assert status == "abnormal", "the side door reached the inventory"
        assert "tool_started" not in types(rest)
        told = json.loads(
            await db.fetchval("SELECT checkpoint::text FROM run WHERE id = $1", run.id)
        )["messages"]
        outcome = next(json.loads(m["content"]) for m in told if m.get("name") == "delete_instance")
        # enforce: the gate stops it; observe: the gate counts it and the grant check (alice has
        # no instance.delete) stops it.
        assert outcome["outcome"] == ("blocked" if mode == "enforce" else "denied")
        await c.close()
    finally:
        proc.terminate()
