"""ToolRegistry: every failure becomes an error result the model can read."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import pytest

from klaw.errors import InvalidInput
from klaw.llm.types import ToolCall, ToolSchema
from klaw.tools import Tool, ToolError, ToolRegistry
from klaw.tools.schema import validate


class Echo(Tool):
    name = "echo"
    description = "Echo the text."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "times": {"type": "integer", "minimum": 1, "maximum": 3},
            "mode": {"type": "string", "enum": ["plain", "loud"]},
        },
        "required": ["text"],
        "additionalProperties": False,
    }

    async def run(self, args: dict[str, Any]) -> str:
        text = args["text"].upper() if args.get("mode") == "loud" else args["text"]
        return text * int(args.get("times", 1))


class Boom(Tool):
    name = "boom"
    description = "Fails."

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def run(self, args: dict[str, Any]) -> str:
        raise self.exc


@pytest.fixture
def reg() -> ToolRegistry:
    return ToolRegistry([Echo()], max_result_chars=300)


async def test_schemas_are_llm_tool_schemas(reg: ToolRegistry) -> None:
    (schema,) = reg.schemas()
    assert isinstance(schema, ToolSchema)
    assert schema.name == "echo" and schema.parameters["required"] == ["text"]


async def test_dispatch_runs_the_tool(reg: ToolRegistry) -> None:
    res = await reg.dispatch("echo", {"text": "hi", "times": 2, "mode": "loud"})
    assert res.content == "HIHI" and not res.is_error


async def test_unknown_tool_names_the_known_ones(reg: ToolRegistry) -> None:
    res = await reg.dispatch("rm_rf", {})
    assert res.is_error and "rm_rf" in res.content and "echo" in res.content


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({}, "missing required argument 'text'"),
        ({"text": 5}, "text must be string, got integer"),
        ({"text": "a", "times": "2"}, "times must be integer, got string"),
        ({"text": "a", "times": True}, "times must be integer, got boolean"),
        ({"text": "a", "times": 1.5}, "times must be integer, got number"),
        ({"text": "a", "times": 9}, "times must be at most 3"),
        ({"text": "a", "mode": "quiet"}, "mode must be one of 'plain', 'loud'"),
        ({"text": "a", "colour": "red"}, "unknown argument(s) colour"),
        ("text", "arguments must be object, got string"),
        ([1], "arguments must be object, got array"),
        ({"text": None}, "text must be string, got null"),
    ],
)
async def test_bad_arguments_say_what_is_wrong(reg: ToolRegistry, args: Any, expected: str) -> None:
    res = await reg.dispatch("echo", args)
    assert res.is_error
    assert res.content.startswith("Invalid arguments for echo:")
    assert expected in res.content


async def test_null_optional_arguments_count_as_absent(reg: ToolRegistry) -> None:
    res = await reg.dispatch("echo", {"text": "x", "times": None, "mode": None})
    assert res.content == "x" and not res.is_error
    res = await reg.dispatch("echo", None)
    assert res.is_error and "missing required argument 'text'" in res.content


async def test_integral_float_is_an_integer(reg: ToolRegistry) -> None:
    assert (await reg.dispatch("echo", {"text": "a", "times": 2.0})).content == "aa"


async def test_tool_error_message_is_returned() -> None:
    reg = ToolRegistry([Boom(ToolError("try again with a smaller file"))])
    res = await reg.dispatch("boom", {})
    assert res.is_error and res.content == "try again with a smaller file"


async def test_klaw_error_message_is_returned() -> None:
    reg = ToolRegistry([Boom(InvalidInput("query must not be empty"))])
    res = await reg.dispatch("boom", {})
    assert res.is_error and "query must not be empty" in res.content


async def test_unexpected_exception_is_short_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    reg = ToolRegistry([Boom(RuntimeError("secret internals /home/x/.ssh"))])
    with caplog.at_level(logging.ERROR, logger="klaw.tools"):
        res = await reg.dispatch("boom", {})
    assert res.is_error
    assert "RuntimeError" in res.content and "Traceback" not in res.content
    assert ".ssh" not in res.content
    assert "Traceback" in caplog.text  # the details go to the log


async def test_long_results_are_truncated_with_a_note(reg: ToolRegistry) -> None:
    res = await reg.dispatch("echo", {"text": "x" * 1000})
    assert len(res.content) <= 300 and not res.is_error
    assert res.content.endswith("[truncated: showing 300 of 1000 characters]")


async def test_malformed_tool_call_is_an_error_result(reg: ToolRegistry) -> None:
    call = ToolCall("c1", "echo", error="invalid JSON", raw_arguments='{"text": ')
    res = await reg.call(call)
    assert res.is_error and "not a JSON object" in res.content
    ok = await reg.call(ToolCall("c2", "echo", {"text": "y"}))
    assert ok.content == "y"


def test_duplicate_names_are_refused(reg: ToolRegistry) -> None:
    with pytest.raises(ValueError, match="already registered"):
        reg.register(Echo())
    assert reg.names() == ["echo"] and "echo" in reg and len(reg) == 1


def test_validator_nested_and_arrays() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}},
            "opt": {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]},
            "either": {"type": ["string", "null"], "minLength": 2},
        },
    }
    assert validate({"tags": ["ab"], "opt": {"n": 1.5}, "either": None}, schema) == []
    problems = validate({"tags": ["abcd", 1], "opt": {}, "either": "a"}, schema)
    assert "tags[0] must have at most 3 characters" in problems
    assert "tags[1] must be string, got integer" in problems
    assert "missing required argument opt.'n'" in problems
    assert "either must have at least 2 characters" in problems
