"""Bad input across the whole HTTP API: schemathesis drives a live gateway from its own
/openapi.json (valid and invalid data, every operation): no 5xx, answers match the document, and
no rejected request stores anything. Plus the targeted cases: oversize bodies 413, garbage
Last-Event-ID 400, unknown fields 400."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import asyncpg
import grpc
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_gateway.health import openapi_document
from tether_testkit import http_extremes
from tether_testkit.client import Client, token
from tether_testkit.processes import Proc, start_gateway
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.security import bearer, concrete_path, new_user

# About 80 s of schemathesis and hypothesis on the worker's CPU, and the live gateway's: the
# longest file of `make test`, handed out first.
pytestmark = [pytest.mark.slow(seconds=104), pytest.mark.timeout(300)]
FUZZ_USER = new_user("fuzz")
MAX_EXAMPLES = 80  # per operation and mode: the whole fuzz run stays well under a minute
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


class Rows:
    """Counts what a request could have stored, on a private loop (schemathesis tests are sync)."""

    QUERY = """
        SELECT (SELECT count(*) FROM conversation WHERE user_id = $1)
             + (SELECT count(*) FROM run WHERE user_id = $1)
             + (SELECT count(*) FROM message m JOIN conversation c ON c.id = m.conversation_id
                WHERE c.user_id = $1 AND m.role = 'user')
             + (SELECT count(*) FROM idempotency_key WHERE scope LIKE '%:' || $1)
    """

    def __init__(self, dsn: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.conn: Any = self.loop.run_until_complete(asyncpg.connect(dsn))

    def count(self, user: str) -> int:
        return int(self.loop.run_until_complete(self.conn.fetchval(self.QUERY, user)))

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


@pytest.fixture(scope="module")
def fuzz_gateway(runtime: Proc, base_env: dict[str, str]) -> Iterator[Proc]:
    # Limits off: a 429 would hide the start and resume handlers from the fuzzer.
    proc = start_gateway(
        {**base_env, "TETHER_RATE_LIMIT_PER_MIN": "0"}, runtime.addr, name="gateway-fuzz"
    )
    yield proc
    proc.terminate()


@pytest.fixture(scope="module")
def rows(database_url: str) -> Iterator[Rows]:
    counter = Rows(database_url)
    yield counter
    counter.close()


@pytest.fixture(scope="module")
def api_schema(fuzz_gateway: Proc) -> Any:
    schema = schemathesis.openapi.from_url(f"{fuzz_gateway.addr}/openapi.json")
    schema.config.update(base_url=fuzz_gateway.addr)
    schema.config.generation.update(
        # Unknown query parameters are ignored, as most HTTP APIs do; unknown *body* fields are
        # rejected (tested below). Credentials are sent by the test: the auth matrix is
        # test_sec_auth's job.
        allow_extra_parameters=False,
        with_security_parameters=False,
    )
    # A body past TETHER_MAX_BODY_BYTES is refused with 413 before it is parsed: as much a
    # rejection of invalid data as a 400 (the "nothing stored" check below holds for it too).
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "413"]
    return schema


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_api_fuzz(api_schema: Any, rows: Rows, mode: GenerationMode) -> None:
    """Every operation of the served document, valid and invalid data alike."""
    # The approvals inbox stream never ends by itself (a whole-inbox snapshot, then heartbeats):
    # a fuzz case would wait on it forever. It takes no input but the caller and Last-Event-ID
    # (any string), and test_approvals.py drives it.
    operations = [
        op
        for op in (result.ok() for result in api_schema.get_all_operations())
        if op.path != "/v1/approvals/events"
    ]
    assert len(operations) >= 15

    def check(case: Any) -> None:
        # A token per case: DELETE /v1/session revokes the one it is sent with.
        auth = bearer(FUZZ_USER)
        before = rows.count(FUZZ_USER)
        response = case.call(headers=auth, timeout=20)
        case.validate_response(response, checks=CHECKS, headers=auth)
        if 400 <= response.status_code < 500:
            assert rows.count(FUZZ_USER) == before, f"a rejected request stored rows: {case!r}"

    fuzzed = 0
    for operation in operations:
        strategy = operation.as_strategy(generation_mode=mode)
        run = settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )(given(case=strategy)(check))
        try:
            run()
            fuzzed += 1
        except Unsatisfiable:
            # Nothing of it can be made invalid (no parameters, no body): e.g. GET /healthz.
            assert mode is GenerationMode.NEGATIVE, operation.label
    assert fuzzed >= 8, f"only {fuzzed} operations were fuzzed in {mode.value} mode"


HEADER_EXAMPLES = 15  # per operation: the whole run stays about a minute


def fuzzed_routes() -> list[tuple[str, str]]:
    """Every operation of the document but the approvals inbox stream (see test_api_fuzz)."""
    paths: Any = openapi_document()["paths"]
    return [
        (method, path)
        for path, ops in paths.items()
        for method in ops
        if method in ("get", "post", "put", "patch", "delete") and path != "/v1/approvals/events"
    ]


@pytest.mark.parametrize(("method", "path"), fuzzed_routes())
def test_api_fuzz_headers_and_extremes(api_schema: Any, rows: Rows, method: str, path: str) -> None:
    """What schemathesis leaves alone: every operation's valid request with the headers the
    gateway reads set to anything (odd and JWT-shaped credentials, huge Last-Event-IDs, an
    Idempotency-Key), and its parameters and body fields pushed to extremes (huge digit strings,
    far-out times, deep JSON): never a 5xx, and a rejected request stores nothing."""
    operation = api_schema[path][method.upper()]
    base = api_schema.config.base_url
    answers: Counter[str] = Counter()

    def check(case: Any, data: st.DataObject) -> None:
        user = new_user("hfuzz")
        sent = case.as_transport_kwargs(base_url=base)
        headers = data.draw(http_extremes.headers(bearer(user)["Authorization"]), "headers")
        params = dict(sent.get("params") or {})
        for p in case.operation.query:
            if data.draw(st.booleans(), f"push {p.name}"):
                schema = p.definition.get("schema", {})
                params[p.name] = data.draw(http_extremes.query_value(schema, p.name), p.name)
        body = sent.get("json")
        raw = data.draw(http_extremes.body(body), "body") if "json" in sent else None
        response = requests.request(
            sent["method"],
            sent["url"],
            params=params,
            headers={**headers, **({"Content-Type": "application/json"} if raw else {})},
            data=raw,
            timeout=10,
        )
        label = str(response.status_code)
        assert response.status_code < 500, (
            f"{case.method} {case.path} answered {response.status_code}: "
            f"{response.text[:500]}\nparams {params!r:.1000}\nheaders {headers!r:.500}"
            f"\nbody {raw!r:.300}"
        )
        if 400 <= response.status_code < 500:
            assert rows.count(user) == 0, f"a rejected request stored rows: {case!r}"
        answers[f"{case.method} {case.path} {label}"] += 1

    run = settings(
        max_examples=HEADER_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )(
        given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE), data=st.data())(
            check
        )
    )
    run()
    print(dict(answers))
    assert sum(answers.values()) >= HEADER_EXAMPLES


def body_operations() -> list[str]:
    paths: Any = openapi_document()["paths"]
    return [
        p
        for p, ops in paths.items()
        if "post" in ops and "requestBody" in ops["post"] and p != "/v1/dev/token"
    ]


def test_oversize_unknown_fields_and_bad_resume_points(fuzz_gateway: Proc, rows: Rows) -> None:
    user = new_user("bad")
    auth = bearer(user)
    base = fuzz_gateway.addr
    conv = requests.post(f"{base}/v1/conversations", json={}, headers=auth, timeout=10).json()
    conv_id = conv["conversation"]["id"]
    before = rows.count(user)
    routes = body_operations()
    assert "/v1/conversations/{id}/runs" in routes and "/v1/runs/{id}/resume" in routes
    for path in routes:
        url = base + concrete_path(path, conv_id, "run_x")
        big = {"text": "x" * (200 * 1024)}
        r = requests.post(url, json=big, headers=auth, timeout=10)
        assert r.status_code == 413, (path, r.status_code, r.text)
        assert r.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
        # Chunked (no Content-Length) is stopped at the limit too.
        r = requests.post(
            url, data=iter([b'{"text": "', b"y" * (200 * 1024), b'"}']), headers=auth, timeout=10
        )
        assert r.status_code == 413, (path, "chunked", r.status_code)
        r = requests.post(url, json={"text": "hi", "isAdmin": True}, headers=auth, timeout=10)
        assert r.status_code == 400, (path, r.status_code, r.text)
        assert r.json()["error"]["code"] == "INVALID_ARGUMENT"
    for garbage in ("abc", "-1", "1e3", "0x10", "1.5", "7 8", "\u0661\u0662", "9" * 40):
        if garbage.isascii():  # a header value is Latin-1 on the wire
            headers = {**auth, "Last-Event-ID": garbage}
            r = requests.get(f"{base}/v1/runs/run_x/events", headers=headers, timeout=10)
            assert r.status_code == 400, (garbage, r.status_code, r.text)
        r = requests.get(
            f"{base}/v1/runs/run_x/events", params={"after": garbage}, headers=auth, timeout=10
        )
        assert r.status_code == 400, (garbage, r.status_code, r.text)
    # Found by the fuzzer: a NUL (Postgres text cannot hold it) or a lone surrogate (not UTF-8,
    # so protobuf cannot carry it) in a body field, a path id or a page token was a 500.
    json_headers = {**auth, "Content-Type": "application/json"}
    for raw in ('{"text": "a\\u0000b"}', '{"text": "\\udd60"}', '{"title": "\\ud800"}'):
        for path in (f"/v1/conversations/{conv_id}/runs", "/v1/conversations"):
            r = requests.post(f"{base}{path}", data=raw, headers=json_headers, timeout=10)
            assert r.status_code == 400, (path, raw, r.status_code, r.text)
    for path in ("/v1/runs/a%00b", "/v1/conversations/a%00b", "/v1/conversations?pageToken=a%00"):
        r = requests.get(f"{base}{path}", headers=auth, timeout=10)
        assert r.status_code == 400, (path, r.status_code, r.text)
    # The review's finding 7: "²".isdigit() is True and int("²") raises; 60,000 `[` overflowed
    # the JSON parser's recursion (RecursionError); NaN / 1e999 in a fill failed re-encoding.
    for path in ("/v1/conversations", "/v1/runs", f"/v1/conversations/{conv_id}/messages"):
        for size in ("²", "٣", "9" * 5000):
            r = requests.get(f"{base}{path}", params={"pageSize": size}, headers=auth, timeout=10)
            assert r.status_code == 400, (path, size, r.status_code, r.text)
            assert r.json()["error"]["code"] == "INVALID_ARGUMENT"
    resume = '{"interruptId": "i", "decision": "respond", "idempotencyKey": "k", "fill": %s}'
    bodies = [b"[" * 60_000, b'{"title": ' + b"[" * 65 + b"]" * 65 + b"}", b"\n\n"]
    bodies += [(resume % v).encode() for v in ("NaN", "Infinity", "1e999", "[" * 65 + "]" * 65)]
    for raw_body in bodies:
        for path in routes:
            url = base + concrete_path(path, conv_id, "run_x")
            r = requests.post(url, data=raw_body, headers=json_headers, timeout=10)
            assert r.status_code == 400, (path, raw_body[:40], r.status_code, r.text)
            assert r.json()["error"]["code"] == "INVALID_ARGUMENT"
    assert rows.count(user) == before, "a rejected request stored rows"


async def test_nul_over_grpc_is_invalid_argument(runtime: Proc) -> None:
    client = Client(runtime.addr, token(TEST_SECRET, new_user("nul")))
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await client.stub.GetRun(pb.GetRunRequest(run_id="run_\x00"), metadata=client.md)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        conv = await client.conversation()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await client.start(conv, "restart \x00 everything")
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await client.close()


def test_any_forwarded_for_is_carried(fuzz_gateway: Proc) -> None:
    """Found by the header fuzz: an X-Forwarded-For with a byte outside printable ASCII (a
    header is Latin-1) went on as gRPC metadata, which cannot carry it: 500 on every route that
    calls the runtime. It goes on with `?` in its place."""
    auth = bearer(new_user("xff"))
    for value in ("\x80", "10.0.0.1, \xe9t\xe9", "a\tb", "\xff" * 300):
        headers = {**auth, "X-Forwarded-For": value}
        r = requests.get(f"{fuzz_gateway.addr}/v1/agents", headers=headers, timeout=10)
        assert r.status_code == 200, (value, r.status_code, r.text)
        r = requests.post(
            f"{fuzz_gateway.addr}/v1/conversations", json={}, headers=headers, timeout=10
        )
        assert r.status_code == 201, (value, r.status_code, r.text)
