"""An agent's model API key: read once from a mounted secret file or the environment, and kept
in a `Secret` so that no repr, log line or error message can carry it."""

from __future__ import annotations

import os
import re
from pathlib import Path


class Secret:
    """A value that prints as `Secret('***')`. `reveal()` is the only way to the value, so a
    key passed around by mistake (a log call, an f-string, a dataclass repr) shows nothing."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[object, ...]:
        # Pickling would be a way out of the redaction: refuse it.
        raise TypeError("a Secret cannot be pickled")


def read_api_key(api_key_file: str, api_key_env: str) -> str:
    """The key: the file's content (stripped; a mounted secret) when `api_key_file` is set,
    else the environment variable `api_key_env`, else "". A configured file that is missing,
    unreadable or empty is an error naming the path (never the content): falling back to the
    environment would hide a broken mount."""
    if api_key_file:
        path = Path(api_key_file)
        try:
            key = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise ValueError(f"API key file {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else "unreadable"
            raise ValueError(f"API key file {path} cannot be read: {reason}") from None
        if not key:
            raise ValueError(f"API key file {path} is empty")
        return key
    return os.environ.get(api_key_env, "").strip() if api_key_env else ""


# Tokens shaped like API keys (sk-..., sk-ant-..., sess-...), and masked echoes of them such as
# "sk-test-***...6789" that some providers put in their 401 messages.
_KEYLIKE = re.compile(r"\b(?:sk|pk|rk|sess)[-_][\w\-.*]{4,}|\S*\*{3,}\S*", re.IGNORECASE)


def redact(text: str, key: str | Secret | None) -> str:
    """`text` with the key (whole, or any 8+ character piece of it as a word) and anything
    key-shaped replaced by "***"."""
    raw = key.reveal() if isinstance(key, Secret) else (key or "")
    if raw:
        text = text.replace(raw, "***")
        if len(raw) >= 16:
            # Providers echo a prefix and the last characters; drop any long piece of it.
            for part in {raw[:8], raw[-8:]}:
                text = text.replace(part, "***")
    return _KEYLIKE.sub("***", text)
