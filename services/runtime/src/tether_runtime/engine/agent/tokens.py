"""Counting tokens for the context budget (Limits.context_tokens).

OpenAI models are counted with tiktoken, the tokenizer they use. tiktoken downloads its BPE
files on first use, so the encoding loads in a thread (counting by estimate meanwhile); a pod
without that network (or without TIKTOKEN_CACHE_DIR pointing at the files) keeps the estimator,
with one warning: a count that is a little off is better than a run that fails. Every other provider (Anthropic publishes no local tokenizer; scripted and
custom models have none) uses the estimator, which is deterministic so tests can count exactly
what the engine counted."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Protocol

log = logging.getLogger(__name__)

MESSAGE_OVERHEAD = 4
"""Tokens a message costs beyond its text (role, separators), as in OpenAI's chat format."""
CALL_OVERHEAD = 3
"""Tokens a tool call costs beyond its name and arguments."""
REPLY_OVERHEAD = 3
"""Tokens every request costs once (the reply's priming)."""


class TokenCounter(Protocol):
    def count(self, text: str) -> int:
        """Tokens of `text`."""
        ...

    def count_messages(self, messages: list[dict[str, Any]]) -> int:
        """Tokens of chat messages (OpenAI-shaped dicts), overheads and tool calls included."""
        ...


class _Messages:
    """count_messages in terms of count, shared by every counter."""

    def count(self, text: str) -> int:
        raise NotImplementedError

    def count_message(self, m: dict[str, Any]) -> int:
        n = MESSAGE_OVERHEAD + self.count(str(m.get("content") or ""))
        for key in ("name", "tool_call_id"):
            if m.get(key):
                n += self.count(str(m[key]))
        for call in m.get("tool_calls") or ():
            n += CALL_OVERHEAD + self.count(str(call.get("name", "")))
            n += self.count(json.dumps(call.get("args") or {}, sort_keys=True, default=str))
        return n

    def count_messages(self, messages: list[dict[str, Any]]) -> int:
        return REPLY_OVERHEAD + sum(self.count_message(m) for m in messages)


class EstimateCounter(_Messages):
    """About 4 characters a token for ASCII text (English prose and code in common BPE
    vocabularies), and half a token per UTF-8 byte of everything else: a CJK character (3 bytes)
    counts 1.5 tokens, an emoji (4 bytes) 2, which errs on the side of too many, as a budget
    should. Deterministic: ceil((ascii characters + 2 * non-ASCII bytes) / 4)."""

    def count(self, text: str) -> int:
        if not text:
            return 0
        if text.isascii():
            return (len(text) + 3) // 4
        ascii_chars = sum(1 for ch in text if ord(ch) < 128)
        other_bytes = len(text.encode("utf-8", "surrogatepass")) - ascii_chars
        return (ascii_chars + 2 * other_bytes + 3) // 4


ESTIMATE = EstimateCounter()
TRUNCATED = " [...truncated]"


def truncate(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """`text` cut at its end (and marked) to at most `max_tokens`; '' if even the mark does
    not fit."""
    if counter.count(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if counter.count(text[:mid] + TRUNCATED) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + TRUNCATED if lo else ""


class TiktokenCounter(_Messages):
    """Exact counts with the model's tiktoken encoding (special-token text counts as ordinary
    text). The encoding loads in a thread of its own: a first load downloads the BPE file, which
    can hang where there is no network, and must never stall the event loop. Until it has
    loaded, and for good if it cannot, this counts by estimate."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.encoding: Any = None
        self._done = threading.Event()
        threading.Thread(target=self._load, name=f"tiktoken {model}", daemon=True).start()

    def _load(self) -> None:
        try:
            self.encoding = _openai_encoding(self.model)
        except Exception as err:  # noqa: BLE001 - no network, no cache, a broken file: estimate
            _warn_once(self.model, err)
        finally:
            self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the load; True if the encoding counts (False: estimating)."""
        self._done.wait(timeout)
        return self.encoding is not None

    def count(self, text: str) -> int:
        encoding = self.encoding
        if encoding is None:
            return ESTIMATE.count(text)
        return len(encoding.encode_ordinary(text)) if text else 0


_cache: dict[tuple[str, str], TokenCounter] = {}
_lock = threading.Lock()
_warned = False


def _openai_encoding(model: str) -> Any:
    import tiktoken

    try:
        return tiktoken.encoding_for_model(model)
    except KeyError:  # a model tiktoken does not know: the newest OpenAI encoding
        return tiktoken.get_encoding("o200k_base")


def _warn_once(model: str, err: Exception) -> None:
    global _warned
    with _lock:
        if _warned:
            return
        _warned = True
    log.warning(
        "tiktoken could not load its encoding; counting tokens by estimate. Set "
        "TIKTOKEN_CACHE_DIR to a folder holding the encoding files to count exactly",
        extra={"model": model, "error": type(err).__name__},
    )


def counter_for(provider: str, model: str) -> TokenCounter:
    """The counter for a provider's model, built once per (provider, model) per process."""
    key = (provider, model)
    with _lock:
        counter = _cache.get(key)
        if counter is None:
            counter = TiktokenCounter(model) if provider == "openai" else ESTIMATE
            _cache[key] = counter
        return counter
