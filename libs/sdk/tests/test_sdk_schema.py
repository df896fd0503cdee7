"""A tool's JSON schema comes from its Python types; the model's arguments are validated against
it, strictly, and an invalid call never reaches the function."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

import pytest
from pydantic import Field
from sdk_testing import make_ctx
from tether_sdk import InvalidArguments, ToolContext, ToolResult, tool

calls: list[dict[str, Any]] = []


@tool(effect="read")
async def lookup(
    ctx: ToolContext,
    service: Annotated[str, "service name, e.g. payment-api"],
    count: Annotated[int, Field(ge=1, le=10), "how many"] = 3,
    env: Literal["prod", "staging"] = "prod",
    status: Optional[str] = None,  # noqa: UP045 - the spelling users write must work too
    tags: list[str] | None = None,
) -> ToolResult:
    """Look a service up.

    The second paragraph is for people reading the code, not for the model."""
    calls.append({"service": service, "count": count, "env": env, "status": status, "tags": tags})
    return ToolResult("found")


def test_the_schema_follows_the_types() -> None:
    s = lookup.parameters
    assert s["type"] == "object"
    assert s["additionalProperties"] is False
    assert s["required"] == ["service"]
    props = s["properties"]
    assert list(props) == ["service", "count", "env", "status", "tags"]  # ctx is not a parameter
    assert props["service"] == {"type": "string", "description": "service name, e.g. payment-api"}
    assert props["count"] == {
        "type": "integer",
        "default": 3,
        "minimum": 1,
        "maximum": 10,
        "description": "how many",
    }
    assert props["env"] == {"type": "string", "enum": ["prod", "staging"], "default": "prod"}
    assert props["status"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert props["tags"]["default"] is None
    # No pydantic noise: titles would only repeat the names.
    assert "title" not in s and all("title" not in p for p in props.values())


def test_the_description_is_the_docstrings_first_paragraph() -> None:
    assert lookup.description == "Look a service up."
    assert lookup.schema().name == "lookup"
    assert lookup.schema().parameters == lookup.parameters


def test_valid_arguments_are_normalized_with_defaults() -> None:
    assert lookup.validate({"service": "payment-api"}) == {
        "service": "payment-api",
        "count": 3,
        "env": "prod",
        "status": None,
        "tags": None,
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"service": 5}, "service: Input should be a valid string"),
        ({}, "service: required, missing"),
        (
            {"service": "a", "colour": "red"},
            "colour: not a parameter of this tool (its parameters: service, count, env, status, "
            "tags)",
        ),
        ({"service": "a", "count": 11}, "count: Input should be less than or equal to 10"),
        ({"service": "a", "count": 0}, "count: Input should be greater than or equal to 1"),
        ({"service": "a", "env": "dev"}, "env: Input should be 'prod' or 'staging'"),
        ({"service": "a", "tags": ["x", 1]}, "tags.1: Input should be a valid string"),
        # Strict, as JSON Schema is: a string or a boolean is not an integer.
        ({"service": "a", "count": "3"}, "count: Input should be a valid integer"),
        ({"service": "a", "count": True}, "count: Input should be a valid integer"),
    ],
)
async def test_invalid_arguments_say_what_is_wrong_and_never_call_the_tool(
    args: dict[str, Any], message: str
) -> None:
    calls.clear()
    with pytest.raises(InvalidArguments) as info:
        lookup.validate(args)
    assert info.value.message == message
    with pytest.raises(InvalidArguments):
        await lookup.invoke(make_ctx(), args)
    assert calls == []


def test_every_problem_is_listed_up_to_five() -> None:
    with pytest.raises(InvalidArguments) as info:
        lookup.validate({"count": "x", "env": 1, "a": 1, "b": 2, "c": 3, "d": 4})
    msg = info.value.message
    assert msg.startswith("service: required, missing; count: Input should be a valid integer")
    assert msg.endswith("and 2 more")


@pytest.mark.parametrize("args", [["service"], "service=a", None])
def test_arguments_must_be_an_object(args: Any) -> None:
    with pytest.raises(InvalidArguments, match="arguments must be a JSON object"):
        lookup.validate(args)


def test_arguments_must_be_json() -> None:
    with pytest.raises(InvalidArguments, match="arguments must be JSON values"):
        lookup.validate({"service": object()})


async def test_a_valid_call_reaches_the_function_with_typed_values() -> None:
    calls.clear()
    result = await lookup.invoke(make_ctx(), {"service": "payment-api", "count": 2, "tags": ["a"]})
    assert result == ToolResult("found")
    assert calls == [
        {"service": "payment-api", "count": 2, "env": "prod", "status": None, "tags": ["a"]}
    ]


async def test_parameters_may_have_names_pydantic_uses_itself() -> None:
    @tool(effect="read")
    async def odd(schema: str, json: int, model_config: str = "x", copy: bool = False) -> str:
        """Names that BaseModel also defines."""
        return f"{schema}-{json}-{model_config}-{copy}"

    assert odd.problems() == []
    assert list(odd.parameters["properties"]) == ["schema", "json", "model_config", "copy"]
    assert odd.validate({"schema": "s", "json": 1}) == {
        "schema": "s",
        "json": 1,
        "model_config": "x",
        "copy": False,
    }
    result = await odd.invoke(make_ctx(), {"schema": "s", "json": 1, "model_config": "m"})
    assert result.summary == "s-1-m-False"


async def test_return_values_become_results() -> None:
    @tool(effect="read")
    async def text() -> str:
        """Text."""
        return "plain"

    @tool(effect="read")
    async def mapping() -> dict[str, int]:
        """A mapping."""
        return {"n": 1}

    @tool(effect="read")
    async def nothing() -> None:
        """Nothing."""

    assert (await text.invoke(make_ctx(), {})).summary == "plain"
    assert (await mapping.invoke(make_ctx(), {})).data == {"n": 1}
    assert (await nothing.invoke(make_ctx(), {})).summary == "nothing done"


def test_a_parameter_without_a_type_is_a_definition_problem() -> None:
    @tool(effect="read")
    async def untyped(ctx: ToolContext, service) -> str:  # type: ignore[no-untyped-def]
        """Untyped."""
        return ""

    (problem,) = untyped.problems()
    assert "parameter 'service' has no type annotation" in problem
    with pytest.raises(InvalidArguments, match="cannot be called"):
        untyped.validate({"service": "a"})


def test_varargs_cannot_be_described() -> None:
    @tool(effect="read")
    async def loose(*args: str, **kw: str) -> str:
        """Loose."""
        return ""

    problems = loose.problems()
    assert len(problems) == 2 and all("*args/**kwargs" in p for p in problems)
