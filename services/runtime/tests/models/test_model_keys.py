"""Model API keys: where they are read from, and that they never show."""

from __future__ import annotations

import email.utils
import time

import pytest
from tether_runtime.models import Secret, read_api_key, retry_after_s
from tether_runtime.models.keys import redact

KEY = "sk-test-do-not-log-0123456789abcdef"


def test_the_file_wins_over_the_environment_and_is_stripped(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_KEY", "from-env")
    secret = tmp_path / "key"
    secret.write_text(f"  {KEY}\n")
    assert read_api_key(str(secret), "MY_KEY") == KEY
    assert read_api_key("", "MY_KEY") == "from-env"
    monkeypatch.delenv("MY_KEY")
    assert read_api_key("", "MY_KEY") == ""


@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_a_configured_file_that_is_missing_or_empty_names_the_path(tmp_path, monkeypatch, content):
    monkeypatch.setenv("MY_KEY", KEY)
    path = tmp_path / "key"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=str(path)) as info:
        read_api_key(str(path), "MY_KEY")
    assert KEY not in str(info.value)


def test_an_unreadable_file_names_the_path(tmp_path):
    with pytest.raises(ValueError, match="cannot be read"):
        read_api_key(str(tmp_path), "")  # a directory


def test_a_secret_never_prints():
    s = Secret(KEY)
    assert KEY not in repr(s) and KEY not in str(s) and KEY not in f"{s}" and KEY not in repr([s])
    assert s.reveal() == KEY and s and not Secret("")


def test_redact_removes_the_key_pieces_and_key_shaped_tokens():
    said = f"Incorrect API key provided: {KEY}. Also {KEY[:10]}***{KEY[-4:]} and sk-live-abcdef123."
    clean = redact(said, KEY)
    assert KEY not in clean and KEY[-4:] not in clean and "sk-live" not in clean
    assert clean.startswith("Incorrect API key provided: ***")


def test_retry_after_reads_ms_seconds_and_dates():
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_s({"retry-after": "4"}) == 4.0
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < (retry_after_s({"retry-after": later}) or 0) <= 30
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None
