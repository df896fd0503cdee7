"""Runs the runtime and gateway processes of `tether dev`, announces them ready, stops them."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
from tether_common.auth import issue_token
from tether_common.config import Settings

from tether_cli import dev_env
from tether_cli.demo_mailer import MailerDemo
from tether_cli.embedded import EmbeddedPostgres, EmbeddedRedis
from tether_cli.embedded._process import die_with_parent, free_port, port_is_free

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0
DEV_USER = "alice"
DEV_TOKEN_TTL_S = 7 * 24 * 3600.0
SERVICES = ("runtime", "gateway")
MAIL_SINK = "mail-sink"
DEV_DEFAULT_AGENT = "opspilot"


def listen_addr(name: str, default: str) -> tuple[str, bool]:
    """The address from the environment, else the default if it is free, else a free port; and
    whether the default was busy (then every example that names it is wrong, which `tether dev`
    says loudly)."""
    configured = os.environ.get(name)
    if configured:
        return configured, False
    host, _, port = default.rpartition(":")
    if port_is_free(host, int(port)):
        return default, False
    return f"{host}:{free_port(host)}", True


def http_url(addr: str) -> str:
    host, _, port = addr.rpartition(":")
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{port}"


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        database_url: str,
        redis_url: str,
        *,
        embedded: list[EmbeddedPostgres | EmbeddedRedis],
        dev_dir: Path,
        mailer: MailerDemo | None = None,
    ) -> None:
        self.settings = settings
        self.mailer = mailer
        self.embedded = embedded
        self.dev_dir = dev_dir
        defaults = Settings()
        self.grpc_addr, grpc_moved = listen_addr("TETHER_GRPC_ADDR", defaults.grpc_addr)
        self.http_addr, http_moved = listen_addr("TETHER_HTTP_ADDR", defaults.http_addr)
        self.moved = [
            (what, default, addr)
            for what, default, addr, moved in (
                ("gateway (HTTP)", defaults.http_addr, self.http_addr, http_moved),
                ("runtime (gRPC)", defaults.grpc_addr, self.grpc_addr, grpc_moved),
            )
            if moved
        ]
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "TETHER_GRPC_ADDR": self.grpc_addr,
            "TETHER_HTTP_ADDR": self.http_addr,
            "TETHER_RUNTIME_TARGET": os.environ.get("TETHER_RUNTIME_TARGET") or self.grpc_addr,
            # The web UI's sign-in by user name (POST /v1/dev/token): only `tether dev` serves it.
            "TETHER_DEV_LOGIN": "1",
            # `tether dev` is OpsPilot's demo (the mailer is loaded beside it): a run that names
            # no agent is OpsPilot's, unless TETHER_DEFAULT_AGENT says otherwise.
            "TETHER_DEFAULT_AGENT": settings.default_agent or DEV_DEFAULT_AGENT,
        }
        if embedded:
            self.env["TETHER_EMBEDDED_STORES"] = "1"
        self.children: dict[str, asyncio.subprocess.Process] = {}
        self._stop = asyncio.Event()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        try:
            if self.mailer is not None:
                # First: the runtime sends to it as soon as a run is approved.
                self.children[MAIL_SINK] = await self._spawn_python(MAIL_SINK, self.mailer.argv)
            for name in SERVICES:
                self.children[name] = await self._spawn(name)
            watch = asyncio.create_task(self._first_death())
            stop = asyncio.create_task(self._stop.wait())
            ready = asyncio.create_task(self._until_ready())
            done, _ = await asyncio.wait({watch, stop, ready}, return_when=asyncio.FIRST_COMPLETED)
            if ready in done and ready.result():
                self._announce()
                done, _ = await asyncio.wait({watch, stop}, return_when=asyncio.FIRST_COMPLETED)
            elif ready in done:
                print(f"tether dev: the gateway was not ready within {READY_TIMEOUT_S:.0f}s",
                      file=sys.stderr)  # fmt: skip
            for task in (watch, stop, ready):
                task.cancel()
            requested = stop in done and watch not in done
            if watch in done:
                print(f"tether dev: {watch.result()}; stopping everything", file=sys.stderr)
            await self._shutdown()
            return 0 if requested else 1
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            await self._kill_all()
            dev_env.remove(self.dev_dir)

    async def _spawn(self, name: str) -> asyncio.subprocess.Process:
        env = self.env
        if name == "gateway":  # TETHER_METRICS_ADDR is the runtime's port here: one binds it
            env = {k: v for k, v in env.items() if k != "TETHER_METRICS_ADDR"}
        return await self._spawn_python(name, ("-m", "tether_cli.main", name), env)

    async def _spawn_python(
        self, name: str, argv: tuple[str, ...], env: dict[str, str] | None = None
    ) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *die_with_parent(signal.SIGTERM), sys.executable, *argv,
            env=self.env if env is None else env, stdin=subprocess.DEVNULL,
            # Own process group: a terminal's Ctrl-C reaches only us, and we stop them in order.
            process_group=0,
        )  # fmt: skip

    async def _first_death(self) -> str:
        """Returns a description of the first service or store that exited on its own."""
        waits = {asyncio.create_task(p.wait()): name for name, p in self.children.items()}
        try:
            while True:
                done, _ = await asyncio.wait(waits, timeout=0.5)
                for task in done:
                    return f"{waits[task]} exited with code {task.result()}"
                for store in self.embedded:
                    proc = store.process
                    if proc is not None and proc.poll() is not None:
                        return f"embedded {type(store).__name__} exited with {proc.returncode}"
        finally:
            for task in waits:
                task.cancel()

    async def _until_ready(self) -> bool:
        url = http_url(self.http_addr) + "/readyz"
        timeout = aiohttp.ClientTimeout(total=1.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_S
            while asyncio.get_running_loop().time() < deadline:
                try:
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            return True
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.2)
        return False

    def _announce(self) -> None:
        token = issue_token(self.settings.jwt_secret, DEV_USER, ttl_s=DEV_TOKEN_TTL_S)
        url = http_url(self.http_addr)
        env_file = dev_env.write(
            self.dev_dir,
            dev_env.DevAddresses(
                url=url,
                grpc_target=self.grpc_addr,
                token=token,
                database_url=self.env["DATABASE_URL"],
                redis_url=self.env["REDIS_URL"],
                embedded_database=any(isinstance(s, EmbeddedPostgres) for s in self.embedded),
                embedded_redis=any(isinstance(s, EmbeddedRedis) for s in self.embedded),
            ),
            self.env,
        )
        for what, default, addr in self.moved:
            print(dev_env.busy_warning(what, default, addr, env_file), file=sys.stderr, flush=True)
        stores = (
            f"  Postgres   {self.env['DATABASE_URL']} (embedded, data in {self.dev_dir}/postgres)\n"
            if any(isinstance(s, EmbeddedPostgres) for s in self.embedded)
            else "  Postgres   DATABASE_URL from the environment\n"
        ) + (
            f"  Redis      {self.env['REDIS_URL']} (embedded)\n"
            if any(isinstance(s, EmbeddedRedis) for s in self.embedded)
            else "  Redis      REDIS_URL from the environment\n"
        )
        print(
            "\nTether is ready.\n"
            f"  Web UI     {url}/\n"
            f"  HTTP API   {url}/v1   (gRPC API at {self.grpc_addr})\n"
            f"{stores}"
            f"{self.mailer.announce() if self.mailer is not None else ''}"
            f"  Dev token for user {DEV_USER} (7 days):\n"
            f"export TETHER_TOKEN={token}\n"
            f"export TETHER_URL={url} TETHER_GRPC_TARGET={self.grpc_addr}\n"
            f"  In another terminal, `source {dev_env.shown(env_file)}` sets TETHER_URL, "
            "TETHER_GRPC_TARGET, TETHER_TOKEN, DATABASE_URL, REDIS_URL\n"
            "  and puts `tether` on PATH; the README's examples use them.\n"
            f'  Try: curl -s -X POST -H "Authorization: Bearer $TETHER_TOKEN" '
            f"-H 'Content-Type: application/json' -d '{{}}' $TETHER_URL/v1/conversations\n"
            "Press Ctrl-C to stop.\n",
            flush=True,
        )

    async def _shutdown(self) -> None:
        """SIGTERM to the gateway, then the runtime; each drains. A second Ctrl-C kills."""
        loop = asyncio.get_running_loop()
        # A second signal kills, unless it arrives with the first (a shell or `uv run` passing
        # the same Ctrl-C along).
        patient_until = loop.time() + 1.0

        def impatient() -> None:
            if loop.time() > patient_until:
                self._kill_now()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, impatient)
        for name in (*reversed(SERVICES), MAIL_SINK):
            proc = self.children.get(name)
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        grace = self.settings.drain_s + 10.0
        waits = [p.wait() for p in self.children.values()]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), grace)
        except TimeoutError:
            log.warning("services did not stop within %.0fs; killing them", grace)

    def _kill_now(self) -> None:
        for proc in self.children.values():
            if proc.returncode is None:
                proc.kill()

    async def _kill_all(self) -> None:
        self._kill_now()
        for proc in self.children.values():
            await proc.wait()
