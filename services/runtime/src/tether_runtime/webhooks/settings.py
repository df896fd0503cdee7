"""The delivery loop's settings (README, "Webhooks"): a view of the process's Settings, which
read and check them (TETHER_WEBHOOK_*)."""

from __future__ import annotations

from dataclasses import dataclass

from tether_common.config import Settings


@dataclass(frozen=True)
class WebhookSettings:
    # Whether this runtime process runs a delivery loop (any number may; they share the work).
    deliver: bool = True
    # How often an idle loop looks for due deliveries.
    poll_s: float = 1.0
    # One attempt's whole HTTP exchange; a row's lease is this plus as much again.
    timeout_s: float = 10.0
    # Attempts before a delivery is dead-lettered (status `dead`, shown by `tether webhooks`).
    max_attempts: int = 12
    # Backoff before attempt n+1: base * 2**(n-1), at most max, with +-50% jitter.
    backoff_base_s: float = 2.0
    backoff_max_s: float = 3600.0
    # Attempts in flight to one endpoint from one process, and in all from one process.
    per_endpoint: int = 4
    max_in_flight: int = 64

    @property
    def lease_s(self) -> float:
        return self.timeout_s * 2 + 1.0

    @classmethod
    def of(cls, settings: Settings) -> WebhookSettings:
        return cls(
            deliver=settings.webhook_delivery,
            poll_s=settings.webhook_poll_s,
            timeout_s=settings.webhook_timeout_s,
            max_attempts=settings.webhook_max_attempts,
            backoff_base_s=settings.webhook_backoff_s,
            backoff_max_s=settings.webhook_backoff_max_s,
            per_endpoint=settings.webhook_per_endpoint,
            max_in_flight=settings.webhook_max_in_flight,
        )
