"""`tether conformance`, run as a user runs it (a subprocess) against the machine's Postgres and
Redis: OpsPilot passes with its table; a tool that claims idempotent_by_key=True but charges once
per call is caught, by tool and kill point; a write tool without examples is not silently skipped."""

from __future__ import annotations

import pytest
from tether_testkit.conformance_cli import POINTS
from tether_testkit.conformance_cli import conformance as _conformance
from tether_testkit.conformance_cli import table_rows as _rows

pytestmark = [pytest.mark.process, pytest.mark.slow(seconds=67), pytest.mark.timeout(600)]


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
