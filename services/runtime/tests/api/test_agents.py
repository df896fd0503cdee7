"""ListAgents and the agent a run names: an unknown one is AGENT_NOT_FOUND, never a fallback."""

from __future__ import annotations

import grpc
import pytest
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_common.config import Settings
from tether_common.errors import AgentNotFound
from tether_runtime.engine.agents import AgentRegistry
from tether_testkit.client import Client, reason, token
from tether_testkit.secrets import TEST_SECRET


@pytest.fixture
async def alice(runtime):
    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    yield c
    await c.close()


@pytest.mark.process  # starts a process: not in test-fast
async def test_list_agents_names_opspilot_with_its_tools_and_effects(alice) -> None:
    resp = await alice.stub.ListAgents(pb.ListAgentsRequest(), metadata=alice.md, timeout=10)
    assert resp.default_agent == "opspilot"
    assert [a.name for a in resp.agents] == ["opspilot"]
    (agent,) = resp.agents
    assert agent.description
    tools = {t.name: t for t in agent.tools}
    # In the order the agent declares them.
    assert [t.name for t in agent.tools] == [
        "find_instances",
        "recent_errors",
        "get_logs",
        "restart_instance",
        "scale_service",
        "delete_instance",
    ]
    restart = tools["restart_instance"]
    assert (restart.effect, restart.action, restart.risk) == ("write", "instance.restart", "high")
    assert (tools["scale_service"].effect, tools["scale_service"].action) == (
        "write",
        "service.scale",
    )
    delete = tools["delete_instance"]
    assert (delete.effect, delete.action, delete.risk) == ("write", "instance.delete", "high")
    logs = tools["get_logs"]
    assert (logs.effect, logs.action, logs.risk) == ("read", "logs.read", "")
    assert tools["find_instances"].action == "", "an ungated read tool names no grant"
    assert all(t.description for t in agent.tools)


@pytest.mark.process  # starts a process: not in test-fast
async def test_list_agents_needs_a_token(runtime) -> None:
    c = Client(runtime.addr, "not-a-token")
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await c.stub.ListAgents(pb.ListAgentsRequest(), metadata=c.md, timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        await c.close()


@pytest.mark.process  # starts a process: not in test-fast
async def test_an_unknown_agent_is_agent_not_found_and_stores_nothing(alice, db) -> None:
    conv = await alice.conversation()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await alice.stub.StartRun(
            pb.StartRunRequest(conversation_id=conv, text="hello", agent="nope"),
            metadata=alice.md,
            timeout=10,
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason(info.value) == "AGENT_NOT_FOUND"
    call = alice.stub.StartRunAndStreamEvents(
        pb.StartRunAndStreamEventsRequest(conversation_id=conv, text="hello", agent="nope"),
        metadata=alice.md,
        timeout=10,
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call.read()
    assert reason(info.value) == "AGENT_NOT_FOUND"
    assert await db.fetchval("SELECT count(*) FROM run WHERE conversation_id = $1", conv) == 0
    # The same conversation takes a run naming the agent, or none.
    named = await alice.stub.StartRun(
        pb.StartRunRequest(conversation_id=conv, text="hello", agent="opspilot"),
        metadata=alice.md,
        timeout=10,
    )
    assert named.run.agent == "opspilot"
    assert (await alice.start(conv, "hello again")).run.agent == "opspilot"


@pytest.mark.process  # starts a process: not in test-fast
async def test_a_stream_token_may_not_list_agents(runtime) -> None:
    c = Client(runtime.addr, token(TEST_SECRET, "alice", scope="stream", run_id="run_x"))
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await c.stub.ListAgents(pb.ListAgentsRequest(), metadata=c.md, timeout=10)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        await c.close()


def test_the_default_agent_is_configured_or_the_only_one_never_a_name_in_the_core() -> None:
    # One agent loaded: a run naming none is that one's.
    assert AgentRegistry.load(Settings()).resolve("") == "opspilot"
    two = Settings.from_env({"TETHER_AGENTS": "tether_testkit.approvals_agent:agent"})
    registry = AgentRegistry.load(two)
    assert sorted(registry.agents) == ["foureyes", "opspilot"]
    # Two and no TETHER_DEFAULT_AGENT: refused, saying what to do.
    with pytest.raises(AgentNotFound) as info:
        registry.resolve("")
    assert str(info.value) == "name an agent: no default is configured (loaded: foureyes, opspilot)"
    assert registry.resolve("foureyes") == "foureyes"
    chosen = AgentRegistry.load(two.model_copy(update={"default_agent": "opspilot"}))
    assert chosen.resolve("") == "opspilot"
    # A configured default that is not loaded is no default (never a fallback to another).
    absent = AgentRegistry.load(two.model_copy(update={"default_agent": "mailer"}))
    with pytest.raises(AgentNotFound):
        absent.resolve("")
