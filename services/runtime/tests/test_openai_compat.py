"""The OpenAI-compatible adapter against a real HTTP server speaking the streaming
chat-completions protocol (the one fake allowed: a hosted LLM cannot exist here)."""

from __future__ import annotations

import json

from aiohttp import web
from tether_testkit.client import Client, token, types
from tether_testkit.processes import free_port, start_runtime
from tether_testkit.secrets import TEST_SECRET


def sse(obj: object) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


async def fake_llm(port: int, seen: list[dict]) -> web.AppRunner:
    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append({"auth": request.headers.get("Authorization"), "body": body})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if not any(m["role"] == "tool" for m in body["messages"]):
            # Step 1: a tool call whose arguments arrive in two fragments.
            await resp.write(
                sse(
                    {
                        "choices": [
                            {
                                "delta": {
                                    "tool_calls": [
                                        {
                                            "index": 0,
                                            "id": "call_llm_1",
                                            "function": {
                                                "name": "recent_errors",
                                                "arguments": '{"service": "paym',
                                            },
                                        }
                                    ]
                                }
                            }
                        ]
                    }
                )
            )
            await resp.write(
                sse(
                    {
                        "choices": [
                            {
                                "delta": {
                                    "tool_calls": [
                                        {
                                            "index": 0,
                                            "function": {"arguments": 'ent-api", "env": "prod"}'},
                                        }
                                    ]
                                }
                            }
                        ]
                    }
                )
            )
        else:
            for piece in ["payment-api ", "had ", "12 ", "errors ", "— ", "naïve ", "check."]:
                await resp.write(sse({"choices": [{"delta": {"content": piece}}]}))
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def test_openai_compatible_model_drives_a_run(private_env):
    port = free_port()
    seen: list[dict] = []
    runner = await fake_llm(port, seen)
    proc = start_runtime(
        {
            **private_env,
            "TETHER_MODEL": "openai",
            "TETHER_OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1",
            "TETHER_OPENAI_API_KEY": "sk-test-do-not-log-0123456789",
        },
        name="runtime-openai",
    )
    try:
        c = Client(proc.addr, token(TEST_SECRET, "alice"))
        conv = await c.conversation()
        run = (await c.start(conv, "what are payment-api's errors?")).run
        evs = await c.events(run.id)
        assert types(evs)[:3] == ["run_started", "tool_started", "tool_finished"]
        assert types(evs)[-1] == "done"
        assert evs[1].tool_started.tool == "recent_errors"
        text = "".join(e.text_delta.delta for e in evs if e.WhichOneof("event") == "text_delta")
        assert text == "payment-api had 12 errors — naïve check."
        # Second request carried the tool result back in the protocol's shape.
        second = seen[1]["body"]["messages"]
        assert second[0]["role"] == "system" and "Known facts" in second[0]["content"]
        assert "You are OpsPilot" in second[0]["content"], "the agent's instructions lead"
        # The call keeps the engine's id (unique in the run) on both sides of the round trip.
        (asked,) = [m for m in second if m["role"] == "assistant" and m.get("tool_calls")]
        call_id = asked["tool_calls"][0]["id"]
        assert any(m["role"] == "tool" and m["tool_call_id"] == call_id for m in second)
        assert seen[0]["auth"] == "Bearer sk-test-do-not-log-0123456789"
        assert {t["function"]["name"] for t in seen[0]["body"]["tools"]} >= {"restart_instance"}
        await c.close()
    finally:
        proc.terminate()
        await runner.cleanup()
    assert "sk-test-do-not-log" not in proc.log(), "the API key reached a log line"
