"""The file `tether dev` leaves for the terminals next to it (`.tether/env`): sourced by a real
bash it gives the examples their addresses and `tether` on PATH, and a shell that sourced it does
not mislead the next `tether dev` into taking a dead embedded store for an external one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tether_cli import dev_env

ADDRS = dev_env.DevAddresses(
    url="http://127.0.0.1:18080",
    grpc_target="127.0.0.1:15051",
    token="tok en'$x",
    database_url="postgresql://postgres@127.0.0.1:40001/tether",
    redis_url="redis://127.0.0.1:40002/0",
    embedded_database=True,
    embedded_redis=False,
)


@pytest.mark.process  # starts a process: not in test-fast
def test_sourced_by_bash_it_sets_the_addresses_and_puts_tether_on_path(tmp_path: Path) -> None:
    env_file = dev_env.write(tmp_path, ADDRS, {"TETHER_AGENTS": "a:b, c:d", "HOME": "/x"})
    assert env_file == tmp_path / "env"
    assert env_file.stat().st_mode & 0o777 == 0o600  # it holds a token
    script = (
        f'source {env_file} && printf \'%s\\n\' "$TETHER_URL" "$TETHER_GRPC_TARGET" '
        '"$TETHER_TOKEN" "$DATABASE_URL" "$REDIS_URL" "$TETHER_AGENTS" '
        '"${TETHER_DEV_EMBEDDED_REDIS_URL-unset}" && command -v tether'
    )
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    lines = out.stdout.splitlines()
    assert lines[:7] == [
        "http://127.0.0.1:18080",
        "127.0.0.1:15051",
        "tok en'$x",
        ADDRS.database_url,
        ADDRS.redis_url,
        "a:b, c:d",
        "unset",  # Redis was not embedded: no twin
    ]
    assert lines[7] == str(Path(sys.executable).parent / "tether")


def test_a_sourced_embedded_store_is_forgotten_an_external_one_kept() -> None:
    environ = {
        "DATABASE_URL": ADDRS.database_url,
        "TETHER_DEV_EMBEDDED_DATABASE_URL": ADDRS.database_url,
        "REDIS_URL": "redis://cache.internal:6379/0",
        "TETHER_DEV_EMBEDDED_REDIS_URL": ADDRS.redis_url,  # set by an older file, since changed
    }
    assert dev_env.forget_stale(environ) == ["DATABASE_URL"]
    assert environ == {"REDIS_URL": "redis://cache.internal:6379/0"}


def test_the_busy_port_warning_names_both_addresses_and_the_way_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    text = dev_env.busy_warning(
        "gateway (HTTP)", "127.0.0.1:8080", "127.0.0.1:41234", tmp_path / ".tether" / "env"
    )
    assert "127.0.0.1:8080 is busy" in text and "127.0.0.1:41234" in text
    assert "`source .tether/env`" in text and "TETHER_HTTP_ADDR" in text
