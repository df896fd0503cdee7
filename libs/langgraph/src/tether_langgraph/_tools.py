"""Write tools: a LangChain tool marked with its effect runs at most once per tool call.

    @write_tool(action="service.restart", scope="{service}")
    @tool
    async def restart_service(service: str) -> str: ...

LangGraph re-runs an interrupted node from its start, and a worker that takes a run over after a
crash re-runs the node it was in. A marked tool goes through Tether's tool-call claim instead:
the first call is claimed (conditionally, fenced by the run's lease epoch), performed with an
idempotency key (`idempotency_key()` inside the tool) and its result stored; a re-run of the node
gets the stored result back without calling the tool again. A crash inside the call leaves it
`executing`: the next worker calls again only when the tool is `idempotent_by_key` (the external
system honours the key), else a person decides (an `outcome_unknown` interrupt: retry with the
same key, mark done, or abandon).

The call is identified by the LangChain tool call's id when the tool is invoked with one (by
`ToolNode`, or `tool.ainvoke(tool_call)`); called with plain arguments inside a node, by the
node's task and the arguments (the same write with the same arguments in one node is one write).
Before it runs: the tool gate and the requester's grant for `action` on `scope` (a template over
the arguments, or a function of them). Read tools need no marking: LangGraph runs them as
always. Outside Tether (a plain LangGraph run) a marked tool simply calls the tool."""

from __future__ import annotations

import contextvars
import functools
import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException

from tether_langgraph._driver import current_host

Scope = str | Callable[[dict[str, Any]], str]

_call_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tether_call_id", default=None
)
_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("tether_key", default=None)


def idempotency_key() -> str | None:
    """Inside a write tool running on Tether: the key to pass to the external system, stable
    for this call across re-runs, crashes and pods. None elsewhere."""
    return _key.get()


class WriteTool(BaseTool):
    """A LangChain tool with a write effect (made by `write_tool`)."""

    inner: BaseTool
    action: str
    scope: Scope = "*"
    idempotent_by_key: bool = False
    timeout_s: float | None = None
    handle_tool_error: bool = True

    async def ainvoke(
        self, input: str | dict[str, Any] | Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        call_id = None
        if isinstance(input, dict) and input.get("type") == "tool_call" and input.get("id"):
            call_id = str(input["id"])
        token = _call_id.set(call_id)
        try:
            return await super().ainvoke(input, config, **kwargs)
        finally:
            _call_id.reset(token)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{self.name} is a write tool: call it with ainvoke")

    async def _arun(self, config: RunnableConfig, **kwargs: Any) -> Any:
        host = current_host.get()
        if host is None:
            return await self.inner.ainvoke(kwargs, config)
        args = json.loads(json.dumps(kwargs, default=str))
        call_id = _call_id.get() or self._derived_id(config, args)

        async def perform(key: str) -> Any:
            token = _key.set(key)
            try:
                return await self.inner.ainvoke(kwargs, config)
            finally:
                _key.reset(token)

        body = await host.once(
            call_id=call_id,
            tool=self.name,
            args=args,
            action=self.action,
            scope=self.scope_of(args),
            perform=perform,
            idempotent_by_key=self.idempotent_by_key,
            timeout_s=self.timeout_s,
        )
        if not body.get("ok"):
            raise ToolException(str(body.get("summary") or f"{self.name} failed"))
        data = body.get("data") or {}
        return data["value"] if "value" in data else body.get("summary", "")

    def scope_of(self, args: dict[str, Any]) -> str:
        if callable(self.scope):
            return str(self.scope(dict(args)))
        return self.scope.format_map(dict(args))

    def _derived_id(self, config: RunnableConfig, args: dict[str, Any]) -> str:
        meta = config.get("metadata") or {}
        task = str(meta.get("langgraph_checkpoint_ns") or meta.get("langgraph_node") or "")
        raw = json.dumps([task, self.name, args], sort_keys=True)
        return "lgw_" + hashlib.sha256(raw.encode()).hexdigest()[:32]


@overload
def write_tool(
    tool: BaseTool,
    *,
    action: str,
    scope: Scope = "*",
    idempotent_by_key: bool = False,
    timeout_s: float | None = None,
) -> WriteTool: ...


@overload
def write_tool(
    tool: None = None,
    *,
    action: str,
    scope: Scope = "*",
    idempotent_by_key: bool = False,
    timeout_s: float | None = None,
) -> Callable[[BaseTool], WriteTool]: ...


def write_tool(
    tool: BaseTool | None = None,
    *,
    action: str,
    scope: Scope = "*",
    idempotent_by_key: bool = False,
    timeout_s: float | None = None,
) -> WriteTool | Callable[[BaseTool], WriteTool]:
    """Mark a LangChain tool as a write (`write_tool(t, action=...)` or as a decorator above
    `@tool`). `action` is the grant a user needs ("noun.verb"), `scope` what it acts on."""

    def wrap(inner: BaseTool) -> WriteTool:
        if not isinstance(inner, BaseTool):
            raise TypeError(f"write_tool marks a LangChain tool (@tool), not {inner!r}")
        if not action or "." not in action:
            raise ValueError(f"write tool {inner.name!r} needs action='noun.verb'")
        return WriteTool(
            name=inner.name,
            description=inner.description,
            args_schema=inner.args_schema,
            inner=inner,
            action=action,
            scope=scope,
            idempotent_by_key=idempotent_by_key,
            timeout_s=timeout_s,
        )

    return wrap(tool) if tool is not None else wrap


R = TypeVar("R")


def write_task(
    *,
    action: str,
    scope: Scope = "*",
    idempotent_by_key: bool = False,
    timeout_s: float | None = None,
) -> Callable[[Callable[..., Awaitable[R]]], Callable[..., Awaitable[R]]]:
    """Mark the side effect of a LangGraph `@task` (an async function) as a write, below
    `@task`:

        @task
        @write_task(action="ticket.file", scope="tickets/{queue}")
        async def file_ticket(queue: str, note: str) -> str: ...

    LangGraph keeps a finished task's result, but a crash inside the task runs it again. On
    Tether it goes through the same at-most-once machine as a `write_tool` (`host.once`: the gate,
    the grant for `action` on `scope`, the claim, the idempotency key, an `outcome_unknown` card
    after a crash inside it unless `idempotent_by_key`). The call is identified by the task's
    checkpoint namespace (LangGraph's task id: the same on a re-run from the same checkpoint,
    another for a second call). Its failure is raised to the graph as a ToolException. Outside
    Tether the function is simply called."""
    if not action or "." not in action:
        raise ValueError("a write task needs action='noun.verb'")

    def wrap(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"write_task marks an async function, not {fn!r}")
        signature = inspect.signature(fn)
        name = fn.__name__

        @functools.wraps(fn)
        async def run(*args: Any, **kwargs: Any) -> R:
            host = current_host.get()
            if host is None:
                return await fn(*args, **kwargs)
            from langgraph.config import get_config

            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            plain = json.loads(json.dumps(dict(bound.arguments), default=str))
            meta = get_config().get("metadata") or {}
            task = str(meta.get("langgraph_checkpoint_ns") or meta.get("langgraph_node") or "")
            raw = json.dumps([task, name, plain], sort_keys=True)
            call_id = "lgt_" + hashlib.sha256(raw.encode()).hexdigest()[:32]

            async def perform(key: str) -> Any:
                token = _key.set(key)
                try:
                    return await fn(*args, **kwargs)
                finally:
                    _key.reset(token)

            where = scope(dict(plain)) if callable(scope) else scope.format_map(dict(plain))
            body = await host.once(
                call_id=call_id,
                tool=name,
                args=plain,
                action=action,
                scope=str(where),
                perform=perform,
                idempotent_by_key=idempotent_by_key,
                timeout_s=timeout_s,
            )
            if not body.get("ok"):
                raise ToolException(str(body.get("summary") or f"{name} failed"))
            data = body.get("data") or {}
            result: R = data["value"] if "value" in data else body.get("summary", "")
            return result

        return run

    return wrap
