"""The delivery loop's settings (README, "Webhooks"): a view of the process's Settings, which
read and check them (TETHER_WEBHOOK_*). The defaults are Settings' own, never written twice."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether_common.config import Settings

# This view's field -> the Settings field it shows.
FIELDS = {
    "deliver": "webhook_delivery",
    "poll_s": "webhook_poll_s",
    "timeout_s": "webhook_timeout_s",
    "max_attempts": "webhook_max_attempts",
    "backoff_base_s": "webhook_backoff_s",
    "backoff_max_s": "webhook_backoff_max_s",
    "per_endpoint": "webhook_per_endpoint",
    "max_in_flight": "webhook_max_in_flight",
}


def _default(name: str) -> Any:
    return Settings.model_fields[FIELDS[name]].default


@dataclass(frozen=True)
class WebhookSettings:
    # Whether this runtime process runs a delivery loop (any number may; they share the work).
    deliver: bool = _default("deliver")
    # How often an idle loop looks for due deliveries.
    poll_s: float = _default("poll_s")
    # One attempt's whole HTTP exchange; a row's lease is this plus as much again.
    timeout_s: float = _default("timeout_s")
    # Attempts before a delivery is dead-lettered (status `dead`, shown by `tether webhooks`).
    max_attempts: int = _default("max_attempts")
    # Backoff before attempt n+1: base * 2**(n-1), at most max, with +-50% jitter.
    backoff_base_s: float = _default("backoff_base_s")
    backoff_max_s: float = _default("backoff_max_s")
    # Attempts in flight to one endpoint from one process, and in all from one process.
    per_endpoint: int = _default("per_endpoint")
    max_in_flight: int = _default("max_in_flight")

    @property
    def lease_s(self) -> float:
        return self.timeout_s * 2 + 1.0

    @classmethod
    def of(cls, settings: Settings) -> WebhookSettings:
        return cls(**{mine: getattr(settings, theirs) for mine, theirs in FIELDS.items()})
