"""The `tether` verbs that need no servers: tokens, and the argument surface."""

from __future__ import annotations

import pytest
from tether_cli.main import build_parser, main
from tether_common.auth import verify_token
from tether_common.config import DEV_JWT_SECRET


def test_token_is_signed_with_the_configured_secret(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s" * 40
    monkeypatch.setenv("TETHER_JWT_SECRET", secret)
    assert main(["token", "--user", "svc-billing", "--scope", "service", "--ttl", "60"]) == 0
    principal = verify_token(secret, capsys.readouterr().out.strip())
    assert (principal.user_id, principal.scope) == ("svc-billing", "service")


def test_an_on_behalf_service_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_JWT_SECRET", "s" * 40)
    assert main(["token", "--user", "crm", "--scope", "service", "--on-behalf"]) == 0
    principal = verify_token("s" * 40, capsys.readouterr().out.strip())
    assert (principal.kind, principal.on_behalf) == ("service", True)
    assert principal.acting_for("alice").user_id == "alice"
    assert main(["token", "--user", "alice", "--on-behalf"]) == 2
    assert "--on-behalf needs --scope service" in capsys.readouterr().err


def test_token_defaults_to_the_dev_secret_and_a_user(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TETHER_JWT_SECRET", raising=False)
    monkeypatch.delenv("TETHER_ENV", raising=False)
    assert main(["token", "--user", "alice"]) == 0
    assert verify_token(DEV_JWT_SECRET, capsys.readouterr().out.strip()).scope == "user"


def test_production_token_needs_a_secret(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_ENV", "production")
    monkeypatch.delenv("TETHER_JWT_SECRET", raising=False)
    assert main(["token", "--user", "alice"]) == 2
    assert "TETHER_JWT_SECRET is not set" in capsys.readouterr().err


def test_a_bad_setting_is_a_clear_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_ENV", "staging")
    assert main(["runtime"]) == 2
    assert "TETHER_ENV must be 'dev' or 'production'" in capsys.readouterr().err


def test_every_documented_verb_exists() -> None:
    parser = build_parser()
    for verb in ("dev", "migrate", "seed-demo", "runtime", "gateway"):
        assert parser.parse_args([verb]).verb == verb
    with pytest.raises(SystemExit):
        parser.parse_args(["token"])  # --user is required
