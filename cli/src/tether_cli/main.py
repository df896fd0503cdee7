"""`tether`: the one entry point for developers, tests, benchmarks and deployments (DESIGN §8)."""

from __future__ import annotations

import argparse
import sys

import tether_common.grpc_io_path  # noqa: F401 - before anything imports grpc
from tether_common.config import Settings, parse_processes
from tether_common.errors import UnsafeSettings

from tether_cli import audit_cmd, commands, connect, erase_cmd, revoke, runs, webhooks_cmd

EXIT_UNSAFE_SETTINGS = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tether", description="Tether: durable AI agent runs.")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    verbs.add_parser("dev", help="the whole system here: embedded stores, migrate, seed, services")
    mig = verbs.add_parser("migrate", help="apply database migrations (safe when pods race)")
    mig.add_argument(
        "--check",
        action="store_true",
        help="apply nothing: exit 0 when every migration this version knows is applied, 1 if not "
        "(a pod's init container: serve only once the schema exists)",
    )
    mig.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with --check: keep checking (and through database outages) until current or this "
        "long has passed",
    )
    seed = verbs.add_parser(
        "seed-demo",
        help="load each agent's demo data and the demo users' grants (idempotent)",
        description="Without --reset, missing demo rows and grants are added and nothing else "
        "changes. With --reset, each agent's demo data is put back as first seeded (OpsPilot: "
        "payment-api-2 abnormal again, replicas, fresh errors and logs) and the demo grants "
        "are restored; other rows and grants stay.",
    )
    seed.add_argument(
        "--reset", action="store_true", help="put the demo back as first seeded (try it again)"
    )
    ag = verbs.add_parser(
        "agents", help="list the agents this configuration loads, their tools and effects"
    )
    ag.add_argument("--json", action="store_true", help="machine-readable output")
    conf = verbs.add_parser(
        "conformance",
        help="prove an agent's write tools at-most-once through SIGKILLs (scratch database)",
        description="For every write tool (the agent's own and its MCP servers', connected to "
        "list them), each of its examples=[...] (an MCP tool's: MCPOverride(examples=...), else "
        "its inputSchema's examples or defaults) and each kill point (before, during, after the "
        "call): drive a run to the tool on a scratch database, SIGKILL the runtime, let a fresh "
        "one take over, and check at most one effect, the tool's declared strategy, dense events "
        "and that the run ended. Exit 1 if a row fails.",
    )
    conf.add_argument("agent", metavar="AGENT", help="a configured agent's name, or module:attr")
    conf.add_argument(
        "--database-url",
        help="a Postgres DSN allowed to create databases (default: DATABASE_URL)",
    )
    conf.add_argument("--redis-url", help="Redis for the runtimes it starts (default: REDIS_URL)")
    conf.add_argument(
        "--effects",
        default="",
        help="how many effects the external system holds for a key: module:function(state, key) "
        "or SQL with the key as $1 (without it, effects are not measurable)",
    )
    conf.add_argument(
        "--tool",
        action="append",
        default=[],
        help="check only this write tool (repeatable; an MCP tool as <server>__<tool>)",
    )
    conf.add_argument(
        "--allow-missing-examples",
        action="store_true",
        help="a write tool without examples is reported, not a failure",
    )
    conf.add_argument("--json", action="store_true", help="the rows as JSON")
    for verb, what in (
        ("runtime", "run one runtime pod: gRPC API and workers"),
        ("gateway", "run one gateway pod: HTTP API, SSE and the web UI"),
    ):
        serve = verbs.add_parser(verb, help=what)
        serve.add_argument(
            "--processes",
            metavar="N",
            help="N processes behind the one port under a supervisor that drains them together "
            "(auto or 0: one per CPU the pod may use; default TETHER_PROCESSES, 1)",
        )
    tok = verbs.add_parser("token", help="print a bearer token signed with TETHER_JWT_SECRET")
    tok.add_argument("--user", required=True, help="the user (or service) id, e.g. alice")
    tok.add_argument("--ttl", type=float, default=3600.0, help="lifetime in seconds (3600)")
    tok.add_argument("--scope", choices=["user", "service"], default="user")
    tok.add_argument(
        "--on-behalf",
        action="store_true",
        help="a service token that may act for a user (gRPC metadata x-tether-on-behalf-of)",
    )
    grants = verbs.add_parser(
        "grants",
        help="add, revoke or list who may do which action where (read at every check)",
        description="Grants are read at every check and never cached: a change applies to runs "
        "already waiting for approval. A scope is exact (payment-api/prod), '*' (everything), "
        "or a pattern whose '/'-separated segments may each be '*' (payment-api/*, */prod).",
    )
    ops = grants.add_subparsers(dest="op", required=True, metavar="OP")
    for op, what in (("add", "allow a user an action on a scope"), ("revoke", "remove a grant")):
        g = ops.add_parser(op, help=what)
        g.add_argument("--user", required=True, help="the user id, e.g. alice")
        g.add_argument("--action", required=True, help="the action, e.g. instance.restart")
        g.add_argument("--scope", required=True, help="e.g. payment-api/prod, payment-api/*, *")
    ls = ops.add_parser("list", help="print the grants as a table")
    ls.add_argument("--user", help="only this user's grants")
    _add_chat(verbs)
    _add_runs(verbs)
    revoke.add_arguments(verbs)
    webhooks_cmd.add_parser(verbs)
    audit_cmd.add_parser(verbs)
    erase_cmd.add_parser(verbs)
    return parser


CHAT_EPILOG = """\
interactive: type a prompt at `you>`; the answer streams as it comes, each step on a dim line.
  A question is asked inline: an approval with y/n, a choice by number, a form field by field
  (or one JSON object on a line), an unknown outcome with r(etry)/d(one)/a(bandon). Ctrl-C
  during a run offers to cancel it; Ctrl-D leaves.

scripts: without a terminal, prompts are read one per line from stdin and each question's answer
  is the next line (the same words as above); --once sends one prompt and exits. Flags answer
  every question of their kind without asking: --approve / --reject, --option, --fill,
  --on-unknown. --json prints each event as one JSON line on stdout (the gateway's objects);
  cards, questions and notices go to stderr.
    tether chat --user alice --json --approve --once "restart the abnormal payment-api instance"
    printf 'scale payment-api\\n{"replicas": 4}\\n' | tether chat --user alice

exit status: 0 every run done; 1 a run failed (or the gateway stayed unreachable); 2 bad usage
  or a refused request; 3 a run left waiting for an answer (input ended); 4 a run cancelled;
  130 Ctrl-C."""


def _add_chat(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chat = verbs.add_parser(
        "chat",
        help="talk to an agent through the gateway: streamed answers, approvals inline",
        description="An operator's terminal client over the gateway's HTTP API. A dropped "
        "connection or a gateway restart is resumed after the last event shown (nothing is "
        "shown twice).",
        epilog=CHAT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    connect.add_arguments(chat)
    chat.add_argument("--agent", default="", help="the agent to run (default: the gateway's)")
    chat.add_argument(
        "--conversation",
        metavar="ID",
        default="",
        help="continue this conversation (its runs still going or waiting are shown first)",
    )
    chat.add_argument("--json", action="store_true", help="events as JSON lines on stdout")
    chat.add_argument("--once", metavar="TEXT", help="send this one prompt, see its run through")
    decide = chat.add_mutually_exclusive_group()
    decide.add_argument("--approve", action="store_true", help="approve every confirm_action")
    decide.add_argument("--reject", action="store_true", help="reject every confirm_action")
    chat.add_argument(
        "--option", metavar="VALUE", help="answer select_option: an option's value or number"
    )
    chat.add_argument("--fill", metavar="JSON", help="answer provide_input with this JSON object")
    chat.add_argument(
        "--on-unknown",
        choices=["retry", "mark_done", "abandon"],
        help="answer outcome_unknown (a write whose effect nobody knows)",
    )
    color = chat.add_mutually_exclusive_group()
    color.add_argument("--color", dest="color", action="store_true", default=None)
    color.add_argument("--no-color", dest="color", action="store_false")
    chat.add_argument(
        "--patience",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="give up reaching the gateway after this long (120); the run carries on",
    )


def _add_runs(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    runs_p = verbs.add_parser("runs", help="get, list, cancel a run or read its events")
    ops = runs_p.add_subparsers(dest="op", required=True, metavar="OP")
    get = ops.add_parser("get", help="a run's state, with the question it waits on, if any")
    get.add_argument("run_id", metavar="RUN_ID")
    ls = ops.add_parser("list", help="your runs, newest first")
    ls.add_argument("--conversation", metavar="ID", help="only this conversation's runs")
    ls.add_argument("--status", choices=list(runs.STATUSES), help="only runs in this status")
    ls.add_argument("--limit", type=int, default=20, help="at most this many (1-200, 20)")
    ls.add_argument("--page-token", help="the next page, as a previous listing printed it")
    cancel = ops.add_parser("cancel", help="cancel a queued, running or waiting run")
    cancel.add_argument("run_id", metavar="RUN_ID")
    cancel.add_argument("--reason", help="recorded with the run's cancelled event")
    ev = ops.add_parser("events", help="a run's events: those so far, or --follow to its end")
    ev.add_argument("run_id", metavar="RUN_ID")
    ev.add_argument("--after", type=int, default=0, help="only events after this sequence")
    ev.add_argument(
        "--follow", action="store_true", help="keep following to the run's end (reconnecting)"
    )
    for p in (get, ls, cancel, ev):
        connect.add_arguments(p)
        p.add_argument("--json", action="store_true", help="machine-readable output")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        if args.verb in ("runtime", "gateway", "dev"):
            settings.check("gateway" if args.verb == "gateway" else "runtime")
        if args.verb == "gateway":
            from tether_gateway.server import check_gateway

            check_gateway(settings)
    except UnsafeSettings as err:
        print(f"tether {args.verb}: {err.message}", file=sys.stderr)
        return EXIT_UNSAFE_SETTINGS
    if args.verb in ("chat", "runs"):
        return _speak_http(args, settings)
    if args.verb == "dev":
        from tether_cli.dev import run_dev

        return run_dev(settings)
    if args.verb == "migrate":
        if args.check:
            return commands.migrate_check(settings, wait_s=args.wait)
        return commands.migrate(settings)
    if args.verb == "seed-demo":
        return commands.seed_demo(settings, reset=args.reset)
    if args.verb == "agents":
        return commands.agents(settings, as_json=args.json)
    if args.verb == "revoke":
        return revoke.revoke(settings, args)
    if args.verb in ("runtime", "gateway"):
        processes = settings.processes
        if args.processes is not None:
            try:
                processes = parse_processes("--processes", args.processes)
            except UnsafeSettings as err:
                print(f"tether {args.verb}: {err.message}", file=sys.stderr)
                return EXIT_UNSAFE_SETTINGS
        if processes > 1:
            from tether_cli.pod import run_pod

            return run_pod(args.verb, settings, processes)
        return commands.serve(args.verb, settings)
    if args.verb == "conformance":
        import os

        from tether_cli import conformance

        return conformance.run(
            conformance.Options(
                agent=args.agent,
                database_url=args.database_url or settings.database_url,
                redis_url=args.redis_url or settings.redis_url,
                env=dict(os.environ),
                effects=args.effects,
                allow_missing_examples=args.allow_missing_examples,
                as_json=args.json,
                only=set(args.tool),
            )
        )
    if args.verb == "webhooks":
        return webhooks_cmd.run(settings, args)
    if args.verb == "audit":
        return audit_cmd.run(settings, args)
    if args.verb == "erase-user":
        return erase_cmd.run(settings, args)
    if args.verb == "grants":
        return commands.grants(
            settings,
            args.op,
            args.user,
            getattr(args, "action", None),
            getattr(args, "scope", None),
        )
    return commands.token(settings, args.user, args.ttl, args.scope, on_behalf=args.on_behalf)


def _speak_http(args: argparse.Namespace, settings: Settings) -> int:
    """`tether chat` and `tether runs`: clients of a gateway, not parts of the system."""
    import json

    try:
        token = connect.bearer(args, settings)
    except connect.NoCredentials as err:
        print(f"tether {args.verb}: {err}", file=sys.stderr)
        return 2
    if args.verb == "runs":
        return runs.run(runs.RunsOptions(args.url, token, as_json=args.json), args.op, args)
    from tether_cli.chat import ChatOptions, run_chat
    from tether_cli.chat_answers import Preset

    fill = None
    if args.fill is not None:
        try:
            fill = json.loads(args.fill)
        except ValueError:
            fill = None
        if not isinstance(fill, dict):
            print(
                "tether chat: --fill takes a JSON object, e.g. '{\"replicas\": 4}'", file=sys.stderr
            )
            return 2
    confirm = "approve" if args.approve else "reject" if args.reject else None
    opts = ChatOptions(
        url=args.url,
        token=token,
        agent=args.agent,
        conversation=args.conversation,
        as_json=args.json,
        once=args.once,
        preset=Preset(confirm=confirm, option=args.option, fill=fill, unknown=args.on_unknown),
        color=args.color,
        patience_s=args.patience,
    )
    return run_chat(opts)


if __name__ == "__main__":
    sys.exit(main())
