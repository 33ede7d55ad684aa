"""The offline model's tool calls on 50 requests that need a tool (benches/offline_requests.json).

For each GGUF given (default: the offline models installed) and each decoding, constrained
by the tool grammar (klaw.llm.toolgrammar, what the server does) and free (the same prompt,
no grammar: the baseline), it reports:

- valid: the answer is a call of an offered tool whose arguments pass the tool's schema
  (klaw.tools.schema.validate, the check the tool loop makes);
- right: a valid call of the tool the request needs;
- gen tok/s and prompt tok/s: llama.cpp's own timings; RSS: the peak resident memory of
  the process that loaded the model (VmHWM), each model in a process of its own.

    python benches/eval_offline.py [--threads 2] [--json out.json] [MODEL.gguf ...]

The requests are English, Russian and Chinese; greedy decoding (temperature 0), so a run
is repeatable on one machine. `make eval-offline` runs it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

REQUESTS = HERE / "offline_requests.json"


def offered_tools(names: list[str]) -> list[dict[str, Any]]:
    """The real tools' schemas (class attributes: no workspace or memory needed)."""
    from klaw.tools.base import Tool
    from klaw.tools.clock import CurrentTime
    from klaw.tools.files import FileRead
    from klaw.tools.memory_tools import MemorySave, MemorySearch
    from klaw.tools.schedule import ScheduleAdd, ScheduleList
    from klaw.tools.web import WebSearch

    classes: dict[str, type[Tool]] = {
        c.name: c
        for c in (
            CurrentTime,
            FileRead,
            MemorySave,
            MemorySearch,
            ScheduleAdd,
            ScheduleList,
            WebSearch,
        )
    }
    return [
        {
            "type": "function",
            "function": {
                "name": classes[n].name,
                "description": classes[n].description,
                "parameters": classes[n].parameters,
            },
        }
        for n in names
    ]


def check(text: str, tools: list[dict[str, Any]]) -> tuple[str | None, bool]:
    """(the called tool's name, whether the call is valid for it)."""
    from klaw.llm.toolgrammar import parse_call
    from klaw.tools.schema import validate

    call = parse_call(text)
    if call is None:
        return None, False
    name, arguments = call
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    if name not in schemas:
        return name, False
    return name, not validate(arguments, schemas[name])


def _hwm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def run_one(model: Path, threads: int, n_ctx: int, every: int = 1) -> dict[str, Any]:
    """Both decodings of one model, in this process (every `every`-th request)."""
    import llama_cpp
    from llama_cpp import Llama

    from klaw.llm.toolgrammar import generate

    data = json.loads(REQUESTS.read_text(encoding="utf-8"))
    tools = offered_tools(data["tools"])
    llama = Llama(str(model), n_ctx=n_ctx, n_threads=threads, verbose=False, logits_all=False)
    out: dict[str, Any] = {"model": model.name, "size_mb": model.stat().st_size / 1e6}
    for mode in ("constrained", "free"):
        rows = []
        t_eval = t_prompt = n_eval = n_prompt = 0.0
        started = time.monotonic()
        for req in data["requests"][::every]:
            llama_cpp.llama_perf_context_reset(llama.ctx)
            messages = [{"role": "user", "content": req["text"]}]
            text, _ = generate(
                llama, messages, tools, constrained=mode == "constrained", max_tokens=80
            )
            perf = llama_cpp.llama_perf_context(llama.ctx)
            t_eval += perf.t_eval_ms
            t_prompt += perf.t_p_eval_ms
            n_eval += perf.n_eval
            n_prompt += perf.n_p_eval
            name, valid = check(text, tools)
            rows.append(
                {
                    "lang": req["lang"],
                    "want": req["tool"],
                    "called": name,
                    "valid": valid,
                    "right": valid and name == req["tool"],
                    "text": text[:200],
                }
            )
        out[mode] = {
            "valid": sum(r["valid"] for r in rows),
            "right": sum(r["right"] for r in rows),
            "by_lang": {
                lang: [
                    sum(r["right"] for r in rows if r["lang"] == lang),
                    sum(1 for r in rows if r["lang"] == lang),
                ]
                for lang in ("en", "ru", "zh")
            },
            "gen_tok_s": n_eval / (t_eval / 1000) if t_eval else 0.0,
            "prompt_tok_s": n_prompt / (t_prompt / 1000) if t_prompt else 0.0,
            "seconds": time.monotonic() - started,
            "rows": rows,
        }
    out["rss_mb"] = _hwm_bytes() / 1e6
    return out


def installed_models() -> list[Path]:
    from klaw.llm.local import local_model_path

    path = local_model_path()
    return [path] if path is not None else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--every", type=int, default=1, help="every N-th request only")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # the child: one model, its result as JSON on stdout
        result = run_one(args.models[0], args.threads, args.n_ctx, args.every)
        print(json.dumps(result, ensure_ascii=False))
        return
    models = args.models or installed_models()
    if not models:
        sys.exit("no offline model installed: run make install-local")
    results = []
    for model in models:
        child = subprocess.run(
            [sys.executable, __file__, "--one", "--threads", str(args.threads),
             "--n-ctx", str(args.n_ctx), "--every", str(args.every), str(model)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        results.append(json.loads(child.stdout))
    total = len(json.loads(REQUESTS.read_text(encoding="utf-8"))["requests"][:: args.every])
    print(f"{total} requests, {args.threads} threads")
    print(
        f"{'model':34} {'decoding':12} {'valid':>6} {'right':>6} {'en/ru/zh right':>15} "
        f"{'gen t/s':>8} {'prompt t/s':>10} {'RSS MB':>7}"
    )
    for r in results:
        for mode in ("constrained", "free"):
            m = r[mode]
            langs = "/".join(f"{a}" for a, _ in m["by_lang"].values())
            print(
                f"{r['model']:34} {mode:12} {m['valid']:>6} {m['right']:>6} {langs:>15} "
                f"{m['gen_tok_s']:>8.1f} {m['prompt_tok_s']:>10.1f} {r['rss_mb']:>7.0f}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
