"""Photos for models with `vision: true` (docs/providers.md, "Images").

The gateway saves a photo under the workspace (`inbox/`) and the inbound names it in
`meta.attachments`. The context (`klaw.engine.context`) turns an image attachment of a
user message into an `ImagePart` placeholder: its workspace path and type, no bytes.
`load_images` then reads each placeholder's file off the event loop and fits it to the
limits below through the Rust core (`klaw._core.fit_image`: JPEG and PNG decoded, shrunk
and turned upright only when needed; a small WebP passed through). An image that cannot
be sent becomes a one-line note saying why; the turn goes on.

The conversation log and klaw.db keep only the attachment's path: the bytes exist in
memory for one turn, never in a log line.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from klaw._core import FittedImage, fit_image
from klaw.errors import InvalidInput
from klaw.llm.types import ImagePart, Message, not_shown, with_notes

__all__ = [
    "IMAGE_TOKENS",
    "MAX_IMAGES",
    "MAX_IMAGE_BYTES",
    "MAX_IMAGE_SIDE",
    "MAX_SOURCE_BYTES",
    "FittedImage",
    "ImageUnusable",
    "fit_image",
    "image_placeholder",
    "load_image",
    "load_images",
    "not_shown",
]

log = logging.getLogger("klaw.engine")

#: Longest side sent: Anthropic's recommended size; OpenAI and Gemini scale larger
#: images down themselves, so more pixels would only cost upload time.
MAX_IMAGE_SIDE: Final = 1568
#: Bytes of one image: base64 makes it 5,000,000, Anthropic's limit per image (OpenAI
#: takes 20 MB, Gemini 20 MB for the whole request).
MAX_IMAGE_BYTES: Final = 3_750_000
#: A file bigger than this is not even read (Telegram's download cap is 20 MB).
MAX_SOURCE_BYTES: Final = 20 * 1024 * 1024
#: Images per request, newest first: an album of photos must not fill the budget.
MAX_IMAGES: Final = 4
#: Context-budget tokens counted per image sent: Anthropic's cost at MAX_IMAGE_SIDE
#: (~1.15 MP after its own resize); OpenAI (high detail) and Gemini charge 258-1,120.
IMAGE_TOKENS: Final = 1600

_IMAGE_SUFFIXES: Final = frozenset({".jpg", ".jpeg", ".png", ".webp"})
_CACHE_SIZE: Final = 8


class ImageUnusable(Exception):
    """The image cannot be sent; the message is the reason, phrased for the model."""


def image_placeholder(attachment: Mapping[str, Any]) -> ImagePart | None:
    """An unloaded `ImagePart` for an attachment that looks like an image, else None."""
    path = attachment.get("path")
    if not isinstance(path, str) or not path:
        return None
    mime = attachment.get("mime")
    if isinstance(mime, str) and mime.lower().startswith("image/"):
        return ImagePart(path, mime.lower(), b"")
    if not mime or mime == "application/octet-stream":
        suffix = Path(path).suffix.lower()
        if suffix in _IMAGE_SUFFIXES:
            kind = "jpeg" if suffix in (".jpg", ".jpeg") else suffix[1:]
            return ImagePart(path, f"image/{kind}", b"")
    return None


# Fitting a 12 MP photo takes ~0.3 s (x86) to ~0.8 s (a Pi): the same photo stays in the
# window for several turns, so the last few results are kept, keyed by file identity.
_cache: OrderedDict[tuple[str, int, int], FittedImage] = OrderedDict()
_cache_lock = threading.Lock()


def load_image(workspace: Path, ref: str) -> FittedImage:
    """The image at `ref` (relative to the workspace), fitted to the limits.

    Raises ImageUnusable with a reason for the model: missing, outside the workspace,
    too big to read, not an image Klaw can send.
    """
    root = workspace.resolve()
    path = (root / ref).resolve()
    if not path.is_relative_to(root):
        raise ImageUnusable("the file is outside the workspace")
    try:
        st = path.stat()
    except OSError:
        raise ImageUnusable("the file is no longer there") from None
    if st.st_size > MAX_SOURCE_BYTES:
        raise ImageUnusable(f"the file is larger than {MAX_SOURCE_BYTES // (1024 * 1024)} MB")
    key = (str(path), st.st_mtime_ns, st.st_size)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImageUnusable(f"the file cannot be read ({exc.strerror})") from None
    try:
        fitted = fit_image(data, MAX_IMAGE_SIDE, MAX_IMAGE_BYTES)
    except InvalidInput as exc:
        raise ImageUnusable(" ".join(str(exc).split())) from None
    with _cache_lock:
        _cache[key] = fitted
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return fitted


def load_images(messages: Sequence[Message], workspace: Path) -> list[Message]:
    """`messages` with every image placeholder loaded, or replaced by a note saying why
    it could not be (blocking: run it in a worker thread)."""
    out: list[Message] = []
    for m in messages:
        if not any(not image.data for image in m.images):
            out.append(m)
            continue
        images: list[ImagePart] = []
        notes: list[str] = []
        for image in m.images:
            if image.data:
                images.append(image)
                continue
            try:
                fitted = load_image(workspace, image.ref)
            except ImageUnusable as exc:
                log.info("image %s not sent: %s", image.ref, exc)
                notes.append(not_shown(image, str(exc)))
                continue
            if fitted.resized:
                log.debug("image %s fitted to %dx%d", image.ref, fitted.width, fitted.height)
            images.append(ImagePart(image.ref, fitted.mime, fitted.data))
        out.append(with_notes(m, images, notes))
    return out
