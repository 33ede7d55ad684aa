"""MEMORY.md within its share of the system prompt (issue 25 item 6): the context as
the engine assembles it, with the real token counter."""

from __future__ import annotations

from pathlib import Path

from test_context import make, system_text

from klaw.memory.rows import count_tokens_batch


def context(ws: Path, **kw: object) -> tuple[str, dict[str, int]]:
    ctx = make(ws, count_tokens=count_tokens_batch, **kw)
    return system_text(ctx), ctx.report.tokens


def long_memory_md() -> str:
    """A MEMORY.md of 240 entries (~4,000 tokens)."""
    return "# MEMORY.md\n\n" + "".join(
        f"- entry {i}: the owner wrote this down.\n" for i in range(240)
    )


def test_memory_md_in_the_prompt_whole_within_its_share(tmp_path: Path) -> None:
    (tmp_path / "MEMORY.md").write_text("# MEMORY.md\n\n- Mara prefers tea.\n")
    text, tokens = context(tmp_path, memory_md_tokens=1200)
    assert "## Long-Term Memory (MEMORY.md)\n# MEMORY.md\n\n- Mara prefers tea." in text
    assert "MEMORY.md" in tokens
    group, _ = context(tmp_path, memory_md_tokens=1200, chat_kind="group")
    assert "Mara prefers tea" not in group  # private memory, like USER.md
    off, _ = context(tmp_path, memory_md_tokens=0)
    assert "Mara prefers tea" not in off


def test_memory_md_over_its_share_is_cut_with_a_note_and_the_file_untouched(
    tmp_path: Path,
) -> None:
    original = long_memory_md()
    (tmp_path / "MEMORY.md").write_text(original)
    text, tokens = context(tmp_path, memory_md_tokens=300)
    assert tokens["MEMORY.md"] <= 300 + 20  # its section heading on top
    assert "- entry 0:" in text and "- entry 239:" not in text
    assert "find the rest with memory_search" in text
    assert (tmp_path / "MEMORY.md").read_text() == original  # never shortened on disk


def test_memory_md_gives_way_to_the_other_always_in_prompt_parts(tmp_path: Path) -> None:
    (tmp_path / "MEMORY.md").write_text(long_memory_md())
    (tmp_path / "SOUL.md").write_text("soul " * 900)
    _, alone = context(tmp_path, memory_md_tokens=1200)
    _, capped = context(tmp_path, memory_md_tokens=1200, memory_max_tokens=1500)
    persona = capped["SOUL.md"]
    assert capped["MEMORY.md"] < alone["MEMORY.md"]
    assert persona + capped["MEMORY.md"] <= 1500 + 40  # headings of the two sections


def test_engine_yaml_sets_the_share(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from klaw.config import load_engine_config
    from klaw.engine.context import ContextInput, assemble_context, model_limits

    cfg_path = tmp_path / "engine.yaml"
    cfg_path.write_text("memory:\n  prompt:\n    memoryMdTokens: 60\n")
    cfg = load_engine_config(cfg_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_text(long_memory_md())
    limits = model_limits(cfg, cfg.routing.default)
    assert (limits.memory_md_tokens, limits.memory_max_tokens) == (60, 5000)
    ctx = assemble_context(
        ContextInput.from_limits(
            limits,
            workspace=ws,
            core_memory="",
            summary=None,
            window=[],
            now=datetime(2026, 11, 27, tzinfo=UTC),
            channel="telegram",
        )
    )
    assert ctx.report.tokens["MEMORY.md"] <= 60 + 20
