"""Questions a step asks a person (select_option, provide_input): the interrupt card they raise,
and the check of a person's answer against it. An answer that does not fit is refused
(INVALID_ANSWER, 422) and changes nothing."""

from __future__ import annotations

from typing import Any

import jsonschema
from tether_common.errors import InvalidArgument
from tether_common.input_parsers import json_document
from tether_sdk import ProvideInput, SelectOption, ToolSchema

from tether_runtime.engine import cards

MAX_OPTIONS = 50
KINDS = ("select_option", "provide_input")
ASKED_DURING = "asked_during"
"""A card's key naming the tool that asks the question during its call (held_questions.py)."""


def as_call(question: SelectOption | ProvideInput) -> tuple[str, dict[str, Any]]:
    """How a question is kept in the checkpoint: a pending call named after its kind."""
    if isinstance(question, SelectOption):
        options = [
            {"value": o.value, "label": o.label or o.value, "description": o.description}
            for o in question.choices()
        ]
        return "select_option", {
            "prompt": question.prompt,
            "title": question.title,
            "options": options,
        }
    return "provide_input", {
        "prompt": question.prompt,
        "title": question.title,
        "schema": question.schema,
    }


def problem(kind: str, args: dict[str, Any]) -> str | None:
    """Why a question cannot be put to a person (told to the model instead), or None."""
    if kind == "select_option":
        values = [o.get("value") for o in args.get("options") or []]
        if not values or len(values) > MAX_OPTIONS:
            return f"a select_option needs 1-{MAX_OPTIONS} options"
        if len(set(values)) != len(values) or not all(isinstance(v, str) and v for v in values):
            return "a select_option's option values must be distinct, non-empty strings"
        return None
    schema = args.get("schema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "a provide_input schema must be a JSON schema of type object"
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as err:
        return f"a provide_input schema is not a valid JSON schema: {err.message}"
    return None


def payload(kind: str, args: dict[str, Any]) -> dict[str, Any]:
    """The card (cards.py: masked and cut like every card), with the options or the form."""
    out = cards.card(title=args.get("title"), details=args.get("prompt"), tool=kind)
    if kind == "select_option":
        out["options"] = [
            {k: cards.cut("option", o.get(k)) for k in ("value", "label", "description")}
            for o in args["options"]
        ]
    else:
        out["input_schema"] = args["schema"]
    return out


def answer(kind: str, card: dict[str, Any], user: str, text: str) -> dict[str, Any]:
    """A person's answer checked against the card; the result the model is given."""
    if kind == "select_option":
        values = [o["value"] for o in card.get("options") or []]
        if text not in values:
            raise InvalidArgument(f"choose one of: {', '.join(values)}", reason="INVALID_ANSWER")
        label = next(o.get("label") or text for o in card["options"] if o["value"] == text)
        data: dict[str, Any] = {"option": text}
        summary = f"{user} chose {label}"
    else:
        try:
            fill = json_document(text, "the answer") if text else None
        except InvalidArgument:  # not JSON, too deep, NaN, 5,000 digits: not an object either
            fill = None
        if not isinstance(fill, dict):
            raise InvalidArgument("the answer must be a JSON object", reason="INVALID_ANSWER")
        schema = card.get("input_schema") or {}
        validator = jsonschema.validators.validator_for(schema)(schema)
        errors = sorted(validator.iter_errors(fill), key=lambda e: list(e.absolute_path))
        if errors:
            where = ".".join(str(p) for p in errors[0].absolute_path) or "the answer"
            raise InvalidArgument(f"{where}: {errors[0].message}", reason="INVALID_ANSWER")
        data = {"fill": fill}
        summary = f"{user} answered"
    return {"ok": True, "summary": summary, "data": data, "facts": {}, "outcome": "answered"}


# What a provider model is offered besides the agent's tools, so a real model can ask a person
# too: calling one of these raises the same interrupt as a ScriptedModel's SelectOption /
# ProvideInput (the names are reserved: no agent tool may take them).
TOOL_SCHEMAS = (
    ToolSchema(
        name="select_option",
        description=(
            "Ask the user to pick one of a few options when the request is ambiguous (for "
            "example two matching instances). The run pauses until they answer; the answer "
            "comes back as this call's result, data.option."
        ),
        parameters={
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "description": "The question, for a person."},
                "title": {"type": "string"},
                "options": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_OPTIONS,
                    "items": {
                        "type": "object",
                        "properties": {
                            "value": {"type": "string"},
                            "label": {"type": "string"},
                            "description": {"type": "string"},
                        },
                        "required": ["value"],
                    },
                },
            },
            "required": ["prompt", "options"],
        },
    ),
    ToolSchema(
        name="provide_input",
        description=(
            "Ask the user for information you are missing, as a form: `schema` is a JSON "
            "schema of type object. The run pauses until they answer; the answer comes back as "
            "this call's result, data.fill."
        ),
        parameters={
            "type": "object",
            "properties": {
                "prompt": {"type": "string"},
                "title": {"type": "string"},
                "schema": {"type": "object"},
            },
            "required": ["prompt", "schema"],
        },
    ),
)
