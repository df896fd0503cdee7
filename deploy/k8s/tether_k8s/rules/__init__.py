"""Tether's own rules for its manifests, one family a module; tether_k8s.contract runs them all.
Each rule returns its findings as sentences (an empty list: the manifests keep it)."""

from __future__ import annotations


def unmet(*checks: tuple[object, str]) -> list[str]:
    """The message of every (condition, message) whose condition is false, in order."""
    return [message for ok, message in checks if not ok]
