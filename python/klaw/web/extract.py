"""A fetched body as text the model reads: HTML as Markdown (main content only),
plain text as it is, JSON indented, PDF as the text of its pages.

HTML goes through trafilatura (chosen by measurement, docs/decisions.md): the article,
docs page or forum posts without navigation, ads, cookie banners and comments, with
headings, lists, links, tables and code kept as Markdown. It is imported at the first
HTML page (about 30 MB and 0.4 s), never at engine start. PDF text comes from pypdf,
imported at the first PDF.

Text is decoded by the charset the server declared, else the page's <meta charset>
(HTML) or byte-order mark, else UTF-8 if it is valid, else the best guess of
charset-normalizer; bytes that do not decode become U+FFFD.
"""

from __future__ import annotations

import codecs
import html
import io
import json
import re
from dataclasses import dataclass, field
from typing import Any

from klaw.web.fetch import Fetched, FetchError

__all__ = ["Extracted", "decode", "extract", "html_to_markdown"]

_META = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_.:-]+)""", re.IGNORECASE)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
MAX_PDF_PAGES = 200
#: trafilatura takes about 0.1-0.2 ms per element (a 2 MB article page has ~10,000;
#: 50,000 list items took 6 s here): past this a page gets plain text instead.
MAX_ELEMENTS = 25_000


@dataclass
class Extracted:
    text: str
    title: str = ""
    kind: str = "text"  # html, text, json, pdf
    notes: list[str] = field(default_factory=list)


def _codec(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def decode(body: bytes, declared: str | None, is_html: bool) -> tuple[str, str]:
    """(text, the encoding used); see the module docstring for the order."""
    encoding = _codec(declared)
    if encoding is None:
        for bom, name in _BOMS:
            if body.startswith(bom):
                encoding = name
                break
    if encoding is None and is_html:
        match = _META.search(body[:4096])
        encoding = _codec(match.group(1).decode("ascii")) if match else None
    if encoding is None:
        try:
            return body.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            encoding = _guess(body)
    if encoding in ("latin-1", "iso8859-1", "ascii"):
        encoding = "cp1252"  # what browsers do: the WHATWG encoding standard
    return body.decode(encoding, errors="replace").removeprefix("\ufeff"), encoding


def _guess(body: bytes) -> str:
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # pragma: no cover - it comes with trafilatura
        return "cp1252"
    best = from_bytes(body[:65536]).best()
    return _codec(best.encoding if best else None) or "cp1252"


#: Ads inside the article that trafilatura keeps (measured: `class="ad"`,
#: `advertisement`, AdSense's `<ins class="adsbygoogle">`): removed before it runs.
#: `contains` first: the regular expression alone took 3 s over 300,000 elements.
_ADS = (
    "//*[contains(@class, 'ad') or contains(@class, 'sponsored') or starts-with(@id, 'ad')]"
    "[re:test(@class, '(^|\\s)(ad|ads|advert|advertisement|adsbygoogle|sponsored)(\\s|$)', 'i')"
    " or re:test(@id, '^(ad|ads|advert|advertisement)([-_]|$)', 'i')]"
)
_EXSLT = {"re": "http://exslt.org/regular-expressions"}
_BLOCKS = ("p", "div", "li", "tr", "br", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "table")


def _parse(markup: str) -> Any:
    from trafilatura.utils import load_html

    return load_html(markup)


def _cleaned(tree: Any, url: str | None) -> Any:
    """`tree` without in-article ads, its links absolute (trafilatura resolves a
    relative link against the site's root, not the page's folder)."""
    for element in tree.xpath(_ADS, namespaces=_EXSLT):
        if element.getparent() is not None:
            element.drop_tree()  # keeps the text that follows it
    if url:
        try:
            tree.make_links_absolute(url, resolve_base_href=True, handle_failures="discard")
        except ValueError:
            pass
    return tree


def html_to_markdown(markup: str, url: str | None = None) -> str:
    """The main content of an HTML page as Markdown ("" when there is no text)."""
    import trafilatura

    options: dict[str, Any] = {
        "output_format": "markdown",
        "include_links": True,
        "include_tables": True,
        "include_images": False,
        "include_comments": False,
        "with_metadata": False,
        "url": url,
    }
    tree = _parse(markup)
    if tree is None:
        return str(trafilatura.html2txt(markup) or "").strip()
    if sum(1 for _ in tree.iter()) > MAX_ELEMENTS:
        return _plain_text(tree)
    text = trafilatura.extract(_cleaned(tree, url), **options)
    if not text:  # a short page or one without an article: take more rather than nothing
        text = trafilatura.extract(_cleaned(_parse(markup), url), favor_recall=True, **options)
    if not text:
        text = trafilatura.html2txt(markup)
    return (text or "").strip()


def _plain_text(tree: Any) -> str:
    """The text of a page too big for trafilatura, without scripts, styles and the
    usual page chrome, a line per block and table row."""
    for element in tree.xpath("//script|//style|//noscript|//nav|//header|//footer|//aside"):
        if element.getparent() is not None:
            element.drop_tree()
    for element in tree.iter(*_BLOCKS):
        element.tail = "\n" + (element.tail or "")
    for element in tree.iter("td", "th"):
        element.tail = " " + (element.tail or "")
    text = str(tree.text_content())
    lines = (" ".join(line.split()) for line in text.splitlines())
    body = "\n".join(line for line in lines if line)
    return f"[a page of over {MAX_ELEMENTS} elements: its plain text, not its main content]\n{body}"


def _title(markup: str) -> str:
    match = _TITLE.search(markup[:200_000])
    return " ".join(html.unescape(match.group(1)).split())[:300] if match else ""


def _pdf(body: bytes, truncated: bool, max_chars: int) -> Extracted:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, PdfReadError

    try:
        reader = PdfReader(io.BytesIO(body), strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            raise FetchError("the PDF is encrypted with a password")
        pages = reader.pages
        count = len(pages)
        out: list[str] = []
        used = 0
        done = 0
        for page in pages[:MAX_PDF_PAGES]:
            text = (page.extract_text() or "").strip()
            done += 1
            out.append(f"--- page {done} of {count} ---\n{text}")
            used += len(text)
            if used > max_chars:  # enough for the cap; reading on costs time only
                break
    except FetchError:
        raise
    except DependencyError:  # AES: most encrypted PDFs, even those opening without a password
        raise FetchError(
            "the PDF is encrypted with AES, which pypdf reads only with the cryptography "
            "package: install it in Klaw's environment (pip install cryptography)"
        ) from None
    except (PdfReadError, ValueError, KeyError, TypeError, IndexError) as exc:
        why = " (the download was cut at web.fetch.maxBytes)" if truncated else ""
        raise FetchError(f"the PDF could not be read{why}: {type(exc).__name__}") from None
    notes = [f"[PDF: {count} pages; text of pages 1-{done} read]"] if done < count else []
    title = ""
    try:
        meta = reader.metadata
        title = str(meta.get("/Title") or "")[:300] if meta is not None else ""
    except (PdfReadError, ValueError, KeyError, TypeError):
        pass
    return Extracted("\n\n".join(out).strip(), title, "pdf", notes)


def extract(page: Fetched, max_chars: int = 200_000) -> Extracted:
    """The text of `page`; `max_chars` bounds the work for long PDFs. Raises FetchError
    for a body that is not text."""
    media = page.media_type
    body = page.body
    if media == "application/pdf" or (not media and body.startswith(b"%PDF-")):
        return _pdf(body, page.truncated, max_chars)
    sniff = body[:512].lstrip().lower()
    is_html = media in ("text/html", "application/xhtml+xml") or (
        not media and sniff.startswith((b"<!doctype html", b"<html"))
    )
    if b"\x00" in body[:4096] and not body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise FetchError(f"{page.url} is binary data ({media or 'no content type'})")
    text, encoding = decode(body, page.charset, is_html)
    notes = []
    if encoding != "utf-8":
        notes.append(f"[decoded from {encoding}]")
    if is_html:
        return Extracted(html_to_markdown(text, page.url), _title(text), "html", notes)
    if media == "application/json" or media.endswith("+json"):
        try:
            text = json.dumps(json.loads(text), indent=1, ensure_ascii=False)
        except (ValueError, RecursionError):  # RecursionError: nested thousands deep
            notes.append("[the JSON did not parse; shown as sent]")
        return Extracted(text, "", "json", notes)
    return Extracted(text, "", "text", notes)
