"""`tether runtime|gateway --processes N`: N processes of one service behind its one port, so a
pod uses every core it is given (one Python process runs on one).

Every child binds the same listen address: gRPC sets SO_REUSEPORT (made explicit in
server_options), the gateway's site asks for it; the kernel spreads new connections over the
listening processes. The supervisor owns no socket of the API, it only:

- starts the children, each with TETHER_PROCESSES=1 and TETHER_SHARED_PORT=1 (a lone process
  binds its port alone) and, when the pod serves metrics, a private
  loopback metrics port that pod_metrics merges onto TETHER_METRICS_ADDR;
- restarts a child that dies, after a backoff that doubles (0.5 s up to 30 s); a child that
  exits with the configuration-refused code (2), or dies MAX_QUICK_DEATHS times in a row within
  STABLE_S of its start, stops the pod with a non-zero exit instead, so kubelet's own crash-loop
  backoff takes over (a crash loop never spins here);
- on SIGTERM/SIGINT sends SIGTERM to every child at once, so they drain together (health
  NOT_SERVING, streams ended, leases given back: each child's own drain, TETHER_DRAIN_S), and
  exits once they have: 0 if every child drained cleanly. A child still running DRAIN_MARGIN_S
  past TETHER_DRAIN_S is killed.

Children run in their own process group (a terminal's Ctrl-C reaches only the supervisor, which
stops them together) and get SIGTERM if the supervisor dies without stopping them."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

from tether_common.backoff import NO_JITTER, Backoff
from tether_common.config import Settings
from tether_common.event_wait import wait_set

from tether_cli.embedded._process import die_with_parent, free_port
from tether_cli.pod_metrics import PodMetrics

log = logging.getLogger(__name__)

EXIT_REFUSED = 2  # main.EXIT_UNSAFE_SETTINGS, AgentLoadError: the same on every restart
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
STABLE_S = 30.0
MAX_QUICK_DEATHS = 5
DRAIN_MARGIN_S = 5.0


@dataclass
class Child:
    slot: int
    proc: asyncio.subprocess.Process
    started: float
    quick_deaths: int = 0


class Pod:
    def __init__(self, service: str, settings: Settings, processes: int) -> None:
        self.service = service
        self.settings = settings
        self.processes = processes
        self.children: dict[int, Child] = {}
        # Each child's private metrics address (stable per slot: the merge labels by slot).
        self.metrics_addrs: dict[int, str] = {}
        if settings.metrics_addr:
            self.metrics_addrs = {
                i: f"127.0.0.1:{free_port('127.0.0.1')}" for i in range(processes)
            }
        self._stop = asyncio.Event()
        self._failure: int | None = None
        # What a child runs (tests put a stand-in here to exercise the restart policy).
        self.child_argv: tuple[str, ...] = (sys.executable, "-m", "tether_cli.main", service)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        metrics = PodMetrics(self.settings.metrics_addr, self.metrics_addrs)
        if self.metrics_addrs:
            await metrics.start()
        try:
            for slot in range(self.processes):
                await self._spawn(slot, quick_deaths=0)
            log.info(
                "pod started",
                extra={
                    "service": self.service,
                    "processes": self.processes,
                    "pids": [c.proc.pid for c in self.children.values()],
                },
            )
            await self._watch()
            clean = await self._drain()
            return self._failure if self._failure is not None else (0 if clean else 1)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            for child in self.children.values():
                if child.proc.returncode is None:
                    child.proc.kill()
                    await child.proc.wait()
            await metrics.stop()

    async def _spawn(self, slot: int, *, quick_deaths: int) -> None:
        env = {**os.environ, "TETHER_PROCESSES": "1", "TETHER_SHARED_PORT": "1"}
        if self.metrics_addrs:
            env["TETHER_METRICS_ADDR"] = self.metrics_addrs[slot]
        proc = await asyncio.create_subprocess_exec(
            *die_with_parent(signal.SIGTERM), *self.child_argv,
            env=env, stdin=subprocess.DEVNULL, process_group=0,
        )  # fmt: skip
        now = asyncio.get_running_loop().time()
        self.children[slot] = Child(slot, proc, now, quick_deaths)

    async def _watch(self) -> None:
        """Until a stop is asked for or the pod gives up: replace children that die."""
        stop = asyncio.create_task(self._stop.wait())
        try:
            while not self._stop.is_set():
                waits = {asyncio.create_task(c.proc.wait()): c for c in self.children.values()}
                done, _ = await asyncio.wait({stop, *waits}, return_when=asyncio.FIRST_COMPLETED)
                for task in waits:
                    task.cancel()
                if stop in done:
                    return
                for task in done:
                    if not await self._replace(waits[task]):
                        return
        finally:
            stop.cancel()

    async def _replace(self, child: Child) -> bool:
        """Restart a dead child after its backoff; False when the pod must stop instead."""
        code = child.proc.returncode
        loop = asyncio.get_running_loop()
        lived = loop.time() - child.started
        quick = child.quick_deaths + 1 if lived < STABLE_S else 0
        if code == EXIT_REFUSED:
            log.error(
                "%s process %d refused its configuration (exit 2): stopping the pod",
                self.service, child.slot,
            )  # fmt: skip
            self._failure = EXIT_REFUSED
            return False
        if quick >= MAX_QUICK_DEATHS:
            log.error(
                "%s process %d died %d times within %.0fs of starting: stopping the pod",
                self.service, child.slot, quick, STABLE_S,
            )  # fmt: skip
            self._failure = 1
            return False
        backoff = Backoff(BACKOFF_FIRST_S, BACKOFF_MAX_S, jitter=NO_JITTER).delay(quick)
        log.warning(
            "%s process %d (pid %d) exited with %s after %.1fs; restarting in %.1fs",
            self.service, child.slot, child.proc.pid, code, lived, backoff,
        )  # fmt: skip
        if await wait_set(self._stop, backoff):
            return False
        await self._spawn(child.slot, quick_deaths=quick)
        return True

    async def _drain(self) -> bool:
        """SIGTERM to every child at once; True when each exited 0 within the grace period."""
        running = [c.proc for c in self.children.values() if c.proc.returncode is None]
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        grace = self.settings.drain_s + DRAIN_MARGIN_S
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in running)), grace)
        except TimeoutError:
            log.warning(
                "%s processes still running %.0fs after SIGTERM; killing", self.service, grace
            )
            return False
        codes = [p.returncode for p in running]
        log.info("pod stopped", extra={"service": self.service, "exit_codes": codes})
        return all(c == 0 for c in codes)


def run_pod(service: str, settings: Settings, processes: int) -> int:
    from tether_common.logging import setup_logging

    setup_logging(f"tether-{service}-pod", settings.log_level)
    # Plain asyncio: the supervisor is idle between signals, and uvloop's subprocess_exec has
    # no process_group.
    return asyncio.run(Pod(service, settings, processes).run())
