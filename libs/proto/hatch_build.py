"""Build hook: generate `tether.runtime.v1` (protobuf messages, .pyi stubs, gRPC stubs) from the
protos at build time, so the wheel carries the code and a user needs nothing but `pip install`.

The protos are the sdist's own copy (`proto/`, see pyproject's sdist force-include) or, building
from a checkout, the repository's `proto/` two levels up. A regular wheel gets the code from a
scratch directory (the source tree stays clean); an editable install (`uv sync` in the workspace)
gets it written into `src/`, where `make gen` also writes it."""

from __future__ import annotations

import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGE = Path("tether") / "runtime" / "v1"


def proto_root(project: Path) -> Path:
    for candidate in (project / "proto", project.parent.parent / "proto"):
        if (candidate / PACKAGE).is_dir():
            return candidate
    raise RuntimeError(f"no protos found: neither {project}/proto nor the repository's proto/")


def generate(protos: Path, out: Path) -> None:
    """protoc (from grpcio-tools) over every .proto under `protos` into `out`."""
    from grpc_tools import protoc

    files = sorted(str(p.relative_to(protos)) for p in protos.rglob("*.proto"))
    well_known = resources.files("grpc_tools") / "_proto"
    shutil.rmtree(out / "tether", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{protos}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *files,
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {files}")
    # The .pyi stubs are the types: PEP 561 marks the package as typed.
    (out / PACKAGE / "py.typed").write_text("")


class ProtoBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        project = Path(self.root)
        protos = proto_root(project)
        if version == "editable":
            generate(protos, project / "src")
            return
        self._scratch = Path(tempfile.mkdtemp(prefix="tether-proto-gen-"))
        generate(protos, self._scratch)
        build_data["force_include"][str(self._scratch / "tether")] = "tether"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
