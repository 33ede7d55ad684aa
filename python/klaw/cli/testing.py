"""Run the CLI in-process and capture its output (for tests), like click's CliRunner."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None = None

    @property
    def output(self) -> str:
        return self.stdout


class CliRunner:
    def invoke(self, app: Callable[[Sequence[str]], int], args: Sequence[str]) -> Result:
        out, err = io.StringIO(), io.StringIO()
        exc: BaseException | None = None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = app(list(args))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception as e:  # surfaced through .exception, like click's runner
                exc = e
                code = 1
        return Result(code, out.getvalue(), err.getvalue(), exc)
