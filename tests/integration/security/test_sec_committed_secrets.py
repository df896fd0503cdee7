"""Finding 1: "the production guard rejects only the public dev value, so a copied key passes".
Every secret value committed to the repository (dev and test keys, the dev overlay's Secret,
README and docs examples) is public. This test finds each `*_SECRET` literal in the repository
(and each key passed literally to issue_token / jwt.encode) and asserts the production guard
refuses it: a future committed key fails here until its digest is added to
tether_common/known_secrets.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from tether_common.config import Settings
from tether_common.known_secrets import digest, is_committed

REPO = Path(__file__).resolve().parents[3]
SKIP = ("uv.lock", "package-lock.json", "libs/proto/src/tether/")
# NAME_SECRET = "v" / "NAME_SECRET": "v" / NAME_SECRET: 'v'  (Python, JSON, YAML)
QUOTED = re.compile(r"""\b((?:[A-Z][A-Z0-9_]*)?SECRET)\b["']?\s*[:=]\s*["']([^"'\s]+)["']""")
# NAME_SECRET=v  (env files, shell, kustomize literals, docs)
BARE = re.compile(r"""\b((?:[A-Z][A-Z0-9_]*)?SECRET)=([^\s"'`$;,)\]}]+)""")
# a key passed as a literal: issue_token("v", ...) / jwt.encode(claims, "v", algorithm=...)
LITERAL_KEY = re.compile(
    r"""issue_token\(\s*["']([^"']+)["']|jwt\.encode\([^()]*?,\s*["']([^"']+)["']\s*,\s*algorithm"""
)
NOT_VALUES = ("***", "…", "...", "<", "{", "%", "$")


def repository_files(root: Path) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return [root / f for f in listed if not f.startswith(SKIP) and (root / f).is_file()]


def committed_secrets(files: list[Path], root: Path) -> dict[str, list[str]]:
    """Each literal secret value found, with where (file:line)."""
    found: dict[str, list[str]] = {}
    for path in files:
        try:
            text = path.read_text("utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            values = [m.group(2) for m in QUOTED.finditer(line)]
            values += [m.group(2) for m in BARE.finditer(line)]
            values += [m.group(1) or m.group(2) for m in LITERAL_KEY.finditer(line)]
            for value in values:
                if value.startswith(NOT_VALUES) or value.isidentifier() and value.islower():
                    continue  # a placeholder, or a variable's name (secret=secret)
                found.setdefault(value, []).append(f"{path.relative_to(root)}:{number}")
    return found


def refused_in_production(value: str) -> bool:
    env = {
        "TETHER_ENV": "production",
        "DATABASE_URL": "postgresql://tether@db.internal:5432/tether",
        "REDIS_URL": "redis://cache.internal:6379/0",
        "TETHER_JWT_SECRET": value,
    }
    problems = Settings.from_env(env).unsafe_for_production()
    return any(
        p.startswith("TETHER_JWT_SECRET is a value committed")
        or p.startswith("TETHER_JWT_SECRET is shorter")
        or p.startswith("TETHER_JWT_SECRET is missing or the public dev value")
        for p in problems
    )


def test_every_committed_secret_is_refused_in_production() -> None:
    found = committed_secrets(repository_files(REPO), REPO)
    # the scan sees the known ones (so it is looking in the right places)
    assert len(found) >= 4, found
    missing = {
        value: where
        for value, where in found.items()
        if not (is_committed(value) or len(value.encode()) < 32)
    }
    assert not missing, "secrets committed to the repository that production would accept; " + (
        "add their digests to tether_common/known_secrets.py: "
        + "; ".join(f"{digest(v)} ({', '.join(w)})" for v, w in missing.items())
    )
    for value, where in found.items():
        assert refused_in_production(value), where


def test_the_scan_finds_a_newly_committed_key(tmp_path: Path) -> None:
    # Built from pieces, so this file's own source holds no such literal for the real scan.
    planted = {
        "deploy.env": "TETHER_STREAM_TOKEN" + "_SECRET=a-fresh-key-someone-pasted-0123456789abcdef",
        "conf.py": "MY" + '_SECRET = "another-fresh-key-0123456789abcdef-0123456789"',
        "t.py": "tok = issue" + '_token("third-fresh-key-0123456789abcdef-01234567", "u")',
        "ok.md": "TETHER_JWT" + "_SECRET=$(openssl rand -base64 48) and AWS" + "_SECRET=***",
    }
    for name, text in planted.items():
        (tmp_path / name).write_text(text)
    found = committed_secrets(sorted(tmp_path.iterdir()), tmp_path)
    assert set(found) == {
        "a-fresh-key-someone-pasted-0123456789abcdef",
        "another-fresh-key-0123456789abcdef-0123456789",
        "third-fresh-key-0123456789abcdef-01234567",
    }
    for value in found:
        assert not is_committed(value) and not refused_in_production(value)


@pytest.mark.parametrize(
    "value",
    [
        "tether-dev-cluster-secret-not-for-production-use",  # the dev overlay's key
        "tether-test-secret-0123456789abcdef-0123456789",  # the tests' key
    ],
)
def test_known_committed_keys_are_refused(value: str) -> None:
    assert is_committed(value) and len(value) >= 32
    assert refused_in_production(value)
