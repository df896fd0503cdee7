"""One reproducer per open fuzz finding of #35 (tether_testkit.fuzz_findings), each an
xfail(strict=True): while the bug stands it fails as expected; when its fix lands it passes, the
strict xfail turns that into a failure, and the finding is deleted from fuzz_findings (which also
ends the fuzzers' tolerance for it) together with its marker here."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
import requests
from google.protobuf.timestamp_pb2 import Timestamp
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether.runtime.v1 import runtime_service_pb2_grpc
from tether_testkit.fuzz_findings import GRPC_FINDINGS, HTTP_FINDINGS, Sent, b64_deep
from tether_testkit.processes import Proc, start_gateway
from tether_testkit.security import bearer, new_user


def known(title_start: str) -> pytest.MarkDecorator:
    titles = [f.title for f in (*GRPC_FINDINGS, *HTTP_FINDINGS) if f.title.startswith(title_start)]
    assert titles, f"no open finding {title_start!r}: delete its marker"
    return pytest.mark.xfail(strict=True, reason=titles[0])


@pytest.fixture(scope="module")
def findings_gateway(runtime: Proc, base_env: dict[str, str]) -> Iterator[Proc]:
    proc = start_gateway(base_env, runtime.addr, name="gateway-findings")
    yield proc
    proc.terminate()


def test_huge_resume_point_is_400(findings_gateway: Proc) -> None:
    auth = bearer(new_user("f1"))
    url = f"{findings_gateway.addr}/v1/runs/run_x/events"
    r = requests.get(url, headers={**auth, "Last-Event-ID": "9" * 5000}, timeout=10)
    assert r.status_code == 400, r.status_code
    r = requests.get(url, params={"after": "9" * 5000}, headers=auth, timeout=10)
    assert r.status_code == 400, r.status_code


@pytest.mark.parametrize("path", ["/v1/runs", "/v1/audit"])
def test_far_time_filters_are_4xx(findings_gateway: Proc, path: str) -> None:
    auth = bearer(new_user("f2"))
    for name in ("since", "until"):
        for value in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
            r = requests.get(
                f"{findings_gateway.addr}{path}", params={name: value}, headers=auth, timeout=10
            )
            assert r.status_code < 500, (name, value, r.status_code)


@pytest.mark.parametrize("rpc", ["ListRuns", "ListAuditRecords"])
def test_far_timestamps_are_invalid_argument(runtime: Proc, rpc: str) -> None:
    md = tuple((k.lower(), v) for k, v in bearer(new_user("f2g")).items())
    request_type = getattr(pb, f"{rpc}Request")
    with grpc.insecure_channel(runtime.addr) as channel:
        stub = runtime_service_pb2_grpc.RuntimeServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            getattr(stub, rpc)(request_type(start_time=Timestamp(seconds=2**40)), metadata=md)
    assert info.value.code() in (  # type: ignore[attr-defined]
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.PERMISSION_DENIED,  # audit: a non-admin, once the time is valid
    )


def test_deep_page_token_is_400(findings_gateway: Proc) -> None:
    auth = bearer(new_user("f3"))
    for path in ("/v1/runs", "/v1/conversations"):
        r = requests.get(
            f"{findings_gateway.addr}{path}",
            params={"pageToken": b64_deep(2000)},
            headers=auth,
            timeout=10,
        )
        assert r.status_code == 400, (path, r.status_code)


def test_deep_page_token_is_invalid_argument(runtime: Proc) -> None:
    md = tuple((k.lower(), v) for k, v in bearer(new_user("f3g")).items())
    with grpc.insecure_channel(runtime.addr) as channel:
        stub = runtime_service_pb2_grpc.RuntimeServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.ListRuns(pb.ListRunsRequest(page_token=b64_deep(2000)), metadata=md)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]


def test_findings_match_their_reproducers() -> None:
    """Every finding is fixed: the fuzzers tolerate no server error (the lists stay, empty, for
    the next one)."""
    deep = Sent("get", "/v1/runs", {"pageToken": b64_deep(2000)}, {})
    assert not any(f.matches(deep) for f in HTTP_FINDINGS)
    assert not HTTP_FINDINGS
    assert not GRPC_FINDINGS


def test_conversation_and_message_pages_take_only_tokens_they_issued(runtime: Proc) -> None:
    """A page token of ListConversations / ListMessages is one the API issued for the same
    listing: pages walk every conversation once; a raw id, a deep token or another user's token
    is INVALID_ARGUMENT (they were read as a raw id before)."""
    md = tuple((k.lower(), v) for k, v in bearer(new_user("f3c")).items())
    other = tuple((k.lower(), v) for k, v in bearer(new_user("f3d")).items())
    with grpc.insecure_channel(runtime.addr) as channel:
        stub = runtime_service_pb2_grpc.RuntimeServiceStub(channel)
        made = {
            stub.CreateConversation(
                pb.CreateConversationRequest(title=f"c{i}"), metadata=md
            ).conversation.id
            for i in range(5)
        }
        seen: list[str] = []
        token = ""
        while True:
            page = stub.ListConversations(
                pb.ListConversationsRequest(page_size=2, page_token=token), metadata=md
            )
            seen += [c.id for c in page.conversations]
            token = page.next_page_token
            if not token:
                break
        assert sorted(seen) == sorted(made)
        first = stub.ListConversations(pb.ListConversationsRequest(page_size=2), metadata=md)
        for bad, who in (
            (first.next_page_token, other),
            (first.conversations[-1].id, md),
            (b64_deep(2000), md),
        ):
            with pytest.raises(grpc.RpcError) as info:
                stub.ListConversations(
                    pb.ListConversationsRequest(page_size=2, page_token=bad), metadata=who
                )
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
        conv = sorted(made)[0]
        with pytest.raises(grpc.RpcError) as info:
            stub.ListMessages(
                pb.ListMessagesRequest(conversation_id=conv, page_token=b64_deep(2000)),
                metadata=md,
            )
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
