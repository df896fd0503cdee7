"""`tether seed-demo --reset`, run as the real command: after the approval walkthrough restarted
the demo's one abnormal instance (and someone scaled and revoked), the demo is back as first
seeded, while rows the demo did not create and the inventory's idempotency record stay."""

from __future__ import annotations

import asyncio
import subprocess
import uuid

import pytest
from tether_runtime import policy
from tether_testkit.inventory import abnormal_service
from tether_testkit.processes import tether_cli

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast

BAD = "payment-api-2"


async def run_tether(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(lambda: tether_cli(*args, env=env))


async def _state(db) -> dict[str, object]:
    inst = await db.fetchrow(
        "SELECT status, restart_count, last_restart FROM inv_instance WHERE id = $1", BAD
    )
    return {
        "status": inst["status"],
        "restart_count": inst["restart_count"],
        "last_restart": inst["last_restart"],
        "replicas": await db.fetchval(
            "SELECT replicas FROM inv_service WHERE name = 'payment-api' AND env = 'prod'"
        ),
        "errors": await db.fetchval(
            "SELECT count(*) FROM inv_error WHERE service = 'payment-api' AND env = 'prod'"
        ),
        "logs": await db.fetchval("SELECT count(*) FROM inv_log WHERE instance_id = $1", BAD),
        "alice_may_restart": await policy.granted(
            db, "alice", "instance.restart", "payment-api/prod"
        ),
    }


SEEDED = {
    "status": "abnormal",
    "restart_count": 0,
    "last_restart": None,
    "replicas": 3,
    "errors": 12,
    "logs": 4,
    "alice_may_restart": True,
}


async def test_reset_puts_the_demo_back_and_leaves_the_rest(base_env: dict[str, str], db) -> None:
    # What the walkthrough and a curious user leave behind.
    other, other_instance = await abnormal_service(db, "reset")
    key = f"reset-test:{uuid.uuid4().hex}"
    await db.execute(
        "INSERT INTO inv_operation (idempotency_key, operation, target, result) "
        "VALUES ($1, 'restart', $2, '{}'::jsonb)",
        key,
        BAD,
    )
    await db.execute(
        "UPDATE inv_instance SET status = 'healthy', restart_count = restart_count + 1, "
        "last_restart = now() WHERE id = $1",
        BAD,
    )
    await db.execute(
        "UPDATE inv_service SET replicas = 7 WHERE name = 'payment-api' AND env = 'prod'"
    )
    await db.execute("DELETE FROM inv_error WHERE service = 'payment-api' AND env = 'prod' AND id IN "
                     "(SELECT id FROM inv_error WHERE service = 'payment-api' LIMIT 5)")  # fmt: skip
    revoked = await run_tether(
        base_env,
        "grants",
        "revoke",
        "--user",
        "alice",
        "--action",
        "instance.restart",
        "--scope",
        "payment-api/*",  # the demo's grants are scoped per service
    )
    assert revoked.returncode == 0, revoked.stderr
    changed = await _state(db)
    assert changed["status"] == "healthy" and changed["replicas"] == 7
    assert changed["alice_may_restart"] is False

    # Plain seed-demo is idempotent: it adds what is missing and changes nothing that exists.
    plain = await run_tether(base_env, "seed-demo")
    assert plain.returncode == 0, plain.stderr
    after_plain = await _state(db)
    assert after_plain["status"] == "healthy" and after_plain["replicas"] == 7, after_plain
    assert after_plain["restart_count"] == changed["restart_count"]

    reset = await run_tether(base_env, "seed-demo", "--reset")
    assert reset.returncode == 0, reset.stderr
    assert "demo reset: opspilot as first seeded; demo grants restored" in reset.stdout
    assert await _state(db) == SEEDED
    # Twice is the same as once.
    again = await run_tether(base_env, "seed-demo", "--reset")
    assert again.returncode == 0, again.stderr
    assert await _state(db) == SEEDED

    # Not the demo's: untouched. The inventory's record of keys that acted: kept.
    assert await db.fetchval("SELECT status FROM inv_instance WHERE id = $1", other_instance) == (
        "abnormal"
    )
    assert await db.fetchval("SELECT count(*) FROM inv_service WHERE name = $1", other) == 1
    assert (
        await db.fetchval("SELECT count(*) FROM inv_operation WHERE idempotency_key = $1", key) == 1
    )


async def test_seed_demo_help_says_what_reset_does(base_env: dict[str, str]) -> None:
    out = await run_tether(base_env, "seed-demo", "--help")
    assert out.returncode == 0
    assert "--reset" in out.stdout and "as first seeded" in out.stdout


async def test_seed_demo_withdraws_the_global_grants_older_versions_seeded(
    base_env: dict[str, str], db
) -> None:
    await db.execute(
        "INSERT INTO \"grant\" (user_id, action, scope) VALUES ('bob', 'service.scale', '*') "
        "ON CONFLICT DO NOTHING"
    )
    assert await policy.granted(db, "bob", "service.scale", "payment-api/prod")
    out = await run_tether(base_env, "seed-demo")
    assert out.returncode == 0, out.stderr
    assert not await policy.granted(db, "bob", "service.scale", "payment-api/prod")
    assert await policy.granted(db, "bob", "service.scale", "checkout-web/prod")
    assert await policy.granted(db, "alice", "logs.read", "payment-api/staging")
