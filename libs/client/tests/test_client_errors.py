"""The error mapping against the runtime's own table and the real google.rpc definitions, the
channel target rules and the decision keys. (The client against real runtimes:
tests/integration/test_python_client.py.)"""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from tether_client import channel_target, decision_key
from tether_client.errors import (
    ERRORS_BY_REASON,
    IdempotencyKeyReused,
    NotFound,
    RunNotFound,
    TetherError,
    Unavailable,
    from_rpc_error,
    reason_of,
)
from tether_common.errors import ERROR_DOMAIN, STATUS_BY_REASON


def rpc_error(code: grpc.StatusCode, reason: str | None, details: str = "") -> grpc.aio.AioRpcError:
    """An error as the runtime's `abort` sends it: google.rpc.Status with an ErrorInfo."""
    trailing = grpc.aio.Metadata()
    if reason is not None:
        packed = any_pb2.Any()
        packed.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN))
        status = status_pb2.Status(
            code=getattr(code_pb2, code.name), message=details, details=[packed]
        )
        trailing.add("grpc-status-details-bin", status.SerializeToString())
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details)


@pytest.mark.parametrize("reason", sorted(STATUS_BY_REASON))
def test_every_reason_of_the_runtime_has_its_class_and_code(reason: str) -> None:
    code_name, _ = STATUS_BY_REASON[reason]
    code = grpc.StatusCode[code_name]
    err = from_rpc_error(rpc_error(code, reason, "why"))
    assert type(err) is ERRORS_BY_REASON[reason]
    assert (err.reason, err.code, err.message) == (reason, code, "why")
    assert type(err).default_code == code  # the class names the code the runtime sends


def test_precise_classes_are_caught_by_their_family() -> None:
    err = from_rpc_error(rpc_error(grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND", "run not found"))
    assert isinstance(err, RunNotFound) and isinstance(err, NotFound)
    assert str(err) == "RUN_NOT_FOUND: run not found"


def test_an_unknown_reason_falls_back_to_its_code_and_keeps_the_reason() -> None:
    err = from_rpc_error(rpc_error(grpc.StatusCode.NOT_FOUND, "WIDGET_NOT_FOUND", "no widget"))
    assert type(err) is NotFound and err.reason == "WIDGET_NOT_FOUND"


def test_a_status_without_details_is_mapped_by_its_code() -> None:
    down = from_rpc_error(rpc_error(grpc.StatusCode.UNAVAILABLE, None, "connection refused"))
    assert type(down) is Unavailable and down.reason == "UNAVAILABLE"
    odd = from_rpc_error(rpc_error(grpc.StatusCode.ALREADY_EXISTS, None))
    assert type(odd) is TetherError and odd.reason == "ALREADY_EXISTS"
    assert not isinstance(odd, IdempotencyKeyReused)


def test_malformed_details_are_no_details() -> None:
    trailing = grpc.aio.Metadata(("grpc-status-details-bin", b"\xff\xff not a status"))
    err = grpc.aio.AioRpcError(grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), trailing, "boom")
    assert reason_of(err) is None


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("runtime.tether.svc:50051", "dns:///runtime.tether.svc:50051"),
        ("localhost:50051", "dns:///localhost:50051"),
        ("127.0.0.1:50051", "127.0.0.1:50051"),
        ("[::1]:50051", "[::1]:50051"),
        ("ipv4:10.0.0.1:1,10.0.0.2:1", "ipv4:10.0.0.1:1,10.0.0.2:1"),
        ("unix:/tmp/tether.sock", "unix:/tmp/tether.sock"),
    ],
)
def test_channel_target(given: str, used: str) -> None:
    assert channel_target(given) == used


def test_decision_keys_name_the_decision() -> None:
    key = decision_key("run_1", "intr_1", 1, "")
    assert key == decision_key("run_1", "intr_1", 1, "")
    others = {
        decision_key("run_1", "intr_1", 2, ""),
        decision_key("run_1", "intr_2", 1, ""),
        decision_key("run_1", "intr_1", 5, "a"),
        decision_key("run_1", "intr_1", 5, "b"),
    }
    assert key not in others and len(others) == 4
    assert len(key) <= 128  # the gateway's and the runtime's limits
