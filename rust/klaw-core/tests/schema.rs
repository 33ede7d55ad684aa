//! klaw.db schema (TASK-007 SchemaTest), read back with plain SQL.

use klaw_core::store::{MessageRow, Store};
use rusqlite::Connection;

fn open() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("klaw.db");
    Store::open(&path, 384, 1).unwrap().close().unwrap();
    (dir, path)
}

fn names(c: &Connection, kind: &str) -> Vec<String> {
    let mut st = c
        .prepare("SELECT name FROM sqlite_master WHERE type = ?1 ORDER BY name")
        .unwrap();
    st.query_map([kind], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn creates_all_required_tables() {
    let (_d, path) = open();
    klaw_core::store::register_sqlite_vec();
    let c = Connection::open(&path).unwrap();
    let tables = names(&c, "table");
    for t in [
        "messages",
        "messages_fts",
        "sessions",
        "summaries",
        "memory_chunks",
        "vec_memory",
        "doc_chunks",
        "vec_docs",
        "files",
        "meta",
    ] {
        assert!(
            tables.iter().any(|n| n == t),
            "missing table {t}: {tables:?}"
        );
    }
    let version: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, klaw_core::schema::SCHEMA_VERSION);
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn messages_table_has_its_index() {
    let (_d, path) = open();
    let c = Connection::open(&path).unwrap();
    let sql: String = c
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'idx_messages_chat'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(sql.contains("messages(chat_id, created_at DESC)"), "{sql}");
}

#[test]
fn vec_memory_is_float_384() {
    let (_d, path) = open();
    let c = Connection::open(&path).unwrap();
    let sql: String = c
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'vec_memory'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(sql.contains("float[384]"), "{sql}");
}

#[test]
fn messages_fts_follows_the_content_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("klaw.db");
    let s = Store::open(&path, 384, 1).unwrap();
    let row = |id: &str, content: &str| MessageRow {
        id: id.into(),
        channel: "telegram".into(),
        chat_id: "telegram_1".into(),
        role: "user".into(),
        kind: None,
        content: content.into(),
        metadata: None,
        created_at: "2026-02-24T10:00:00Z".into(),
    };
    s.insert_messages(&[row("a", "apples and pears"), row("b", "only pears")])
        .unwrap();
    assert_eq!(s.search_messages("apples", 10).unwrap().len(), 1);
    assert_eq!(s.search_messages("pears", 10).unwrap().len(), 2);
    s.close().unwrap();
    // Deleting a message removes it from the full-text index (trigger).
    klaw_core::store::register_sqlite_vec();
    let c = Connection::open(&path).unwrap();
    c.execute("DELETE FROM messages WHERE id = 'a'", [])
        .unwrap();
    let n: i64 = c
        .query_row(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'pears'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 1);
}

#[test]
fn foreign_keys_are_enforced() {
    let (_d, path) = open();
    let c = Connection::open(&path).unwrap();
    c.pragma_update(None, "foreign_keys", "ON").unwrap();
    let err = c.execute(
        "INSERT INTO memory_chunks(source, content, created_at, file_id, chunk_hash) \
         VALUES ('x', 'y', '2026-01-01', 999, 'h')",
        [],
    );
    assert!(
        err.is_err(),
        "a chunk pointing at a missing file must be refused"
    );
}
