"""`code_execute` (design §6.5): run a Python or bash script in the sandbox.

The result is what the model needs to go on: exit code, capped stdout and stderr,
wall time, which limit killed the run, and the files it left in /output. A script
that fails is a normal result (the model reads the traceback and retries); only a
sandbox that cannot run anything is a tool error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from klaw.errors import SandboxError
from klaw.llm.types import ToolSchema
from klaw.tools.base import Tool, ToolError

if TYPE_CHECKING:
    from klaw.sandbox.service import Sandbox

__all__ = ["MAX_CODE_CHARS", "CodeExecute"]

#: A script is passed as a file, not argv; this only keeps one call's input sane.
MAX_CODE_CHARS = 100_000


class CodeExecute(Tool):
    name = "code_execute"
    description = "Run a Python 3 or bash script in an isolated sandbox."

    def __init__(self, sandbox: Sandbox, chat_id: str) -> None:
        self._sandbox = sandbox
        self._chat = chat_id

    def schema(self) -> ToolSchema:
        p = self._sandbox.policy
        net = (
            "The network is reachable."
            if p.network
            else "There is no network (the owner can allow it: codeExecution.allowNetwork)."
        )
        description = (
            "Run a Python 3 or bash script in an isolated Linux sandbox and get its exit "
            "code, stdout and stderr. print() what you need to see. The working directory "
            "is /output: files written there are kept for this chat (later calls see them) "
            f"and listed in the result. Skills' files are read-only at /skills. {net} "
            f"Limits: {p.timeout_s} s, {p.memory_bytes >> 20} MB memory, {p.pids} "
            "processes; /tmp is emptied after each call. One script per call; if it fails, "
            "read the error, fix the script and call again."
        )
        parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "language": {"type": "string", "enum": ["python", "bash"]},
                "code": {"type": "string", "minLength": 1, "maxLength": MAX_CODE_CHARS},
                "timeout": {"type": "integer", "minimum": 1, "maximum": 3600},
            },
            "required": ["language", "code"],
            "additionalProperties": False,
        }
        return ToolSchema(self.name, description, parameters)

    @property
    def parameters(self) -> dict[str, Any]:  # type: ignore[override]
        return self.schema().parameters

    async def run(self, args: dict[str, Any]) -> str:
        try:
            result = await self._sandbox.run(
                self._chat, args["language"], args["code"], args.get("timeout")
            )
        except SandboxError as exc:
            raise ToolError(f"The sandbox could not run the code: {exc}") from None
        return self._sandbox.render(result)
