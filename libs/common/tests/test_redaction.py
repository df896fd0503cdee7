"""Masking: each secret format of issue 16 (finding 3) with only its secret part replaced, the
formats masked before, values inside parsed structures (never JSON text), and text left alone."""

from __future__ import annotations

import json

import pytest
from tether_common.redaction import redact, redact_mapping, redact_value

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAq7Bz9XvN2mK4pL8sR1tY6uW3\n"
    "eF0gH5jK7lM9nP2qS4vX8zA1cD3fG6hJ9kL2mN5p\n"
    "-----END RSA PRIVATE KEY-----"
)

# (text, the secret that must go, what must stay)
CASES = [
    ("db_password=Hx7-pr0d-Zq91 host=db1", "Hx7-pr0d-Zq91", "db_password=*** host=db1"),
    ("client_secret: cs9f8e7d6c5b4a3928", "cs9f8e7d6c5b4a3928", "client_secret: ***"),
    (
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "AWS_SECRET_ACCESS_KEY=***",
    ),
    ("key id AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", "key id"),
    ("GITHUB_TOKEN=gt5a4b3c2d1e0f9a8b", "gt5a4b3c2d1e0f9a8b", "GITHUB_TOKEN=***"),
    (
        "push with ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 now",
        "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
        "push with ",
    ),
    ("charge via sk_live_4eC39HqLyjWDarjtT1zdp7dc ok", "4eC39HqLyjWDarjtT1zdp7dc", " ok"),
    (
        "Authorization: Basic dXNlcjpzM2NyZXQtcGFzcw==",
        "dXNlcjpzM2NyZXQtcGFzcw",
        "Authorization: Basic ***",
    ),
    (f"deploy key:\n{PEM}\nnext line", "MIIEowIBAAKCAQEAq7Bz9XvN2mK4pL8sR1tY6uW3", "\nnext line"),
    (f"cut short:\n{PEM[:90]}", "MIIEowIBAAKCAQEAq7Bz9Xv", "cut short:"),
    (
        "alert https://hooks.slack.com/services/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",
        "Zx81kQ2LmP0aB7cD9eF3gH4j",
        "alert ",
    ),
    ('password = "hunter2hunter2"', "hunter2hunter2", 'password = "***"'),
    (
        "line client_secret: client_secret: cs9f8e7d6c",
        "cs9f8e7d6c",
        "client_secret: client_secret: ***",
    ),
    ("password=a1 pwd: b2 user=bob", "b2", "password=*** pwd: *** user=bob"),
    # masked before this change, still masked
    ("Authorization: Bearer abc.def.ghi", "abc.def.ghi", "Bearer ***"),
    ("postgresql://payments:Pw1@db-primary.internal:5432/p", "db-primary", "postgresql://***"),
    (
        "provider rejected key sk-live-4f9XqT2mB7vR1kLp0Zs8Wd3H",
        "4f9XqT2mB7vR1kLp0Zs8Wd3H",
        "***key***",
    ),
    (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJyb290In0.Qm9ndXNTaWduYXR1cmU",
        "Qm9ndXNTaWduYXR1cmU",
        "***jwt***",
    ),
    ("https://bob:s3cr3t-pw@git.example.com/x.git", "s3cr3t-pw", "https://***:***@git"),
]


@pytest.mark.parametrize(("text", "secret", "kept"), CASES, ids=[c[0][:24] for c in CASES])
def test_each_format_loses_its_secret_and_keeps_the_rest(text: str, secret: str, kept: str) -> None:
    out = redact(text)
    assert secret not in out, out
    assert kept in out, out
    assert redact(text) == out  # deterministic (and the cached answer is the same)


@pytest.mark.parametrize(
    "text",
    [
        "restarted payment-api-2 in 41 ms; 3 instances healthy",
        "the keyboard and the monkey passed the basic test",  # trigger words, nothing secret
        "run_01JD0X3 trace 4bf92f3577b34da6a3ce929d0e0e4736",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_values_inside_structures_are_masked_keys_and_types_kept() -> None:
    odd = 'redis://h\\"x'  # broke the old mask-the-JSON-text-and-reparse
    data = {
        "line": odd,
        "n": 7,
        "ok": True,
        "none": None,
        "lines": ["db_password=Hx7-pr0d-Zq91", {"deep": "GITHUB_TOKEN=gt5a4b3c2d1e0f9a8b"}],
        "pair": ("a", "client_secret: cs9f8e7d6c5b4a3928"),
        "api_key": "no-keyword-in-the-value-itself",
        "token_count": 12,
    }
    out = redact_value(data)
    assert out == {
        "line": 'redis://***"x',
        "n": 7,
        "ok": True,
        "none": None,
        "lines": ["db_password=***", {"deep": "GITHUB_TOKEN=***"}],
        "pair": ("a", "client_secret: ***"),
        "api_key": "***",
        "token_count": 12,
    }
    assert json.loads(json.dumps(out)) == json.loads(json.dumps(out))  # still plain JSON data
    assert data["line"] == odd  # the input is not changed in place


def test_settings_view_masks_secret_named_settings_whole() -> None:
    view = redact_mapping({"database_url": "postgresql://x", "jwt_secret": "s", "port": 8080})
    assert view == {"database_url": "***", "jwt_secret": "***", "port": 8080}


def test_long_text_beyond_the_cache_is_masked_too() -> None:
    text = "x " * 5000 + "db_password=Hx7-pr0d-Zq91"
    assert redact(text).endswith("db_password=***")


@pytest.mark.parametrize(("text", "secret", "kept"), CASES, ids=[c[0][:24] for c in CASES])
def test_masking_twice_changes_nothing(text: str, secret: str, kept: str) -> None:
    once = redact(f"{text} | then https://example.com/next")
    assert redact(once) == once
    if not text.startswith("cut short"):  # a key block without its END line masks to the end
        assert once.endswith(" | then https://example.com/next")
