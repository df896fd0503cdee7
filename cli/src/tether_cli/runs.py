"""`tether runs get|list|cancel|events`: a run's state, the caller's runs, a cancel, and a run's
event log (to now, or followed to its end across gateway restarts), as text or JSON."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from tether_proto import wire

from tether_cli.chat_render import json_line
from tether_cli.gateway_http import ApiError, GatewayApi, GaveUp

Run = dict[str, Any]
STATUSES = wire.RUN_STATUS.names


@dataclass(frozen=True)
class RunsOptions:
    url: str
    token: str
    as_json: bool = False


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def _waiting(run: Run) -> str:
    i = run.get("pendingInterrupt")
    if not i:
        return ""
    p = i.get("payload") or {}
    what = p.get("title") or p.get("tool") or ""
    target = f" on {p['target']}" if p.get("target") else ""
    return f"{i['kind']} {what!r}{target} ({i['id']}, expires {i.get('expiresAt')})"


def describe_run(run: Run) -> list[str]:
    u = run.get("usage") or {}
    lines = [
        f"{run['id']}  {run['status']}{' (cancel requested)' if run.get('cancelRequested') else ''}",
        f"  agent:         {run.get('agent')}",
        f"  conversation:  {run.get('conversationId')}",
        f"  created:       {run.get('createdAt')}",
        f"  updated:       {run.get('updatedAt')}",
        f"  events:        {run.get('lastSequence')}",
        f"  usage:         {u.get('modelSteps', 0)} model steps, {u.get('inputTokens', 0)} in / "
        f"{u.get('outputTokens', 0)} out tokens",
    ]
    if run.get("pendingInterrupt"):
        lines.append(f"  waiting for:   {_waiting(run)}")
    return lines


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    )


async def get(api: GatewayApi, opts: RunsOptions, run_id: str) -> int:
    run = await api.get_run(run_id)
    if opts.as_json:
        _print_json({"run": run})
    else:
        print("\n".join(describe_run(run)))
    return 0


async def list_runs(
    api: GatewayApi,
    opts: RunsOptions,
    *,
    conversation: str = "",
    status: str = "",
    limit: int = 20,
    page_token: str = "",
) -> int:
    runs, next_token = await api.list_runs(
        conversation_id=conversation, status=status, page_size=limit, page_token=page_token
    )
    if opts.as_json:
        _print_json({"runs": runs, "nextPageToken": next_token})
        return 0
    if not runs:
        print("no runs")
        return 0
    rows = [
        [
            r["id"],
            r["status"],
            str(r.get("agent")),
            str(r.get("conversationId")),
            str(r.get("createdAt")),
            str(r.get("lastSequence")),
            (r.get("pendingInterrupt") or {}).get("kind", ""),
        ]
        for r in runs
    ]
    print(table(["RUN", "STATUS", "AGENT", "CONVERSATION", "CREATED", "EVENTS", "WAITING"], rows))
    if next_token:
        print(f"(more: --page-token {next_token})")
    return 0


async def cancel(api: GatewayApi, opts: RunsOptions, run_id: str, reason: str) -> int:
    status, run = await api.cancel_run(run_id, reason)
    if opts.as_json:
        _print_json({"run": run, "cancelled": status == 200})
    elif status == 200:
        print(f"cancelled: {run_id}")
    else:
        print(f"cancel requested: {run_id} is {run['status']}; it ends at its next step")
    return 0


def event_summary(ev: dict[str, Any]) -> str:
    """One event as one line of a log: sequence, type and what matters of it."""
    kind = ev.get("type")
    detail = ""
    if kind == "text_delta":
        detail = json.dumps(ev.get("delta"), ensure_ascii=False)
    elif kind == "tool_started":
        detail = f"{ev.get('tool')}({ev.get('argsSummary')})"
    elif kind == "tool_progress":
        detail = f"{ev.get('tool')}: {ev.get('fraction')} {ev.get('text')}"
    elif kind == "tool_finished":
        detail = f"{ev.get('tool')} {ev.get('status')}: {ev.get('summary')}"
    elif kind == "interrupt":
        p = ev.get("payload") or {}
        detail = f"{ev.get('kind')} {ev.get('interruptId')}: {p.get('title')} {p.get('target')}"
    elif kind == "interrupt_resolved":
        detail = f"{ev.get('interruptId')}: {ev.get('decision')}"
    elif kind == "done":
        u = ev.get("usage") or {}
        detail = (
            f"{u.get('modelSteps')} steps, {u.get('inputTokens')}/{u.get('outputTokens')} tokens"
        )
    elif kind == "error":
        detail = f"{ev.get('code')}: {ev.get('message')}"
    elif kind == "cancelled":
        detail = str(ev.get("reason") or "")
    elif kind == "run_started":
        detail = str(ev.get("conversationId"))
    return (
        f"{ev.get('sequence', '-'):>5}  {ev.get('time') or '':<27}  {kind:<18}  {detail}".rstrip()
    )


async def events(
    api: GatewayApi, opts: RunsOptions, run_id: str, *, after: int = 0, follow: bool = False
) -> int:
    """The run's events after `after`: those stored now, or (--follow) on to the run's end."""
    until = None if follow else int((await api.get_run(run_id))["lastSequence"])
    if until is not None and until <= after:
        return 0
    stream: AsyncGenerator[dict[str, Any], None] = api.follow(run_id, after)
    async with contextlib.aclosing(stream):
        async for ev in stream:
            print(json_line(ev) if opts.as_json else event_summary(ev), flush=True)
            if until is not None and int(ev.get("sequence") or 0) >= until:
                break
    return 0


def run(opts: RunsOptions, op: str, args: Any) -> int:
    """One `tether runs OP`: 0 done, 1 the gateway failed or stayed away, 2 refused (4xx)."""

    async def main() -> int:
        notice = (lambda text: print(f"  … {text}", file=sys.stderr)) if op == "events" else None
        api = GatewayApi(opts.url, opts.token, notice=notice)
        try:
            if op == "get":
                return await get(api, opts, args.run_id)
            if op == "list":
                return await list_runs(
                    api,
                    opts,
                    conversation=args.conversation or "",
                    status=args.status or "",
                    limit=args.limit,
                    page_token=args.page_token or "",
                )
            if op == "cancel":
                return await cancel(api, opts, args.run_id, args.reason or "")
            return await events(api, opts, args.run_id, after=args.after, follow=args.follow)
        finally:
            await api.close()

    try:
        return asyncio.run(main())
    except ApiError as err:
        print(f"tether runs {op}: {err.status} {err.code}: {err.message}", file=sys.stderr)
        return 2 if err.status < 500 else 1
    except GaveUp as err:
        print(f"tether runs {op}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
