"""Photos from the chat to the model: the context's image placeholders, loading them
within the limits (the Rust core shrinks and turns them upright), and the pipeline
sending them to a vision model while the log keeps only the path."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from klaw.engine.context import ContextInput, StoredMessage, assemble_context, model_limits
from klaw.engine.images import (
    IMAGE_TOKENS,
    MAX_IMAGE_BYTES,
    MAX_IMAGE_SIDE,
    MAX_IMAGES,
    fit_image,
    load_images,
)
from klaw.engine.pipeline import Pipeline
from klaw.llm.router import Router
from klaw.llm.types import ImagePart, Message
from klaw.memory import Memory
from klaw.paths import KlawPaths
from klaw.wire.protocol import Attachment, Inbound, InboundMeta, Outbound
from pictures import png, sample
from scripted_llm import FakeLLM, engine_config

NOW = datetime(2026, 2, 24, 14, 30, tzinfo=ZoneInfo("Europe/Prague"))
T = 10.0


def photo_row(n: int, text: str, *paths: str, mime: str | None = "image/jpeg") -> StoredMessage:
    files = [{"path": p, "mime": mime, "size": 1000} if mime else {"path": p} for p in paths]
    return StoredMessage(
        id=f"msg_{n:04d}",
        channel="telegram",
        chat_id="telegram_1",
        role="user",
        kind=None,
        content=text,
        metadata=json.dumps({"attachments": files}),
        created_at=f"2026-02-24T14:{n:02d}:00Z",
    )


def assemble(workspace: Path, rows: list[StoredMessage], *, vision: bool) -> list[Message]:
    ctx = assemble_context(
        ContextInput(
            workspace=workspace,
            core_memory="",
            summary=None,
            window=rows,
            now=NOW,
            channel="telegram",
            context_budget=100_000,
            max_tokens=1000,
            window_cap=20,
            count_tokens=lambda texts: [len(t) for t in texts],
            vision=vision,
        )
    )
    return ctx.messages[1:]


# --------------------------------------------------------------------- the context


def test_a_model_without_vision_reads_a_note(tmp_path: Path) -> None:
    [msg] = assemble(tmp_path, [photo_row(1, "what is it?", "inbox/a.jpg")], vision=False)
    assert msg.images == []
    assert msg.content == (
        "what is it?\n"
        "[attached file: inbox/a.jpg (image/jpeg, 1000 bytes)]\n"
        "[image inbox/a.jpg not shown: this model does not take images]"
    )


def test_a_vision_model_gets_placeholders_for_the_newest_images(tmp_path: Path) -> None:
    rows = [
        photo_row(1, "first", "inbox/1.jpg", "inbox/2.jpg"),
        photo_row(2, "doc", "inbox/report.pdf", mime="application/pdf"),
        photo_row(3, "more", "inbox/3.png", "inbox/4.jpg", mime=None),  # types from names
        photo_row(4, "last", "inbox/5.webp", "inbox/6.jpg"),
    ]
    # Each row is a unit of its own: no assistant in between is fine for the context.
    first, doc, more, last = assemble(tmp_path, rows, vision=True)
    kept = [i.ref for m in (first, doc, more, last) for i in m.images]
    assert len(kept) == MAX_IMAGES == 4
    assert kept == ["inbox/3.png", "inbox/4.jpg", "inbox/5.webp", "inbox/6.jpg"]
    assert all(i.data == b"" for m in (more, last) for i in m.images)  # not loaded yet
    assert [i.mime for i in more.images] == ["image/png", "image/jpeg"]
    assert first.images == [] and first.content is not None
    for ref in ("inbox/1.jpg", "inbox/2.jpg"):
        assert f"[image {ref} not shown: only the 4 newest images are sent]" in first.content
    assert doc.images == [] and "[attached file: inbox/report.pdf" in (doc.content or "")


def test_images_count_against_the_budget(tmp_path: Path) -> None:
    rows = [photo_row(1, "x", "inbox/a.jpg", "inbox/b.jpg")]
    counted = {}
    for vision in (False, True):
        ctx = assemble_context(
            ContextInput.from_limits(
                model_limits(_config(vision), "fake/m"),
                workspace=tmp_path,
                core_memory="",
                summary=None,
                window=rows,
                now=NOW,
                channel="telegram",
                count_tokens=lambda texts: [len(t) for t in texts],
            )
        )
        counted[vision] = ctx.report.tokens["window"]
        assert bool(ctx.messages[-1].images) is vision
    note_chars = 2 * len("\n[image inbox/a.jpg not shown: this model does not take images]")
    assert counted[True] == counted[False] - note_chars + 2 * IMAGE_TOKENS


def _config(vision: bool) -> Any:
    from klaw.config import EngineConfig

    return EngineConfig.model_validate(
        {
            "providers": {"fake": {"endpoint": "http://127.0.0.1:9/v1"}},
            "models": {"fake/m": {"vision": vision, "contextBudget": 50_000}},
            "routing": {"default": "fake/m", "fallback": []},
        }
    )


# --------------------------------------------------------------------- loading


def load(workspace: Path, *refs: str, text: str = "look") -> Message:
    images = [ImagePart(ref, "image/jpeg", b"") for ref in refs]
    [msg] = load_images([Message("user", text, images=images)], workspace)
    return msg


def put(workspace: Path, name: str, data: bytes) -> str:
    path = workspace / "inbox" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return f"inbox/{name}"


def test_a_photo_within_the_limits_is_sent_as_it_is(tmp_path: Path) -> None:
    ref = put(tmp_path, "p.jpg", sample("photo_1280x960.jpg"))
    msg = load(tmp_path, ref)
    assert msg.content == "look"
    [image] = msg.images
    assert (image.ref, image.mime, image.data) == (ref, "image/jpeg", sample("photo_1280x960.jpg"))


def test_big_photos_shrink_and_sideways_photos_turn_upright(tmp_path: Path) -> None:
    big = put(tmp_path, "big.jpg", sample("photo_3000x2000.jpg"))
    side = put(tmp_path, "side.jpg", sample("sideways_exif6.jpg"))
    heavy = put(tmp_path, "heavy.png", png(1500, 1000, noise=True))  # 4.5 MB
    msg = load(tmp_path, big, side, heavy)
    sizes = [fit_image(i.data, 100_000, 1 << 30) for i in msg.images]  # reads sizes only
    assert [(s.width, s.height, s.resized) for s in sizes] == [
        (MAX_IMAGE_SIDE, 1045, False),
        (32, 64, False),
        (1500, 1000, False),
    ]
    assert [i.mime for i in msg.images] == ["image/jpeg", "image/jpeg", "image/jpeg"]
    assert all(len(i.data) <= MAX_IMAGE_BYTES for i in msg.images)


def test_images_that_cannot_be_sent_become_notes(tmp_path: Path) -> None:
    gif = put(tmp_path, "anim.gif", b"GIF89a" + b"\0" * 100)
    broken = put(tmp_path, "broken.jpg", b"\xff\xd8\xff\xe0 not really")
    (tmp_path.parent / "secret.jpg").write_bytes(sample("photo_1280x960.jpg"))
    msg = load(tmp_path, gif, broken, "inbox/gone.jpg", "../secret.jpg", text="")
    assert msg.images == []
    lines = (msg.content or "").splitlines()
    assert lines[0] == (
        "[image inbox/anim.gif not shown: image/gif is not sent to models: use JPEG, PNG or WebP]"
    )
    assert lines[1].startswith("[image inbox/broken.jpg not shown: the image cannot be")
    assert lines[2:] == [
        "[image inbox/gone.jpg not shown: the file is no longer there]",
        "[image ../secret.jpg not shown: the file is outside the workspace]",
    ]


# --------------------------------------------------------------------- the pipeline


async def _turn(
    tmp_path: Path,
    klaw_home: KlawPaths,
    memory: Memory,
    llm: FakeLLM,
    *,
    vision: bool,
) -> dict[str, Any]:
    ref = put(klaw_home.workspace, "telegram_1_5_photo.jpg", sample("photo_1280x960.jpg"))
    config = engine_config(tmp_path, llm.url)
    config.models["fake/m"].vision = vision
    router = Router(config)
    pipeline = Pipeline(config, klaw_home, memory, router)
    sent: list[Any] = []

    async def reply(msg: Any) -> None:
        sent.append(msg)

    msg = Inbound(
        id="telegram_1_5",
        channel="telegram",
        chat_id="telegram_1",
        ts=datetime.now(UTC),
        content="what is this?",
        meta=InboundMeta(
            attachments=[Attachment(path=ref, mime="image/jpeg", name=None, size=19828)]
        ),
    )
    llm.answer("A blue square.")
    try:
        await asyncio.wait_for(pipeline.handle(msg, reply), T)
    finally:
        await asyncio.wait_for(pipeline.aclose(), T)
        await asyncio.wait_for(router.aclose(), T)
    assert isinstance(sent[-1], Outbound) and sent[-1].content == "A blue square."
    request: dict[str, Any] = llm.requests[-1]
    return request


async def test_a_photo_reaches_a_vision_model_and_the_log_keeps_its_path(
    tmp_path: Path, klaw_home: KlawPaths, memory: Memory, llm: FakeLLM
) -> None:
    request = await _turn(tmp_path, klaw_home, memory, llm, vision=True)
    user = request["messages"][-1]
    data = base64.b64encode(sample("photo_1280x960.jpg")).decode()
    assert user["content"] == [
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{data}"}},
        {
            "type": "text",
            "text": "what is this?\n"
            "[attached file: inbox/telegram_1_5_photo.jpg (image/jpeg, 19 KiB)]",
        },
    ]
    stored = memory.store.recent_messages("telegram_1", None, 10)
    assert [r.role for r in stored] == ["user", "assistant"]
    assert "inbox/telegram_1_5_photo.jpg" in (stored[0].metadata or "")
    assert all(data[:40] not in (r.metadata or "") + r.content for r in stored)


async def test_a_photo_to_a_model_without_vision_is_a_note(
    tmp_path: Path, klaw_home: KlawPaths, memory: Memory, llm: FakeLLM
) -> None:
    request = await _turn(tmp_path, klaw_home, memory, llm, vision=False)
    assert request["messages"][-1] == {
        "role": "user",
        "content": "what is this?\n"
        "[attached file: inbox/telegram_1_5_photo.jpg (image/jpeg, 19 KiB)]\n"
        "[image inbox/telegram_1_5_photo.jpg not shown: this model does not take images]",
    }


@pytest.mark.parametrize("vision", [True])
def test_model_limits_read_vision(vision: bool) -> None:
    assert model_limits(_config(vision), "fake/m").vision is vision
    assert model_limits(_config(vision), "other/x").vision is False
