"""`klaw reindex` rebuilds each chat's session model from session_break and model_switch lines."""

from __future__ import annotations

import json

import pytest

from klaw import _core
from klaw.config import load_engine_config
from klaw.memory.api import rebuild
from klaw.paths import KlawPaths

CHAT = "telegram_1"


def line(i: int, kind: str | None = None, model: str | None = None) -> str:
    meta: dict[str, str] = {"channel": "telegram", "chat_id": "1"}
    if model is not None:
        meta["model"] = model
    rec: dict[str, object] = {
        "id": f"m{i:03d}",
        "ts": f"2026-02-24T10:{i:02d}:00Z",
        "role": "system" if kind else "user",
        "content": "" if kind else f"message {i}",
        "meta": meta,
    }
    if kind:
        rec["type"] = kind
    return json.dumps(rec)


def session_after_reindex(
    paths: KlawPaths, backend: object, days: dict[str, list[str]]
) -> tuple[str, str]:
    chat_dir = paths.conversations / CHAT
    chat_dir.mkdir(parents=True)
    for day, lines in days.items():
        (chat_dir / f"{day}.jsonl").write_text("\n".join(lines) + "\n")
    config = load_engine_config(paths.engine_config)
    rebuild(paths, config, backend=backend, progress=False)  # type: ignore[arg-type]
    store = _core.Store(str(paths.db))
    try:
        session = store.get_session(CHAT)
    finally:
        store.close()
    assert session is not None
    return session.model, session.segment_start


def default_model(paths: KlawPaths) -> str:
    return str(load_engine_config(paths.engine_config).routing.default)


@pytest.mark.parametrize(
    ("lines", "model", "segment_minute"),
    [
        # A /model switch after the break: the switched model.
        (
            [line(0), line(1, "session_break", "a/one"), line(2), line(3, "model_switch", "b/two")],
            "b/two",
            1,
        ),
        # A switch, then /new without a model: the switched model is kept.
        (
            [line(0), line(1, "model_switch", "b/two"), line(2), line(3, "session_break")],
            "b/two",
            3,
        ),
        # A switch, then a break that names a model: the break's model.
        (
            [line(0, "model_switch", "b/two"), line(1, "session_break", "c/three"), line(2)],
            "c/three",
            1,
        ),
        # Several switches without any break: the latest; the segment is the whole chat.
        (
            [line(0), line(1, "model_switch", "b/two"), line(2, "model_switch", "d/four")],
            "d/four",
            0,
        ),
    ],
)
def test_model_switch_sets_the_session_model(
    klaw_home: KlawPaths,
    backend: object,
    lines: list[str],
    model: str,
    segment_minute: int,
) -> None:
    got = session_after_reindex(klaw_home, backend, {"2026-02-24": lines})
    assert got == (model, f"2026-02-24T10:{segment_minute:02d}:00Z")


def test_switch_in_an_earlier_day_file_survives_a_later_plain_break(
    klaw_home: KlawPaths, backend: object
) -> None:
    days = {
        "2026-02-23": [line(0), line(1, "model_switch", "b/two")],
        "2026-02-24": [line(2, "session_break"), line(3)],
    }
    assert session_after_reindex(klaw_home, backend, days) == ("b/two", "2026-02-24T10:02:00Z")


def test_no_markers_give_the_default_model(klaw_home: KlawPaths, backend: object) -> None:
    got = session_after_reindex(
        klaw_home, backend, {"2026-02-24": [line(0), line(1), line(2, "model_switch")]}
    )
    assert got == (default_model(klaw_home), "2026-02-24T10:00:00Z")
