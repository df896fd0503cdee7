"""Tools: async functions with typed parameters and a declared effect.

`read` tools run at once and may run again after a crash; one that declares an `action` runs
only for a user holding that grant on its `scope` (else the model is told it was denied). `write`
tools need a grant (`action` on a `scope` computed from the arguments) and a person's
confirmation, may `recheck` the world after approval, and say how they stay at-most-once across
a crash: the external system honours the idempotency key (`idempotent_by_key=True`), or
`reconcile` asks it what the key already did. A write tool with neither is still allowed: after
a crash inside it, a person decides."""

from __future__ import annotations

import inspect
import json
import re
import string
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin, overload

import pydantic

from tether_sdk._approval import Approval
from tether_sdk._context import ToolContext
from tether_sdk._model import ToolSchema
from tether_sdk._results import Reconciled, ToolResult

Effect = Literal["read", "write"]
Risk = Literal["low", "medium", "high"]
EFFECTS: tuple[str, ...] = ("read", "write")
_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]{0,63}$")
_ACTION = re.compile(r"^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)+$")

ToolFn = Callable[..., Awaitable[Any]]
F = TypeVar("F", bound=ToolFn)
Scope = str | Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class Confirmation:
    """The card a person sees before a write tool runs. Every field is masked by the engine
    before it is stored or shown."""

    title: str
    target: str
    summary: str
    risk: Risk = "medium"
    details: str = ""
    preview: str = ""


class InvalidArguments(ValueError):
    """The model's arguments do not fit the tool's schema; `message` says where, for the model."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _describe(errors: Sequence[Mapping[str, Any]], params: Sequence[str]) -> str:
    """Pydantic's errors as one line a model can act on: where, and what is wrong."""
    parts = []
    for e in errors[:5]:
        where = ".".join(str(p) for p in e.get("loc", ())) or "arguments"
        if e.get("type") == "extra_forbidden":
            known = ", ".join(params) or "none"
            parts.append(f"{where}: not a parameter of this tool (its parameters: {known})")
        elif e.get("type") == "missing":
            parts.append(f"{where}: required, missing")
        else:
            parts.append(f"{where}: {e.get('msg', 'invalid')}")
    if len(errors) > 5:
        parts.append(f"and {len(errors) - 5} more")
    return "; ".join(parts)


class Tool:
    """Made by the `@tool` decorator; its hooks (`recheck`, `reconcile`, `confirmation`) are
    decorators too."""

    def __init__(
        self,
        fn: ToolFn,
        *,
        effect: str | None,
        name: str | None = None,
        description: str | None = None,
        action: str = "",
        scope: Scope | None = None,
        risk: Risk = "medium",
        idempotent_by_key: bool = False,
        timeout_s: float | None = None,
        examples: Sequence[Mapping[str, Any]] = (),
        summary: Scope | None = None,
        approval: Approval | None = None,
    ) -> None:
        self.fn = fn
        self.approval = approval
        self._summary = summary
        self.effect = effect
        self.name = name or fn.__name__
        doc = inspect.getdoc(fn) or ""
        self.description = description or doc.split("\n\n", 1)[0].replace("\n", " ").strip()
        self.action = action
        self._scope = scope
        self.risk: Risk = risk
        self.idempotent_by_key = idempotent_by_key
        self.timeout_s = timeout_s
        self.examples = [dict(e) for e in examples]
        self._recheck: ToolFn | None = None
        self._reconcile: ToolFn | None = None
        self._confirmation: ToolFn | None = None
        self._problems: list[str] = []
        self._takes_ctx = False
        self._args_model: type[pydantic.BaseModel] | None = None
        self._fields: dict[str, str] = {}
        """pydantic field name -> parameter name"""
        self._schema: dict[str, Any] = {}
        self._build()

    # -- the schema, from the function's types ----------------------------------------------

    def _build(self) -> None:
        fn = self.fn
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception as err:  # noqa: BLE001 - any failure is a definition problem to report
            self._problems.append(f"tool {self.name!r}: its type hints cannot be resolved: {err}")
            return
        fields: dict[str, Any] = {}
        params = list(inspect.signature(fn).parameters.values())
        if params and (
            params[0].name in ("ctx", "context") or hints.get(params[0].name) is ToolContext
        ):
            self._takes_ctx = True
            params = params[1:]
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                self._problems.append(
                    f"tool {self.name!r}: *args/**kwargs cannot be described to a model; "
                    "name each parameter with a type"
                )
                continue
            if p.name not in hints:
                self._problems.append(
                    f"tool {self.name!r}: parameter {p.name!r} has no type annotation; the "
                    "arguments' JSON schema is derived from the types"
                )
                continue
            hint = _with_descriptions(hints[p.name])
            default = ... if p.default is inspect.Parameter.empty else p.default
            # Pydantic fields get neutral names and the parameter as alias: a parameter may be
            # called `schema`, `json` or `model_config` without clashing with BaseModel's own.
            self._fields[f"p{len(self._fields)}"] = p.name
            fields[f"p{len(fields)}"] = (
                Annotated[hint, pydantic.Field(alias=p.name)],
                default,
            )
        if self._problems:
            return  # a tool whose parameters cannot all be described is never called
        try:
            self._args_model = pydantic.create_model(
                f"{self.name}_arguments",
                __config__=pydantic.ConfigDict(extra="forbid"),
                **fields,
            )
            assert self._args_model is not None
            self._schema = _strip_titles(self._args_model.model_json_schema())
        except Exception as err:  # noqa: BLE001
            self._problems.append(f"tool {self.name!r}: its parameters have no JSON schema: {err}")

    @property
    def parameters(self) -> dict[str, Any]:
        return self._schema

    def schema(self) -> ToolSchema:
        return ToolSchema(self.name, self.description, self._schema)

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The model's arguments checked against the schema, normalized (defaults filled) as
        JSON values; InvalidArguments says what is wrong."""
        return self._validated(args).model_dump(mode="json", by_alias=True)

    def _validated(self, args: Mapping[str, Any]) -> pydantic.BaseModel:
        if self._args_model is None:
            raise InvalidArguments(
                f"tool {self.name!r} cannot be called: " + "; ".join(self._problems)
            )
        if not isinstance(args, Mapping):
            raise InvalidArguments("arguments must be a JSON object")
        try:
            raw = json.dumps(dict(args))
        except (TypeError, ValueError):
            raise InvalidArguments("arguments must be JSON values") from None
        try:
            # Strict, as JSON: the schema says "integer", so "3" and true are not integers
            # (lax pydantic would turn them into 3 and 1 and act on a guess).
            return self._args_model.model_validate_json(raw, strict=True)
        except pydantic.ValidationError as err:
            raise InvalidArguments(_describe(err.errors(), list(self._fields.values()))) from None

    def _kwargs(self, args: Mapping[str, Any]) -> dict[str, Any]:
        model = self._validated(args)
        return {self._fields[k]: getattr(model, k) for k in type(model).model_fields}

    # -- grants and the card --------------------------------------------------------------

    def scope(self, args: Mapping[str, Any]) -> str:
        """The grant scope this call needs, e.g. "payment-api/prod"; "*" when undeclared."""
        if self._scope is None:
            return "*"
        if callable(self._scope):
            return str(self._scope(dict(args)))
        return self._scope.format_map(dict(args))

    def summarize(self, args: Mapping[str, Any]) -> str:
        """What a person sees of the arguments (a step's line, the card's default summary):
        the tool's `summary` template or function, else every argument as k=v."""
        if self._summary is None:
            return ", ".join(f"{k}={v}" for k, v in sorted(args.items()))
        if callable(self._summary):
            return str(self._summary(dict(args)))
        return self._summary.format_map(dict(args))

    async def confirmation_for(self, ctx: ToolContext, args: Mapping[str, Any]) -> Confirmation:
        if self._confirmation is not None:
            card = await self._call_hook(self._confirmation, ctx, args)
            if not isinstance(card, Confirmation):
                raise TypeError(f"{self.name}: the confirmation hook must return a Confirmation")
            return card
        return Confirmation(
            title=self.description or f"Run {self.name}",
            target=self.scope(args),
            summary=self.summarize(args),
            risk=self.risk,
        )

    # -- calling --------------------------------------------------------------------------

    async def _call_hook(self, hook: ToolFn, ctx: ToolContext, args: Mapping[str, Any]) -> Any:
        kwargs = self._kwargs(args)
        return await hook(ctx, **kwargs)

    async def invoke(self, ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
        """Call the tool with validated arguments; its return value as a ToolResult."""
        kwargs = self._kwargs(args)
        value = await (self.fn(ctx, **kwargs) if self._takes_ctx else self.fn(**kwargs))
        if isinstance(value, ToolResult):
            return value
        if value is None:
            return ToolResult(f"{self.name} done")
        if isinstance(value, str):
            return ToolResult(value)
        if isinstance(value, Mapping):
            return ToolResult(f"{self.name} done", dict(value))
        return ToolResult(str(value))

    async def recheck_for(self, ctx: ToolContext, args: Mapping[str, Any]) -> str | None:
        if self._recheck is None:
            return None
        reason = await self._call_hook(self._recheck, ctx, args)
        return None if reason is None else str(reason)

    async def reconcile_for(self, ctx: ToolContext, args: Mapping[str, Any]) -> Reconciled:
        if self._reconcile is None:
            return Reconciled.unknown("the tool cannot reconcile")
        found = await self._call_hook(self._reconcile, ctx, args)
        if not isinstance(found, Reconciled):
            raise TypeError(f"{self.name}: reconcile must return a Reconciled")
        return found

    @property
    def can_reconcile(self) -> bool:
        return self._reconcile is not None

    @property
    def scope_template(self) -> str:
        """The declared scope as people read it: the template, a function's name, or "*"."""
        if self._scope is None:
            return "*"
        if callable(self._scope):
            return f"<{getattr(self._scope, '__name__', 'function')}(arguments)>"
        return self._scope

    @property
    def at_most_once(self) -> str:
        """How a write tool stays at-most-once after a crash inside it: "idempotent_by_key",
        "reconcile", or "person" (neither: an outcome_unknown interrupt, a person decides);
        "" for a read tool."""
        if self.effect != "write":
            return ""
        if self.idempotent_by_key:
            return "idempotent_by_key"
        return "reconcile" if self._reconcile is not None else "person"

    # -- hooks as decorators --------------------------------------------------------------

    def recheck(self, fn: F) -> F:
        """`async def (ctx, **args) -> str | None`: after approval, reload the resource; a reason
        not to act (it is healthy now) or None to go ahead."""
        self._recheck = fn
        return fn

    def reconcile(self, fn: F) -> F:
        """`async def (ctx, **args) -> Reconciled`: after a crash inside the call, ask the
        external system what `ctx.idempotency_key` already did."""
        self._reconcile = fn
        return fn

    def confirmation(self, fn: F) -> F:
        """`async def (ctx, **args) -> Confirmation`: the card a person approves (title, target,
        summary, risk, details, preview: e.g. a recipient count and the email's text)."""
        self._confirmation = fn
        return fn

    # -- what is wrong with it ------------------------------------------------------------

    def problems(self) -> list[str]:
        out = list(self._problems)
        n = repr(self.name)
        if not _NAME.match(self.name):
            out.append(
                f"tool {n}: a name is 1-64 letters, digits, '_' or '-', starting with a letter"
            )
        if not inspect.iscoroutinefunction(self.fn):
            out.append(f"tool {n}: must be an `async def` function")
        if self.effect is None:
            out.append(
                f"tool {n} declares no effect. Tether has no default, because guessing wrong runs "
                "a dangerous action without approval or twice after a crash: pass effect='read' "
                "(changes nothing; runs at once and may run again) or effect='write' (changes "
                "something: needs a grant and a person's confirmation, and stays at-most-once "
                "by idempotent_by_key=True or a reconcile hook)"
            )
        elif self.effect not in EFFECTS:
            out.append(f"tool {n}: effect must be 'read' or 'write', not {self.effect!r}")
        elif self.effect == "read":
            if self.action and not _ACTION.match(self.action):
                out.append(
                    f"read tool {n}: action must look like 'noun.verb' (e.g. 'logs.read'): the "
                    f"grant a user must hold to call it (got {self.action!r})"
                )
            if self._scope is not None and not self.action:
                out.append(
                    f"read tool {n} declares a scope but no action, so no grant would ever be "
                    "checked: add action='noun.verb' (e.g. 'logs.read'), or drop the scope"
                )
            extras = [
                label
                for label, present in (
                    ("idempotent_by_key", self.idempotent_by_key),
                    ("recheck", self._recheck is not None),
                    ("reconcile", self._reconcile is not None),
                    ("confirmation", self._confirmation is not None),
                )
                if present
            ]
            if extras:
                out.append(
                    f"tool {n} is effect='read' but declares {', '.join(extras)}, which only a "
                    "write tool has: if it changes something, declare effect='write'"
                )
        elif not self.action or not _ACTION.match(self.action):
            out.append(
                f"write tool {n} needs action='noun.verb' (e.g. 'instance.restart'): the "
                f"grant a person must hold to run it (got {self.action!r})"
            )
        if isinstance(self._scope, str):
            fields = {f for _, f, _, _ in string.Formatter().parse(self._scope) if f}
            unknown = fields - set(self._schema.get("properties", {}))
            if unknown:
                out.append(
                    f"tool {n}: scope {self._scope!r} names {sorted(unknown)}, which are not "
                    "parameters"
                )
        if isinstance(self._summary, str):
            fields = {f for _, f, _, _ in string.Formatter().parse(self._summary) if f}
            unknown = fields - set(self._schema.get("properties", {}))
            if unknown:
                out.append(
                    f"tool {n}: summary {self._summary!r} names {sorted(unknown)}, which are not "
                    "parameters"
                )
        if self.approval is not None:
            if self.effect != "write":
                out.append(f"tool {n}: only a write tool has an approval policy")
            elif type(self.approval) is not Approval:
                out.append(f"tool {n}: approval must be an Approval(...)")
            else:
                out.extend(self.approval.problems(self.name))
        if self.timeout_s is not None and self.timeout_s <= 0:
            out.append(f"tool {n}: timeout_s must be positive")
        for i, example in enumerate(self.examples):
            try:
                self.validate(example)
            except InvalidArguments as err:
                out.append(f"tool {n}: example {i} does not fit the schema: {err.message}")
        return out

    @property
    def approval_policy(self) -> Approval | None:
        """Who may approve this write tool's calls, its grant named; None: the run's owner
        approves once with the tool's own grant."""
        if self.effect != "write" or self.approval is None:
            return None
        return self.approval.resolved(self.action)

    def warnings(self) -> list[str]:
        """What loads but deserves a look: a read tool without an action runs for every user."""
        if self.effect == "read" and not self.action:
            return [
                f"read tool {self.name!r} declares no action, so every user may call it on any "
                "target: if what it reads is not for everyone (logs, records, secrets), declare "
                "action='noun.read' and a scope from its arguments (e.g. '{service}/{env}')"
            ]
        return []

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, effect={self.effect!r})"


@overload
def tool(fn: ToolFn, /) -> Tool: ...


@overload
def tool(
    *,
    effect: Effect | None = None,
    name: str | None = None,
    description: str | None = None,
    action: str = "",
    scope: Scope | None = None,
    risk: Risk = "medium",
    idempotent_by_key: bool = False,
    timeout_s: float | None = None,
    examples: Sequence[Mapping[str, Any]] = (),
    summary: Scope | None = None,
    approval: Approval | None = None,
) -> Callable[[ToolFn], Tool]: ...


def tool(
    fn: ToolFn | None = None,
    *,
    effect: Effect | None = None,
    name: str | None = None,
    description: str | None = None,
    action: str = "",
    scope: Scope | None = None,
    risk: Risk = "medium",
    idempotent_by_key: bool = False,
    timeout_s: float | None = None,
    examples: Sequence[Mapping[str, Any]] = (),
    summary: Scope | None = None,
    approval: Approval | None = None,
) -> Tool | Callable[[ToolFn], Tool]:
    """Declare a tool. Use `@tool(effect="read")`, `@tool(effect="read", action=..., scope=...)`
    or `@tool(effect="write", action=...)`; a tool with no effect is refused when its agent
    loads.

    - `action`: the grant the run's user must hold, 'noun.verb'. Required for a write tool;
      optional for a read tool (`action="logs.read"`): without it, every user may call it.
    - `scope`: a template over the arguments ("{service}/{env}") or a function of them; the
      grant `action` must cover it. Undeclared: "*" (only an unrestricted grant covers it).
    - `idempotent_by_key`: the external system honours `ctx.idempotency_key`, so after a crash
      the engine simply calls again with the same key.
    - `summary`: how a person sees the arguments, a template ("instance_id={instance_id}") or a
      function; else every argument as k=v.
    - `examples`: arguments `tether conformance` drives the tool with.
    - `timeout_s`: this tool's timeout (else the agent's `Limits.tool_timeout_s`).
    - `approval`: a write tool's approval policy (`Approval(grant=..., self_approval=...,
      approvals=1|2)`); without it, the run's owner approves once with `action`."""

    def wrap(f: ToolFn) -> Tool:
        return Tool(
            f,
            effect=effect,
            name=name,
            description=description,
            action=action,
            scope=scope,
            risk=risk,
            idempotent_by_key=idempotent_by_key,
            timeout_s=timeout_s,
            examples=examples,
            summary=summary,
            approval=approval,
        )

    return wrap(fn) if fn is not None else wrap


def _with_descriptions(hint: Any) -> Any:
    """`Annotated[str, "the service"]`: a plain string in the metadata describes the parameter."""
    if get_origin(hint) is Annotated:
        base, *meta = get_args(hint)
        texts = [m for m in meta if isinstance(m, str)]
        rest = [m for m in meta if not isinstance(m, str)]
        if texts:
            rest.append(pydantic.Field(description=" ".join(texts)))
        return Annotated[(base, *rest)] if rest else base
    return hint


def _strip_titles(schema: Any) -> Any:
    """Pydantic adds a `title` to every property; models read the names and descriptions."""
    if isinstance(schema, dict):
        return {
            k: _strip_titles(v)
            for k, v in schema.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema
