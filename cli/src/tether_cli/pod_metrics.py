"""One Prometheus endpoint for the N processes of a pod (`--processes N`): each child serves its
metrics on a private loopback port; a scrape of the pod's TETHER_METRICS_ADDR reads them all and
labels every sample with `process` (the child's slot, stable across restarts, so the series
stay bounded). Prometheus keeps scraping one port per pod, and sees every process's queue
depth, streams and counters."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 3.0
LABEL = "process"
UP = "tether_pod_process_up"


def merge(texts: dict[int, str | None]) -> bytes:
    """The children's expositions as one, each sample labelled with its child's slot; a child
    that did not answer (restarting, stuck) is `tether_pod_process_up{process=...} 0`."""
    families: dict[str, Metric] = {}
    up = Metric(UP, "Whether the pod's process answered this scrape", "gauge")
    for slot, text in sorted(texts.items()):
        up.add_sample(UP, {LABEL: str(slot)}, 0.0 if text is None else 1.0)
        if text is None:
            continue
        for family in text_string_to_metric_families(text):
            merged = families.setdefault(
                family.name, Metric(family.name, family.documentation, family.type, family.unit)
            )
            for s in family.samples:
                merged.add_sample(s.name, {**s.labels, LABEL: str(slot)}, s.value, s.timestamp)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed([up, *families.values()]))
    return generate_latest(registry)


class _Fixed:
    """A collector that yields families already built (one scrape's worth)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class PodMetrics:
    """Serves the merged /metrics on the pod's metrics address, reading `children` (slot to
    "host:port") at each scrape."""

    def __init__(self, addr: str, children: dict[int, str]) -> None:
        self.addr = addr
        self.children = children
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S))
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/", self._metrics)  # the runtime's own server answers any path
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        host, _, port = self.addr.rpartition(":")
        await web.TCPSite(self._runner, host.strip("[]") or "0.0.0.0", int(port)).start()  # noqa: S104

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _metrics(self, request: web.Request) -> web.Response:
        slots = sorted(self.children)
        texts = await asyncio.gather(*(self._read(self.children[s]) for s in slots))
        body = merge(dict(zip(slots, texts, strict=True)))
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})

    async def _read(self, addr: str) -> str | None:
        assert self._session is not None
        try:
            async with self._session.get(f"http://{addr}/metrics") as resp:
                if resp.status != 200:
                    return None
                return await resp.text()
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None
