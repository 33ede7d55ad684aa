"""Reindex of 1M JSONL messages into `messages` + full-text index.

Bar (issue #2): ≤ 12 s and ≥ 2× the Python way (orjson + sqlite3 executemany in
one transaction + an FTS5 `rebuild`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import corpus
from smoke import scaled

N_MESSAGES = int(os.environ.get("KLAW_BENCH_MESSAGES", str(scaled(1_000_000, 5_000))))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("reindex-data")
    corpus.jsonl_messages(root, N_MESSAGES)
    return root


@pytest.mark.benchmark(group="reindex-1M")
def test_reindex_klaw(benchmark: Any, data_dir: Path, tmp_path: Path) -> None:
    from klaw import _core

    n = iter(range(100))

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (str(tmp_path / f"klaw{next(n)}.db"),), {}

    stats = benchmark.pedantic(
        lambda db: _core.rebuild_messages(db, str(data_dir)), setup=setup, rounds=2
    )
    assert stats.messages == N_MESSAGES and stats.skipped == 0


@pytest.mark.benchmark(group="reindex-1M")
def test_reindex_baseline_python(benchmark: Any, data_dir: Path, tmp_path: Path) -> None:
    import orjson
    import sqlean

    n = iter(range(100))

    def run(db: str) -> int:
        c = sqlean.connect(db)
        c.executescript(
            """CREATE TABLE messages (id TEXT PRIMARY KEY, channel TEXT NOT NULL,
               chat_id TEXT NOT NULL, role TEXT NOT NULL, type TEXT, content TEXT NOT NULL,
               metadata JSON, created_at TIMESTAMP NOT NULL);
               CREATE VIRTUAL TABLE messages_fts USING fts5(content, content=messages,
                 content_rowid=rowid);"""
        )

        def rows() -> Any:
            for chat in sorted((data_dir / "conversations").iterdir()):
                for f in sorted(chat.glob("*.jsonl")):
                    with f.open("rb") as fh:
                        for line in fh:
                            try:
                                m = orjson.loads(line)
                            except orjson.JSONDecodeError:
                                continue
                            yield (
                                m["id"],
                                m["meta"].get("channel", ""),
                                chat.name,
                                m["role"],
                                m.get("type"),
                                m["content"],
                                orjson.dumps(m["meta"]).decode(),
                                m["ts"],
                            )

        c.executemany("INSERT OR IGNORE INTO messages VALUES (?,?,?,?,?,?,?,?)", rows())
        c.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
        c.commit()
        count = c.execute("SELECT count(*) FROM messages").fetchone()[0]
        c.close()
        return int(count)

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (str(tmp_path / f"py{next(n)}.db"),), {}

    assert benchmark.pedantic(run, setup=setup, rounds=1) == N_MESSAGES
