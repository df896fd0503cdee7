"""Tether runtime service."""
