"""The measurement behind `web_fetch`'s extraction library (docs/decisions.md): each
candidate in a process of its own, on the pages of benches/web_pages.py.

    python benches/web_extract_compare.py      # in a venv holding the candidates

Per candidate: import time and RSS added by the import; on the article, docs and
forum pages, the content sentences kept, the boilerplate markers leaked and the
structure kept (headings, links, lists, code, tables as Markdown); on a 2 MB page,
the extraction time (median of 3) and the peak RSS it added (VmHWM after
/proc/self/clear_refs). A candidate that is not installed is skipped.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

CANDIDATES = [
    "trafilatura",
    "readability+markdownify",
    "resiliparse",
    "selectolax+markdownify",
    "stdlib-text",
]


def _kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _load(name: str) -> Any:
    """The candidate's html -> text function (imports it)."""
    if name == "trafilatura":
        import trafilatura

        return lambda html: (
            trafilatura.extract(
                html,
                output_format="markdown",
                include_links=True,
                include_tables=True,
                include_comments=False,
                with_metadata=False,
            )
            or ""
        )
    if name == "readability+markdownify":
        from markdownify import markdownify
        from readability import Document

        return lambda html: markdownify(
            Document(html).summary(html_partial=True), heading_style="ATX"
        )
    if name == "resiliparse":
        from resiliparse.extract.html2text import extract_plain_text

        return lambda html: extract_plain_text(
            html, main_content=True, list_bullets=True, links=False, alt_texts=False
        )
    if name == "selectolax+markdownify":
        from markdownify import markdownify
        from selectolax.lexbor import LexborHTMLParser

        def run(html: str) -> str:
            tree = LexborHTMLParser(html)
            tree.strip_tags(
                ["script", "style", "noscript", "nav", "header", "footer", "aside", "form"]
            )
            root = tree.css_first("main") or tree.css_first("article") or tree.body
            return markdownify(root.html if root is not None else "", heading_style="ATX")

        return run
    if name == "stdlib-text":
        from html.parser import HTMLParser as Std

        class Text(Std):
            def __init__(self) -> None:
                super().__init__()
                self.out: list[str] = []
                self.skip = 0

            def handle_starttag(self, tag: str, attrs: Any) -> None:
                self.skip += tag in ("script", "style")

            def handle_endtag(self, tag: str) -> None:
                self.skip -= tag in ("script", "style") and self.skip > 0

            def handle_data(self, data: str) -> None:
                if not self.skip and data.strip():
                    self.out.append(data.strip())

        def run(html: str) -> str:
            p = Text()
            p.feed(html)
            return "\n".join(p.out)

        return run
    raise ValueError(name)


def child(name: str) -> dict[str, Any]:
    import web_pages

    rss0 = _kb("VmRSS")
    t0 = time.perf_counter()
    try:
        run = _load(name)
    except ImportError as exc:
        return {"name": name, "missing": str(exc)}
    import_ms = (time.perf_counter() - t0) * 1000
    run("<html><body><p>warm up</p></body></html>")
    out: dict[str, Any] = {
        "name": name,
        "import_ms": import_ms,
        "import_rss_mb": (_kb("VmRSS") - rss0) / 1024,
    }
    quality = {}
    for page in web_pages.pages():
        text = run(page.html)
        tags = [s.split(" ", 1)[0] for s in page.content]
        kept = sum(1 for t in tags if re.search(rf"\b{t}\b", text))
        leaked = sorted({j for j in page.junk if j in text})
        struct = {k: v in text for k, v in page.structure.items()}
        md = {"#": bool(re.search(r"^#{1,6} ", text, re.M)), "](": "](" in text}
        quality[page.name] = {
            "recall": kept / len(tags),
            "leaked": leaked,
            "structure": struct,
            "markdown": md,
            "chars": len(text),
        }
    out["quality"] = quality
    big = web_pages.big_page()
    times = []
    Path("/proc/self/clear_refs").write_text("5")
    base = _kb("VmRSS")
    for _ in range(3):
        t0 = time.perf_counter()
        text = run(big.html)
        times.append((time.perf_counter() - t0) * 1000)
    out["big_bytes"] = len(big.html.encode())
    out["big_ms"] = statistics.median(times)
    out["big_peak_mb"] = (_kb("VmHWM") - base) / 1024
    tags = [s.split(" ", 1)[0] for s in big.content]
    out["big_recall"] = sum(1 for t in tags if re.search(rf"\b{t}\b", text)) / len(tags)
    out["big_chars"] = len(text)
    return out


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2])))
        return
    rows = []
    for name in CANDIDATES:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", name], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            print(f"{name}: failed\n{proc.stderr[-2000:]}")
            continue
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(json.dumps(rows, indent=1))
    print()
    print(
        "| candidate | import ms | import RSS MB | recall a/d/f | leaked a/d/f | structure "
        "| 2 MB page ms | peak RSS MB | 2 MB recall |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "missing" in r:
            print(f"| {r['name']} | not installed | | | | | | | |")
            continue
        q = r["quality"]
        rec = "/".join(f"{q[p]['recall']:.2f}" for p in ("article", "docs", "forum"))
        leak = "/".join(str(len(q[p]["leaked"])) for p in ("article", "docs", "forum"))
        st = [v for p in ("article", "docs") for v in q[p]["structure"].values()]
        md = sum(q[p]["markdown"]["#"] + q[p]["markdown"]["]("] for p in ("article", "docs"))
        print(
            f"| {r['name']} | {r['import_ms']:.0f} | {r['import_rss_mb']:.1f} | {rec} | {leak} | "
            f"{sum(st)}/{len(st)} (md {md}/4) | {r['big_ms']:.0f} | {r['big_peak_mb']:.1f} | "
            f"{r['big_recall']:.2f} |"
        )


if __name__ == "__main__":
    main()
