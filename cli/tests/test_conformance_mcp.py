"""`tether conformance` on an agent's MCP write tools (issue 31): the CLI connects the agent's
MCP server, lists its write tools and kills the runtime around each call (its own file, so that
`make test`'s workers run it beside the native conformance tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tether_testkit.conformance_cli import POINTS
from tether_testkit.conformance_cli import conformance as _conformance
from tether_testkit.conformance_cli import table_rows as _rows

pytestmark = [pytest.mark.process, pytest.mark.slow(seconds=61), pytest.mark.timeout(600)]


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
