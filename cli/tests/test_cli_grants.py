"""`tether grants add|revoke|list`, run as the real command against the session's fresh database,
and a change that applies to a run already waiting for approval."""

from __future__ import annotations

import asyncio
import subprocess
import uuid

import grpc
import pytest
from tether.runtime.v1 import events_pb2
from tether_runtime import policy
from tether_testkit.client import Client, token, types
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.processes import tether_cli
from tether_testkit.secrets import TEST_SECRET

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast


async def run_tether(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(lambda: tether_cli(*args, env=env))


def cli_env(base_env: dict[str, str]) -> dict[str, str]:
    import os

    return {**os.environ, **base_env}


async def test_add_list_revoke(base_env: dict[str, str], db) -> None:
    env = cli_env(base_env)
    u = f"cli-{uuid.uuid4().hex[:8]}"
    add = await run_tether(
        env, "grants", "add", "--user", u, "--action", "instance.restart", "--scope", "pay/*"
    )
    assert add.returncode == 0, add.stderr
    assert f"granted: {u} may instance.restart on pay/*" in add.stdout
    again = await run_tether(
        env, "grants", "add", "--user", u, "--action", "instance.restart", "--scope", "pay/*"
    )
    assert again.returncode == 0 and "already granted" in again.stdout
    assert await policy.granted(db, u, "instance.restart", "pay/prod")
    assert not await policy.granted(db, u, "instance.restart", "billing/prod")

    listed = await run_tether(env, "grants", "list", "--user", u)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["USER", "ACTION", "SCOPE"]
    assert [line.split() for line in lines[1:]] == [[u, "instance.restart", "pay/*"]]
    everyone = await run_tether(env, "grants", "list")
    assert any(
        line.split()[:2] == ["alice", "instance.restart"] for line in everyone.stdout.splitlines()
    )

    revoke = await run_tether(
        env, "grants", "revoke", "--user", u, "--action", "instance.restart", "--scope", "pay/*"
    )
    assert revoke.returncode == 0, revoke.stderr
    assert not await policy.granted(db, u, "instance.restart", "pay/prod")
    # Revoking what does not exist (a typo) fails loudly rather than looking done.
    missing = await run_tether(
        env, "grants", "revoke", "--user", u, "--action", "instance.restart", "--scope", "pay/*"
    )
    assert missing.returncode == 1
    assert "nothing revoked" in missing.stderr


async def test_bad_input_exits_2_with_a_clear_message(base_env: dict[str, str], db) -> None:
    env = cli_env(base_env)
    u = f"cli-{uuid.uuid4().hex[:8]}"
    cases = [
        (["--action", "", "--scope", "*"], "action must be a non-empty name"),
        (["--action", "instance.restart", "--scope", "pay//prod"], "empty segment"),
        (["--action", "instance.restart", "--scope", "pay/"], "empty segment"),
        (["--action", "instance.restart", "--scope", "pay*/prod"], "no partial wildcards"),
    ]
    for args, message in cases:
        for op in ("add", "revoke"):
            out = await run_tether(env, "grants", op, "--user", u, *args)
            assert out.returncode == 2, (op, args, out.stdout, out.stderr)
            assert message in out.stderr, out.stderr
            assert "Traceback" not in out.stderr
    # A missing flag is argparse's usage error, also exit 2.
    out = await run_tether(env, "grants", "add", "--user", u, "--scope", "*")
    assert out.returncode == 2 and "--action" in out.stderr
    assert (await run_tether(env, "grants", "list", "--user", u)).stdout.splitlines()[1:] == []


async def test_revoke_applies_to_a_run_already_waiting(
    base_env: dict[str, str], runtime, db
) -> None:
    """Granted when the card was raised, revoked (by the CLI) before the click: the approval is
    refused and the tool never runs; granted again, the same card can be approved."""
    env = cli_env(base_env)
    u = f"cli-{uuid.uuid4().hex[:8]}"
    grant = ["--user", u, "--action", "instance.restart", "--scope", "*"]
    assert (await run_tether(env, "grants", "add", *grant)).returncode == 0
    service, instance = await abnormal_service(db, prefix="cli")
    c = Client(runtime.addr, token(TEST_SECRET, u))
    try:
        run = (
            await c.start(await c.conversation(), f"restart the abnormal {service} instance")
        ).run
        evs = await c.events(run.id, until="interrupt")
        assert types(evs)[-1] == "interrupt"
        interrupt_id = evs[-1].interrupt.interrupt_id

        assert (await run_tether(env, "grants", "revoke", *grant)).returncode == 0
        try:
            await c.resume(run.id, interrupt_id, events_pb2.DECISION_APPROVED)
            raise AssertionError("approved without a grant")
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED, err
        assert await executions(db, instance) == 0

        assert (await run_tether(env, "grants", "add", *grant)).returncode == 0
        await c.resume(run.id, interrupt_id, events_pb2.DECISION_APPROVED)
        rest = await c.events(run.id, after=evs[-1].sequence)
        assert types(rest)[-1] == "done"
        assert await executions(db, instance) == 1
    finally:
        await c.close()
