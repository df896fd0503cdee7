"""Finding 8: runtime gRPC in plaintext with reflection on. A runtime given a certificate
(TETHER_GRPC_TLS_CERT_FILE / _KEY_FILE, as the production overlay mounts it from a Secret) serves
its API over TLS only: a gateway that trusts the CA (TETHER_RUNTIME_TLS_CA_FILE) serves requests
through it; a plaintext client, or one trusting another CA, is refused; reflection is off in
production and wherever TETHER_GRPC_REFLECTION=0. Kubelet's probes use the plaintext
health-only port (TETHER_GRPC_HEALTH_ADDR), which serves nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether.runtime.v1 import runtime_service_pb2_grpc as pb_grpc
from tether_common.config import Settings
from tether_testkit.processes import Proc, free_port, start_gateway, start_runtime
from tether_testkit.security import bearer, new_user
from tether_testkit.tls import TlsFiles, make_tls

# The name the production overlay's certificate carries (the headless Service's DNS name).
RUNTIME_NAME = "tether-runtime-headless.tether.svc.cluster.local"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls(tmp_path_factory.mktemp("runtime-tls"), [RUNTIME_NAME])


@pytest.fixture(scope="module")
def tls_runtime(base_env: dict[str, str], tls: TlsFiles) -> Iterator[tuple[Proc, str]]:
    health_addr = f"127.0.0.1:{free_port()}"
    env = {
        **base_env,
        "TETHER_GRPC_TLS_CERT_FILE": str(tls.cert),
        "TETHER_GRPC_TLS_KEY_FILE": str(tls.key),
        "TETHER_GRPC_HEALTH_ADDR": health_addr,
        "TETHER_GRPC_REFLECTION": "0",
    }
    proc = start_runtime(env, name="runtime-tls", probe_addr=health_addr)
    yield proc, health_addr
    proc.terminate()


def _tls_channel(addr: str, ca: Path) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
    return grpc.secure_channel(
        addr, creds, options=[("grpc.ssl_target_name_override", RUNTIME_NAME)]
    )


def _health(channel: grpc.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=3).status  # type: ignore[no-any-return]


def _reflection_services(channel: grpc.Channel) -> list[str]:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    [answer] = list(stub.ServerReflectionInfo(iter([request]), timeout=3))
    return [s.name for s in answer.list_services_response.service]


async def test_gateway_reaches_a_tls_runtime_through_the_ca(
    tls_runtime: tuple[Proc, str], base_env: dict[str, str], tls: TlsFiles, http
) -> None:
    runtime, _ = tls_runtime
    env = {
        **base_env,
        "TETHER_RUNTIME_TLS_CA_FILE": str(tls.ca_cert),
        "TETHER_RUNTIME_TLS_SERVER_NAME": RUNTIME_NAME,
    }
    gateway = start_gateway(env, runtime.addr, name="gateway-tls")  # ready = runtime reachable
    try:
        user = new_user("tls")
        body = {"title": "over tls"}
        async with http.post(
            f"{gateway.addr}/v1/conversations", json=body, headers=bearer(user)
        ) as r:
            assert r.status == 201, await r.text()
            conv = (await r.json())["conversation"]["id"]
        async with http.get(f"{gateway.addr}/v1/conversations/{conv}", headers=bearer(user)) as r:
            assert r.status == 200, await r.text()
    finally:
        gateway.terminate()


def test_gateway_without_the_ca_is_not_ready(
    tls_runtime: tuple[Proc, str], base_env: dict[str, str]
) -> None:
    runtime, _ = tls_runtime
    with pytest.raises(TimeoutError):
        start_gateway(base_env, runtime.addr, name="gateway-plaintext", timeout=4)


def test_plaintext_and_foreign_ca_clients_are_refused(
    tls_runtime: tuple[Proc, str], tls: TlsFiles, tmp_path: Path
) -> None:
    runtime, _ = tls_runtime
    with _tls_channel(runtime.addr, tls.ca_cert) as ok:
        assert _health(ok) == health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(runtime.addr) as plain:
        with pytest.raises(grpc.RpcError) as err:
            _health(plain)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.RuntimeServiceStub(plain).ListAgents(pb.ListAgentsRequest(), timeout=3)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    other = make_tls(tmp_path / "other", [RUNTIME_NAME], ca_name="someone-else")
    with _tls_channel(runtime.addr, other.ca_cert) as foreign:
        with pytest.raises(grpc.RpcError) as err:
            _health(foreign)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_health_port_serves_health_alone_in_plaintext(tls_runtime: tuple[Proc, str]) -> None:
    _, health_addr = tls_runtime
    with grpc.insecure_channel(health_addr) as probe:
        assert _health(probe) == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.RuntimeServiceStub(probe).ListAgents(pb.ListAgentsRequest(), timeout=3)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_reflection_off_on_the_tls_runtime_on_in_dev(
    tls_runtime: tuple[Proc, str], runtime: Proc, tls: TlsFiles
) -> None:
    # The shared dev runtime answers reflection (so this probe can see it)...
    with grpc.insecure_channel(runtime.addr) as dev:
        assert "tether.runtime.v1.RuntimeService" in _reflection_services(dev)
    # ...the one with TETHER_GRPC_REFLECTION=0 does not.
    with _tls_channel(tls_runtime[0].addr, tls.ca_cert) as off:
        with pytest.raises(grpc.RpcError) as err:
            _reflection_services(off)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_reflection_defaults_off_in_production() -> None:
    assert Settings.from_env({"TETHER_ENV": "production"}).grpc_reflection is False
    assert Settings.from_env({"TETHER_ENV": "dev"}).grpc_reflection is True
    assert Settings.from_env({}).grpc_reflection is True
    on = {"TETHER_ENV": "production", "TETHER_GRPC_REFLECTION": "1"}
    assert Settings.from_env(on).grpc_reflection is True


async def test_python_client_uses_tls_from_the_environment(
    tls_runtime: tuple[Proc, str], tls: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether_client import TetherClient
    from tether_client.errors import Unavailable
    from tether_client.retry import NO_RETRY

    token = bearer(new_user("tls-client"))["Authorization"].removeprefix("Bearer ")
    runtime, _ = tls_runtime
    monkeypatch.setenv("TETHER_RUNTIME_TLS_CA_FILE", str(tls.ca_cert))
    monkeypatch.setenv("TETHER_RUNTIME_TLS_SERVER_NAME", RUNTIME_NAME)
    async with TetherClient(runtime.addr, token=token, deadline_s=3) as client:
        assert (await client.list_agents()).agents
    monkeypatch.delenv("TETHER_RUNTIME_TLS_CA_FILE")
    async with TetherClient(runtime.addr, token=token, deadline_s=3, retry=NO_RETRY) as plain:
        with pytest.raises(Unavailable):
            await plain.list_agents()
