"""Pipelined round trips to a plain Redis on one connection held for them: the gateway's script
calls (`script_batch.py`) and the runtime's publishes (`run_bus.py`), each of which already
makes one round trip at a time.

redis-py's pipeline does a pool checkout under a lock per round trip, its observability hooks,
a `Pipeline` object with its reset and a retry wrapper; a lone command goes through most of the
same. On this machine a round trip of two EVALSHA cost the client 81-128 µs of CPU that way and
44-65 µs here, a lone command 53-55 against 36 µs (`python -m tether_bench.redis_round_trip_cpu`,
`bench/README.md`): a gateway makes 1.2 script round trips per short run, a runtime a publish or
two. Here the commands are packed into one write and the answers read in order.

The connection is one of the client's pool, checked out once and never given back: the client's
`aclose()` closes it with the pool. Before each round trip a connection Redis closed since, or
one holding unread bytes, is dialled again. A round trip
that fails, or is cancelled (its caller's bound ran out), leaves it disconnected (redis-py drops
a connection whose write or read was broken off, never reusing one half read) and the next round
trip dials again. One round trip at a time: a caller that may overlap asks `busy` and takes the
client's own path meanwhile."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError


class RoundTrip:
    """Round trips on one held connection of a plain (not cluster) `redis.asyncio.Redis`."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._conn: Any = None
        self.busy = False

    async def send(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Each command's answer in order, or the ResponseError Redis answered it with (NOSCRIPT
        as NoScriptError). A broken connection or a cancellation raises, as redis-py's own
        calls do, and the connection is dropped."""
        if self.busy:
            raise RuntimeError("RoundTrip.send: a round trip is in flight (check busy first)")
        self.busy = True
        try:
            conn = self._conn
            if conn is None:
                conn = self._conn = await self._client.connection_pool.get_connection()
            elif conn.is_connected and await conn.can_read():
                # A connection Redis closed since (a restart, an idle timeout, CLIENT KILL) or
                # holding bytes nobody asked for is dialled again before writing, not failed on
                # (no system call: the loop has read the FIN). redis-py 8.1's pool has this check
                # (`ensure_connection`) but skips it while maintenance notifications are "auto",
                # its default: its own calls fail once after such a close.
                await conn.disconnect(nowait=True)
            try:
                await conn.send_packed_command(conn.pack_commands(commands))
                answers: list[Any] = []
                for _ in commands:
                    try:
                        answers.append(await conn.read_response())
                    except ResponseError as err:  # this command's, the next answers follow
                        answers.append(err)
                return answers
            except BaseException:
                # redis-py disconnects on a broken write or read; anything else between them
                # must not leave answers unread on a connection the next round trip reuses.
                await conn.disconnect(nowait=True)
                raise
        finally:
            self.busy = False
