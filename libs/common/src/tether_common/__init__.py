"""Tether shared library."""
