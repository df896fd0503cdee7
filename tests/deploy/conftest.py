"""Fixtures for the deployment tests: the validator module and each overlay rendered once."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = ("dev", "production")


def _load_validator() -> ModuleType:
    path = REPO / "deploy" / "k8s" / "validate.py"
    spec = importlib.util.spec_from_file_location("tether_k8s_validate", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def kv() -> ModuleType:
    return _load_validator()


@pytest.fixture(scope="session")
def rendered(kv: ModuleType) -> dict[str, list[dict[str, Any]]]:
    return {name: kv.render(REPO / "deploy" / "k8s" / "overlays" / name) for name in OVERLAYS}
