"""Rendering an overlay with a real kustomize (the standalone binary, else `kubectl kustomize`,
which embeds kustomize v5) and loading the objects it prints."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from tether_k8s.manifests import Doc

K8S_DIR = Path(__file__).resolve().parents[1]
OVERLAYS_DIR = K8S_DIR / "overlays"


class RenderError(RuntimeError):
    pass


def renderer() -> list[str]:
    """The command that renders a kustomization directory (appended as the last argument)."""
    if exe := shutil.which("kustomize"):
        return [exe, "build"]
    if exe := shutil.which("kubectl"):
        return [exe, "kustomize"]
    raise RenderError(
        "no kustomize renderer: install kubectl (Debian/Ubuntu package `kubectl`, which embeds "
        "kustomize v5) or the standalone `kustomize` binary"
    )


def overlays() -> list[Path]:
    return sorted(p for p in OVERLAYS_DIR.iterdir() if (p / "kustomization.yaml").is_file())


def render_text(path: Path) -> str:
    cmd = [*renderer(), str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RenderError(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()}")
    return proc.stdout


def load(text: str) -> list[Doc]:
    """The objects of a multi-document YAML stream (empty documents dropped)."""
    return [d for d in yaml.safe_load_all(text) if d]


def render(path: Path) -> list[Doc]:
    docs = load(render_text(path))
    if not docs:
        raise RenderError(f"{path} rendered no objects")
    return docs
