"""TETHER_DB_POOLER says whether DATABASE_URL goes through a transaction pooler; an unknown value
stops the process instead of running with settings the pooler would break."""

from __future__ import annotations

import pytest
from tether_common.config import Settings
from tether_common.errors import UnsafeSettings


def test_default_is_a_direct_connection() -> None:
    s = Settings.from_env({})
    assert (s.db_pooler, s.db_listen_url) == ("none", "")


def test_transaction_pooler_with_a_session_dsn_for_listen() -> None:
    s = Settings.from_env(
        {"TETHER_DB_POOLER": "transaction", "TETHER_DB_LISTEN_URL": "postgresql://pg/tether"}
    )
    assert (s.db_pooler, s.db_listen_url) == ("transaction", "postgresql://pg/tether")


@pytest.mark.parametrize("value", ["session", "Transaction", "pgbouncer", "yes"])
def test_unknown_pooler_is_refused(value: str) -> None:
    with pytest.raises(UnsafeSettings, match="TETHER_DB_POOLER"):
        Settings.from_env({"TETHER_DB_POOLER": value})


def test_the_listen_dsn_is_masked_in_the_start_up_log() -> None:
    s = Settings.from_env({"TETHER_DB_LISTEN_URL": "postgresql://u:secret@pg/tether"})
    assert "secret" not in str(s.public_view()["db_listen_url"])
