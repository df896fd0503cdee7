"""Test agents for a second message while a run is active (issue 18): the ledger agent's tools
under each `concurrent_runs` policy. "peek": a read tool held open PEEK_S seconds; "send X": the
write tool send_keyed (approval first; LEDGER_HOLD_S holds it open); "recall": answers with the
conversation's previous answer, as the run's context shows it; anything else is echoed.

Load with the ledger agent (its tables): TETHER_AGENTS=tether_testkit.ledger_agent:agent,
tether_testkit.turns_agent:rejecting,tether_testkit.turns_agent:enqueuing,
tether_testkit.turns_agent:interrupting."""

from __future__ import annotations

from tether_sdk import Agent, Limits, ModelRequest, ScriptedModel, ToolCall

from tether_testkit.ledger_agent import ledger_pool, peek, send_keyed


def decide(req: ModelRequest) -> str | ToolCall:
    words = req.last_user_text().split()
    results = req.results()
    if results:
        r = results[-1]
        return f"{r.tool} ended: {r.outcome}: {r.summary}"
    if words[0] == "peek":
        return ToolCall("peek", {"n": 1})
    if words[0] == "send":
        return ToolCall("send_keyed", {"recipient": words[-1]})
    if words[0] == "recall":
        answers = [str(m["content"]) for m in req.messages if m["role"] == "assistant"]
        return "recalled: " + (answers[-1] if answers else "nothing")
    return "echo " + " ".join(words)


def _agent(name: str, policy: str) -> Agent:
    return Agent(
        name=name,
        description=f"Test agent: a second message while a run is active is {policy}ed.",
        instructions="Do what you are asked.",
        model=ScriptedModel(decide),
        tools=[peek, send_keyed],
        limits=Limits(max_steps=5),
        lifespan=ledger_pool,
        concurrent_runs=policy,  # type: ignore[arg-type]
    )


rejecting = _agent("turns-reject", "reject")
enqueuing = _agent("turns-enqueue", "enqueue")
interrupting = _agent("turns-interrupt", "interrupt")
