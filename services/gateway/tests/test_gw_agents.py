"""GET /v1/agents, the start body's `agent`, and the outcome_unknown decisions of resume."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from gw_fake_runtime import FakeRuntime
from tether.runtime.v1 import events_pb2


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_list_agents(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    resp = await client.get("/v1/agents", headers=auth(user_token))
    assert resp.status == 200
    assert await resp.json() == {
        "agents": [
            {
                "name": "billing",
                "description": "Refunds and invoices.",
                "tools": [
                    {
                        "name": "refund",
                        "description": "Refund a payment.",
                        "effect": "write",
                        "action": "payment.refund",
                        "risk": "high",
                    }
                ],
            },
            {
                "name": "opspilot",
                "description": "The demo ops assistant.",
                "tools": [
                    {
                        "name": "get_logs",
                        "description": "Read logs.",
                        "effect": "read",
                        "action": "",
                        "risk": "",
                    }
                ],
            },
        ],
        "defaultAgent": "opspilot",
    }
    assert fake_runtime[0].tokens[-1] == f"Bearer {user_token}"


async def test_list_agents_needs_a_token(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str]
) -> None:
    resp = await client.get("/v1/agents")
    assert resp.status == 401
    assert fake_runtime[0].tokens == []  # refused before the runtime is called


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
async def test_the_start_body_names_the_agent(
    client: TestClient[Any, Any],
    fake_runtime: tuple[FakeRuntime, str],
    user_token: str,
    streaming: bool,
) -> None:
    fake = fake_runtime[0]
    headers = {**auth(user_token), **({"Accept": "text/event-stream"} if streaming else {})}
    resp = await client.post(
        "/v1/conversations/conv_1/runs", json={"text": "hi", "agent": "billing"}, headers=headers
    )
    assert resp.status == 201
    method = "StartRunAndStreamEvents" if streaming else "StartRun"
    assert fake.starts == [(method, "billing")]
    if streaming:
        assert "event: done" in await resp.text()
    else:
        assert (await resp.json())["run"]["agent"] == "billing"
    # Left out or null: the runtime's default (an empty `agent`).
    for body in ({"text": "hi"}, {"text": "hi", "agent": None}):
        resp = await client.post("/v1/conversations/conv_1/runs", json=body, headers=headers)
        assert resp.status == 201
        await resp.read()
    assert fake.starts[1:] == [(method, ""), (method, "")]


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
async def test_an_unknown_agent_is_400_agent_not_found(
    client: TestClient[Any, Any],
    fake_runtime: tuple[FakeRuntime, str],
    user_token: str,
    streaming: bool,
) -> None:
    headers = {**auth(user_token), **({"Accept": "text/event-stream"} if streaming else {})}
    resp = await client.post(
        "/v1/conversations/conv_1/runs", json={"text": "hi", "agent": "nope"}, headers=headers
    )
    assert resp.status == 400
    assert await resp.json() == {
        "error": {"code": "AGENT_NOT_FOUND", "message": "unknown agent 'nope'"}
    }


@pytest.mark.parametrize("agent", ["", "OpsPilot", "ops pilot", "a" * 65, "ops/pilot", "é", 7])
async def test_a_malformed_agent_never_reaches_the_runtime(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str, agent: Any
) -> None:
    resp = await client.post(
        "/v1/conversations/conv_1/runs",
        json={"text": "hi", "agent": agent},
        headers=auth(user_token),
    )
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "INVALID_ARGUMENT"
    assert fake_runtime[0].starts == []


async def test_the_longest_agent_name_passes(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    name = "a-b_9" + "z" * 59
    resp = await client.post(
        "/v1/conversations/conv_1/runs",
        json={"text": "hi", "agent": name},
        headers=auth(user_token),
    )
    # Well-formed, so the runtime decides (this one does not know it).
    assert (resp.status, (await resp.json())["error"]["code"]) == (400, "AGENT_NOT_FOUND")
    assert fake_runtime[0].starts == [("StartRun", name)]


@pytest.mark.parametrize(
    ("decision", "value"),
    [
        ("approve", events_pb2.DECISION_APPROVED),
        ("reject", events_pb2.DECISION_REJECTED),
        ("respond", events_pb2.DECISION_RESPONDED),
        ("retry", events_pb2.DECISION_RETRY),
        ("mark_done", events_pb2.DECISION_MARK_DONE),
        ("abandon", events_pb2.DECISION_ABANDON),
    ],
)
async def test_resume_forwards_every_decision(
    client: TestClient[Any, Any],
    fake_runtime: tuple[FakeRuntime, str],
    user_token: str,
    decision: str,
    value: int,
) -> None:
    fake = fake_runtime[0]
    fake.add_run("run_1")
    resp = await client.post(
        "/v1/runs/run_1/resume",
        json={"interruptId": "int_1", "decision": decision, "idempotencyKey": "k1"},
        headers=auth(user_token),
    )
    assert resp.status == 202
    (req,) = fake.resumes
    assert (req.run_id, req.interrupt_id, req.decision) == ("run_1", "int_1", value)


@pytest.mark.parametrize("decision", ["markDone", "MARK_DONE", "mark-done", "approved", "done"])
async def test_resume_refuses_other_spellings(
    client: TestClient[Any, Any],
    fake_runtime: tuple[FakeRuntime, str],
    user_token: str,
    decision: str,
) -> None:
    resp = await client.post(
        "/v1/runs/run_1/resume",
        json={"interruptId": "int_1", "decision": decision, "idempotencyKey": "k1"},
        headers=auth(user_token),
    )
    assert resp.status == 400
    assert fake_runtime[0].resumes == []
