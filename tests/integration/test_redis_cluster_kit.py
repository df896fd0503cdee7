"""The test kit's Redis Cluster starts even when a port it drew is taken before a node binds it
(CI once lost a whole module to that: a node's bus port, then port + 10000 and so in the kernel's
ephemeral range, was taken by some connection and the node exited)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from tether_testkit import redis_cluster as kit
from tether_testkit.ports import free_port


@pytest.fixture
def a_taken_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        yield held.getsockname()[1]


def test_a_node_whose_port_was_taken_first_is_started_again_on_others(
    a_taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first node's bus port is the taken one; every other port is drawn as usual.
    draws = iter([free_port(), a_taken_port])
    monkeypatch.setattr(kit, "free_port", lambda: next(draws, None) or free_port())
    since = time.time()
    with kit.redis_cluster() as cluster:
        assert len(cluster.nodes) == 6 and all(n.alive() for n in cluster.nodes)
        assert a_taken_port not in {n.bus_port for n in cluster.nodes}
        cluster.wait_ok(5)
    logs = [p for p in kit.LOG_DIR.glob("redis-cluster-*.log") if p.stat().st_mtime >= since]
    refused = [p.read_text() for p in logs if "Address already in use" in p.read_text()]
    assert len(refused) == 1 and f"127.0.0.1:{a_taken_port}" in refused[0]


def test_a_node_that_keeps_exiting_fails_the_start_saying_why(
    a_taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kit, "free_port", lambda: a_taken_port)
    with pytest.raises(RuntimeError, match="exited before it answered, 3 times.*in use"):
        with kit.redis_cluster():
            pass
