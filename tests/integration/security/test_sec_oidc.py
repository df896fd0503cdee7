"""Finding 2 (one shared HS256 secret) and the leeway of finding 8: a runtime process trusting only
an OIDC issuer run by the test (discovery + JWKS, keys made by `cryptography`) holds no key that
mints a token. It accepts the issuer's tokens, follows a key rotation without a restart, refuses
a withdrawn key, a wrong `iss`/`aud`, alg confusion and a token expired beyond the leeway; a
service acts on behalf of a user only with the capability, and never approves."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from cryptography.hazmat.primitives import serialization
from tether.runtime.v1 import events_pb2, resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_client import TetherClient
from tether_common.auth import ON_BEHALF_METADATA, issue_token
from tether_testkit.client import Client
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.oidc_issuer import TestIssuer
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.security import grant_restart, new_user

JWKS_TTL_S = 1.0
REFETCH_S = 0.5


@pytest.fixture(scope="module")
def idp() -> Iterator[TestIssuer]:
    with TestIssuer() as issuer:
        yield issuer


@pytest.fixture(scope="module")
def oidc_env(idp: TestIssuer, base_env: dict[str, str]) -> dict[str, str]:
    """A runtime as production runs it: the issuer's tokens only, no dev issuer key."""
    return {
        **base_env,
        **idp.env(),
        "TETHER_JWT_SECRET": "",
        "TETHER_OIDC_JWKS_TTL_S": str(JWKS_TTL_S),
        "TETHER_OIDC_JWKS_REFETCH_S": str(REFETCH_S),
    }


@pytest.fixture(scope="module")
def oidc_runtime(oidc_env: dict[str, str]) -> Iterator[Proc]:
    proc = start_runtime(oidc_env, name="runtime-oidc")
    yield proc
    proc.terminate()


@pytest.fixture
async def clients(oidc_runtime: Proc) -> AsyncIterator[list[Client]]:
    made: list[Client] = []
    yield made
    for c in made:
        await c.close()


def client(made: list[Client], addr: str, token: str, on_behalf_of: str = "") -> Client:
    c = OnBehalfClient(addr, token, on_behalf_of) if on_behalf_of else Client(addr, token)
    made.append(c)
    return c


class OnBehalfClient(Client):
    def __init__(self, addr: str, token: str, on_behalf_of: str) -> None:
        super().__init__(addr, token)
        self.on_behalf_of = on_behalf_of

    @property
    def md(self) -> tuple[tuple[str, str], ...]:
        return (*super().md, (ON_BEHALF_METADATA, self.on_behalf_of))


async def code_of(call: Any) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as err:
        return err.code()
    return grpc.StatusCode.OK


async def list_conversations(addr: str, token: str) -> grpc.StatusCode:
    c = Client(addr, token)
    try:
        return await code_of(
            c.stub.ListConversations(pb.ListConversationsRequest(), metadata=c.md, timeout=10)
        )
    finally:
        await c.close()


async def test_idp_tokens_are_accepted_and_key_rotation_needs_no_restart(
    idp: TestIssuer, oidc_runtime: Proc
) -> None:
    addr, user = oidc_runtime.addr, new_user("oidc")
    old = idp.current_kid
    old_token = idp.token(user)
    assert await list_conversations(addr, old_token) == grpc.StatusCode.OK

    new = idp.rotate()  # the IdP publishes a new key and signs with it
    # The runtime fetched the JWKS a moment ago: an unknown kid is refetched only once the
    # refetch interval has passed since (the rate limit against made-up kids).
    await asyncio.sleep(REFETCH_S + 0.1)
    assert await list_conversations(addr, idp.token(user, kid=new)) == grpc.StatusCode.OK
    assert await list_conversations(addr, old_token) == grpc.StatusCode.OK, "old key still listed"

    idp.withdraw(old)
    await asyncio.sleep(JWKS_TTL_S + 0.5)  # the runtime's copy of the JWKS goes stale
    # The token verified before (remembered by the runtime) and a fresh one of the old key.
    assert await list_conversations(addr, old_token) == grpc.StatusCode.UNAUTHENTICATED
    assert await list_conversations(addr, idp.token(user, kid=old)) == (
        grpc.StatusCode.UNAUTHENTICATED
    )
    assert await list_conversations(addr, idp.token(user, kid=new)) == grpc.StatusCode.OK
    assert oidc_runtime.alive()


async def test_made_up_key_ids_do_not_hammer_the_idp(idp: TestIssuer, oidc_runtime: Proc) -> None:
    addr, user = oidc_runtime.addr, new_user("kid")
    assert await list_conversations(addr, idp.token(user)) == grpc.StatusCode.OK
    before, started = idp.jwks_requests, time.monotonic()
    for _ in range(40):
        forged = idp.sign(idp.claims(user), claimed_kid=uuid.uuid4().hex)
        assert await list_conversations(addr, forged) == grpc.StatusCode.UNAUTHENTICATED
    elapsed = time.monotonic() - started
    # One fetch per refetch interval at most (TTL refreshes included): never one per token.
    allowed = int(elapsed / REFETCH_S) + 2
    assert idp.jwks_requests - before <= allowed, (idp.jwks_requests - before, elapsed)


async def test_wrong_issuer_audience_alg_confusion_and_expiry_beyond_leeway_are_refused(
    idp: TestIssuer, oidc_runtime: Proc
) -> None:
    addr, user = oidc_runtime.addr, new_user("bad")
    now = int(time.time())
    key = idp.keys[idp.current_kid]
    public_pem = key.public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    other = TestIssuer(audience=idp.audience)  # a stranger's keys, never started
    other.rotate()
    refused = {
        "wrong iss": idp.token(user, iss="https://another-idp.example/realm"),
        "wrong aud": idp.token(user, aud="some-other-app"),
        "expired beyond the leeway": idp.token(user, exp=now - 45),
        "alg confusion (HS256 keyed with the public key)": hs256(idp.claims(user), public_pem),
        "signed by another issuer's key under our kid": other.sign(
            idp.claims(user), claimed_kid=idp.current_kid
        ),
        "a dev-issuer token (the runtime holds no dev key)": issue_token(TEST_SECRET, user),
    }
    for name, token in refused.items():
        code = await list_conversations(addr, token)
        assert code == grpc.StatusCode.UNAUTHENTICATED, f"{name}: {code}"
    # A clock a few seconds behind the issuer's: within the default 30 s leeway.
    assert await list_conversations(addr, idp.token(user, exp=now - 10)) == grpc.StatusCode.OK


def hs256(claims: dict[str, Any], secret: bytes) -> str:
    """What PyJWT refuses to produce: HS256 keyed with a PEM public key."""
    import base64
    import hashlib
    import hmac

    def b64(raw: bytes) -> bytes:
        return base64.urlsafe_b64encode(raw).rstrip(b"=")

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    sig = b64(hmac.new(secret, head + b"." + body, hashlib.sha256).digest())
    return (head + b"." + body + b"." + sig).decode()


async def paused_run(c: Client, db: Any, user: str) -> tuple[str, str, str]:
    """A run of `user` waiting at a restart confirmation: (run, interrupt, instance)."""
    await grant_restart(db, user)
    service, instance = await abnormal_service(db, prefix="oidc")
    conv = await c.conversation("mine")
    run = (await c.start(conv, f"restart the abnormal {service} instance")).run
    for _ in range(400):
        got = await c.stub.GetRun(pb.GetRunRequest(run_id=run.id), metadata=c.md, timeout=10)
        if got.run.status == resources_pb2.RUN_STATUS_INTERRUPTED:
            return run.id, got.run.pending_interrupt.id, instance
        await asyncio.sleep(0.05)
    raise AssertionError(f"the run never asked for confirmation: {got.run}")


async def test_a_service_acts_on_behalf_only_with_the_capability(
    idp: TestIssuer, oidc_runtime: Proc, clients: list[Client], db: Any
) -> None:
    addr = oidc_runtime.addr
    alice, bob = new_user("alice"), new_user("bob")
    alice_c = client(clients, addr, idp.token(alice))
    bob_c = client(clients, addr, idp.token(bob))
    alice_conv, bob_conv = await alice_c.conversation("a"), await bob_c.conversation("b")

    plain = client(clients, addr, idp.service_token("svc-plain"), on_behalf_of=alice)
    for rpc in (
        plain.stub.ListConversations(pb.ListConversationsRequest(), metadata=plain.md),
        plain.stub.CreateConversation(pb.CreateConversationRequest(title="x"), metadata=plain.md),
    ):
        assert await code_of(rpc) == grpc.StatusCode.PERMISSION_DENIED
    # A user's token cannot name another user either.
    as_bob = client(clients, addr, idp.token(bob), on_behalf_of=alice)
    assert await code_of(
        as_bob.stub.ListConversations(pb.ListConversationsRequest(), metadata=as_bob.md)
    ) == (grpc.StatusCode.PERMISSION_DENIED)

    crm = f"svc-crm-{uuid.uuid4().hex[:6]}"
    able = client(clients, addr, idp.service_token(crm, on_behalf=True), on_behalf_of=alice)
    listed = await able.stub.ListConversations(pb.ListConversationsRequest(), metadata=able.md)
    assert [c.id for c in listed.conversations] == [alice_conv], "only alice's conversations"
    assert await code_of(
        able.stub.GetConversation(
            pb.GetConversationRequest(conversation_id=bob_conv), metadata=able.md
        )
    ) == (grpc.StatusCode.NOT_FOUND)
    made = await able.conversation("made for alice")
    again = await alice_c.stub.GetConversation(
        pb.GetConversationRequest(conversation_id=made), metadata=alice_c.md
    )
    assert again.conversation.id == made, "what the service made on her behalf is alice's"
    # The Python client's option sends the same metadata.
    token = idp.service_token(crm, on_behalf=True)
    async with TetherClient(addr, token=token, on_behalf_of=alice) as tc:
        listed = await tc.list_conversations()
    assert {c.id for c in listed.conversations} == {alice_conv, made}
    # Every on-behalf call is logged: which service, which user, which RPC.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = [json.loads(x) for x in oidc_runtime.log().splitlines() if x.startswith("{")]
        acting = [x for x in lines if x.get("msg") == "service acting on behalf of a user"]
        if any(x.get("caller_service") == crm for x in acting):
            break
        await asyncio.sleep(0.1)
    mine = [x for x in acting if x.get("caller_service") == crm]
    assert {x["rpc"] for x in mine} >= {"ListConversations", "CreateConversation"}
    assert {x["on_behalf_of"] for x in mine} == {alice} and all(x["level"] == "info" for x in mine)


async def test_a_service_cannot_approve(
    idp: TestIssuer, oidc_runtime: Proc, clients: list[Client], db: Any
) -> None:
    addr, owner = oidc_runtime.addr, new_user("owner")
    owner_c = client(clients, addr, idp.token(owner))
    run_id, interrupt_id, instance = await paused_run(owner_c, db, owner)
    svc = f"svc-{uuid.uuid4().hex[:6]}"
    await grant_restart(db, svc)  # even with a grant of its own
    on_behalf = client(clients, addr, idp.service_token(svc, on_behalf=True), on_behalf_of=owner)
    as_itself = client(clients, addr, idp.service_token(svc, on_behalf=True))
    for c, decision in (
        (on_behalf, events_pb2.DECISION_APPROVED),
        (on_behalf, events_pb2.DECISION_RETRY),
        (on_behalf, events_pb2.DECISION_MARK_DONE),
        (as_itself, events_pb2.DECISION_APPROVED),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await c.resume(run_id, interrupt_id, decision)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, info.value
        assert "a service cannot approve" in (info.value.details() or "")
    await asyncio.sleep(0.5)  # had anything been queued, a worker would have picked it up
    got = await owner_c.stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=owner_c.md)
    assert got.run.status == resources_pb2.RUN_STATUS_INTERRUPTED
    assert got.run.pending_interrupt.id == interrupt_id
    assert await executions(db, instance) == 0, "the tool ran on a service's approval"
    assert await db.fetchval("SELECT status FROM interrupt WHERE id = $1", interrupt_id) == (
        "pending"
    )
    # The owner, a person, can: the refusal was about who approved, not about the run.
    await owner_c.resume(run_id, interrupt_id)
    for _ in range(200):
        if await executions(db, instance) == 1:
            break
        await asyncio.sleep(0.05)
    assert await executions(db, instance) == 1


async def test_the_gateway_verifies_the_same_idp_tokens(
    idp: TestIssuer, oidc_runtime: Proc, oidc_env: dict[str, str], procs: list[Proc]
) -> None:
    import aiohttp

    gw = start_gateway(oidc_env, oidc_runtime.addr, name="gateway-oidc")
    procs.append(gw)
    user = new_user("gw")
    async with aiohttp.ClientSession() as http:
        for token, status in (
            (idp.token(user), 200),
            (idp.token(user, aud="some-other-app"), 401),
            (issue_token(TEST_SECRET, user), 401),
        ):
            h = {"Authorization": f"Bearer {token}"}
            async with http.get(f"{gw.addr}/v1/conversations", headers=h) as r:
                assert r.status == status, await r.text()


def forged(header: dict[str, Any], claims: dict[str, Any]) -> str:
    """A token with any header and a signature of nothing (it must be refused before, or by,
    the signature check)."""
    import base64

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    return ".".join((b64(json.dumps(header).encode()), b64(json.dumps(claims).encode()), "c2ln"))


async def test_a_token_that_does_not_fit_its_key_is_401_never_500(
    idp: TestIssuer, oidc_runtime: Proc, oidc_env: dict[str, str], procs: list[Proc]
) -> None:
    """Issue #35 finding 1: a JWKS key without `alg` (as Entra ID publishes them) and a token
    whose header names it with an algorithm of another key type made PyJWT raise TypeError
    ("Expecting a PEM-formatted key"): every route answered 500, the runtime INTERNAL. The same
    for a header whose `alg` is not a string, and an `exp` past a float's range."""
    import aiohttp

    unpinned = idp.publish("RS256", publish_alg=False)
    await asyncio.sleep(REFETCH_S + 0.1)  # the next unknown kid refetches the JWKS
    user = new_user("fit")
    claims = idp.claims(user)
    refused = {
        "ES256 naming an RSA key": forged({"alg": "ES256", "kid": unpinned}, claims),
        "EdDSA naming an RSA key": forged({"alg": "EdDSA", "kid": unpinned}, claims),
        "alg a list": forged({"alg": ["RS256"], "kid": unpinned}, claims),
        "alg an object": forged({"alg": {"RS256": 1}, "kid": unpinned}, claims),
        "exp of 400 digits": idp.token(user, kid=unpinned, exp=10**400),
    }
    # The key is usable for what it is: RS256 under it verifies.
    assert await list_conversations(oidc_runtime.addr, idp.token(user, kid=unpinned)) == (
        grpc.StatusCode.OK
    )
    for name, token in refused.items():
        code = await list_conversations(oidc_runtime.addr, token)
        assert code == grpc.StatusCode.UNAUTHENTICATED, f"{name}: {code}"

    gw = start_gateway(oidc_env, oidc_runtime.addr, name="gateway-oidc-fit")
    procs.append(gw)
    async with aiohttp.ClientSession() as http:
        for name, token in refused.items():
            h = {"Authorization": f"Bearer {token}"}
            for route in ("/v1/conversations", "/v1/runs", "/v1/audit", "/v1/runs/run_x/events"):
                async with http.get(f"{gw.addr}{route}", headers=h) as r:
                    assert r.status == 401, (name, route, r.status, await r.text())
    idp.withdraw(unpinned)
    assert oidc_runtime.alive() and gw.alive()
