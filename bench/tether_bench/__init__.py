"""Tether's benchmark harness: `make bench` / `make bench-quick` (see bench/README.md)."""
