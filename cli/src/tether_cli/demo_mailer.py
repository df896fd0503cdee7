"""The mailer example in `tether dev` (examples/mailer/): loaded through TETHER_AGENTS like any
user's agent, with its SMTP sink as one more supervised process and a page showing what it
received. On by default; TETHER_DEMO_MAILER=0 turns it off, and it is skipped when the
`tether-mailer` package is not installed."""

from __future__ import annotations

import importlib.util
from collections.abc import MutableMapping
from dataclasses import dataclass

from tether_cli.embedded._process import free_port, port_is_free

AGENT = "tether_mailer:agent"
# The demo users may email any segment (Tether's grants, as `tether grants add` gives them).
GRANTS = [("alice", "email.send", "segment/*"), ("bob", "email.send", "segment/*")]


@dataclass(frozen=True)
class MailerDemo:
    smtp_addr: str
    page_url: str
    argv: tuple[str, ...] = ("-m", "tether_mailer.mailbox")

    def announce(self) -> str:
        return f"  Mail sink  {self.page_url}/   (what the mailer sent; SMTP at {self.smtp_addr})\n"


def _port(host: str, default: int) -> int:
    return default if port_is_free(host, default) else free_port(host)


def configure(environ: MutableMapping[str, str]) -> MailerDemo | None:
    """Name the mailer in TETHER_AGENTS and point it at the sink's ports, in `environ` (which
    migrate, seed and every child process read); None when the demo is off."""
    if environ.get("TETHER_DEMO_MAILER", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    if importlib.util.find_spec("tether_mailer") is None:
        return None
    agents = [a.strip() for a in environ.get("TETHER_AGENTS", "").split(",") if a.strip()]
    if AGENT not in agents:
        environ["TETHER_AGENTS"] = ",".join([*agents, AGENT])
    host = environ.get("MAILER_SMTP_HOST") or "127.0.0.1"
    port = environ.get("MAILER_SMTP_PORT") or str(_port(host, 8025))
    environ["MAILER_SMTP_HOST"], environ["MAILER_SMTP_PORT"] = host, port
    page = environ.get("MAILER_SINK_HTTP") or f"127.0.0.1:{_port('127.0.0.1', 8026)}"
    environ["MAILER_SINK_HTTP"] = page
    return MailerDemo(smtp_addr=f"{host}:{port}", page_url=f"http://{page}")


async def grant(dsn: str) -> None:
    from tether_runtime.api import admin

    await admin.add_grants(dsn, GRANTS)
