"""(Kept for branches made before the move: run it on such a branch after merging main.) Move tether_runtime's flat modules into layer folders and rewrite every reference.
Run from the repo root; running it again (after a merge brought code with old names) rewrites only the old names."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

PKG = Path("services/runtime/src/tether_runtime")
# old dotted name under tether_runtime -> new dotted name
MOVES = {
    # api: the gRPC servicer and one module per API area
    "servicer": "api.servicer",
    "convert": "api.convert",
    "runs_api": "api.runs",
    "approvals_api": "api.approvals",
    "audit_api": "api.audit",
    "run_listing": "api.run_listing",
    "erasure": "api.erasure",
    "revoked_tokens": "api.revoked_tokens",
    # engine: executing runs
    "engine": "engine.process",
    "worker": "engine.worker",
    "run_loop": "engine.run_loop",
    "model_step": "engine.model_step",
    "tool_calls": "engine.tool_calls",
    "driven": "engine.driven",
    "checkpoint": "engine.checkpoint",
    "questions": "engine.questions",
    "resume": "engine.resume",
    "run_outcomes": "engine.run_outcomes",
    "concurrent_runs": "engine.concurrent_runs",
    "poison": "engine.poison",
    "agents": "engine.agents",
    "loaded_agent": "engine.loaded_agent",
    "model_choice": "engine.model_choice",
    "conformance": "engine.conformance",
    "write_call": "engine.write_call",
    "cards": "engine.cards",
    "tool_results": "engine.tool_results",
    "run_context": "engine.run_context",
    "admin": "api.admin",
    "agent.compaction": "engine.agent.compaction",
    "agent.context": "engine.agent.context",
    "agent.summaries": "engine.agent.summaries",
    "agent.tokens": "engine.agent.tokens",
    # policy: grants, the tool gate, approval policies
    "agent.gate": "policy.gate",
    "approvals": "policy.approvals",
    # streams: the write path, events and their fan-out
    "run_writer": "streams.run_writer",
    "event_sink": "streams.event_sink",
    "event_stream": "api.event_stream",
    # domain: the shapes every layer shares (events, views)
    "events": "domain.events",
    "views": "domain.views",
    "store.records": "domain.records",
    "bus": "streams.bus",
    "sharded_bus": "streams.sharded_bus",
    # store
    "outage": "store.outage",
}
# extra: names that become packages of their own, and files merged away
PACKAGES = {
    "api": "The gRPC API: the servicer (authenticate, translate, call the engine, map errors) and one module per API area.",
    "engine": "Executing runs: workers, the run loop, model steps, the tool-call machines, checkpoints, questions, resume, the driven-agent host.",
    "engine.agent": "The agent inside a run: its context, compaction, summaries and token counts.",
    "policy": None,  # policy.py becomes policy/__init__.py
    "domain": "The shapes every layer shares: run events (the one place the event schema is built), the rows the store reads and the views of runs, interrupts and agents.",
    "streams": "A run's events on their way out: the one write path of a run, the event-only sink, and their fan-out (Redis).",
}


def moved_file(dotted: str) -> Path:
    return PKG.joinpath(*dotted.split(".")).with_suffix(".py")


def git(*a: str) -> None:
    subprocess.run(["git", *a], check=True)


def move_files() -> None:
    for pkg, doc in PACKAGES.items():
        d = PKG.joinpath(*pkg.split("."))
        d.mkdir(parents=True, exist_ok=True)
        init = d / "__init__.py"
        if pkg == "policy":
            if (PKG / "policy.py").exists():
                git("mv", str(PKG / "policy.py"), str(init))
        elif not init.exists():
            init.write_text(f'"""{doc}"""\n')
            git("add", str(init))
    for old, new in MOVES.items():
        src, dst = moved_file(old), moved_file(new)
        if src.exists() and not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            git("mv", str(src), str(dst))
    agent = PKG / "agent"
    if agent.exists():
        rest = [p for p in agent.iterdir() if p.name not in ("__init__.py", "__pycache__")]
        if not rest:
            git("rm", "-q", str(agent / "__init__.py"))


# longest names first, so agent.gate wins over agent
OLD = sorted(MOVES, key=len, reverse=True)
DOTTED = re.compile(
    r"\btether_runtime\.(" + "|".join(re.escape(o) for o in OLD) + r")\b(?!\.py)(?!(?<=\.engine)\.)"
)
PATHS = re.compile(
    r"\btether_runtime/(" + "|".join(re.escape(o.replace(".", "/")) for o in OLD) + r")\.py\b"
)
FROM = re.compile(
    r"^(?P<ind>[ \t]*)from tether_runtime import (?:(?P<names>[^\n(]+)|\((?P<pnames>[^)]*)\))$",
    re.M,
)
FROM_AGENT = re.compile(
    r"^(?P<ind>[ \t]*)from tether_runtime\.agent import (?:(?P<names>[^\n(]+)|\((?P<pnames>[^)]*)\))$",
    re.M,
)


def _split_from(m: re.Match[str], base: str) -> str:
    ind = m.group("ind")
    groups: dict[str, list[str]] = {}
    raw = m.group("names") or re.sub(r"#[^\n]*", "", m.group("pnames"))
    for part in raw.replace("\n", ",").split(","):
        part = part.strip()
        if not part:
            continue
        name = part.split(" as ")[0].strip()
        key = f"{base}.{name}" if base else name
        new = MOVES.get(key)
        if new is None:
            parent, child = (base or ""), part
        else:
            parent, _, leaf = new.rpartition(".")
            alias = part.split(" as ")[1].strip() if " as " in part else name
            child = leaf if alias == leaf else f"{leaf} as {alias}"
        groups.setdefault(parent, []).append(child)
    lines = []
    for parent, names in groups.items():
        mod = "tether_runtime" + (f".{parent}" if parent else "")
        lines.append(f"{ind}from {mod} import {', '.join(names)}")
    return "\n".join(lines)


def rewrite(text: str) -> str:
    def dotted(m: re.Match[str]) -> str:
        # `from tether_runtime.engine import worker` is already the new package; the old module
        # `engine` held only the class Engine.
        if m.group(1) == "engine" and re.match(r" import \(?\s*(?!Engine\b)\w", text[m.end() :]):
            return m.group(0)
        return "tether_runtime." + MOVES[m.group(1)]

    text = DOTTED.sub(dotted, text)
    text = PATHS.sub(
        lambda m: "tether_runtime/" + MOVES[m.group(1)].replace(".", "/") + ".py", text
    )
    text = FROM.sub(lambda m: _split_from(m, ""), text)
    text = FROM_AGENT.sub(lambda m: _split_from(m, "agent"), text)
    return text


def main() -> None:
    move_files()
    files = subprocess.run(
        ["git", "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    exts = (
        ".py",
        ".md",
        ".toml",
        ".json",
        ".yaml",
        ".yml",
        ".cfg",
        ".ini",
        ".txt",
        ".sh",
        "Makefile",
        "Dockerfile",
        ".pyi",
    )
    for f in files:
        p = Path(f)
        if (
            not f.endswith(exts)
            or not p.is_file()
            or "/tether/runtime/v1/" in f
            or f.endswith("uv.lock")
        ):
            continue
        try:
            t = p.read_text()
        except UnicodeDecodeError:
            continue
        n = rewrite(t)
        if n != t:
            p.write_text(n)


if __name__ == "__main__":
    main()
