"""The user's text inside a LangGraph-style input, read once for the gateway and the runtime."""

from __future__ import annotations

from tether_common.message_text import content_text, user_text_of


def test_the_last_user_message_wins_in_every_form() -> None:
    assert user_text_of({"messages": [{"role": "user", "content": "a"}, ("human", "b")]}) == "b"
    assert user_text_of({"messages": [("human", "b"), {"type": "human", "content": "c"}]}) == "c"
    assert user_text_of({"messages": ["plain", {"role": "assistant", "content": "no"}]}) == "plain"
    assert user_text_of({"messages": {"role": "user", "content": "one"}}) == "one"


def test_no_user_message_is_empty() -> None:
    assert user_text_of({}) == ""
    assert user_text_of({"messages": 3}) == ""
    assert user_text_of({"messages": [{"role": "ai", "content": "x"}, ("tool", "y")]}) == ""


def test_content_blocks_join_their_text_only() -> None:
    blocks = [{"type": "text", "text": "a"}, {"type": "image_url", "url": "u"}, "b"]
    assert content_text(blocks) == "ab"
    assert content_text(None) == ""
