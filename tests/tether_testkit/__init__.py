"""Test kit: real Postgres and Redis for a test session, and real Tether processes on free ports."""
