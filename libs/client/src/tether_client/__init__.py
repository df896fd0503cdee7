"""Tether client."""
