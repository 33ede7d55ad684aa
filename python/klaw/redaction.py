"""One way to keep a secret (an API key, a bot token) out of text that is logged or
shown: the LLM clients' errors and the chat channels' alike.

A provider may echo the key it rejected, an HTTP library may put the request URL in its
error (Telegram's token is part of every Bot API URL, percent-encoded there), so the
secret is blanked out as it is and in its URL-encoded forms.
"""

from __future__ import annotations

from urllib.parse import quote

__all__ = ["redact"]


def redact(text: str, secret: str | None, mask: str = "***") -> str:
    """`text` with every occurrence of `secret` (also URL-encoded) replaced by `mask`."""
    if not secret:
        return text
    for form in dict.fromkeys((secret, quote(secret, safe=""), quote(secret, safe=":"))):
        text = text.replace(form, mask)
    return text
