"""`tether webhooks` as an operator runs it (a subprocess on a database of the test's own): bad
input is refused with a clear message and changes nothing; the secret is stored, never shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tether_testkit.processes import tether_cli

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast

SECRET = "operator-secret-0123456789"


async def test_add_list_remove_and_refusals(
    private_env: dict[str, str], private_db: Any, tmp_path: Path
) -> None:
    good = tmp_path / "secret"
    good.write_text(SECRET + "\n")
    short = tmp_path / "short"
    short.write_text("tiny")
    refusals = [
        (["ftp://x/y", "--secret-file", str(good)], "http(s)"),
        (["https://u:p@x/y", "--secret-file", str(good)], "credentials"),
        (["https://x/y", "--secret-file", str(good), "--events", "run.exploded"], "unknown"),
        (["https://x/y", "--secret-file", str(short)], "at least 16"),
        (["https://x/y", "--secret-file", str(tmp_path / "missing")], "cannot read"),
    ]
    for args, why in refusals:
        out = tether_cli("webhooks", "add", *args, env=private_env)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert why in out.stderr
    assert await private_db.fetchval("SELECT count(*) FROM webhook_endpoint") == 0

    out = tether_cli(
        "webhooks", "add", "https://hooks.example/t", "--secret-file", str(good),
        "--events", "run.failed,interrupt.raised", env=private_env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    endpoint = out.stdout.split()[1].rstrip(":")
    assert (
        await private_db.fetchval("SELECT secret FROM webhook_endpoint WHERE id = $1", endpoint)
        == SECRET
    )
    listing = tether_cli("webhooks", "list", env=private_env)
    assert endpoint in listing.stdout and "interrupt.raised,run.failed" in listing.stdout
    none_dead = tether_cli("webhooks", "deliveries", "--status", "dead", env=private_env)
    assert none_dead.returncode == 0
    for text in (out.stdout, out.stderr, listing.stdout, none_dead.stdout):
        assert SECRET not in text
    # A dead delivery made due again by an operator, once the receiver works.
    await private_db.execute("INSERT INTO conversation (id, user_id) VALUES ('conv_c', 'u')")
    await private_db.execute(
        "INSERT INTO message (id, conversation_id, role, content) VALUES ('msg_c', 'conv_c', "
        "'user', 'x')"
    )
    run = await private_db.fetchval(
        "INSERT INTO run (id, conversation_id, user_id, user_message_id, agent, status) "
        "VALUES ('run_c', 'conv_c', 'u', 'msg_c', 'opspilot', 'failed') RETURNING id"
    )
    await private_db.execute(
        "INSERT INTO webhook_delivery (id, event_id, event_type, endpoint_id, run_id, payload, "
        "status, attempts, last_error) VALUES ('d1', 'e1', 'run.failed', $1, $2, '{}', 'dead', "
        "12, 'HTTP 500')",
        endpoint,
        run,
    )
    dead = tether_cli("webhooks", "deliveries", "--status", "dead", env=private_env)
    assert "e1" in dead.stdout and "HTTP 500" in dead.stdout
    redo = tether_cli("webhooks", "redeliver", endpoint, env=private_env)
    assert redo.returncode == 0 and "1 dead deliveries" in redo.stdout, redo.stderr
    row = await private_db.fetchrow("SELECT status, attempts FROM webhook_delivery")
    assert (row["status"], row["attempts"]) == ("pending", 0)
    assert tether_cli("webhooks", "remove", endpoint, env=private_env).returncode == 0
    again = tether_cli("webhooks", "remove", endpoint, env=private_env)
    assert again.returncode == 1 and "no endpoint" in again.stderr
