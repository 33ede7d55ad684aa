"""Web pages built the way real sites are (navigation, ads, cookie banners, sidebars,
comments, footers around the content), with the sentences that are content and the
markers that are not known, so an extractor's output can be scored: recall of the
content sentences, boilerplate markers leaked, structure kept (headings, links, lists,
code, tables). Used by benches/web_extract_compare.py and benches/test_bench_web.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Page", "article", "big_page", "docs", "forum", "pages"]

WORDS = (
    "the garden keeps its water in a tank beside the shed and a small pump moves it "
    "to the beds at dawn when the air is still cool enough that little is lost so "
    "the tomatoes grow strong while the beans climb the fence and every evening the "
    "owner writes down how much rain fell and which plants need more"
).split()

#: Words that appear only in boilerplate: any of them in the output is a leak.
JUNK = ["NAVMENU", "ADVERTX", "COOKIEBAR", "SIDEBARX", "FOOTERX", "SHAREBTN", "RELATEDX"]


@dataclass
class Page:
    name: str
    html: str
    content: list[str]  # sentences that must be in the output
    junk: list[str] = field(default_factory=lambda: list(JUNK))  # markers that must not
    structure: dict[str, str] = field(default_factory=dict)  # what -> a substring proving it


def _sentence(rng: random.Random, tag: str) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(12, 22))]
    return f"{tag} " + " ".join(words).capitalize() + "."


def _chrome(body: str, title: str) -> str:
    nav = "".join(f'<li><a href="/s{i}">NAVMENU item {i}</a></li>' for i in range(12))
    return f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>{title}</title><script>var tracking = {{"id": 42}};</script>
<style>body {{ font-family: sans-serif }}</style></head><body>
<div class="cookie-banner" id="cookie-consent">COOKIEBAR We use cookies to improve your
experience. <button>Accept all</button></div>
<header class="site-header"><a class="logo" href="/">Site</a><nav class="main-nav"><ul>{nav}
</ul></nav></header>
<div class="ad ad-banner">ADVERTX Buy the best garden pumps today, 50% off!</div>
{body}
<aside class="sidebar"><h3>SIDEBARX Popular</h3><ul>
{"".join(f'<li><a href="/p{i}">SIDEBARX popular post {i}</a></li>' for i in range(8))}
</ul></aside>
<footer class="site-footer"><p>FOOTERX Copyright 2026 Site Ltd. All rights reserved.</p>
<ul>{"".join(f'<li><a href="/f{i}">FOOTERX link {i}</a></li>' for i in range(6))}</ul>
</footer></body></html>"""


def article(seed: int = 1, paragraphs: int = 8) -> Page:
    """A news/blog article with an ad in the middle, share buttons, related links and
    reader comments (not the article's content)."""
    rng = random.Random(seed)
    content: list[str] = []
    parts: list[str] = []
    for i in range(paragraphs):
        sents = [_sentence(rng, f"A{seed}P{i}S{j}") for j in range(3)]
        content += sents
        parts.append(f"<p>{' '.join(sents)}</p>")
        if i == 2:
            parts.append(
                "<h2>Water and the pump</h2><ul><li>Rain tank of 300 litres</li>"
                "<li>Pump on a timer</li></ul>"
            )
            parts.append('<div class="ad-slot">ADVERTX Sponsored: pumps for less</div>')
        if i == 4:
            parts.append(
                '<p>See <a href="https://example.org/tanks">the tank guide</a> for sizes.</p>'
            )
    comments = "".join(
        f'<div class="comment"><span class="author">RELATEDX user{i}</span>'
        f"<p>RELATEDX Great post, thanks {i}!</p></div>"
        for i in range(5)
    )
    body = f"""<main><article class="post"><h1>How the garden is watered</h1>
<div class="byline">By Ann Gardner, 12 May 2026</div>
{"".join(parts)}
<div class="share">SHAREBTN Share on <a href="#">X</a> <a href="#">Facebook</a></div>
</article>
<section class="related"><h3>RELATEDX Related</h3><ul>
{"".join(f'<li><a href="/r{i}">RELATEDX story {i}</a></li>' for i in range(5))}</ul></section>
<section id="comments" class="comments"><h3>RELATEDX 5 comments</h3>{comments}</section>
</main>"""
    return Page(
        "article",
        _chrome(body, "How the garden is watered"),
        content,
        structure={
            "heading": "Water and the pump",
            "list": "Pump on a timer",
            "link": "https://example.org/tanks",
        },
    )


def docs(seed: int = 2) -> Page:
    """A documentation page: a left table of contents, prose, a code block, a table,
    a note box, a 'next page' footer."""
    rng = random.Random(seed)
    content: list[str] = []
    sections: list[str] = []
    for i in range(4):
        sents = [_sentence(rng, f"D{seed}S{i}P{j}") for j in range(2)]
        content += sents
        sections.append(f'<h2 id="s{i}">Section {i} of the pump API</h2><p>{" ".join(sents)}</p>')
    code = "pump = Pump(pin=17)\npump.run(seconds=30)\nprint(pump.litres)"
    table = (
        "<table><thead><tr><th>Setting</th><th>Default</th></tr></thead><tbody>"
        "<tr><td>flowRate</td><td>2.5</td></tr><tr><td>maxRuntime</td><td>600</td></tr>"
        "</tbody></table>"
    )
    toc = "".join(f'<li><a href="/docs/p{i}">NAVMENU chapter {i}</a></li>' for i in range(20))
    body = f"""<div class="docs-layout"><nav class="toc" role="navigation"><ul>{toc}</ul></nav>
<div role="main" class="document"><h1>Pump API reference</h1>
{sections[0]}<pre><code class="language-python">{code}</code></pre>
{sections[1]}{table}
<div class="admonition note"><p>Note: run the pump for at most ten minutes.</p></div>
{sections[2]}{sections[3]}
<div class="nav-next">NAVMENU Next: <a href="/docs/valves">Valves</a></div></div></div>"""
    return Page(
        "docs",
        _chrome(body, "Pump API reference"),
        content,
        structure={
            "code": "pump.run(seconds=30)",
            "table": "maxRuntime",
            "heading": "Section 2 of the pump API",
        },
    )


def forum(seed: int = 3, posts: int = 6) -> Page:
    """A forum thread: the posts are the content; signatures, user badges, the
    reply box and the board's navigation are not."""
    rng = random.Random(seed)
    content: list[str] = []
    items: list[str] = []
    for i in range(posts):
        sents = [_sentence(rng, f"F{seed}T{i}S{j}") for j in range(2)]
        content += sents
        items.append(
            f'<div class="post" id="p{i}"><div class="postprofile"><b>member{i}</b>'
            f'<span class="badge">SIDEBARX 1{i}0 posts</span></div>'
            f'<div class="postbody"><div class="content">{" ".join(sents)}</div>'
            f'<div class="signature">FOOTERX my garden blog</div></div></div>'
        )
    body = f"""<div id="page-body"><div class="breadcrumbs">NAVMENU Board &gt; Gardening</div>
<h1 class="topic-title">Pump keeps stopping after ten minutes</h1>
<div class="topic">{"".join(items)}</div>
<form class="quick-reply">SHAREBTN <textarea>Write a reply</textarea></form></div>"""
    return Page("forum", _chrome(body, "Pump keeps stopping"), content, structure={})


def big_page(target_bytes: int = 2_000_000, seed: int = 4) -> Page:
    """A ~2 MB article page: a long article (hundreds of paragraphs, lists, tables)
    inside the usual chrome, with inline scripts and a long comment thread, the size of
    a heavy real news or wiki page."""
    rng = random.Random(seed)
    content: list[str] = []
    parts: list[str] = []
    script = "<script>" + "var x=" + ",".join(str(i) for i in range(2000)) + ";</script>"
    size = 0
    i = 0
    while size < target_bytes * 0.7:
        sents = [_sentence(rng, f"B{i}S{j}") for j in range(4)]
        if i % 50 == 0:
            content += sents
        block = f"<p>{' '.join(sents)}</p>"
        if i % 20 == 0:
            block += f"<h2>Part {i // 20}</h2>"
        if i % 40 == 0:
            block += script
        if i % 30 == 0:
            rows = "".join(f"<tr><td>row {k}</td><td>{k * i}</td></tr>" for k in range(10))
            block += f"<table>{rows}</table>"
        parts.append(block)
        size += len(block)
        i += 1
    comments = []
    while size < target_bytes:
        c = (
            f'<div class="comment"><p>RELATEDX comment {len(comments)} '
            + "nice " * 40
            + "</p></div>"
        )
        comments.append(c)
        size += len(c)
    body = (
        f"<main><article><h1>The long garden</h1>{''.join(parts)}</article>"
        f'<section class="comments">{"".join(comments)}</section></main>'
    )
    return Page("big", _chrome(body, "The long garden"), content)


def pages() -> list[Page]:
    return [article(), docs(), forum()]
