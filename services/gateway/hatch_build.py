"""Build hook: the JS client's source (clients/js/src in the repository) goes into the wheel at
tether_gateway/static/client, where the demo UI imports it, so the package never holds a copy to
keep in sync by hand. The sdist carries it inside the package directory, so a wheel built from the
sdist (away from the repository) has it too. Editable installs skip it: app.py serves the
checkout's clients/js/src directly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

CLIENT_SRC = Path("..", "..", "clients", "js", "src")
IN_PACKAGE = Path("src", "tether_gateway", "static", "client")


class JsClientHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return
        source = (Path(self.root) / CLIENT_SRC).resolve()
        if not source.is_dir():
            if (Path(self.root) / IN_PACKAGE).is_dir():
                return  # built from an sdist: the package directory already holds it
            raise RuntimeError(f"the JS client's source is missing: {source}")
        target = "tether_gateway/static/client" if self.target_name == "wheel" else str(IN_PACKAGE)
        build_data["force_include"][str(source)] = target
