"""A Streamable HTTP MCP server written with the official SDK's server side, for issue 31's
tests: one tool per kind of annotation (`set_flag`, `delete_item` and `add_credit` offer
`tether conformance` example arguments through their inputSchema: examples, a default), a tool that honours Tether's idempotency key, one that
dies mid-call, one that hangs, and two that ask a person (`elicitation/create`): a read and a
write; each answer is a line of kind "answer". Every call and every effect is a line of the JSON-lines file
MCP_HTTP_LOG ({"tool", "kind": "call" | "effect", "key", "args"}); a call whose bearer token is
not MCP_HTTP_TOKEN is refused.

    python -m tether_testkit.mcp_http_server <port>"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Annotated, Any

from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

KEY = "io.tether/idempotency-key"
server = MCPServer("tether-test-http")


def _record(tool: str, kind: str, ctx: Context, args: dict[str, Any]) -> None:
    meta = ctx.request_context.meta or {}
    key = meta.get(KEY) if isinstance(meta, dict) else getattr(meta, KEY, None)
    with open(os.environ["MCP_HTTP_LOG"], "a") as f:
        f.write(json.dumps({"tool": tool, "kind": kind, "key": key, "args": args}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _authorized(ctx: Context) -> None:
    headers = ctx.headers or {}
    if headers.get("authorization") != f"Bearer {os.environ['MCP_HTTP_TOKEN']}":
        raise PermissionError("missing or wrong bearer token")


def _key(ctx: Context) -> str | None:
    meta = ctx.request_context.meta or {}
    found = meta.get(KEY) if isinstance(meta, dict) else None
    return str(found) if found else None


def _effects(tool: str, key: str | None) -> int:
    try:
        with open(os.environ["MCP_HTTP_LOG"]) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return 0
    return sum(1 for r in rows if r["tool"] == tool and r["kind"] == "effect" and r["key"] == key)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def lookup(q: str, ctx: Context) -> str:
    """Look something up."""
    _authorized(ctx)
    _record("lookup", "call", ctx, {"q": q})
    await ctx.report_progress(1, 2, "halfway")
    return f"found {q}"


@server.tool(
    title="Set a flag",
    annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False),
)
async def set_flag(name: Annotated[str, Field(examples=["conformance-flag"])], ctx: Context) -> str:
    """Set a named flag (setting it twice changes nothing: only the first is an effect)."""
    _authorized(ctx)
    _record("set_flag", "call", ctx, {"name": name})
    await asyncio.sleep(float(os.environ.get("MCP_HTTP_HOLD_S") or 0))
    if not _flag_set(name):
        _record("set_flag", "effect", ctx, {"name": name})
    return f"flag {name} set"


def _flag_set(name: str) -> bool:
    try:
        with open(os.environ["MCP_HTTP_LOG"]) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return False
    return any(
        r["tool"] == "set_flag" and r["kind"] == "effect" and r["args"] == {"name": name}
        for r in rows
    )


@server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
async def add_credit(account: Annotated[str, Field(examples=["acct-1"])], ctx: Context) -> str:
    """Add one credit to an account. Declared idempotent, but every call adds one: the liar
    `tether conformance` must catch."""
    _authorized(ctx)
    _record("add_credit", "call", ctx, {"account": account})
    _record("add_credit", "effect", ctx, {"account": account})
    return f"credit added to {account}"


@server.tool(
    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False)
)
async def delete_item(item: str = "conformance-item", *, ctx: Context) -> str:
    """Delete an item for good."""
    _authorized(ctx)
    _record("delete_item", "call", ctx, {"item": item})
    _record("delete_item", "effect", ctx, {"item": item})
    return f"deleted {item}"


@server.tool()
async def plain_send(to: str, ctx: Context) -> str:
    """Send a message (declares no annotations)."""
    _authorized(ctx)
    _record("plain_send", "call", ctx, {"to": to})
    _record("plain_send", "effect", ctx, {"to": to})
    return f"sent to {to}"


@server.tool()
async def keyed_send(to: str, ctx: Context) -> str:
    """Send a message; a repeated idempotency key sends nothing again."""
    _authorized(ctx)
    key = _key(ctx)
    _record("keyed_send", "call", ctx, {"to": to})
    if key is not None and _effects("keyed_send", key):
        return f"already sent to {to}"
    _record("keyed_send", "effect", ctx, {"to": to})
    await asyncio.sleep(float(os.environ.get("MCP_HTTP_HOLD_S") or 0))
    return f"sent to {to}"


@server.tool()
async def die_send(to: str, ctx: Context) -> str:
    """Send a message, and the server dies before it answers."""
    _authorized(ctx)
    _record("die_send", "call", ctx, {"to": to})
    _record("die_send", "effect", ctx, {"to": to})
    os._exit(17)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def hang(ctx: Context) -> str:
    """Never answers."""
    _authorized(ctx)
    _record("hang", "call", ctx, {})
    await asyncio.sleep(3600)
    return "never"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def broken(ctx: Context) -> str:
    """Fails with an error result."""
    _authorized(ctx)
    raise RuntimeError("the backend said no")


SECRET_IN_LOG = "sk-live-0123456789abcdefXYZ"
"""A key the `noisy` tool logs: the run's log must show it masked."""
FLOOD = 300
"""Lines `noisy` logs after the secret one: more than a runtime lets one server log at once."""


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def noisy(q: str, ctx: Context) -> str:
    """Look something up, logging as it goes (a key among the lines, then a flood)."""
    _authorized(ctx)
    await ctx.warning(f"connecting with api_key {SECRET_IN_LOG} for {q}")
    for i in range(FLOOD):
        await ctx.info(f"noisy line {i}")
    return f"noisy found {q}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def early_lookup(q: str, ctx: Context) -> str:
    """A lookup `grow` removes."""
    _authorized(ctx)
    return f"early found {q}"


async def late_lookup(q: str, ctx: Context) -> str:
    """A lookup `grow` adds."""
    _authorized(ctx)
    return f"late found {q}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def grow(ctx: Context) -> str:
    """Change the server's tools: late_lookup added, early_lookup removed; the client told
    (notifications/tools/list_changed)."""
    _authorized(ctx)
    server.add_tool(late_lookup, annotations=ToolAnnotations(read_only_hint=True))
    server.remove_tool("early_lookup")
    await ctx.notify_tools_changed()
    return "tools changed"


class Name(BaseModel):
    name: str = Field(description="Who to greet")


class Amount(BaseModel):
    amount: int = Field(description="How much to transfer")


# The SDK's resolvers ask the client in whichever way the protocol negotiated says: mid-call
# (`elicitation/create`, <= 2025-11-25), or an InputRequiredResult the client answers and calls
# again with (2026-07-28). Either way the tool's body runs once the person has answered.
def _ask_name() -> Elicit[Name]:
    return Elicit("Whom should I greet?", Name)


def _ask_amount(to: str) -> Elicit[Amount]:
    return Elicit(f"How much should go to {to}?", Amount)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def greet(
    ctx: Context, answer: Annotated[ElicitationResult[Name], Resolve(_ask_name)]
) -> str:
    """Greet someone; asks a person for the name (elicitation)."""
    _authorized(ctx)
    _record("greet", "answer", ctx, {"action": answer.action})
    if isinstance(answer, AcceptedElicitation):
        return f"hello {answer.data.name}"
    return f"nobody greeted: {answer.action}"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
async def transfer(
    to: str, ctx: Context, answer: Annotated[ElicitationResult[Amount], Resolve(_ask_amount)]
) -> str:
    """Transfer money; asks a person for the amount (elicitation), then acts."""
    _authorized(ctx)
    _record("transfer", "answer", ctx, {"to": to, "action": answer.action})
    if not isinstance(answer, AcceptedElicitation):
        return f"no transfer: {answer.action}"
    _record("transfer", "effect", ctx, {"to": to, "amount": answer.data.amount})
    return f"sent {answer.data.amount} to {to}"


if __name__ == "__main__":
    import uvicorn

    port = int(sys.argv[1])
    app = server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
