"""`web_fetch`'s extraction on a 2 MB page (benches/web_pages.py big_page): Klaw's
path (decode, ad removal, trafilatura to Markdown) beside the baseline of plain
html-to-text with the standard library's HTMLParser, timed in the same run; and, each
in a fresh process, the RSS the import adds and the peak RSS the extraction adds
(VmHWM after /proc/self/clear_refs), with the content kept and the comments left out.

Run: pytest benches/test_bench_web.py --benchmark-group-by=group -s
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from klaw.web.extract import extract
from klaw.web.fetch import Fetched
from smoke import SMOKE, scaled
from web_extract_compare import _load
from web_pages import big_page

PAGE = big_page(scaled(2_000_000, 200_000))
BODY = PAGE.html.encode()
MAX_PEAK_MB = 80.0  # on top of the engine: the Pi's engine unit allows 700 MB


def _klaw(body: bytes = BODY) -> str:
    page = Fetched("https://example.org/long", 200, "text/html", None, body, False)
    return extract(page).text


@pytest.mark.benchmark(group="web_fetch extract 2 MB")
def test_bench_klaw_extract(benchmark: Any) -> None:
    _klaw(b"<html><body><p>warm up</p></body></html>")
    text = benchmark.pedantic(_klaw, rounds=3, iterations=1)
    benchmark.extra_info["bytes"] = len(BODY)
    benchmark.extra_info["chars_out"] = len(text)


@pytest.mark.benchmark(group="web_fetch extract 2 MB")
def test_bench_stdlib_text_baseline(benchmark: Any) -> None:
    run = _load("stdlib-text")
    text = benchmark.pedantic(run, args=(PAGE.html,), rounds=3, iterations=1)
    benchmark.extra_info["chars_out"] = len(text)


_PROBE = """
import json, sys
from pathlib import Path
sys.path.insert(0, {benches!r})
def kb(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
from web_pages import big_page
page = big_page({size})
body = page.html.encode()
rss0 = kb("VmRSS")
if {which!r} == "klaw":
    from klaw.web.extract import extract
    from klaw.web.fetch import Fetched
    page_in = Fetched("https://example.org/long", 200, "text/html", None, body, False)
    run = lambda: extract(page_in).text
else:
    from web_extract_compare import _load
    f = _load("stdlib-text")
    run = lambda: f(page.html)
rss1 = kb("VmRSS")
Path("/proc/self/clear_refs").write_text("5")
base = kb("VmRSS")
text = run()
print(json.dumps({{
    "import_mb": (rss1 - rss0) / 1024,
    "peak_mb": (kb("VmHWM") - base) / 1024,
    "kept": sum(s.split(" ", 1)[0] in text for s in page.content) / len(page.content),
    "comments": "RELATEDX" in text,
}}))
"""


def _probe(which: str) -> dict[str, Any]:
    code = _PROBE.format(benches=str(Path(__file__).parent), size=len(BODY), which=which)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_extract_memory_and_quality() -> None:
    ours, base = _probe("klaw"), _probe("baseline")
    print(
        f"\nweb_fetch extraction of a {len(BODY) / 1e6:.1f} MB page: klaw import "
        f"+{ours['import_mb']:.1f} MB (lazy: at the first page), peak +{ours['peak_mb']:.1f} MB, "
        f"content kept {ours['kept']:.0%}, comments {'kept' if ours['comments'] else 'dropped'}; "
        f"stdlib text: peak +{base['peak_mb']:.1f} MB, comments "
        f"{'kept' if base['comments'] else 'dropped'}"
    )
    assert ours["kept"] == 1.0 and not ours["comments"]
    if not SMOKE:
        assert ours["peak_mb"] <= MAX_PEAK_MB
