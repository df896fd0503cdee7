"""The mailer's settings, read once from the environment when a runtime loads it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class SmtpSettings:
    host: str = "127.0.0.1"
    port: int = 8025
    sender: str = "news@example.com"
    timeout_s: float = 30.0
    send_delay_s: float = 0.0
    """A pause between recipients: lets a demo show progress and a test kill the runtime
    between two recipients (MAILER_SEND_DELAY_S)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SmtpSettings:
        env = os.environ if env is None else env
        try:
            return cls(
                host=env.get("MAILER_SMTP_HOST") or cls.host,
                port=int(env.get("MAILER_SMTP_PORT") or cls.port),
                sender=env.get("MAILER_FROM") or cls.sender,
                timeout_s=float(env.get("MAILER_SMTP_TIMEOUT_S") or cls.timeout_s),
                send_delay_s=float(env.get("MAILER_SEND_DELAY_S") or 0),
            )
        except ValueError as err:
            raise ValueError(
                "tether_mailer: MAILER_SMTP_PORT must be an integer and MAILER_SMTP_TIMEOUT_S / "
                f"MAILER_SEND_DELAY_S numbers of seconds ({err}); the mailer cannot send without them"
            ) from err
