"""One redaction for every secret in error text: LLM keys and bot tokens (P5)."""

from __future__ import annotations

from klaw.redaction import redact

TOKEN = "123456:AAE-secret_token"


def test_a_secret_is_blanked_as_it_is_and_url_encoded() -> None:
    text = f"POST https://api.telegram.org/bot123456%3AAAE-secret_token/getMe: {TOKEN} refused"
    assert redact(text, TOKEN, "<token>") == (
        "POST https://api.telegram.org/bot<token>/getMe: <token> refused"
    )
    assert redact("Incorrect API key provided: sk-abc", "sk-abc") == (
        "Incorrect API key provided: ***"
    )


def test_no_secret_leaves_the_text_alone() -> None:
    assert redact("nothing to hide", None) == "nothing to hide"
    assert redact("nothing to hide", "") == "nothing to hide"
