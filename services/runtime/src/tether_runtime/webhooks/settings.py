"""The delivery loop's settings, read from the environment (README, "Webhooks")."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from tether_common.errors import UnsafeSettings


def _number(env: Mapping[str, str], name: str, default: float, minimum: float) -> float:
    raw = env.get(name, "")
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as err:
        raise UnsafeSettings(f"{name}={raw!r} is not a number") from err
    if not value >= minimum:  # also refuses NaN
        raise UnsafeSettings(f"{name} must be at least {minimum:g}, not {raw}")
    return value


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
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebhookSettings:
        e = os.environ if env is None else env
        return cls(
            deliver=e.get("TETHER_WEBHOOK_DELIVERY", "1") not in ("0", "false"),
            poll_s=_number(e, "TETHER_WEBHOOK_POLL_S", cls.poll_s, 0.01),
            timeout_s=_number(e, "TETHER_WEBHOOK_TIMEOUT_S", cls.timeout_s, 0.1),
            max_attempts=int(_number(e, "TETHER_WEBHOOK_MAX_ATTEMPTS", cls.max_attempts, 1)),
            backoff_base_s=_number(e, "TETHER_WEBHOOK_BACKOFF_S", cls.backoff_base_s, 0.0),
            backoff_max_s=_number(e, "TETHER_WEBHOOK_BACKOFF_MAX_S", cls.backoff_max_s, 0.0),
            per_endpoint=int(_number(e, "TETHER_WEBHOOK_PER_ENDPOINT", cls.per_endpoint, 1)),
            max_in_flight=int(_number(e, "TETHER_WEBHOOK_MAX_IN_FLIGHT", cls.max_in_flight, 1)),
        )
