"""`tether`: the one entry point for developers, tests, benchmarks and deployments (DESIGN §8)."""

from __future__ import annotations

import argparse
import sys

from tether_common.config import Settings
from tether_common.errors import UnsafeSettings

from tether_cli import commands

EXIT_UNSAFE_SETTINGS = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tether", description="Tether: durable AI agent runs.")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    verbs.add_parser("dev", help="the whole system here: embedded stores, migrate, seed, services")
    verbs.add_parser("migrate", help="apply database migrations (safe when pods race)")
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
        description="For every write tool, each of its examples=[...] and each kill point "
        "(before, during, after the call): drive a run to the tool on a scratch database, "
        "SIGKILL the runtime, let a fresh one take over, and check at most one effect, the "
        "tool's declared strategy, dense events and that the run ended. Exit 1 if a row fails.",
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
        "--tool", action="append", default=[], help="check only this write tool (repeatable)"
    )
    conf.add_argument(
        "--allow-missing-examples",
        action="store_true",
        help="a write tool without examples is reported, not a failure",
    )
    conf.add_argument("--json", action="store_true", help="the rows as JSON")
    verbs.add_parser("runtime", help="run one runtime pod: gRPC API and workers")
    verbs.add_parser("gateway", help="run one gateway pod: HTTP API, SSE and the web UI")
    tok = verbs.add_parser("token", help="print a bearer token signed with TETHER_JWT_SECRET")
    tok.add_argument("--user", required=True, help="the user (or service) id, e.g. alice")
    tok.add_argument("--ttl", type=float, default=3600.0, help="lifetime in seconds (3600)")
    tok.add_argument("--scope", choices=["user", "service"], default="user")
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        if args.verb in ("runtime", "gateway", "dev"):
            settings.check()
    except UnsafeSettings as err:
        print(f"tether {args.verb}: {err.message}", file=sys.stderr)
        return EXIT_UNSAFE_SETTINGS
    if args.verb == "dev":
        from tether_cli.dev import run_dev

        return run_dev(settings)
    if args.verb == "migrate":
        return commands.migrate(settings)
    if args.verb == "seed-demo":
        return commands.seed_demo(settings, reset=args.reset)
    if args.verb == "agents":
        return commands.agents(settings, as_json=args.json)
    if args.verb in ("runtime", "gateway"):
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
    if args.verb == "grants":
        return commands.grants(
            settings,
            args.op,
            args.user,
            getattr(args, "action", None),
            getattr(args, "scope", None),
        )
    return commands.token(settings, args.user, args.ttl, args.scope)


if __name__ == "__main__":
    sys.exit(main())
