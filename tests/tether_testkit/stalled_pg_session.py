"""A Postgres session left in the middle of a command, as a pooled connection that goes dark
leaves it: a client on a raw socket (Postgres's wire protocol, version 3) that opens a
transaction, takes a lock in it, then sends a Parse with a Flush and never the Sync. Postgres
shows it `active`, waiting on `ClientRead`, until something ends it
(tether_runtime.store.stalled_sessions)."""

from __future__ import annotations

import socket
import struct
import urllib.parse


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


class StalledSession:
    """`StalledSession(dsn, name)`: connected (trust authentication, as the test servers use),
    named `name`, inside a transaction holding the advisory lock `lock`, stalled mid-command.
    `pid` is its backend; `ended()` tells whether the server has closed it."""

    def __init__(self, dsn: str, name: str, *, lock: int = 0, stall: bool = True) -> None:
        url = urllib.parse.urlsplit(dsn)
        self.sock = socket.create_connection((url.hostname or "127.0.0.1", url.port or 5432), 5)
        params = {
            "user": url.username or "postgres",
            "database": url.path.lstrip("/") or "postgres",
            "application_name": name,
        }
        body = struct.pack("!I", 196608) + b"".join(
            k.encode() + b"\0" + v.encode() + b"\0" for k, v in params.items()
        )
        self.sock.sendall(struct.pack("!I", len(body) + 5) + body + b"\0")
        self.pid = 0
        self._until_ready()
        take = f"; SELECT pg_advisory_xact_lock({lock})" if lock else ""
        self.sock.sendall(_message(b"Q", f"BEGIN{take}".encode() + b"\0"))
        self._until_ready()
        if stall:  # Parse, Flush: the backend answers ParseComplete and waits for the rest
            self.sock.sendall(_message(b"P", b"\0SELECT 1\0\0\0") + _message(b"H", b""))
            kind, _ = self._read()
            assert kind == b"1", f"expected ParseComplete, got {kind!r}"

    def _read(self) -> tuple[bytes, bytes]:
        head = self._exactly(5)
        (length,) = struct.unpack("!I", head[1:])
        return head[:1], self._exactly(length - 4)

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the server closed the session")
            data += chunk
        return data

    def _until_ready(self) -> None:
        while True:
            kind, body = self._read()
            if kind == b"E":
                raise AssertionError(f"Postgres refused: {body!r}")
            if kind == b"K":
                self.pid = struct.unpack("!I", body[:4])[0]
            if kind == b"Z":
                return

    def ended(self, timeout: float = 0.2) -> bool:
        """Whether the server closed the session (reads what it sent last: a FATAL, then EOF)."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(4096):
                pass
            return True
        except TimeoutError:
            return False
        except OSError:
            return True

    def close(self) -> None:
        self.sock.close()
