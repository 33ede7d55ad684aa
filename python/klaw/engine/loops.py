"""Loop breakers: what ends a turn whose model keeps calling tools (docs/costs.md).

One `LoopGuard` per turn (chats, jobs, the heartbeat and subagents alike) is asked
after each model response that calls tools, before they run. It stops the turn at
`processing.maxToolCallRounds` rounds, at `processing.loops.maxTokens` tokens or
`maxSeconds` of wall time, and when the calls repeat: the same tool with the same
arguments `repeats` times in a row, or two calls alternating (A,B,A,B,...) `repeats`
times, or a round of three or four calls (A,B,C,A,B,C,...) `repeats` times. Arguments
are compared as parsed (key order does not matter); a malformed call's text without
its whitespace. Every check is a comparison on what the turn already has: microseconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from time import monotonic
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from klaw.config import ProcessingConfig
    from klaw.llm.types import LlmResponse, ToolCall

__all__ = ["TOOL_LIMIT_MESSAGE", "LoopGuard", "LoopStop"]

_AGAIN: Final = "Please rephrase the request or tell me what to do differently."
TOOL_LIMIT_MESSAGE: Final = (
    "I stopped after {rounds} rounds of tool calls without reaching an answer (the limit "
    "was reached). Please rephrase or narrow the request."
)


@dataclass(frozen=True, slots=True)
class LoopStop:
    """Why a turn stops: `error` for the reply's meta, `message` for the user, `detail`
    for the log."""

    # "tool_call_limit", "loop_repeat", "loop_alternate", "loop_cycle", "loop_tokens", "loop_time"
    error: str
    message: str
    detail: str


def _key(call: ToolCall) -> tuple[str, str]:
    if call.error is not None:  # malformed: what the model sent is the call
        return call.name, " ".join((call.raw_arguments or "").split())
    try:
        return call.name, json.dumps(call.arguments, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return call.name, repr(call.arguments)


class LoopGuard:
    """Counts one turn's rounds, tokens, time and calls (see the module docstring)."""

    def __init__(self, processing: ProcessingConfig, started: float | None = None) -> None:
        loops = processing.loops
        self.max_rounds = processing.max_tool_call_rounds
        self.enabled = loops.enabled
        self.max_tokens = loops.max_tokens
        self.max_seconds = loops.max_seconds
        self.repeats = loops.repeats
        self.started = monotonic() if started is None else started
        self.rounds = 0
        self.tokens = 0
        self.calls: list[tuple[str, str]] = []

    def check(self, response: LlmResponse) -> LoopStop | None:
        """After a response that calls tools: None to run them, else why the turn ends.
        Counts the response's tokens and calls either way."""
        usage = response.usage  # below zero is no count: it must not buy more rounds
        self.tokens += max(usage.tokens_in, 0) + max(usage.tokens_out, 0)
        self.calls.extend(_key(c) for c in response.tool_calls)
        if self.rounds >= self.max_rounds:
            return LoopStop(
                "tool_call_limit",
                TOOL_LIMIT_MESSAGE.format(rounds=self.max_rounds),
                f"tool-call limit of {self.max_rounds} rounds reached",
            )
        self.rounds += 1
        if not self.enabled:
            return None
        return self._repeated() or self._spent()

    def _spent(self) -> LoopStop | None:
        if self.tokens >= self.max_tokens:
            return LoopStop(
                "loop_tokens",
                f"I stopped: this request used {self.tokens:,} tokens, the limit for one "
                f"turn is {self.max_tokens:,}. {_AGAIN}",
                f"token cap of the turn reached ({self.tokens} >= {self.max_tokens})",
            )
        elapsed = monotonic() - self.started
        if elapsed >= self.max_seconds:
            return LoopStop(
                "loop_time",
                f"I stopped: this request has run for {elapsed:.0f} s, the limit for one "
                f"turn is {self.max_seconds} s. {_AGAIN}",
                f"time cap of the turn reached ({elapsed:.1f} s >= {self.max_seconds} s)",
            )
        return None

    def _repeated(self) -> LoopStop | None:
        n, calls = self.repeats, self.calls
        tail = calls[-n:]
        if len(tail) == n and all(c == tail[0] for c in tail):
            name, args = tail[0]
            return LoopStop(
                "loop_repeat",
                f"I stopped: I was calling {name} with the same arguments over and over "
                f"({n} times in a row) without getting anywhere. {_AGAIN}",
                f"loop: {name} {args[:200]} called {n} times in a row",
            )
        pairs = calls[-2 * n :]
        if len(pairs) == 2 * n and pairs[0] != pairs[1] and pairs == pairs[:2] * n:
            (a, a_args), (b, b_args) = pairs[0], pairs[1]
            return LoopStop(
                "loop_alternate",
                f"I stopped: I was going back and forth between {a} and {b} ({n} times) "
                f"without getting anywhere. {_AGAIN}",
                f"loop: {a} {a_args[:100]} and {b} {b_args[:100]} alternating {n} times",
            )
        for period in (3, 4):  # a round of calls made again and again (A,B,C,A,B,C,...)
            window = calls[-period * n :]
            cycle = window[:period]
            if len(window) == period * n and window == cycle * n and _shortest(cycle):
                names = [name for name, _ in cycle]
                shown = ", ".join(names[:-1]) + " and " + names[-1]
                return LoopStop(
                    "loop_cycle",
                    f"I stopped: I was calling {shown} in turn, the same way {n} times, "
                    f"without getting anywhere. {_AGAIN}",
                    f"loop: {' -> '.join(f'{c} {a[:60]}' for c, a in cycle)} repeated {n} times",
                )
        return None


def _shortest(cycle: list[tuple[str, str]]) -> bool:
    """Whether `cycle` is not a shorter one repeated (A,B,A,B is the pair A,B)."""
    size = len(cycle)
    return not any(size % p == 0 and cycle == cycle[:p] * (size // p) for p in range(1, size))
