"""How a connection to a store on the LAN gives up on a peer gone silent (a NAT or firewall forgot
the connection, a partition drops its packets, the peer's machine vanished: no FIN, no RST).

Left to the kernel's defaults, data sent on such a connection is retransmitted for about 15
minutes before the socket fails, and an idle one is probed after 2 hours. Here, data unacknowledged
for TCP_USER_TIMEOUT_MS ends the connection (the caller sees an OSError and dials a fresh one), and
keepalive probes do the same for an idle one. The store is a LAN peer: 5 s is many
retransmissions. One policy for every store: the Postgres pool (tether_runtime.store.db) and the
Redis subscribers (redis_conn.silent_peer_options)."""

from __future__ import annotations

import socket

TCP_USER_TIMEOUT_MS = 5_000
KEEPALIVE = ((socket.TCP_KEEPIDLE, 10), (socket.TCP_KEEPINTVL, 3), (socket.TCP_KEEPCNT, 3))


def tcp_options() -> dict[int, int]:
    """The IPPROTO_TCP options, as (option, value) for a client that sets them itself."""
    return {socket.TCP_USER_TIMEOUT: TCP_USER_TIMEOUT_MS, **dict(KEEPALIVE)}


def fail_fast_when_silent(sock: socket.socket | None) -> None:
    """Apply the policy to an open TCP socket (a no-op for a Unix socket, or none)."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in tcp_options().items():
        sock.setsockopt(socket.IPPROTO_TCP, option, value)
