"""Secret values committed to Tether's repository, which a production process refuses.

Dev and test keys, the dev overlay's generated Secret and the benchmark's key are public: anyone
with a clone can mint tokens with them. A copied one passes every other check (it is long
enough), so `Settings.check` refuses a signing key whose SHA-256 is listed here. Only digests are
kept, so this file adds no secret of its own for the scan to find.

tests/integration/security/test_sec_committed_secrets.py scans the repository for `*_SECRET`
literals and fails, printing the digest to add, when a committed value is missing here.
"""

from __future__ import annotations

import hashlib

COMMITTED_SECRET_SHA256 = frozenset(
    {
        # libs/common/src/tether_common/config.py DEV_JWT_SECRET (`tether dev`'s default key)
        "05eb1ff6e1bfd3f333ec4f3e7bb8b5fb1d75dc3e5f9cb860f07fadc2ef381dcd",
        # deploy/k8s/overlays/dev/kustomization.yaml (the dev cluster's generated Secret)
        "5c8236bde2707ccd00527373edae96595c903547fa83993ff9a963bcf92a0d26",
        # tests/tether_testkit/secrets.py TEST_SECRET
        "15db89b632007b66b9a056111cb86e25a2c8b9bfccce82ab1cee940c046c8e68",
        # tests/integration/security/test_sec_auth.py (a wrong signature)
        "8a75c38ef8d76f66b45d7a11e7a077fabfb99c1eaf3a4ee86044ba13abff2671",
        # bench/tether_bench/runtime_probe.py SECRET
        "20d3739225746bed1122eed795790ae10d257ac1e1ea1656d218d54c8b006ec9",
        # services/gateway/tests/gw_fake_runtime.py (the gateway's unit tests)
        "7fe5935036a3edd115a5588f957b344215ff5d85734b6e724ac71e365a8bc166",
        # tests/integration/test_production_guard.py (a short key)
        "7750e5644cf856467b1acb0e59b3dbe5a2991e69bc1b9846abd4f991c800cf8e",
        # cli/tests/test_cli_webhooks.py (a webhook endpoint's signing secret)
        "d99c0a026d545ef70880be60384bf53a9353cd3de2eadcd8de1c01635531c1a5",
        # libs/client/tests/test_webhooks_verify.py (a receiver's webhook secret)
        "0dfa31348971e1293ef4bd9afbcdd817a5c7ff19993d135140750674e611ed9f",
        # services/runtime/tests/webhooks/test_webhook_outbox.py (a test fixture)
        "506334017ae7d65f5f6c2f1fe7dd92089e4b8e706a542b2fd7e4c16748ce7812",
    }
)


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def is_committed(value: str) -> bool:
    """Whether this secret value is one committed to the repository (so public)."""
    return bool(value) and digest(value) in COMMITTED_SECRET_SHA256
