"""`make soak` kept working: a one-minute soak (tests/integration/chaos/soak.py) on its real fleet
(two runtimes, two gateways, its own Redis), every kind of load exercised, every sample taken, and
the history checker clean. Its slopes are printed, not judged (a minute is too short to fit one;
`make soak` judges them)."""

from __future__ import annotations

import pytest

from chaos import soak
from chaos.kit import Procs

# A minute of the soak, in `make chaos` (not `make test`: it would cost a minute of its wall
# clock); `make soak` is the real one, and test_soak_verdict.py checks the verdict's fit.
pytestmark = [
    pytest.mark.process,
    pytest.mark.slow,
    pytest.mark.chaos,
    pytest.mark.chaos_full,
    pytest.mark.timeout(600),
]


async def test_a_short_soak_runs_clean(private_env: dict[str, str], procs: Procs) -> None:
    settings = soak.Settings(
        minutes=1.0,
        sample_s=3.0,
        short_lanes=2,
        stream_lanes=1,
        approval_lanes=1,
        revocation_lanes=1,
        stream_deltas=600,
        drain_s=240,
        judge=False,
    )
    doc = await soak.soak(private_env, procs, settings)
    print("\n" + soak.table(doc))
    assert doc["checker"]["violations"] == 0, doc["checker"]["first"]
    assert not doc["problems"], doc["problems"]
    assert doc["ok"]
    for kind in ("short runs", "long streams", "approvals across pods", "revocations", "reattach"):
        assert doc["load"].get(kind, 0) >= 1, (kind, doc["load"])
    assert doc["samples"] >= 5
    procs_seen = set(doc["slopes"])
    assert procs_seen == {"soak-rt1", "soak-rt2", "soak-gw1", "soak-gw2", "redis"}
    for name in ("soak-rt1", "soak-rt2"):
        assert doc["slopes"][name]["db_connections"]["to"] >= 1
    assert doc["slopes"]["redis"]["redis_used_mib"]["to"] > 0
