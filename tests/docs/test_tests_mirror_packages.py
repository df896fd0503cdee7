"""The runtime's tests mirror its layers: services/runtime/tests/<layer>/ for each folder of
tether_runtime (api, engine, policy, streams, store, models, webhooks), and server/ for the
top-level modules (server.py and what starts with it). A test file at the top, or in a folder
no package has, is a test nobody finds beside its code."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "services" / "runtime" / "src" / "tether_runtime"
TESTS = ROOT / "services" / "runtime" / "tests"


def test_every_runtime_test_sits_in_the_folder_of_a_package() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()} | {"server"}
    assert not sorted(p.name for p in TESTS.glob("test_*.py")), "a test file at the top"
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= packages, f"test folders without a package: {sorted(folders - packages)}"
    for folder in folders:
        assert list((TESTS / folder).glob("test_*.py")), f"{folder}/ holds no test"


def test_the_layers_that_hold_code_have_tests() -> None:
    for layer in ("api", "engine", "policy", "streams", "store"):
        assert list((TESTS / layer).glob("test_*.py")), f"no test for the {layer} layer"
