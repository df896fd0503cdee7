"""A gateway process's counters, read from its /metrics as a scraper would."""

from __future__ import annotations

import aiohttp

from tether_testkit.processes import Proc


async def bus_feeds(gw: Proc) -> dict[str, float]:
    """tether_gateway_bus_feeds_total by outcome: how the runs it followed on the bus ended."""
    async with aiohttp.ClientSession() as http, http.get(f"{gw.addr}/metrics") as r:
        text = await r.text()
    out = {}
    for line in text.splitlines():
        if line.startswith("tether_gateway_bus_feeds_total{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            out[outcome] = float(line.rsplit(" ", 1)[1])
    return out
