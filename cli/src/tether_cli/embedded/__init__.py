"""Embedded PostgreSQL and Redis for `tether dev` and for tests on a machine with neither."""

from tether_cli.embedded._process import EmbeddedStoreError
from tether_cli.embedded.postgres import EmbeddedPostgres
from tether_cli.embedded.redis import EmbeddedRedis

__all__ = ["EmbeddedPostgres", "EmbeddedRedis", "EmbeddedStoreError"]
