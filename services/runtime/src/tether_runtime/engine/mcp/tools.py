"""An MCP server's tool as a Tool: the engine offers, validates, gates, cards and calls it exactly
as a native tool (tool_calls.py; a write through write_call.py), and only the call itself goes
to the server: `tools/call` with the call's arguments, Tether's idempotency key in the request's
`_meta` (IDEMPOTENCY_META_KEY), progress streamed as `tool_progress`.

What comes back, for the model:
- a result: its text (and structured content) as the tool's data, its first line as the summary;
- `isError: true`: a tool error the model sees (ToolError);
- a protocol error (the server answered with a JSON-RPC error): a tool error, MCP_PROTOCOL_ERROR;
- the server unreachable before the request was sent: a read is tried again (TransientError), a
  write is told MCP_SERVER_UNAVAILABLE and not called (nothing happened);
- the connection lost while the request was out: a read is tried again; a write may have acted
  (Uncertain): called again with its key if idempotent, else outcome_unknown;
- no answer within the tool's timeout: the engine's timeout (a read again, a write Uncertain)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jsonschema
import mcp_types
from jsonschema.exceptions import SchemaError, best_match
from mcp.shared.exceptions import MCPError
from tether_sdk import (
    IDEMPOTENCY_META_KEY,
    Confirmation,
    InvalidArguments,
    MCPServer,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    TransientError,
)
from tether_sdk._tools import _strip_titles

from tether_runtime.engine.mcp.effects import Derived, model_name
from tether_runtime.engine.mcp.sessions import Connection, ConnectionLost, Unavailable
from tether_runtime.engine.write_call import Uncertain

TEXT_LIMIT = 100_000
"""Characters of a result's text kept for the model (the rest is cut, and said so)."""


async def _not_called(**_: Any) -> None:
    """An MCP tool's `fn`: the engine calls `invoke`, never this."""


def annotations_of(listed: mcp_types.Tool) -> dict[str, Any] | None:
    """The tool's annotations as on the wire (camelCase), None when it declares none."""
    if listed.annotations is None:
        return None
    found = listed.annotations.model_dump(by_alias=True, exclude_none=True, mode="json")
    return found or None


def schema_examples(schema: Any) -> list[dict[str, Any]]:
    """Argument sets a tool's inputSchema offers, for `tether conformance`: its own `examples`
    (whole argument objects), else one set of each property's first example (or `examples`, or
    `default`) when every required property has one."""
    if not isinstance(schema, dict):
        return []
    whole = schema.get("examples")
    if isinstance(whole, list) and whole:
        return [dict(e) for e in whole if isinstance(e, dict)]
    props = schema.get("properties")
    if not isinstance(props, dict):
        return []
    one: dict[str, Any] = {}
    for name, prop in props.items():
        if not isinstance(prop, dict):
            continue
        found = prop.get("examples")
        if isinstance(found, list) and found:
            one[name] = found[0]
        elif "example" in prop:
            one[name] = prop["example"]
        elif "default" in prop:
            one[name] = prop["default"]
    required = schema.get("required") or []
    if not all(isinstance(r, str) and r in one for r in required):
        return []
    return [one]


class MCPTool(Tool):
    def __init__(
        self,
        server: MCPServer,
        listed: mcp_types.Tool,
        derived: Derived,
        connection: Connection,
    ) -> None:
        self.server = server.name
        self.transport = server.transport
        self.mcp_name = listed.name
        self.connection = connection
        self.derived = derived
        self.annotations = annotations_of(listed)
        title = listed.title or (self.annotations or {}).get("title") or ""
        self.title = str(title)
        self.mcp_description = (listed.description or "").strip()
        self._input_schema: Any = listed.input_schema
        self._validator: Any = None
        super().__init__(
            _not_called,
            effect=derived.effect,
            name=model_name(server.name, listed.name),
            description=self.mcp_description or self.title or f"{listed.name} ({server.name})",
            action=derived.action,
            scope=derived.scope,
            risk=derived.risk,
            idempotent_by_key=derived.idempotent,
            timeout_s=derived.timeout_s,
            summary=derived.summary,
            approval=derived.approval,
        )
        # The override's examples are the agent's word (a misfit is its definition's problem);
        # the schema's are the server's, kept only when they fit.
        if derived.examples is not None:
            self.examples = [dict(e) for e in derived.examples]
            self.examples_from = "override"
        else:
            self.examples = [e for e in schema_examples(self._input_schema) if self._fits(e)]
            self.examples_from = "inputSchema" if self.examples else ""

    @property
    def origin(self) -> str:
        """Where the tool and its effect came from, for `tether agents` and the logs."""
        why = self.derived.why
        return (
            f"MCP {self.transport} server {self.server!r}, tool {self.mcp_name!r}: "
            f"effect {self.effect} ({why.get('effect', '')}), after a crash "
            f"{self.derived.after_crash} ({why.get('idempotent', '')})"
        )

    # -- the schema: the server's inputSchema, checked as JSON Schema -------------------------

    def _build(self) -> None:
        schema = self._input_schema
        if not isinstance(schema, dict) or schema.get("type") != "object":
            self._problems.append(
                f"tool {self.name!r}: the server's inputSchema is not a JSON Schema object"
            )
            return
        try:
            cls = jsonschema.validators.validator_for(
                schema, default=jsonschema.Draft202012Validator
            )
            cls.check_schema(schema)
            self._validator = cls(schema)
        except SchemaError as err:
            self._problems.append(
                f"tool {self.name!r}: the server's inputSchema is invalid: {err.message}"
            )
            return
        self._schema = _strip_titles(schema)

    def _fits(self, example: dict[str, Any]) -> bool:
        try:
            self.validate(example)
        except InvalidArguments:
            return False
        return True

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        if self._validator is None:
            raise InvalidArguments(
                f"tool {self.name!r} cannot be called: " + "; ".join(self._problems)
            )
        if not isinstance(args, Mapping):
            raise InvalidArguments("arguments must be a JSON object")
        try:
            value: dict[str, Any] = json.loads(json.dumps(dict(args)))
        except (TypeError, ValueError):
            raise InvalidArguments("arguments must be JSON values") from None
        error = best_match(self._validator.iter_errors(value))
        if error is not None:
            where = ".".join(str(p) for p in error.absolute_path) or "arguments"
            raise InvalidArguments(f"{where}: {error.message}"[:500])
        return value

    # -- the card -------------------------------------------------------------------------

    async def confirmation_for(self, ctx: ToolContext, args: Mapping[str, Any]) -> Confirmation:
        first = self.mcp_description.split("\n", 1)[0].strip()
        return Confirmation(
            title=self.title or first or f"Call {self.mcp_name}",
            target=self.scope(args),
            summary=self.summarize(args),
            risk=self.risk,
            details=(
                f"MCP server {self.server!r}, tool {self.mcp_name!r}. {self.mcp_description}"
            ).strip(),
        )

    # -- the call -------------------------------------------------------------------------

    async def invoke(self, ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
        async def report(progress: float, total: float | None, message: str | None) -> None:
            fraction = progress / total if total else 0.0
            await ctx.progress(min(max(fraction, 0.0), 1.0), message or "")

        read = self.effect == "read"
        try:
            result = await self.connection.call(
                self.mcp_name,
                dict(args),
                meta={IDEMPOTENCY_META_KEY: ctx.idempotency_key},
                within_s=max(ctx.time_left(), 0.001),
                progress=report,
                ask=ctx._ask,
            )
        except Unavailable as err:
            if read:
                raise TransientError(f"MCP_SERVER_UNAVAILABLE: {err}") from None
            raise ToolError(f"MCP_SERVER_UNAVAILABLE: {err}; not called") from None
        except ConnectionLost as err:
            if read:
                raise TransientError(f"MCP_CONNECTION_LOST: {err}") from None
            raise Uncertain(f"MCP_CONNECTION_LOST: {err}") from None
        except MCPError as err:
            raise ToolError(f"MCP_PROTOCOL_ERROR {err.code}: {err.message}"[:1000]) from None
        return self.result_of(result)

    def result_of(self, result: mcp_types.CallToolResult) -> ToolResult:
        texts: list[str] = []
        other: list[dict[str, Any]] = []
        for block in result.content:
            kind = getattr(block, "type", "")
            if isinstance(block, mcp_types.TextContent):
                texts.append(block.text)
            elif isinstance(block, mcp_types.EmbeddedResource):
                res = block.resource
                if isinstance(res, mcp_types.TextResourceContents):
                    texts.append(res.text)
                else:
                    other.append(
                        {"type": "resource", "uri": str(res.uri), "mimeType": res.mime_type}
                    )
            elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
                # Not passed on: the model's transcript is text. Said, with its size.
                other.append(
                    {"type": kind, "mimeType": block.mime_type, "base64_chars": len(block.data)}
                )
            elif isinstance(block, mcp_types.ResourceLink):
                other.append({"type": "resource_link", "uri": str(block.uri), "name": block.name})
            else:  # a kind of content newer than this client
                other.append({"type": str(kind or type(block).__name__)})  # type: ignore[unreachable]
        text = "\n".join(texts)
        if result.is_error:
            raise ToolError((text or "the tool reported an error")[:2000])
        data: dict[str, Any] = {}
        if text:
            data["text"] = text[:TEXT_LIMIT]
            if len(text) > TEXT_LIMIT:
                data["text_cut"] = f"{len(text) - TEXT_LIMIT} more characters not shown"
        if result.structured_content is not None:
            data["structured"] = result.structured_content
        if other:
            data["content"] = other
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        return ToolResult((first or f"{self.name} done")[:200], data)
