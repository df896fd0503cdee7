"""Hosts on a network of their own for the partition tests: one network namespace per host
(`ip netns`, iproute2), each linked by a veth pair to a bridge in the root namespace, the hub.
The machine's Postgres and Redis listen on 127.0.0.1 of the root namespace; a host reaches them
through a forwarder on the hub's address (a FaultProxy, so the same link can also be slowed).

A partition is real: nftables rules in a host's namespace drop the packets of a link (both
directions, or one for an asymmetric partition) while both processes keep running and keep
their sockets, which then hear nothing (no FIN, no RST), as across a failed switch. Needs root
and `nft` (.ci/ensure_test_deps installs nftables). Names are unique per Net, so parallel test
workers do not collide, and `close()` removes everything even after a failed test."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field

from tether_testkit.fault_proxy import FaultProxy


def _ip(*args: str, ns: str = "") -> str:
    cmd = ["ip", *args] if not ns else ["ip", "-n", ns, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done.stdout


def available() -> str:
    """Why this machine cannot make these networks ('' if it can): the tests that need them fail
    with it (fixture `netns_required`), never skip."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if not any(os.access(f"{d}/{tool}", os.X_OK) for d in ("/usr/sbin", "/sbin", "/usr/bin")):
            return f"{tool} is not installed (.ci/ensure_test_deps installs it)"
    return ""


@dataclass
class Host:
    """One namespace with one interface (eth0) on the hub's subnet."""

    net: Net
    name: str
    ns: str
    ip: str
    veth: str  # its link's end in the root namespace
    _rules: bool = False

    @property
    def prefix(self) -> list[str]:
        """What to put before a command to run it on this host."""
        return ["ip", "netns", "exec", self.ns]

    def run(self, *cmd: str) -> str:
        """Run a command on this host; its output."""
        return self._exec(list(cmd))

    def _exec(self, cmd: list[str]) -> str:
        done = subprocess.run(self.prefix + cmd, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} on {self.name}: {done.stderr.strip()}")
        return done.stdout

    def _nft(self, script: str) -> None:
        done = subprocess.run(
            [*self.prefix, "nft", "-f", "-"], input=script, capture_output=True, text=True,
            timeout=30,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"nft on {self.name}: {done.stderr.strip()}\n{script}")

    def _table(self) -> None:
        if not self._rules:
            self._nft(
                "table inet tether {\n"
                "  chain in { type filter hook input priority 0; }\n"
                "  chain out { type filter hook output priority 0; }\n"
                "}\n"
            )
            self._rules = True

    def partition(self, peer: str, port: int = 0, *, direction: str = "both") -> None:
        """Drop this host's packets to `peer` (an address; `port`: only that service of it) and
        from it. `direction="out"`: only what this host sends is lost (it still hears the peer);
        `"in"`: only what it receives."""
        if direction not in ("both", "in", "out"):
            raise ValueError(f"direction must be both, in or out, not {direction!r}")
        self._table()
        out_match = f"ip daddr {peer}" + (f" tcp dport {port}" if port else "")
        in_match = f"ip saddr {peer}" + (f" tcp sport {port}" if port else "")
        lines = []
        if direction in ("both", "out"):
            lines.append(f"add rule inet tether out {out_match} drop")
        if direction in ("both", "in"):
            lines.append(f"add rule inet tether in {in_match} drop")
        self._nft("\n".join(lines) + "\n")

    def silence_open(self, peer: str, port: int) -> int:
        """Half-open: the connections open now from this host to peer:port go dark both ways
        (as when a NAT or firewall forgets them, or the peer's machine vanishes), with no FIN and
        no RST; new connections work. Returns how many were silenced."""
        out = self._exec(["ss", "-tnH", "state", "established", "dst", f"{peer}:{port}"])
        local_ports = sorted(
            {int(line.split()[-2].rsplit(":", 1)[1]) for line in out.splitlines() if line.strip()}
        )
        if not local_ports:
            return 0
        self._table()
        ports = ", ".join(str(p) for p in local_ports)
        self._nft(
            f"add rule inet tether out ip daddr {peer} tcp dport {port} tcp sport {{ {ports} }} drop\n"
            f"add rule inet tether in ip saddr {peer} tcp sport {port} tcp dport {{ {ports} }} drop\n"
        )
        return len(local_ports)

    def heal(self) -> None:
        """Remove every drop rule of this host: its links carry packets again."""
        if self._rules:
            self._nft("flush table inet tether\n")

    def link(self, up: bool) -> None:
        """Take the host's link down (or up again): its interface loses carrier."""
        _ip("link", "set", self.veth, "up" if up else "down")


@dataclass
class Net:
    """A bridge (the hub) and the hosts on it. Use as a context manager, or call close()."""

    tag: str = field(
        default_factory=lambda: f"{os.getpid() % 10000:04d}{random.randrange(36**2):03d}"
    )
    hosts: list[Host] = field(default_factory=list)
    proxies: list[FaultProxy] = field(default_factory=list)
    subnet: str = ""
    bridge: str = ""

    @property
    def hub(self) -> str:
        return f"{self.subnet}.1"

    def open(self) -> Net:
        reason = available()
        if reason:
            raise RuntimeError(f"cannot make test networks: {reason}")
        used = _ip("-o", "-4", "addr")
        while True:
            self.subnet = f"10.{random.randrange(100, 250)}.{random.randrange(0, 255)}"
            if f" {self.subnet}." not in used:
                break
        self.bridge = f"tb{self.tag}"[:15]
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.hub}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        return self

    def host(self, name: str) -> Host:
        i = len(self.hosts) + 2
        ns = f"tether-{self.tag}-{name}"
        veth, peer = f"tv{self.tag}{i}"[:15], f"tp{self.tag}{i}"[:15]
        _ip("netns", "add", ns)
        host = Host(self, name, ns, f"{self.subnet}.{i}", veth)
        self.hosts.append(host)
        _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", ns)
        _ip("link", "set", veth, "master", self.bridge)
        _ip("link", "set", veth, "up")
        _ip("link", "set", "lo", "up", ns=ns)
        _ip("link", "set", peer, "name", "eth0", ns=ns)
        _ip("addr", "add", f"{host.ip}/24", "dev", "eth0", ns=ns)
        _ip("link", "set", "eth0", "up", ns=ns)
        return host

    def forward(self, target: tuple[str, int]) -> FaultProxy:
        """A forwarder on the hub's address to `target` in the root namespace (the machine's
        Postgres or Redis): the link hosts reach it through, and where it can be slowed."""
        proxy = FaultProxy(target, listen=(self.hub, 0)).start()
        self.proxies.append(proxy)
        return proxy

    def close(self) -> None:
        for proxy in self.proxies:
            with contextlib.suppress(Exception):
                proxy.stop()
        for host in self.hosts:
            with contextlib.suppress(RuntimeError):
                _ip("netns", "del", host.ns)  # its eth0 goes with it, and so the veth pair
        if self.bridge:
            with contextlib.suppress(RuntimeError):
                _ip("link", "del", self.bridge)

    def __enter__(self) -> Net:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def network() -> Iterator[Net]:
    with Net() as net:
        yield net
