"""What the real APIs check before they answer, for the fake server (`FakeLLM.rules`),
and Gemini-shaped replies.

Each rule answers a request the real API would refuse with that API's own error shape
and message (quoted from public error reports), so a contract test fails the way
production would: Gemini's thought-signature and function-response rules, its schema
subset and inline images; image parts of the OpenAI-compatible and Anthropic formats.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any

from fake_llm import Recorded, Reply

GEMINI_PATH = re.compile(r"^/v1beta/models/([^/:]+):(generateContent|streamGenerateContent)$")
GEMINI_SCHEMA_KEYS = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "maxItems",
        "minItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "anyOf",
        "propertyOrdering",
        "default",
        "items",
        "minimum",
        "maximum",
    }
)
GEMINI_IMAGE_TYPES = frozenset(
    {"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"}
)
GEMINI_MAX_REQUEST = 20 * 1024 * 1024
SKIP_SIGNATURE = "skip_thought_signature_validator"
MISSING_SIGNATURE = (
    "Function call is missing a thought_signature in functionCall parts. This is required "
    "for tools to work correctly, and missing thought_signature may lead to degraded model "
    "performance. Additional data, function call `default_api:{name}` , position {pos}. "
    "Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more "
    "details."
)


def google_error(code: int, status: str, message: str, **extra: Any) -> Reply:
    error: dict[str, Any] = {"code": code, "message": message, "status": status, **extra}
    return Reply(status=code, json={"error": error})


def _bad_request(message: str) -> Reply:
    return google_error(400, "INVALID_ARGUMENT", message)


@dataclass
class GeminiRules:
    """Gemini 3's checks on generateContent requests.

    `issued` holds the signatures this server sent (add the ones of each scripted reply
    with `remember`); a signature it never issued is refused as corrupted, as the real
    API refuses a signature from another conversation.
    """

    key: str
    issued: set[str] = field(default_factory=set)

    def remember(self, reply: Any) -> Any:
        """Record the thoughtSignatures of a scripted reply (a dict or a list of chunks)."""
        chunks = reply if isinstance(reply, list) else [reply]
        for chunk in chunks:
            for candidate in chunk.get("candidates", []) if isinstance(chunk, dict) else []:
                for part in candidate.get("content", {}).get("parts", []):
                    if "thoughtSignature" in part:
                        self.issued.add(part["thoughtSignature"])
        return reply

    def __call__(self, req: Recorded) -> Reply | None:
        if not GEMINI_PATH.match(req.path):
            return google_error(404, "NOT_FOUND", f"path {req.path} not found")
        if req.path.endswith(":streamGenerateContent") and req.query.get("alt") != "sse":
            return _bad_request("this fake streams only with alt=sse")
        if req.headers.get("x-goog-api-key") != self.key:
            return google_error(
                400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key."
            )
        body = req.json
        if len(json.dumps(body)) > GEMINI_MAX_REQUEST:
            return _bad_request("Request payload size exceeds the limit: 20971520 bytes.")
        for check in (self._tools, self._contents, self._signatures):
            rejection = check(body)
            if rejection is not None:
                return rejection
        return None

    def _tools(self, body: dict[str, Any]) -> Reply | None:
        for t, tool in enumerate(body.get("tools", [])):
            for d, decl in enumerate(tool.get("functionDeclarations", [])):
                where = f"tools[{t}].function_declarations[{d}].parameters"
                if "parameters" in decl:
                    problem = _schema_problem(decl["parameters"], where)
                    if problem is not None:
                        return _bad_request(problem)
        return None

    def _contents(self, body: dict[str, Any]) -> Reply | None:
        contents = body.get("contents", [])
        for i, content in enumerate(contents):
            if content.get("role") not in ("user", "model"):
                return _bad_request(f"Please use a valid role: user, model. (contents[{i}].role)")
            parts = content.get("parts") or []
            if not parts:
                return _bad_request(f"contents[{i}].parts: contents.parts must not be empty.")
            for part in parts:
                inline = part.get("inlineData")
                if inline is not None:
                    if inline.get("mimeType") not in GEMINI_IMAGE_TYPES:
                        return _bad_request(f"Unsupported MIME type: {inline.get('mimeType')}")
                    try:
                        base64.b64decode(inline.get("data", ""), validate=True)
                    except binascii.Error:
                        return _bad_request("Invalid value at 'contents.parts.inline_data.data'")
            responses = sum(1 for p in parts if "functionResponse" in p)
            if responses:
                before = contents[i - 1] if i else {}
                calls = sum(1 for p in before.get("parts", []) if "functionCall" in p)
                if before.get("role") != "model" or calls != responses:
                    return _bad_request(
                        "Please ensure that the number of function response parts is equal "
                        "to the number of function call parts of the function call turn."
                    )
                if any(
                    "name" not in p["functionResponse"] for p in parts if "functionResponse" in p
                ):
                    return _bad_request("* function_response.name: Name cannot be empty.")
        return None

    def _signatures(self, body: dict[str, Any]) -> Reply | None:
        """The first functionCall of every step of the current turn carries its signature
        (the turn starts at the last user content holding text or an image)."""
        contents = body.get("contents", [])
        start = 0
        for i, content in enumerate(contents):
            if content.get("role") == "user" and any(
                "text" in p or "inlineData" in p for p in content.get("parts", [])
            ):
                start = i
        for content in contents:
            for part in content.get("parts", []):
                signature = part.get("thoughtSignature")
                if signature not in (None, SKIP_SIGNATURE, *self.issued):
                    return _bad_request("Corrupted thought signature.")
        for i, content in enumerate(contents[start:], start):
            calls = [p for p in content.get("parts", []) if "functionCall" in p]
            if content.get("role") == "model" and calls and "thoughtSignature" not in calls[0]:
                name = calls[0]["functionCall"].get("name", "")
                return _bad_request(MISSING_SIGNATURE.format(name=name, pos=i))
        return None


def _schema_problem(schema: Any, where: str) -> str | None:
    if not isinstance(schema, dict):
        return f"Invalid JSON payload received. Invalid value at '{where}'"
    for key, value in schema.items():
        if key not in GEMINI_SCHEMA_KEYS:
            return (
                f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': "
                "Cannot find field."
            )
        if key == "type" and not isinstance(value, str):
            return (
                f"Invalid JSON payload received. Unknown name \"type\" at '{where}': "
                "Proto field is not repeating, cannot start list."
            )
    if schema.get("type") == "object" and "properties" in schema and not schema["properties"]:
        return f"* {where}.properties: should be non-empty for OBJECT type"
    for name, sub in (schema.get("properties") or {}).items():
        problem = _schema_problem(sub, f"{where}.properties[{name}].value")
        if problem is not None:
            return problem
    if "items" in schema:
        return _schema_problem(schema["items"], f"{where}.items")
    return None


# --------------------------------------------------------------------- image parts

OPENAI_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})
ANTHROPIC_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
ANTHROPIC_MAX_IMAGE = 5 * 1024 * 1024
DATA_URL = re.compile(r"^data:(image/[a-z]+);base64,(.*)$", re.S)


def openai_images(req: Recorded) -> Reply | None:
    """`image_url` parts: a data URL of a supported type with valid base64."""
    for m, message in enumerate((req.json or {}).get("messages", [])):
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            if part.get("type") != "image_url":
                continue
            match = DATA_URL.match(part.get("image_url", {}).get("url", ""))
            ok = match is not None and match.group(1) in OPENAI_IMAGE_TYPES
            if ok and match is not None:
                try:
                    base64.b64decode(match.group(2), validate=True)
                except binascii.Error:
                    ok = False
            if not ok:
                return Reply(
                    status=400,
                    json={
                        "error": {
                            "message": f"Invalid image in messages[{m}]: the URL must be a "
                            "base64 data URL of a PNG, JPEG, WEBP or non-animated GIF.",
                            "type": "invalid_request_error",
                            "code": "invalid_image_format",
                        }
                    },
                )
    return None


def anthropic_images(req: Recorded) -> Reply | None:
    """`image` blocks: base64 source of a supported type, at most 5 MB of base64."""
    for m, message in enumerate((req.json or {}).get("messages", [])):
        for b, block in enumerate(message.get("content", [])):
            if not isinstance(block, dict) or block.get("type") != "image":
                continue
            source = block.get("source", {})
            where = f"messages.{m}.content.{b}.image.source.base64"
            problem = None
            if source.get("type") != "base64" or source.get("media_type") not in (
                ANTHROPIC_IMAGE_TYPES
            ):
                problem = (
                    f"{where}.media_type: Input should be 'image/jpeg', 'image/png', "
                    "'image/gif' or 'image/webp'"
                )
            elif len(source.get("data", "")) > ANTHROPIC_MAX_IMAGE:
                size = len(source["data"])
                problem = (
                    f"{where}: image exceeds 5 MB maximum: {size} bytes > "
                    f"{ANTHROPIC_MAX_IMAGE} bytes"
                )
            if problem is not None:
                return Reply(
                    status=400,
                    json={
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": problem},
                    },
                )
    return None


# --------------------------------------------------------------------- Gemini replies


def gemini_reply(
    parts: list[dict[str, Any]],
    finish: str | None = "STOP",
    *,
    model: str = "gemini-3-flash-preview",
    usage: tuple[int, int, int] = (12, 5, 0),
) -> dict[str, Any]:
    """A generateContent response (or one stream chunk) with these parts."""
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    prompt, out, thoughts = usage
    meta: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": out,
        "totalTokenCount": prompt + out + thoughts,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    }
    if thoughts:
        meta["thoughtsTokenCount"] = thoughts
    return {
        "candidates": [candidate],
        "usageMetadata": meta,
        "modelVersion": model,
        "responseId": "fB3kaK2xD4-mz7IPrKnD8Qw",
    }


def function_call(
    name: str, args: dict[str, Any], call_id: str | None = None, signature: str | None = None
) -> dict[str, Any]:
    call: dict[str, Any] = {"name": name, "args": args}
    if call_id is not None:
        call["id"] = call_id
    part: dict[str, Any] = {"functionCall": call}
    if signature is not None:
        part["thoughtSignature"] = signature
    return part
