"""`tether agents`: what the configuration loads, run as a user runs it (a subprocess), including
an agent from a package outside the source tree and one the runtime would refuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tether_testkit.agent_packages import declare_entry_point, env_with_path, write_package
from tether_testkit.processes import tether_cli

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast

MAILER = '''
from tether_sdk import Agent, Reconciled, ScriptedModel, ToolContext, tool


@tool(effect="read")
async def inbox(ctx: ToolContext, folder: str = "in") -> str:
    """Count the messages in a folder."""
    return "3"


@tool(effect="write", action="mail.send", scope="mail/{to}", risk="high")
async def send(ctx: ToolContext, to: str, text: str) -> str:
    """Send an email."""
    return "sent"


def _domain(args: dict) -> str:
    return "domain/" + args["to"].split("@")[-1]


@tool(effect="write", action="mail.forward", scope=_domain)
async def forward(ctx: ToolContext, to: str) -> str:
    """Forward the last email."""
    return "forwarded"


@forward.reconcile
async def _forwarded(ctx: ToolContext, to: str) -> Reconciled:
    return Reconciled.unknown()


@tool(effect="write", action="mail.delete", idempotent_by_key=True, risk="low")
async def purge(ctx: ToolContext) -> str:
    """Empty the trash."""
    return "purged"


agent = Agent(
    name="mailer",
    description="Reads and sends email.",
    instructions="Be brief.",
    model=ScriptedModel(lambda request: "ok"),
    tools=[inbox, send, forward, purge],
)
'''

NO_EFFECT = '''
from tether_sdk import Agent, ScriptedModel, tool


@tool
async def wipe(target: str) -> str:
    """Wipe something."""
    return "wiped"


agent = Agent("careless", "d", "i", ScriptedModel(lambda request: "ok"), [wipe])
'''

PAYMENTS = '''
from tether_sdk import Agent, Approval, ScriptedModel, ToolContext, tool


@tool(effect="write", action="payment.refund", scope="payment/{order}", idempotent_by_key=True,
      approval=Approval(grant="approve:payment.refund", self_approval=False, approvals=2))
async def refund(ctx: ToolContext, order: str) -> str:
    """Refund an order."""
    return "refunded"


@tool(effect="write", action="payment.void", scope="payment/{order}", idempotent_by_key=True,
      approval=Approval())
async def void(ctx: ToolContext, order: str) -> str:
    """Void an order."""
    return "voided"


@tool(effect="write", action="payment.note", scope="payment/{order}", idempotent_by_key=True)
async def note(ctx: ToolContext, order: str) -> str:
    """Note an order."""
    return "noted"


agent = Agent("payments", "Refunds.", "i", ScriptedModel(lambda request: "ok"),
              [refund, void, note])
'''


def test_lists_the_installed_reference_agent_with_its_tools() -> None:
    out = tether_cli("agents", env={"TETHER_AGENTS": ""})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "opspilot (default)"
    assert lines[1] == "  from: entry point opspilot = tether_opspilot:agent"
    text = out.stdout
    assert "find_instances    read " in text
    assert "restart_instance  write" in text
    assert "grant: instance.restart on {service}/{env}, risk high" in text
    assert "at-most-once: idempotent by key" in text
    # A read tool's grant, and a note on the one any user may call.
    logs = text[text.index("get_logs ") : text.index("restart_instance ")]
    assert "grant: logs.read on {service}/{env}\n" in logs
    ungated = text[text.index("find_instances ") : text.index("recent_errors ")]
    assert "note: read tool 'find_instances' declares no action, so every user" in ungated


def test_a_tool_reserved_to_a_grant_is_listed_as_such() -> None:
    env = {"TETHER_AGENTS": "", "TETHER_TOOL_ALLOW_GRANT": "opspilot:delete_instance"}
    out = tether_cli("agents", env=env)
    assert out.returncode == 0, out.stderr
    delete = out.stdout[out.stdout.index("delete_instance ") :]
    assert "offered only to holders of tool.use on opspilot/delete_instance" in delete
    assert "offered only" not in out.stdout[: out.stdout.index("delete_instance ")]
    listing = json.loads(tether_cli("agents", "--json", env=env).stdout)
    (opspilot,) = listing["agents"]
    assert [t["name"] for t in opspilot["tools"] if t["grant_to_use"]] == ["delete_instance"]


def test_an_agent_outside_the_source_tree_by_tether_agents(tmp_path: Path) -> None:
    write_package(tmp_path, "mailer_pkg", MAILER)
    env = env_with_path(
        {"TETHER_AGENTS": "mailer_pkg:agent", "TETHER_TOOL_DENY": "mailer:purge"}, tmp_path
    )
    # Two agents and no TETHER_DEFAULT_AGENT: no default (a run naming none is refused);
    # the core configuration names no agent.
    assert json.loads(tether_cli("agents", "--json", env=env).stdout)["default"] == ""
    env["TETHER_DEFAULT_AGENT"] = "opspilot"
    out = tether_cli("agents", env=env)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    # Both the configured one and the installed one; the default is the configured opspilot.
    assert "mailer\n  from: TETHER_AGENTS=mailer_pkg:agent\n  Reads and sends email.\n" in text
    assert "opspilot (default)" in text
    section = text[text.index("mailer\n") : text.index("opspilot (default)")]
    assert "    inbox    read   Count the messages in a folder.\n" in section
    assert "grant: mail.send on mail/{to}, risk high" in section
    assert "at-most-once: neither key nor reconcile: after a crash a person decides" in section
    assert "grant: mail.forward on <_domain(arguments)>, risk medium" in section
    assert "at-most-once: reconcile: after a crash it asks the external system" in section
    assert "grant: mail.delete on *, risk low" in section
    assert "at-most-once: idempotent by key" in section
    assert "Empty the trash.  [switched off by TETHER_TOOL_DENY]" in section

    listing = json.loads(tether_cli("agents", "--json", env=env).stdout)
    assert listing["default"] == "opspilot"
    mailer = next(a for a in listing["agents"] if a["name"] == "mailer")
    assert mailer["source"] == "TETHER_AGENTS=mailer_pkg:agent"
    assert [(t["name"], t["effect"], t.get("at_most_once")) for t in mailer["tools"]] == [
        ("inbox", "read", None),
        ("send", "write", "person"),
        ("forward", "write", "reconcile"),
        ("purge", "write", "idempotent_by_key"),
    ]


def test_an_agent_by_entry_point_alone_is_the_default(tmp_path: Path) -> None:
    write_package(tmp_path, "mailer_pkg", MAILER)
    declare_entry_point(tmp_path, "mailer-agent", "mailer", "mailer_pkg:agent")
    # Only the entry points: the reference agent is installed too, so it is listed as well;
    # with TETHER_DEFAULT_AGENT the user's agent is the default.
    env = env_with_path({"TETHER_AGENTS": "", "TETHER_DEFAULT_AGENT": "mailer"}, tmp_path)
    out = tether_cli("agents", env=env)
    assert out.returncode == 0, out.stderr
    assert "mailer (default)\n  from: entry point mailer = mailer_pkg:agent\n" in out.stdout
    assert "opspilot\n" in out.stdout


def test_a_bad_configuration_is_exit_2_with_the_reason() -> None:
    out = tether_cli("agents", env={"TETHER_AGENTS": "no_such_module:agent"})
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "tether agents: cannot import 'no_such_module': No module named 'no_such_module'"
    )
    out = tether_cli("agents", env={"TETHER_AGENTS": "tether_opspilot:nope"})
    assert out.returncode == 2
    assert "module 'tether_opspilot' has no attribute 'nope'" in out.stderr
    out = tether_cli("agents", env={"TETHER_AGENTS": "tether_opspilot:tools"})
    assert out.returncode == 2
    assert "is a module, not a tether_sdk.Agent" in out.stderr


def test_a_tool_without_an_effect_is_refused_with_why(tmp_path: Path) -> None:
    write_package(tmp_path, "careless_pkg", NO_EFFECT)
    out = tether_cli("agents", env=env_with_path({"TETHER_AGENTS": "careless_pkg:agent"}, tmp_path))
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.startswith(
        "tether agents: TETHER_AGENTS=careless_pkg:agent: agent 'careless' cannot be loaded:"
    )
    assert "tool 'wipe' declares no effect" in out.stderr
    assert "effect='read' (changes nothing" in out.stderr
    assert "effect='write' (changes something" in out.stderr


def test_migrate_with_a_bad_agent_is_exit_2_with_the_reason_before_touching_the_database(
    tmp_path: Path,
) -> None:
    write_package(tmp_path, "careless_pkg", NO_EFFECT)
    env = env_with_path(
        {
            "TETHER_AGENTS": "careless_pkg:agent",
            # Never reached: the agents are checked before any connection.
            "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        },
        tmp_path,
    )
    for verb in ("migrate", "seed-demo"):
        out = tether_cli(verb, env=env)
        assert out.returncode == 2, out.stderr
        assert out.stderr.startswith(f"tether {verb}: TETHER_AGENTS=careless_pkg:agent: ")
        assert "tool 'wipe' declares no effect" in out.stderr
        assert "Traceback" not in out.stderr


def test_each_write_tool_shows_who_may_approve_it(tmp_path: Path) -> None:
    write_package(tmp_path, "payments_pkg", PAYMENTS)
    env = env_with_path(
        {"TETHER_AGENTS": "payments_pkg:agent", "TETHER_DEFAULT_AGENT": "opspilot"}, tmp_path
    )
    out = tether_cli("agents", env=env)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    section = text[text.index("payments\n") :]  # listed by name: after opspilot
    refund = section[section.index("refund ") : section.index("void ")]
    void = section[section.index("void ") : section.index("note ")]
    note = section[section.index("note ") :]
    assert (
        "approval: 2 distinct holders of approve:payment.refund on the call's scope; "
        "never the requester\n" in refund
    )
    # Approval() with no grant named: holders of the tool's own action.
    assert "approval: any holder of payment.void on the call's scope; the requester too\n" in void
    # No policy: today's confirmation by the run's owner.
    assert "approval: the run's owner, once (holding payment.note on the call's scope)\n" in note
    # The reference agent's restart names its approvers' grant; its scale does not.
    opspilot = text[text.index("opspilot (default)") : text.index("payments\n")]
    restart = opspilot[opspilot.index("restart_instance ") : opspilot.index("scale_service ")]
    assert "approval: any holder of approve:instance.restart on the call's scope" in restart

    listing = json.loads(tether_cli("agents", "--json", env=env).stdout)
    payments = next(a for a in listing["agents"] if a["name"] == "payments")
    assert {t["name"]: t["approval"] for t in payments["tools"]} == {
        "refund": {
            "approvers": "grant",
            "grant": "approve:payment.refund",
            "approvals": 2,
            "self_approval": False,
        },
        "void": {
            "approvers": "grant",
            "grant": "payment.void",
            "approvals": 1,
            "self_approval": True,
        },
        "note": {
            "approvers": "owner",
            "grant": "payment.note",
            "approvals": 1,
            "self_approval": True,
        },
    }
    opspilot_json = next(a for a in listing["agents"] if a["name"] == "opspilot")
    assert all("approval" not in t for t in opspilot_json["tools"] if t["effect"] == "read")
