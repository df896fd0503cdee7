"""The grants' scope rule as a table (store/grants.py): every form of it is held to these cases,
`grants.matches` (the checks), `grants.matches_sql` and the approvals inbox's query
(services/runtime/tests/policy/test_grants.py, test_approval_inbox.py)."""

from __future__ import annotations

# (pattern, scope, allowed)
SCOPE_CASES: list[tuple[str, str, bool]] = [
    ("payment-api/prod", "payment-api/prod", True),
    ("payment-api/prod", "payment-api/staging", False),
    ("payment-api/*", "payment-api/prod", True),
    ("payment-api/*", "payment-api/staging", True),
    ("payment-api/*", "billing-api/prod", False),
    ("*/prod", "payment-api/prod", True),
    ("*/prod", "payment-api/staging", False),
    ("*/*", "payment-api/prod", True),
    ("*", "payment-api/prod", True),
    ("*", "anything/at/all", True),
    # A pattern has as many segments as the scopes it allows.
    ("payment-api/*", "payment-api/prod/eu", False),
    ("payment-api/*", "payment-api", False),
    ("payment-api", "payment-api/prod", False),
    ("*/prod", "prod", False),
    # '*' is a whole segment, never a glob inside one, and a scope's '*' is just a name.
    ("payment-api/prod", "payment-api/*", False),
]
# Scopes no tool should produce and patterns no grant may have (check refuses them): the two
# matchers must still agree on them, whatever they answer.
ODD_CASES: list[tuple[str, str]] = [
    (pattern, scope)
    for pattern in ("*", "a", "a/*", "*/*", "", "a/", "*/", "A/*", "é/*")
    for scope in ("", "a", "a/", "/", "a/b", "a//b", "*", "a/*", "A/b", "é/b", "a/b/", " a/b")
]
