"""The compatibility check (README, "Upgrading"): during a rolling upgrade pods of the previous
release (deploy/previous-release) run on the schema this version's migrations leave, so the
release's own event-path and resume tests run, from its tree and with its virtualenv, against
databases migrated by this code. A migration that breaks the release fails here, before it ships:
the second test applies one (a column the release uses, renamed) and the check must report it."""

from __future__ import annotations

import re
from importlib import resources

import pytest
from tether_testkit import releases

pytestmark = [pytest.mark.process, pytest.mark.slow(seconds=77), pytest.mark.timeout(900)]


def _latest_migration() -> str:
    folder = resources.files("tether_runtime.store").joinpath("migrations")
    return max(f.name for f in folder.iterdir() if f.name.endswith(".sql"))


@pytest.fixture(scope="module")
def release() -> releases.Release:
    return releases.build_previous()


def test_previous_release_passes_its_event_and_resume_tests_on_this_schema(
    release: releases.Release, admin_dsn: str, redis_url: str
) -> None:
    result = releases.run_compat_tests(
        release, releases.COMPAT_TESTS, admin_dsn=admin_dsn, redis_url=redis_url
    )
    print(f"\n[compat] {release.name}'s {len(releases.COMPAT_TESTS)} files: {result.seconds:.1f}s")
    assert result.returncode == 0, (
        f"the previous release {release.name} ({release.sha[:10]}) fails its own tests on this "
        f"version's schema: a migration is not backward compatible (README, 'Upgrading')\n"
        + result.output[-6000:]
    )
    # Its databases really had this version's schema: the newest migration was applied to them.
    assert _latest_migration() in result.migrations, result.migrations
    passed = re.search(r"(\d+) passed", result.output)
    assert passed and int(passed.group(1)) >= 20, result.output[-2000:]


def test_the_check_fails_on_a_migration_that_breaks_the_previous_release(
    release: releases.Release, admin_dsn: str, redis_url: str
) -> None:
    result = releases.run_compat_tests(
        release,
        ("services/runtime/tests/streams/test_claims_and_bus.py",),
        admin_dsn=admin_dsn,
        redis_url=redis_url,
        extra_migrations="tether_testkit:breaking_migrations",
        pytest_args=("-x",),
    )
    assert "0001_rename_run_checkpoint.sql" in result.migrations, result.migrations
    # pytest's "tests failed" (1), not a usage or collection error: the release's code ran and
    # failed on the renamed column.
    assert result.returncode == 1, result.output[-4000:]
    assert re.search(r"\d+ failed", result.output), result.output[-4000:]
    assert 'column "checkpoint" of relation "run" does not exist' in result.output


def test_a_release_commit_missing_from_the_clone_fails_loudly() -> None:
    """No silent skip: a clone without the commit (a shallow one) says what to fetch."""
    with pytest.raises(RuntimeError, match=r"deploy/previous-release.*(unshallow|git fetch)"):
        releases._require_commit("v0.0", "0" * 40)
