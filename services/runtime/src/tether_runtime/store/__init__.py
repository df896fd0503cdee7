"""Postgres access (asyncpg): one module per record family."""
