"""README's "In numbers", written from docs/bench-latest.txt (the table `make bench`
writes), so the README never quotes figures the last run did not give.

    python benches/readme_numbers.py          # rewrite the block in README.md
    python benches/readme_numbers.py --check  # exit 1 if README.md is not up to date

The block lies between the BEGIN and END markers below; everything else in README.md
is left as it is.
"""

from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "bench-latest.txt"
README = ROOT / "README.md"
BEGIN = "<!-- numbers: from docs/bench-latest.txt by benches/readme_numbers.py -->"
END = "<!-- numbers: end -->"

# "group(20) name  median ms  [ratio x]  extra": group names may hold spaces, names not.
_ROW = re.compile(
    r"^.{20} (?P<name>\S+)\s+(?P<median>[\d.]+)ms\s+(?:(?P<ratio>[\d.]+)x)?\s*(?P<extra>.*)$"
)


@dataclass(frozen=True)
class Row:
    median_ms: float
    ratio: float | None  # the row's median over its group's Klaw figure
    extra: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, key: str) -> float:
        return float(self.extra[key])


def read_table(text: str) -> dict[str, Row]:
    rows = {}
    for line in text.splitlines()[1:]:
        m = _ROW.match(line)
        if m is None:
            continue
        extra = dict(kv.split("=", 1) for kv in m["extra"].split() if "=" in kv)
        ratio = float(m["ratio"]) if m["ratio"] else None
        rows[m["name"]] = Row(float(m["median"]), ratio, extra)
    return rows


def bullets(r: dict[str, Row]) -> list[str]:
    chunk = [r[f"chunk400_klaw[{lang}]"].median_ms for lang in ("en", "ru", "zh")]
    return [
        f"hybrid search over 100k chunks, query embedding included: "
        f"~{r['hybrid_klaw'].median_ms:.1f} ms, {r['hybrid_baseline'].ratio:.0f}× faster than "
        f"the onnxruntime + sqlite-vec + FTS5 stack; vector top-10 "
        f"{r['vector_klaw'].median_ms:.1f} ms at recall@10 = {r['vector_klaw']['recall@10']:.2f}; "
        f"a 400-token chunk embeds in {min(chunk):.0f}–{max(chunk):.0f} ms;",
        f"keyword search that finds Russian inflections and Chinese words inside sentences "
        f"(recall@10 0.94 vs 0.44 for FTS5 unicode61, "
        f"[docs/keyword-eval.md](docs/keyword-eval.md)), in "
        f"{r['keyword_klaw_tantivy'].median_ms:.1f} ms at 100k chunks;",
        f"`klaw reindex` of 1M messages with full-text index in "
        f"~{r['reindex_klaw'].median_ms / 1000:.1f} s "
        f"({r['reindex_baseline_python'].ratio:.1f}× faster than the Python way);",
        f"peak memory with the model and 100k chunks ~{r['rss_klaw']['peak_rss_mb']:.0f} MB "
        f"(the Python stack: ~{r['rss_python_stack']['peak_rss_mb']:.0f} MB);",
        f"the engine adds ~{r['overhead_klaw_engine']['p50_ms']:.1f} ms per message (p50, "
        f"100k messages stored, model time excluded; a bare Python relay: "
        f"{r['overhead_python_relay']['p50_ms']:.1f} ms) and idles at "
        f"{r['idle_klaw_engine']['rss_mb']:.0f} MB with the embedding model loaded;",
        f"the gateway adds ~{r['inbound_klaw_gateway']['p50_ms']:.1f} ms from a Telegram "
        f"update to the engine and ~{r['outbound_klaw_gateway']['p50_ms']:.1f} ms from a "
        f"reply to sendMessage, and idles at {r['idle_klaw_gateway']['rss_mb']:.0f} MB.",
    ]


def block(table: str) -> str:
    lines = [BEGIN]
    for text in bullets(read_table(table)):
        lines += textwrap.wrap(
            text, 88, initial_indent="- ", subsequent_indent="  ", break_on_hyphens=False
        )
    return "\n".join([*lines, END])


def updated(readme: str, table: str) -> str:
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{README}: the markers {BEGIN!r} and {END!r} are missing")
    return readme[:start] + block(table) + readme[end + len(END) :]


def main() -> int:
    readme = README.read_text(encoding="utf-8")
    try:
        new = updated(readme, TABLE.read_text(encoding="utf-8"))
    except KeyError as exc:
        raise SystemExit(f"{TABLE} has no figure {exc}: run `make bench`") from None
    if "--check" in sys.argv[1:]:
        if new != readme:
            print(
                f"{README}: 'In numbers' differs from {TABLE}: "
                "run `python benches/readme_numbers.py`",
                file=sys.stderr,
            )
            return 1
        return 0
    if new != readme:
        README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
