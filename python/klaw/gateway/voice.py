"""Voice notes to text, as the gateway takes a message in (gateway.yaml `transcription`).

The transcript becomes the message's text and the audio file stays its attachment, so
the JSONL line holds both, the model reads the words, and reindex and the context need
nothing new. Transcription is normalisation of what arrived, like downloading a photo:
the engine never sees audio. It goes through an OpenAI-compatible
`POST {endpoint}/audio/transcriptions` (multipart: file, model, optional language),
which OpenAI, Groq, SiliconFlow and local whisper servers offer.

Nothing is lost when it cannot be done: a note that is too long or too big, a provider
that fails, or no provider at all leaves the message as a file the model is told about,
and the sender gets one line saying why (without a provider: once per chat and run).
A transcript too long for one message goes to the inbox like a long typed text
(`klaw.gateway.core`). A message tried again (storage full, a failure after the upload)
is not transcribed, nor its sender told, a second time: the last results are kept.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import aiohttp

from klaw.config import TranscriptionConfig
from klaw.errors import KlawError
from klaw.redaction import redact
from klaw.wire.protocol import Attachment, Inbound

__all__ = ["NOT_CONFIGURED", "Transcriber", "TranscriptionError", "is_audio"]

log = logging.getLogger("klaw.gateway")

AUDIO_SUFFIXES: Final = frozenset(
    {".ogg", ".oga", ".opus", ".mp3", ".m4a", ".mp4", ".wav", ".webm", ".flac", ".aac"}
)
NOT_CONFIGURED: Final = (
    "I got your voice message but can't listen to it yet: voice notes need a "
    "transcription provider (`transcription` in gateway.yaml, see docs/providers.md). "
    "Until then I only see that a recording arrived."
)
TOO_LONG: Final = "That voice message is {what}; I take up to {limit}. Please send it shorter."
FAILED: Final = "I couldn't transcribe that voice message ({reason}); I only see the file."

Say = Callable[[str, str], Awaitable[None]]  # (chat id, text)
_KEEP_HEARD: Final = 64


class TranscriptionError(KlawError):
    """The provider did not turn the audio into text."""


def is_audio(att: Attachment) -> bool:
    if att.mime and att.mime.split(";")[0].strip().lower().startswith("audio/"):
        return True
    return Path(att.name or att.path).suffix.lower() in AUDIO_SUFFIXES


class Transcriber:
    def __init__(self, config: TranscriptionConfig, workspace: Path, say: Say) -> None:
        self._config = config
        self._workspace = workspace
        self._say = say
        self._told: set[str] = set()  # chats told that no provider is set
        # Messages transcribed lately, by id: a message handled again is not paid twice.
        self._heard: dict[str, Inbound] = {}
        self._session: aiohttp.ClientSession | None = None

    async def transcribed(self, msg: Inbound) -> Inbound:
        """`msg` with its voice notes' words as its text (after a caption, if any)."""
        if not any(is_audio(a) for a in msg.meta.attachments):
            return msg
        heard = self._heard.get(msg.id)
        if heard is None:
            heard = await self._transcribed(msg)
            if len(self._heard) >= _KEEP_HEARD:
                self._heard.pop(next(iter(self._heard)))
            self._heard[msg.id] = heard
        return heard

    def forget(self, msg_id: str) -> None:
        """`msg_id` is stored: a redelivery of it is recognised without the transcript."""
        self._heard.pop(msg_id, None)

    async def _transcribed(self, msg: Inbound) -> Inbound:
        audio = [a for a in msg.meta.attachments if is_audio(a)]
        if not self._config.active:
            if msg.chat_id not in self._told:
                self._told.add(msg.chat_id)
                await self._say(msg.chat_id, NOT_CONFIGURED)
            return msg
        words: list[str] = []
        for att in audio:
            problem = self._too_much(att)
            if problem is not None:
                await self._say(msg.chat_id, problem)
                continue
            try:
                words.append(await self._transcribe(att))
            except TranscriptionError as exc:
                log.warning("transcribing %s of %s failed: %s", att.path, msg.id, exc)
                await self._say(msg.chat_id, FAILED.format(reason=exc))
        text = "\n\n".join(w for w in (msg.content.strip(), *words) if w)
        return msg if not words else msg.model_copy(update={"content": text})

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _too_much(self, att: Attachment) -> str | None:
        cfg = self._config
        if att.duration is not None and att.duration > cfg.max_seconds:
            return TOO_LONG.format(
                what=f"{att.duration / 60:.1f} minutes long", limit=f"{cfg.max_seconds // 60} min"
            )
        if att.size is not None and att.size > cfg.max_mb * 1024 * 1024:
            return TOO_LONG.format(
                what=f"{att.size / 1024 / 1024:.0f} MB", limit=f"{cfg.max_mb} MB"
            )
        return None

    async def _transcribe(self, att: Attachment) -> str:
        cfg = self._config
        path = Path(att.path)
        path = path if path.is_absolute() else self._workspace / path
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise TranscriptionError(f"the recording cannot be read: {exc.strerror}") from exc
        if len(data) > cfg.max_mb * 1024 * 1024:
            raise TranscriptionError(f"the recording is over {cfg.max_mb} MB")
        form = aiohttp.FormData()
        form.add_field(
            "file", data, filename=att.name or path.name, content_type=att.mime or "audio/ogg"
        )
        form.add_field("model", cfg.model)
        form.add_field("response_format", "json")
        if cfg.language:
            form.add_field("language", cfg.language)
        headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        url = cfg.endpoint.rstrip("/") + "/audio/transcriptions"
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=cfg.timeout_s)
            )
        try:
            async with self._session.post(url, data=form, headers=headers) as response:
                body = await response.text()
                if response.status != 200:
                    raise TranscriptionError(f"the provider answered HTTP {response.status}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            reason = redact(str(exc), cfg.api_key)
            raise TranscriptionError(f"the provider could not be reached: {reason}") from exc
        try:
            payload = json.loads(body)
            text = payload["text"]
        except (ValueError, KeyError, TypeError) as exc:
            raise TranscriptionError("the provider's answer has no text") from exc
        if not isinstance(text, str):
            raise TranscriptionError("the provider's answer has no text")
        return text.strip()
