"""An interrupt's answer, from the command line's flags (for scripts) or asked line by line:
confirm_action -> approve / reject; select_option -> an option by number or value;
provide_input -> each field of the JSON schema, type-checked and asked again when it does not
fit (or one JSON object on a line); outcome_unknown -> retry / mark done / abandon.
Each answer becomes the body of POST /v1/runs/{id}/resume, with a fresh idempotency key."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Event = dict[str, Any]
# Reads one line after showing a question; None at the end of the input (nobody will answer).
Ask = Callable[[str], str | None]
Say = Callable[[str], None]


class NoAnswer(Exception):
    """The input ended before the question was answered: the run keeps waiting."""


@dataclass(frozen=True)
class Preset:
    """Answers given up front (flags): None where the question is to be asked."""

    confirm: str | None = None  # "approve" | "reject"
    option: str | None = None  # an option's value, or its 1-based number
    fill: dict[str, Any] | None = None
    unknown: str | None = None  # "retry" | "mark_done" | "abandon"


YES = {"y", "yes", "approve", "a", "ok"}
NO = {"n", "no", "reject", "r"}
UNKNOWN_CHOICES = {
    "r": "retry",
    "retry": "retry",
    "d": "mark_done",
    "done": "mark_done",
    "mark_done": "mark_done",
    "a": "abandon",
    "abandon": "abandon",
}


def body(ev: Event, decision: str, **content: Any) -> dict[str, Any]:
    return {
        "interruptId": ev["interruptId"],
        "decision": decision,
        "idempotencyKey": f"chat-{uuid.uuid4().hex}",
        **content,
    }


def answer(ev: Event, preset: Preset, ask: Ask, say: Say) -> dict[str, Any]:
    """The resume body for interrupt event `ev`; NoAnswer when the input ends first."""
    kind = ev.get("kind")
    payload: dict[str, Any] = ev.get("payload") or {}
    if kind == "confirm_action":
        return body(ev, preset.confirm or _confirm(ask, say))
    if kind == "select_option":
        options = payload.get("options") or []
        if preset.option is not None:
            value = pick(options, preset.option)
            if value is None:
                raise ValueError(f"--option {preset.option!r} is none of the options offered")
            return body(ev, "respond", option=value)
        return body(ev, "respond", option=_select(options, ask, say))
    if kind == "provide_input":
        if preset.fill is not None:
            return body(ev, "respond", fill=preset.fill)
        return body(ev, "respond", fill=ask_fill(payload.get("inputSchema") or {}, ask, say))
    if kind == "outcome_unknown":
        return body(ev, preset.unknown or _unknown(ask, say))
    raise ValueError(f"an interrupt of a kind this client does not know: {kind!r}")


def _required(ask: Ask, question: str) -> str:
    got = ask(question)
    if got is None:
        raise NoAnswer
    return got.strip()


def _confirm(ask: Ask, say: Say) -> str:
    while True:
        got = _required(ask, "approve? [y/n] ").lower()
        if got in YES:
            return "approve"
        if got in NO:
            return "reject"
        say("answer y (approve) or n (reject)")


def pick(options: list[dict[str, Any]], given: str) -> str | None:
    """An option's value from its 1-based number or its value; None if it is neither."""
    values = [str(o.get("value")) for o in options]
    if given in values:
        return given
    if given.isdigit() and 1 <= int(given) <= len(values):
        return values[int(given) - 1]
    return None


def _select(options: list[dict[str, Any]], ask: Ask, say: Say) -> str:
    while True:
        got = _required(ask, f"pick one [1-{len(options)}] ")
        value = pick(options, got)
        if value is not None:
            return value
        say(f"give a number from 1 to {len(options)} (or an option's value)")


def _unknown(ask: Ask, say: Say) -> str:
    while True:
        got = _required(ask, "retry, mark done or abandon? [r/d/a] ").lower()
        if got in UNKNOWN_CHOICES:
            return UNKNOWN_CHOICES[got]
        say("answer r (try it again), d (it was done) or a (give it up)")


def ask_fill(schema: dict[str, Any], ask: Ask, say: Say) -> dict[str, Any]:
    """Each property of an object schema, asked in turn (a line starting with `{` is taken as
    the whole answer, unchecked here: the gateway checks it)."""
    props: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    fill: dict[str, Any] = {}
    for name, spec in props.items():
        while True:
            got = _required(ask, _field_question(name, spec, name in required))
            if got.startswith("{") and not fill:
                try:
                    whole = json.loads(got)
                except ValueError as err:
                    say(f"not valid JSON: {err}")
                    continue
                if isinstance(whole, dict):
                    return whole
                say("a JSON answer must be an object")
                continue
            if got == "" and name not in required:
                break
            try:
                fill[name] = coerce(got, spec)
                break
            except ValueError as err:
                say(str(err))
    return fill


def _field_question(name: str, spec: dict[str, Any], required: bool) -> str:
    kind = spec.get("type", "string")
    hints = [str(kind)]
    if "enum" in spec:
        hints.append("one of " + ", ".join(str(v) for v in spec["enum"]))
    if "minimum" in spec and "maximum" in spec:
        hints.append(f"{spec['minimum']}-{spec['maximum']}")
    elif "minimum" in spec:
        hints.append(f">= {spec['minimum']}")
    elif "maximum" in spec:
        hints.append(f"<= {spec['maximum']}")
    hints.append("required" if required else "optional, empty to skip")
    desc = f" {spec['description']}" if spec.get("description") else ""
    return f"{name} ({', '.join(hints)}){desc}: "


def coerce(text: str, spec: dict[str, Any]) -> Any:
    """`text` as the JSON value `spec` describes; ValueError saying what is wrong."""
    kind = spec.get("type", "string")
    value: Any
    if kind == "integer":
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a whole number") from None
    elif kind == "number":
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number") from None
    elif kind == "boolean":
        low = text.lower()
        if low not in ("y", "yes", "true", "n", "no", "false"):
            raise ValueError("answer yes or no")
        value = low in ("y", "yes", "true")
    elif kind == "string":
        value = text
        if "minLength" in spec and len(text) < int(spec["minLength"]):
            raise ValueError(f"at least {spec['minLength']} characters")
        if "maxLength" in spec and len(text) > int(spec["maxLength"]):
            raise ValueError(f"at most {spec['maxLength']} characters")
    else:
        try:
            value = json.loads(text)
        except ValueError:
            raise ValueError(f"give JSON for a {kind}") from None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in spec and value < spec["minimum"]:
            raise ValueError(f"at least {spec['minimum']}")
        if "maximum" in spec and value > spec["maximum"]:
            raise ValueError(f"at most {spec['maximum']}")
    if "enum" in spec and value not in spec["enum"]:
        raise ValueError("one of " + ", ".join(str(v) for v in spec["enum"]))
    return value
