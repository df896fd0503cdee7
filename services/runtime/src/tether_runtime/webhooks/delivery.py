"""The delivery loop: any number of runtime processes run one; each claims due outbox rows with
FOR UPDATE SKIP LOCKED (a row is one pod's at a time, leased by `next_attempt_at`), posts them
signed, and records the answer fenced by its claim token. At least once: a pod killed
mid-delivery leaves the row due again once its lease passes, and the next loop posts it again
with the same event id.

Nothing here blocks a run: runs only insert outbox rows. A dead or slow endpoint holds at most
`per_endpoint` attempts of this process, each bounded by `timeout_s`, and is skipped by the
claim while those are in flight; other endpoints' deliveries go on beside it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import Counter as Tally

import aiohttp
from prometheus_client import Counter
from tether_common import task_stop
from tether_common.backoff import Backoff
from tether_common.event_wait import wait_set
from tether_common.ids import new_id

from tether_runtime.store import outbox
from tether_runtime.store.db import STORE_ERRORS, Pool
from tether_runtime.webhooks import signature as sig
from tether_runtime.webhooks.settings import WebhookSettings

log = logging.getLogger(__name__)

DELIVERIES = Counter(
    "tether_webhook_deliveries_total",
    "Webhook delivery attempts by outcome (delivered, retry, dead, fenced)",
    ["outcome"],
)
USER_AGENT = "Tether-Webhooks/1"


def encode(payload: dict[str, object]) -> bytes:
    """The body, the same bytes on every attempt (keys sorted, no spaces)."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def backoff_s(settings: WebhookSettings, attempts: int) -> float:
    """The wait after the `attempts`-th failed attempt: exponential, capped, with jitter (so
    the deliveries of an endpoint that came back do not all retry in step)."""
    policy = Backoff(settings.backoff_base_s, settings.backoff_max_s, jitter=(0.5, 1.5))
    return policy.delay(attempts)


class DeliveryLoop:
    def __init__(self, pool: Pool, settings: WebhookSettings) -> None:
        self.pool = pool
        self.settings = settings
        self._in_flight: Tally[str] = Tally()  # endpoint id -> attempts in flight here
        self._tasks: set[asyncio.Task[None]] = set()
        self._freed = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            headers={"User-Agent": USER_AGENT, "Content-Type": "application/json"},
            # No connection limit of aiohttp's own (endpoints on one host would queue behind each
            # other): attempts are bounded per endpoint and in all by this loop, and time out.
            connector=aiohttp.TCPConnector(limit=0),
        )
        self._loop_task = asyncio.create_task(self._loop(), name="webhook-delivery")

    async def stop(self) -> None:
        """Attempts still in flight are abandoned: their rows' leases run out and another loop
        (or this pod's successor) delivers them."""
        tasks = [t for t in (self._loop_task, *self._tasks) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(Exception):
                await task_stop.stop(t)
        if self._session is not None:
            await self._session.close()

    def _free_slots(self) -> dict[str, int]:
        per = self.settings.per_endpoint
        return {ep: max(per - n, 0) for ep, n in self._in_flight.items() if n}

    async def _loop(self) -> None:
        while True:
            room = self.settings.max_in_flight - sum(self._in_flight.values())
            claimed: list[outbox.Claimed] = []
            if room > 0:
                try:
                    async with self.pool.acquire() as conn:
                        claimed = await outbox.claim(
                            conn,
                            new_id("whc"),
                            limit=room,
                            per_endpoint=self.settings.per_endpoint,
                            free_slots=self._free_slots(),
                            lease_s=self.settings.lease_s,
                        )
                except STORE_ERRORS as err:
                    log.warning("webhook claim failed, retrying: %s", err)
            for d in claimed:
                self._in_flight[d.endpoint_id] += 1
                task = asyncio.create_task(self._attempt(d), name=f"webhook-{d.id}")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            if claimed and len(claimed) == room:
                continue  # maybe more due: claim again at once
            self._freed.clear()
            # A freed slot may let an endpoint's next delivery go; else poll (wait_set: the
            # loop has no other way out than stop()'s cancel, which wait_for could lose).
            await wait_set(self._freed, self.settings.poll_s)

    async def _attempt(self, d: outbox.Claimed) -> None:
        try:
            code, error = await self._post(d)
            await self._record(d, code, error)
        finally:
            self._in_flight[d.endpoint_id] -= 1
            if self._in_flight[d.endpoint_id] <= 0:
                del self._in_flight[d.endpoint_id]
            self._freed.set()

    async def _post(self, d: outbox.Claimed) -> tuple[int | None, str]:
        """(HTTP status or None, error or "" when a 2xx answered)."""
        assert self._session is not None
        body = encode(d.payload)
        now = int(time.time())
        headers = {
            sig.SIGNATURE_HEADER: sig.header(d.secret, now, body),
            sig.EVENT_ID_HEADER: d.event_id,
            sig.EVENT_TYPE_HEADER: d.event_type,
            sig.ATTEMPT_HEADER: str(d.attempts),
        }
        timeout = self.settings.timeout_s
        try:
            async with asyncio.timeout(timeout):
                async with self._session.post(
                    d.url, data=body, headers=headers, allow_redirects=False
                ) as resp:
                    code = resp.status
        except TimeoutError:
            return None, f"no answer within {timeout:g} s"
        except aiohttp.ClientConnectorError as err:
            # Not str(err): an error's text can quote the URL, and a URL can hold a token.
            return None, f"cannot connect: {err.os_error.strerror or type(err.os_error).__name__}"
        except aiohttp.ClientError as err:
            return None, type(err).__name__
        except ValueError:  # e.g. a URL aiohttp cannot use
            return None, "invalid URL"

        if 200 <= code < 300:
            return code, ""
        return code, f"HTTP {code}"

    async def _record(self, d: outbox.Claimed, code: int | None, error: str) -> None:
        retry_in = None
        if not error:
            outcome = "delivered"
        elif d.attempts >= self.settings.max_attempts:
            outcome = "dead"
        else:
            outcome = "retry"
            retry_in = backoff_s(self.settings, d.attempts)
        try:
            async with self.pool.acquire() as conn:
                if outcome == "delivered":
                    held = await outbox.delivered(conn, d, code or 0)
                else:
                    held = await outbox.failed(conn, d, error, code, retry_in)
        except STORE_ERRORS as err:
            # The row stays leased; when the lease passes it is attempted again (at least once).
            log.warning("webhook %s: recording the attempt failed: %s", d.id, err)
            return
        DELIVERIES.labels(outcome=outcome if held else "fenced").inc()
        if outcome != "delivered":
            log.info(
                "webhook attempt failed",
                extra={
                    "delivery": d.id,
                    "endpoint": d.endpoint_id,
                    "attempt": d.attempts,
                    "error": error,
                    "outcome": outcome,
                },
            )
