"""`tether conformance`, run as a user runs it (a subprocess) against the machine's Postgres and
Redis: OpsPilot passes with its table; a tool that claims idempotent_by_key=True but charges once
per call is caught, by tool and kill point; a write tool without examples is not silently skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(600)]

TESTS_DIR = str(Path(__file__).resolve().parents[2] / "tests")
POINTS = ("before", "during", "after")


def _conformance(
    admin_dsn: str,
    redis_url: str,
    *args: str,
    agents: str = "",
    extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        **(extra or {}),
        "DATABASE_URL": admin_dsn,
        "REDIS_URL": redis_url,
        "TETHER_ENV": "dev",
        "PYTHONPATH": os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH")])),
    }
    if agents:
        env["TETHER_AGENTS"] = agents
    return subprocess.run(
        [sys.executable, "-m", "tether_cli.main", "conformance", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )


def _rows(out: str) -> dict[tuple[str, str], list[str]]:
    """The table's rows by (tool, kill point): their columns split on runs of two spaces."""
    rows = {}
    for line in out.splitlines():
        cols = [c.strip() for c in line.split("  ") if c.strip()]
        if len(cols) >= 10 and cols[2] in POINTS:
            rows[(cols[0], cols[2])] = cols
    return rows


def test_opspilot_passes_with_one_effect_per_key(admin_dsn: str, redis_url: str) -> None:
    r = _conformance(admin_dsn, redis_url, "opspilot", "--effects", "tether_opspilot.effects:count")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = _rows(r.stdout)
    for tool in ("restart_instance", "scale_service", "delete_instance"):
        for point in POINTS:
            cols = rows[(tool, point)]
            assert cols[3] == "idempotent_by_key"
            assert cols[6] == "1", f"{tool} killed {point}: effects {cols[6]}"
            assert cols[7].startswith("dense 1..")
            assert cols[8:] == ["done", "pass"], cols
        # Killed inside the call, the engine called it again with the same key.
        assert rows[(tool, "during")][4] == "called it again with the same key"
    assert "opspilot: PASS (9/9 rows pass)" in r.stdout
    # Not a failure, but said: the one read tool every user may call (logs need logs.read).
    notes = [line for line in r.stdout.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "read tool 'find_instances' declares no action" in notes[0], notes


def test_a_tool_lying_about_its_key_is_caught(admin_dsn: str, redis_url: str) -> None:
    r = _conformance(
        admin_dsn,
        redis_url,
        "broken",
        "--effects",
        "tether_testkit.broken_agent:effects",
        agents="tether_testkit.broken_agent:agent",
    )
    assert r.returncode == 1, r.stdout + r.stderr
    rows = _rows(r.stdout)
    # Killed before the call, there is only one call: nothing to catch.
    assert rows[("charge", "before")][-1] == "pass"
    for point in ("during", "after"):
        assert rows[("charge", point)][6] == "2"
        assert rows[("charge", point)][-1] == "FAIL"
        assert (
            f"FAIL charge #0 killed {point}: 2 effects for one idempotency key, although it "
            "claims idempotent_by_key=True"
        ) in r.stdout
    assert "broken: FAIL (1/3 rows pass)" in r.stdout


def test_a_write_tool_without_examples_is_not_skipped_silently(
    admin_dsn: str, redis_url: str
) -> None:
    agents = "tether_testkit.broken_agent:unexampled"
    r = _conformance(admin_dsn, redis_url, "unexampled", agents=agents)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "not checked: refund: declare examples=[...] on its @tool (FAIL)" in r.stdout
    r = _conformance(admin_dsn, redis_url, "unexampled", "--allow-missing-examples", agents=agents)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "allowed by --allow-missing-examples" in r.stdout


def test_mcp_write_tools_are_exercised_and_a_lying_one_caught(
    admin_dsn: str, redis_url: str, tmp_path: Path
) -> None:
    """The `webops` agent's MCP tools over Streamable HTTP: conformance connects its server,
    lists its write tools and kills the runtime around each call with example arguments from
    the inputSchema (set_flag, add_credit: examples; delete_item: a default) or the agent's
    override (keyed_send). add_credit says idempotentHint: true but adds a credit per call: 2
    effects for one key. plain_send offers no example: said, not passed."""
    from tether_testkit.mcp_http_proc import TOKEN, Server

    server = Server(tmp_path)
    server.start()
    env = {
        "MCP_HTTP_URL": server.url,
        "MCP_HTTP_AUTH": f"Bearer {TOKEN}",
        "MCP_HTTP_LOG": str(server.log),
    }
    tools = ("set_flag", "delete_item", "keyed_send", "add_credit", "plain_send")
    try:
        r = _conformance(
            admin_dsn,
            redis_url,
            "webops",
            "--effects",
            "tether_testkit.mcp_agent:http_effects",
            *(arg for t in tools for arg in ("--tool", f"web__{t}")),
            agents="tether_testkit.mcp_agent:webops",
            extra=env,
        )
    finally:
        server.stop()
    assert r.returncode == 1, r.stdout + r.stderr
    rows = _rows(r.stdout)
    by = {
        "web__set_flag": "idempotent_by_key",
        "web__keyed_send": "idempotent_by_key",
        "web__add_credit": "idempotent_by_key",
        "web__delete_item": "person",
    }
    for tool, strategy in by.items():
        for point in POINTS:
            cols = rows[(tool, point)]
            assert cols[3] == strategy, cols
            assert cols[7].startswith("dense 1.."), cols
            if tool == "web__add_credit" and point != "before":
                assert cols[6] == "2" and cols[-1] == "FAIL", cols
                assert (
                    f"FAIL web__add_credit #0 killed {point}: 2 effects for one idempotency "
                    "key, although it claims idempotent_by_key=True"
                ) in r.stdout
                continue
            # set_flag's first case sets the flag; later cases find it set: no new effect.
            allowed = ("0", "1") if tool == "web__set_flag" else ("1",)
            assert cols[6] in allowed, f"{tool} killed {point}: effects {cols[6]}"
            assert cols[8:] == ["done", "pass"], cols
    assert rows[("web__keyed_send", "during")][4] == "called it again with the same key"
    assert "outcome_unknown, answered mark_done" in rows[("web__delete_item", "during")][4]
    assert (
        "not exercised: web__plain_send: no example arguments (its inputSchema gives no "
        "examples or defaults; give MCPOverride(examples=[...])) (FAIL)"
    ) in r.stdout
    assert "webops: FAIL (10/12 rows pass)" in r.stdout
