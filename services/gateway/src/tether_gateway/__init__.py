"""Tether gateway service."""
