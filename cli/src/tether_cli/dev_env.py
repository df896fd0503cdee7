"""The addresses of a running `tether dev`, for the terminals next to it.

`tether dev` picks free ports when the defaults (8080, 50051) are busy, and its embedded stores
always listen on free ports: no example can hard-code an address. So once it is ready it writes
`<dev dir>/env` (`.tether/env`), a file of `export` lines that a second terminal sources:
TETHER_URL and TETHER_GRPC_TARGET for the examples, TETHER_TOKEN, DATABASE_URL and REDIS_URL for
`tether grants` / `tether seed-demo`, and the virtualenv's bin folder on PATH so that `tether`
works even where uv is not on PATH. The file goes away when `tether dev` stops.

A shell that sourced the file still holds DATABASE_URL / REDIS_URL of embedded stores that no
longer run; `tether dev` started from that shell would take them for external stores. The file
therefore also names them as TETHER_DEV_EMBEDDED_*_URL, and `forget_stale` drops a store URL
that equals its embedded twin.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "env"
EMBEDDED_TWINS = {
    "DATABASE_URL": "TETHER_DEV_EMBEDDED_DATABASE_URL",
    "REDIS_URL": "TETHER_DEV_EMBEDDED_REDIS_URL",
}
# Passed on when set: what makes `tether seed-demo` and `tether token` in the other terminal
# see the same agents and sign with the same key as this `tether dev`.
PASSED_ON = ("TETHER_AGENTS", "TETHER_JWT_SECRET", "OPSPILOT_DATABASE_URL")


@dataclass(frozen=True)
class DevAddresses:
    url: str
    grpc_target: str
    token: str
    database_url: str
    redis_url: str
    embedded_database: bool
    embedded_redis: bool


def path(dev_dir: Path) -> Path:
    return dev_dir / FILE_NAME


def shown(env_file: Path) -> str:
    """The file as a person would type it: relative to the current folder when inside it."""
    try:
        return str(env_file.relative_to(Path.cwd()))
    except ValueError:
        return str(env_file)


def render(addrs: DevAddresses, environ: Mapping[str, str], bin_dir: Path) -> str:
    values: dict[str, str] = {
        "TETHER_URL": addrs.url,
        "TETHER_GRPC_TARGET": addrs.grpc_target,
        "TETHER_TOKEN": addrs.token,
        "DATABASE_URL": addrs.database_url,
        "REDIS_URL": addrs.redis_url,
    }
    if addrs.embedded_database:
        values[EMBEDDED_TWINS["DATABASE_URL"]] = addrs.database_url
    if addrs.embedded_redis:
        values[EMBEDDED_TWINS["REDIS_URL"]] = addrs.redis_url
    values |= {name: environ[name] for name in PASSED_ON if environ.get(name)}
    lines = [
        "# Written by `tether dev` when it was ready; removed when it stops.",
        "# `source` it in another terminal: the README's examples read these.",
        *(f"export {name}={shlex.quote(value)}" for name, value in values.items()),
        f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"',
    ]
    return "\n".join(lines) + "\n"


def write(dev_dir: Path, addrs: DevAddresses, environ: Mapping[str, str]) -> Path:
    """Write the file (mode 0600: it holds a token) and return its path."""
    target = path(dev_dir)
    tmp = target.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(render(addrs, environ, Path(sys.executable).parent))
    os.replace(tmp, target)
    return target


def remove(dev_dir: Path) -> None:
    path(dev_dir).unlink(missing_ok=True)


def forget_stale(environ: MutableMapping[str, str]) -> list[str]:
    """Drop DATABASE_URL / REDIS_URL that a sourced env file left behind (they name an embedded
    store of an earlier `tether dev`); returns the names dropped."""
    dropped = []
    for name, twin in EMBEDDED_TWINS.items():
        if environ.get(twin) and environ.get(name) == environ[twin]:
            del environ[name]
            dropped.append(name)
        environ.pop(twin, None)
    return dropped


def busy_warning(what: str, default: str, addr: str, env_file: Path) -> str:
    """Loud on purpose: every example and bookmark says the default."""
    bar = "!" * 78
    return (
        f"\n{bar}\n"
        f"!! {default} is busy, so the {what} listens on {addr} instead.\n"
        f"!! Examples that say {default} mean {addr} here: `source {shown(env_file)}` sets\n"
        "!! TETHER_URL / TETHER_GRPC_TARGET, which the README's examples use. To pin it, set\n"
        "!! TETHER_HTTP_ADDR / TETHER_GRPC_ADDR (or stop what holds the port).\n"
        f"{bar}"
    )
