"""Agent packages written into a folder outside the source tree, as a user's own would be: a
module (and optional migrations), loaded by TETHER_AGENTS or by a `tether.agents` entry point
declared in a minimal `*.dist-info` folder that importlib.metadata finds on PYTHONPATH."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path


def write_package(
    root: Path,
    package: str,
    source: str,
    *,
    migrations: dict[str, str] | None = None,
) -> Path:
    """`root/package/__init__.py` holding `source`, and `root/package/migrations/*.sql`."""
    folder = root / package
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text(textwrap.dedent(source))
    if migrations:
        (folder / "migrations").mkdir(exist_ok=True)
        for name, sql in migrations.items():
            (folder / "migrations" / name).write_text(textwrap.dedent(sql))
    return folder


def declare_entry_point(root: Path, dist: str, name: str, target: str) -> Path:
    """A distribution `dist` whose `tether.agents` entry point `name` is `target`
    ("module:attribute"), as `pip install` would leave it in site-packages."""
    info = root / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[tether.agents]\n{name} = {target}\n")
    return info


def env_with_path(env: dict[str, str], *folders: Path) -> dict[str, str]:
    """`env` with `folders` first on PYTHONPATH (the child process imports from there)."""
    parts = [str(f) for f in folders]
    old = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    if old:
        parts.append(old)
    return {**env, "PYTHONPATH": os.pathsep.join(parts)}
