"""Grammar-constrained tool calls for the offline model.

The offline model (llm/local.py) runs in llama-cpp-python's OpenAI-compatible server. This
module is loaded there by file path (it imports only the standard library and llama_cpp,
never the rest of Klaw) and registers the chat format `klaw-tools`. When a request offers
tools and the last message is the user's, the answer is generated under a GBNF grammar
built from the offered tools' JSON schemas (llama.cpp's own converter): a JSON object
`{"name": <one of the offered names>, "arguments": <that tool's schema>}`, or a call of
the pseudo-tool `reply` whose text is the answer when no tool fits. So every call the model
emits is valid JSON for a real tool; which tool (or `reply`) is still the model's choice.
After a tool result, and without tools, the model answers in free text.

The prompt is the model's own chat template (the GGUF's `tokenizer.chat_template`, ChatML
when it has none) with one line per tool (name and the first sentence of its
description): the schemas constrain the decoding, so they need not fill a small context.
The answer goes back in the OpenAI shape (`tool_calls`, `finish_reason: "tool_calls"`),
streamed as chunks when asked, so Klaw's client and tool loop take it like any other.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

__all__ = [
    "HANDLER_NAME",
    "call_grammar",
    "call_schema",
    "parse_call",
    "register",
    "tools_prompt",
]

HANDLER_NAME = "klaw-tools"
_MAX_LENGTH_KEPT = 64
# The answer when no tool fits: a call of this pseudo-tool, its text shown as the reply.
# A tiny model left free to start with text or "{" almost never starts a call; made to
# pick a name, it picks a tool for most requests that need one (docs/providers.md).
REPLY = "reply"
_REPLY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": REPLY,
        "description": "Answer in text when no tool fits.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string", "minLength": 1}},
            "required": ["text"],
        },
    },
}
_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool.get("function", tool)
    return fn if isinstance(fn, dict) else {}


def _bounded(schema: Any) -> Any:
    """`schema` without string length caps above `_MAX_LENGTH_KEPT` (the converter spells
    a cap of N as N nested optionals: 20,000 would make a grammar of megabytes; the tool's
    own check still refuses a value too long), with descriptions and titles left out."""
    if isinstance(schema, list):
        return [_bounded(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("description", "title", "examples", "default"):
            continue
        if key == "maxLength" and isinstance(value, int) and value > _MAX_LENGTH_KEPT:
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _bounded(sub) for name, sub in value.items()}
        else:
            out[key] = _bounded(value)
    return out


def _arguments_schema(parameters: Any) -> dict[str, Any]:
    """The tool's parameters, closed: a small model would otherwise invent extra keys."""
    schema = _bounded(parameters) if isinstance(parameters, dict) else {}
    schema.setdefault("type", "object")
    if schema.get("type") == "object":
        schema.setdefault("properties", {})
        schema.setdefault("additionalProperties", False)
    return schema


def call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """A JSON schema that matches exactly a call of one of `tools` (OpenAI tool format)."""
    alternatives = []
    for tool in tools:
        fn = _function(tool)
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            continue
        alternatives.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": name},
                    "arguments": _arguments_schema(fn.get("parameters")),
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    if not alternatives:
        raise ValueError("no tool with a name to call")
    return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}


def call_grammar(tools: list[dict[str, Any]], *, allow_text: bool = True) -> str:
    """GBNF for a call of one of `tools`, or (allow_text) of `reply` with a text answer."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    offered = [*tools, _REPLY_TOOL] if allow_text else tools
    return str(json_schema_to_gbnf(json.dumps(call_schema(offered))))


def parse_call(text: str) -> tuple[str, dict[str, Any]] | None:
    """(name, arguments) when `text` is a call object, else None (a text answer; `reply`
    is one too: see `reply_text`)."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    name, arguments = value.get("name"), value.get("arguments", {})
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return None
    return name, arguments


def _first_sentence(text: str, limit: int = 120) -> str:
    line = " ".join(text.split())
    for end in (". ", "; "):
        cut = line.find(end)
        if cut > 0:
            line = line[: cut + 1]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def tools_prompt(tools: list[dict[str, Any]]) -> str:
    """The system text that names the tools and the call format."""
    lines = [
        'Answer with only a JSON object {"name": "<tool>", "arguments": {...}} that calls '
        f'the tool the request needs; when none fits, call "{REPLY}" with your answer '
        "as its text. Tools:"
    ]
    for tool in [*tools, _REPLY_TOOL]:
        fn = _function(tool)
        if isinstance(fn.get("name"), str):
            lines.append(f"- {fn['name']}: {_first_sentence(str(fn.get('description', '')))}")
    return "\n".join(lines)


def _messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[Any]:
    """Messages as plain role/content pairs that any chat template takes."""
    out: list[dict[str, str]] = []
    system = [tools_prompt(tools)] if tools else []
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        text = content if isinstance(content, str) else ""
        if role == "system":
            system.insert(0, text)
            continue
        if role == "assistant" and m.get("tool_calls"):
            calls = [c.get("function", {}) for c in m["tool_calls"] if isinstance(c, dict)]
            text = "\n".join(
                json.dumps({"name": c.get("name"), "arguments": _loads(c.get("arguments"))})
                for c in calls
            )
        elif role == "tool":
            role, text = "user", f"Tool result:\n{text}"
        if role not in ("user", "assistant"):
            role = "user"
        if out and out[-1]["role"] == role:  # templates that need turns to alternate
            out[-1]["content"] += "\n\n" + text
        else:
            out.append({"role": str(role), "content": text})
    if system:
        if out and out[0]["role"] == "user":
            out[0]["content"] = "\n\n".join(system) + "\n\n" + out[0]["content"]
        else:
            out.insert(0, {"role": "user", "content": "\n\n".join(system)})
    return out


def _loads(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return {}
    return arguments


def _prompt(llama: Any, messages: list[Any]) -> tuple[str, list[str]]:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    metadata = getattr(llama, "metadata", {}) or {}
    template = metadata.get("tokenizer.chat_template") or _CHATML

    def token(key: str) -> str:
        tid = metadata.get(key)
        if tid is None:
            return ""
        return str(llama.detokenize([int(tid)], special=True).decode("utf-8", "replace"))

    eos = token("tokenizer.ggml.eos_token_id")
    formatter = Jinja2ChatFormatter(
        template=template, eos_token=eos, bos_token=token("tokenizer.ggml.bos_token_id")
    )
    formatted = formatter(messages=messages)
    stops = [s for s in ("<|im_end|>", "<end_of_turn>", eos) if s]
    if isinstance(formatted.stop, str):
        stops.append(formatted.stop)
    elif formatted.stop:
        stops.extend(formatted.stop)
    return formatted.prompt, list(dict.fromkeys(stops))


def generate(
    llama: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    *,
    constrained: bool = True,
    max_tokens: int | None = None,
    temperature: float = 0.0,
    seed: int | None = None,
) -> tuple[str, dict[str, int]]:
    """The model's raw answer (a call's JSON or text) and its token usage."""
    from llama_cpp.llama_grammar import LlamaGrammar

    wants_call = bool(tools) and bool(messages) and messages[-1].get("role") == "user"
    prompt, stops = _prompt(llama, _messages(messages, tools if wants_call else None))
    grammar = None
    if wants_call and constrained and tools:
        grammar = LlamaGrammar.from_string(call_grammar(tools), verbose=False)
    completion = llama.create_completion(
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=temperature,
        stop=stops,
        grammar=grammar,
        seed=seed,
        stream=False,
    )
    text = str(completion["choices"][0]["text"])
    usage = dict(completion.get("usage") or {})
    return text, {k: int(v) for k, v in usage.items()}


def reply_text(text: str) -> str:
    """What the user sees of an answer: the text of a `reply` call, else the answer."""
    call = parse_call(text)
    if call is not None and call[0] == REPLY and isinstance(call[1].get("text"), str):
        return str(call[1]["text"])
    return text.strip()


def _response(text: str, usage: dict[str, int], model: str, stream: bool) -> Any:
    call = parse_call(text)
    if call is not None and call[0] == REPLY:
        call = None
    created = int(time.time())
    rid = "chatcmpl-" + uuid.uuid4().hex[:16]
    if call is not None:
        name, arguments = call
        tool_call = {
            "id": "call_" + uuid.uuid4().hex[:12],
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
        }
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": reply_text(text)}, "stop"
    if not stream:
        return {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            ],
            "usage": usage,
        }
    return _chunks(rid, created, model, message, finish, usage)


def _chunks(
    rid: str, created: int, model: str, message: dict[str, Any], finish: str, usage: Any
) -> Iterator[dict[str, Any]]:
    head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}
    delta = dict(message)
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": 0, **c} for c in delta["tool_calls"]]
    yield {
        **head,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}],
    }
    yield {
        **head,
        "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}],
    }
    yield {**head, "choices": [], "usage": usage}


def _handler(
    *,
    llama: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    temperature: float = 0.2,
    stream: bool = False,
    seed: int | None = None,
    max_tokens: int | None = None,
    model: str | None = None,
    **_: Any,
) -> Any:
    text, usage = generate(
        llama, messages, tools, max_tokens=max_tokens, temperature=temperature, seed=seed
    )
    return _response(text, usage, model or "local", stream)


def register() -> None:
    """Make `--chat_format klaw-tools` known to llama-cpp-python (in the server process)."""
    from llama_cpp import llama_chat_format

    llama_chat_format.register_chat_completion_handler(HANDLER_NAME)(_handler)
