"""The service images: multi-stage, pinned base, protobuf code generated in the builder (by
tether-proto's wheel build), non-root, no secrets baked in, `tether` as the entry point.
(Building needs a Docker engine, which this environment lacks; these tests check the
Dockerfile's text and that its inputs exist.)"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SERVICES = {"runtime": 50051, "gateway": 8080}
BASE = re.compile(r"^python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?$")


def instructions(service: str | None = None) -> list[tuple[str, str]]:
    """(INSTRUCTION, argument) pairs of the Dockerfile, continuation lines joined, comments
    dropped; with `service`, only the stages that image is built from (builder, base, target)."""
    text = (REPO / "Dockerfile").read_text()
    joined = re.sub(
        r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    )
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    if service is None:
        return out
    return [ins for stage in stages(service) for ins in stage]


def all_stages() -> dict[str, list[tuple[str, str]]]:
    """Stage name -> its instructions (FROM first)."""
    result: dict[str, list[tuple[str, str]]] = {}
    name = ""
    for ins in instructions():
        if ins[0] == "FROM":
            name = ins[1].split()[-1]
            result[name] = []
        if name:
            result[name].append(ins)
    return result


def stages(service: str) -> list[list[tuple[str, str]]]:
    """The stages one image is built from, in order: builder, base, the service's target."""
    by_name = all_stages()
    return [by_name["builder"], by_name["base"], by_name[service]]


def final(service: str) -> list[tuple[str, str]]:
    """What the image's last stage is made of: the shared base plus the target's own lines."""
    base, target = stages(service)[1:]
    return base + target[1:]


def arg_default(service: str, name: str) -> str:
    for word, rest in instructions():
        if word == "ARG" and rest.startswith(f"{name}="):
            return rest.split("=", 1)[1].strip('"')
    raise AssertionError(f"no ARG {name}")


@pytest.mark.parametrize("service", SERVICES)
def test_multi_stage_on_a_pinned_slim_base(service: str) -> None:
    builder, base_stage, target = stages(service)
    base = arg_default(service, "PYTHON_IMAGE")
    assert BASE.match(base), base
    # Builder and base on the same pinned image (the venv's interpreter path must exist).
    assert builder[0][1] == "${PYTHON_IMAGE} AS builder"
    assert base_stage[0][1] == "${PYTHON_IMAGE} AS base"
    assert target[0][1] == f"base AS {service}"


@pytest.mark.parametrize("service", SERVICES)
def test_builder_installs_from_lock_and_generates_protos(service: str) -> None:
    builder = " ".join(rest for _, rest in stages(service)[0])
    assert "uv sync --frozen --no-dev --no-install-workspace --package tether-cli" in builder
    assert "uv sync --frozen --no-dev --no-editable --package tether-cli" in builder
    # The generated code comes from tether-proto's wheel build (its hook runs grpc_tools.protoc
    # over proto/), checked importable before the image is done.
    copies = [rest for word, rest in stages(service)[0] if word == "COPY"]
    assert "proto proto" in copies
    assert "libs/proto/pyproject.toml libs/proto/pyproject.toml" in copies
    assert "libs/client/pyproject.toml libs/client/pyproject.toml" in copies
    # The CLI is an application at the top level (cli/), not a library under libs/.
    assert "cli/pyproject.toml cli/pyproject.toml" in copies
    assert "cli cli" in copies
    assert 'python -c "import tether.runtime.v1.runtime_service_pb2_grpc"' in builder
    assert re.search(r"uv==\d+\.\d+\.\d+", builder) or re.search(
        r"UV_VERSION=\d+\.\d+\.\d+", builder
    )


@pytest.mark.parametrize("service", SERVICES)
def test_final_stage_is_non_root_with_tether_entrypoint(service: str) -> None:
    final_stage = final(service)
    words = [w for w, _ in final_stage]
    user = [rest for w, rest in final_stage if w == "USER"]
    assert user and user[-1].split(":")[0] == "10001"
    assert words.index("USER") < words.index("ENTRYPOINT")
    [entry] = [rest for w, rest in final_stage if w == "ENTRYPOINT"]
    [cmd] = [rest for w, rest in final_stage if w == "CMD"]
    assert json.loads(entry) == ["tether"]
    assert json.loads(cmd) == [service]
    assert any(
        w == "COPY" and "--from=builder" in rest and "/app/.venv" in rest for w, rest in final_stage
    )
    assert not any(
        w == "RUN" and ("pip install" in rest or "uv " in rest) for w, rest in final_stage
    )
    assert f"EXPOSE {SERVICES[service]}" in [f"{w} {r}" for w, r in final_stage]


@pytest.mark.parametrize("service", SERVICES)
def test_no_secrets_baked_in(service: str) -> None:
    for word, rest in instructions(service):
        if word in ("ENV", "ARG", "LABEL"):
            assert not re.search(
                r"DATABASE_URL|REDIS_URL|JWT|SECRET|PASSWORD|TOKEN|API_KEY", rest, re.I
            ), rest
        if word == "COPY":
            assert ".env" not in rest


def _ignored(path: str, patterns: list[str]) -> bool:
    hit = False
    for pat in patterns:
        neg = pat.startswith("!")
        pat = pat.lstrip("!")
        if (
            fnmatch.fnmatch(path, pat)
            or fnmatch.fnmatch(path, pat.replace("**/", ""))
            or path.startswith(pat + "/")
        ):
            hit = not neg
    return hit


def _dockerignore() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def test_dockerignore_keeps_state_and_secrets_out() -> None:
    patterns = _dockerignore()
    for path in (
        ".git",
        ".venv",
        "node_modules",
        ".env",
        ".env.local",
        "libs/proto/src/tether",
        ".tether",
    ):
        assert _ignored(path, patterns), path


@pytest.mark.parametrize("service", SERVICES)
def test_copied_inputs_exist_and_are_not_ignored(service: str) -> None:
    patterns = _dockerignore()
    for word, rest in instructions(service):
        if word != "COPY" or "--from=" in rest:
            continue
        args = [a for a in shlex.split(rest) if not a.startswith("--")]
        for src in args[:-1]:
            assert (REPO / src).exists(), src
            assert not _ignored(src, patterns), src
