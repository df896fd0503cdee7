"""The test kit's networks (tether_testkit.netns): a host in its own namespace reaches a
service of the root namespace through the hub's forwarder; a partition cuts that link (both
ways, or one), heal restores it, a silenced connection stays open and dark while new ones work,
and close() leaves no namespace or link behind."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from tether_testkit.netns import Host, Net

pytestmark = [
    pytest.mark.process,
    pytest.mark.timeout(90),
    pytest.mark.usefixtures("netns_required"),
]

# Connects to host:port, sends a line and prints the echo, or "timeout"/"refused".
CLIENT = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.5)
try:
    s.sendall(b"ping"); print(s.recv(4).decode())
except TimeoutError:
    print("timeout")
"""


def reach(host: Host, addr: str, port: int) -> str:
    done = subprocess.run(
        [*host.prefix, sys.executable, "-c", CLIENT, addr, str(port)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if "TimeoutError" in done.stderr or "timed out" in done.stderr:
        return "timeout"
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


@pytest.fixture
def echo_port() -> Iterator[int]:
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def echo(c: socket.socket) -> None:
        with c:
            if data := c.recv(4):
                c.sendall(data)

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(c,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield int(srv.getsockname()[1])
    srv.close()


def test_partition_and_heal_of_a_hosts_link(echo_port: int) -> None:
    with Net() as net:
        a = net.host("a")
        fwd = net.forward(("127.0.0.1", echo_port))
        assert reach(a, net.hub, fwd.port) == "ping"
        a.partition(net.hub, fwd.port)
        assert reach(a, net.hub, fwd.port) == "timeout"
        a.heal()
        assert reach(a, net.hub, fwd.port) == "ping"
        a.partition(net.hub, fwd.port, direction="in")  # its SYN goes out, no answer comes back
        assert reach(a, net.hub, fwd.port) == "timeout"
        a.heal()
        a.link(up=False)
        assert reach(a, net.hub, fwd.port) == "timeout"
        a.link(up=True)
        assert reach(a, net.hub, fwd.port) == "ping"
        ns = a.ns
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert ns not in names
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert net.bridge not in links and a.veth not in links


def test_silenced_connection_stays_open_and_dark_while_new_ones_work(echo_port: int) -> None:
    holder = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
print("open", flush=True)
sys.stdin.readline()
s.settimeout(1.5)
try:
    s.sendall(b"ping"); print(s.recv(4).decode() or "eof", flush=True)
except TimeoutError:
    print("timeout", flush=True)
except OSError as err:
    print(type(err).__name__, flush=True)
"""
    with Net() as net:
        a = net.host("a")
        fwd = net.forward(("127.0.0.1", echo_port))
        p = subprocess.Popen(
            [*a.prefix, sys.executable, "-c", holder, net.hub, str(fwd.port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert p.stdout is not None and p.stdin is not None
            assert p.stdout.readline().strip() == "open"
            assert a.silence_open(net.hub, fwd.port) == 1
            assert reach(a, net.hub, fwd.port) == "ping"  # a new connection works
            p.stdin.write("\n")
            p.stdin.flush()
            assert p.stdout.readline().strip() == "timeout"  # the old one: no bytes, no FIN/RST
        finally:
            p.kill()
            p.wait(10)


def test_a_bad_direction_is_refused_and_changes_nothing() -> None:
    with Net() as net:
        a = net.host("a")
        with pytest.raises(ValueError, match="direction must be both, in or out"):
            a.partition(net.hub, 1, direction="sideways")
        assert "drop" not in a.run("nft", "list", "ruleset")
