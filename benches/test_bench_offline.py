"""The offline model answering a request that needs a tool: grammar-constrained decoding
(klaw.llm.toolgrammar, what the server does) beside the same prompt decoded freely (the
baseline), on the installed offline GGUF, in this process.

The quality figures (valid-call and right-tool rates on 50 requests in three languages)
come from benches/eval_offline.py (`make eval-offline`), too slow for `make bench`; the
numbers and their date are in docs/providers.md. Here: the time of one answer, and that
the constrained one is a valid call of an offered tool.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_offline import REQUESTS, check, offered_tools
from klaw.llm.local import local_model_path
from klaw.llm.toolgrammar import generate

DATA = json.loads(REQUESTS.read_text(encoding="utf-8"))
TOOLS = offered_tools(DATA["tools"])
MESSAGES = [{"role": "user", "content": "What time is it in Tokyo?"}]


@pytest.fixture(scope="module")
def llama() -> Iterator[Any]:
    path = local_model_path()
    if path is None:
        pytest.fail("the offline model is not installed: run make install-local")
    from llama_cpp import Llama

    model = Llama(str(path), n_ctx=2048, n_threads=2, verbose=False)
    yield model
    model.close()


def _answer(llama: Any, constrained: bool) -> str:
    text, _ = generate(llama, MESSAGES, TOOLS, constrained=constrained, max_tokens=80)
    return text


def test_offline_tool_call_constrained(benchmark: Any, llama: Any) -> None:
    text = benchmark.pedantic(_answer, args=(llama, True), rounds=3, iterations=1)
    name, valid = check(text, TOOLS)
    assert name == "reply" or valid, text


def test_baseline_offline_answer_unconstrained(benchmark: Any, llama: Any) -> None:
    benchmark.pedantic(_answer, args=(llama, False), rounds=3, iterations=1)
