"""The report: a line for each rendered tree (the base, each overlay) saying whether it passed,
and its findings below it."""

from __future__ import annotations


def _status(failed: bool) -> str:
    return "FAILED" if failed else "ok"


def _with_findings(header: str, findings: list[str]) -> list[str]:
    return [header, *(f"  - {line}" for line in findings)]


def preamble(renderer: list[str], k8s_version: str) -> list[str]:
    return [f"renderer: {' '.join(renderer)}; schemas: Kubernetes {k8s_version} (strict)"]


def base_report(problems: list[str]) -> list[str]:
    header = f"[base] {len(problems)} dev settings or secrets: {_status(bool(problems))}"
    return _with_findings(header, problems)


def render_failure(overlay: str, error: Exception) -> list[str]:
    return [f"[{overlay}] RENDER FAILED", str(error)]


def overlay_report(overlay: str, objects: int, errors: list[str], problems: list[str]) -> list[str]:
    header = (
        f"[{overlay}] {objects} objects, {len(errors)} schema errors, "
        f"{len(problems)} contract problems: {_status(bool(errors or problems))}"
    )
    return _with_findings(header, errors + problems)
