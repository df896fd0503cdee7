"""Graphs loaded without a wrapper: a `langgraph.json` read as LangGraph reads it, each graph a
GraphAgent named after its key (`TETHER_AGENTS=./langgraph.json`).

    {"graphs": {"agent": "./src/agent/graph.py:graph", "ops": "ops.graphs:hitl"},
     "env": ".env", "dependencies": ["."]}

- `graphs`: name -> "path/to/file.py:attribute" (relative to the json's folder) or
  "package.module:attribute" (or `{"path": ..., "description": ...}`); the attribute a compiled
  graph, a StateGraph, or a Tether agent (a GraphAgent). A graph factory (a function taking the
  config) is refused: Tether compiles a graph once per process.
- `env`: a file of KEY=VALUE lines (relative to the json's folder) or a dict, for the graphs'
  own code; a variable the process already has wins. Tether's settings were read before.
- `dependencies`: local paths ("." or "./pkg") go on sys.path; package names must be installed
  already (Tether installs nothing)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from tether_sdk import Agent

from tether_langgraph._agent import graph_agent, is_graph


class GraphConfigError(ValueError):
    """A langgraph.json Tether cannot load; the message says which graph and why."""


def agents_from_config(path: str) -> list[tuple[Agent, str]]:
    """Every graph of the langgraph.json at `path`, each with where it came from."""
    file = Path(path).expanduser().resolve()
    try:
        config = json.loads(file.read_text())
    except (OSError, ValueError) as err:
        raise GraphConfigError(f"cannot read {path}: {err}") from err
    if not isinstance(config, dict) or not isinstance(config.get("graphs"), dict):
        raise GraphConfigError(f"{path}: no `graphs` object")
    base = file.parent
    for dep in config.get("dependencies") or []:
        if isinstance(dep, str) and dep.startswith((".", "/")):
            where = str((base / dep).resolve())
            if where not in sys.path:
                sys.path.insert(0, where)
    _load_env(config.get("env"), base, path)
    out: list[tuple[Agent, str]] = []
    for name, spec in config["graphs"].items():
        target = spec.get("path") if isinstance(spec, dict) else spec
        if not isinstance(target, str) or ":" not in target:
            raise GraphConfigError(
                f"{path}: graph {name!r} must be 'file.py:attr' or 'module:attr'"
            )
        source = f"{path} graphs.{name} = {target}"
        obj = _load(target, base, name, source)
        if isinstance(obj, Agent):
            out.append((obj, source))
        elif is_graph(obj):
            out.append((graph_agent(obj, str(name), target), source))
        else:
            kind = "a graph factory" if callable(obj) else f"a {type(obj).__name__}"
            raise GraphConfigError(
                f"{source} is {kind}, not a compiled graph, a StateGraph or a Tether agent"
            )
    return out


def _load(target: str, base: Path, name: str, source: str) -> object:
    where, _, attr = target.rpartition(":")
    try:
        if where.endswith(".py") or "/" in where:
            file = (base / where).resolve()
            spec = importlib.util.spec_from_file_location(f"tether_langgraph_graphs.{name}", file)
            if spec is None or spec.loader is None:
                raise GraphConfigError(f"{source}: no such file {file}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except GraphConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - any import failure is reported with its cause
        raise GraphConfigError(f"{source}: cannot import: {err}") from err
    obj: object = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise GraphConfigError(f"{source}: no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _load_env(env: Any, base: Path, path: str) -> None:
    if env is None:
        return
    if isinstance(env, dict):
        values = {str(k): str(v) for k, v in env.items()}
    elif isinstance(env, str):
        try:
            values = _dotenv((base / env).read_text())
        except OSError as err:
            raise GraphConfigError(f"{path}: cannot read env file {env!r}: {err}") from err
    else:
        raise GraphConfigError(f"{path}: `env` must be a file path or an object")
    for key, value in values.items():
        os.environ.setdefault(key, value)


def _dotenv(text: str) -> dict[str, str]:
    """KEY=VALUE lines (`export ` allowed, `#` comments, values optionally quoted)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key.strip()] = value
    return out
