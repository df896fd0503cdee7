"""csrf.py's rules on their own: which origins pass, and a token bound to its session."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from tether_common.errors import PermissionDenied
from tether_gateway.csrf import check, check_origin, csrf_token


def _request(**headers: str) -> web.Request:
    return make_mocked_request(
        "POST", "/v1/conversations", headers={"Host": "tether.test:8080", **headers}
    )


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://tether.test:8080"},
        {"Origin": "https://TETHER.test:8080"},  # behind a TLS-terminating ingress
        {"Sec-Fetch-Site": "same-origin"},
        {"Origin": "http://tether.test:8080", "Sec-Fetch-Site": "same-origin"},
    ],
)
def test_same_origin_passes(headers: dict[str, str]) -> None:
    check_origin(_request(**headers))


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Origin": "null"},
        {"Origin": "http://tether.test"},  # another port is another origin
        {"Origin": "http://tether.test:8080.evil.example"},
        {"Origin": "ftp://tether.test:8080"},
        {"Origin": "http://evil.example", "Sec-Fetch-Site": "same-origin"},
        {"Origin": "http://tether.test:8080", "Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "none"},
    ],
)
def test_other_origins_are_refused(headers: dict[str, str]) -> None:
    with pytest.raises(PermissionDenied) as refused:
        check_origin(_request(**headers))
    assert refused.value.reason == "CSRF_ORIGIN_REFUSED"


def test_no_origin_passes_only_when_not_required() -> None:
    check_origin(_request(), required=False)


def test_the_token_is_bound_to_its_session() -> None:
    mine, other = csrf_token("session-a"), csrf_token("session-b")
    assert mine != other and mine == csrf_token("session-a")
    assert "session-a" not in mine
    same = {"Origin": "http://tether.test:8080"}
    check(_request(**same, **{"X-CSRF-Token": mine}), "session-a")
    for sent in ("", other, mine + "x", mine.upper()):
        with pytest.raises(PermissionDenied) as refused:
            check(_request(**same, **{"X-CSRF-Token": sent}), "session-a")
        assert refused.value.reason == "CSRF_TOKEN_INVALID"
