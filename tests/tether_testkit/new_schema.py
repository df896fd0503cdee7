"""`python -m tether_testkit.new_schema [--extra package:folder] DSN`: apply this version's
migrations (the migrator `tether migrate` runs) to DSN, then, with --extra, the migrations of one
more folder (as an agent's are applied: the breaking-migration test's "later migration"). Prints
what it applied. Run by the previous release's tests through tether_release_compat."""

from __future__ import annotations

import argparse
import asyncio

from tether_runtime.store.migrations import migrate

EXTRA_AGENT = "compat-extra"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--extra", default="")
    parser.add_argument("dsn")
    args = parser.parse_args()
    agents = [(EXTRA_AGENT, args.extra)] if args.extra else []
    applied = asyncio.run(migrate(args.dsn, agents))
    print("new schema applied:", ", ".join(applied) or "nothing")


if __name__ == "__main__":
    main()
