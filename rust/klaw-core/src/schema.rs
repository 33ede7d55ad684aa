//! klaw.db schema (design §5.3) and its migrations, keyed by `PRAGMA user_version`.

use crate::error::{CoreError, Result};
use rusqlite::Connection;

pub const SCHEMA_VERSION: i64 = 4;

/// Migration `i` brings the schema from version `i` to `i + 1`.
fn migrations(dim: usize) -> Vec<String> {
    vec![
        format!(
            r"
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);

-- Mirror of the JSONL logs. No WITHOUT ROWID: messages_fts is bound to the rowid.
CREATE TABLE messages (
    id TEXT PRIMARY KEY,
    channel TEXT NOT NULL,
    chat_id TEXT NOT NULL,
    role TEXT NOT NULL,
    type TEXT,
    content TEXT NOT NULL,
    metadata JSON,
    created_at TIMESTAMP NOT NULL
);
CREATE INDEX idx_messages_chat ON messages(chat_id, created_at DESC);
CREATE VIRTUAL TABLE messages_fts USING fts5(content, content=messages, content_rowid=rowid, detail=column, tokenize='unicode61 remove_diacritics 0');
CREATE TRIGGER messages_ai AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.rowid, new.content);
END;
CREATE TRIGGER messages_ad AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
END;
CREATE TRIGGER messages_au AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.rowid, new.content);
END;

CREATE TABLE sessions (
    chat_id TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    segment_start TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL
);

CREATE TABLE summaries (
    id INTEGER PRIMARY KEY,
    chat_id TEXT NOT NULL,
    from_message_id TEXT,
    to_message_id TEXT,
    file_path TEXT NOT NULL UNIQUE,
    created_at TIMESTAMP NOT NULL
);

-- Files indexed into archival memory: unchanged hashes are skipped.
CREATE TABLE files (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    source TEXT NOT NULL,
    hash TEXT NOT NULL,
    mtime REAL NOT NULL,
    size INTEGER NOT NULL,
    indexed_at TIMESTAMP NOT NULL
);

CREATE TABLE memory_chunks (
    id INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    chat_id TEXT,
    content TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP,
    file_id INTEGER REFERENCES files(id) ON DELETE CASCADE,
    start_line INTEGER,
    end_line INTEGER,
    heading TEXT,
    chunk_hash TEXT NOT NULL
);
CREATE INDEX idx_chunks_file ON memory_chunks(file_id);
CREATE INDEX idx_chunks_created ON memory_chunks(created_at);
CREATE VIRTUAL TABLE vec_memory USING vec0(embedding float[{dim}], chunk_size=16);

CREATE TABLE doc_chunks (
    id INTEGER PRIMARY KEY,
    file TEXT NOT NULL,
    section TEXT,
    content TEXT NOT NULL,
    version TEXT NOT NULL
);
CREATE VIRTUAL TABLE vec_docs USING vec0(embedding float[{dim}]);
"
        ),
        // 2: the documentation index gets chunk order, line ranges and a keyword
        // index (the docs are English prose: Porter stemming).
        r"
ALTER TABLE doc_chunks ADD COLUMN chunk INTEGER NOT NULL DEFAULT 0;
ALTER TABLE doc_chunks ADD COLUMN start_line INTEGER;
ALTER TABLE doc_chunks ADD COLUMN end_line INTEGER;
CREATE INDEX idx_doc_chunks_file ON doc_chunks(file, chunk);
CREATE VIRTUAL TABLE docs_fts USING fts5(section, content, content=doc_chunks, content_rowid=id, tokenize='porter unicode61');
"
        .to_string(),
        // 3: the docs are searched like archival memory (int8 + tantivy, in memory),
        // so their FTS5 table goes.
        "DROP TABLE IF EXISTS docs_fts;".to_string(),
        // 4: retained facts (store/facts.rs), one per fact chunk; an entity's name
        // has a row with term NULL and one per analysed term of it.
        r"
CREATE TABLE facts (
    chunk_id INTEGER PRIMARY KEY REFERENCES memory_chunks(id) ON DELETE CASCADE,
    fact_id TEXT NOT NULL,
    kind TEXT,
    confidence REAL,
    attribute TEXT,
    day TEXT,
    start_day TEXT,
    end_day TEXT,
    superseded_by TEXT
);
CREATE INDEX idx_facts_fact ON facts(fact_id);
CREATE INDEX idx_facts_kind ON facts(kind);
CREATE TABLE fact_entities (
    chunk_id INTEGER NOT NULL REFERENCES facts(chunk_id) ON DELETE CASCADE,
    ord INTEGER NOT NULL,
    name TEXT NOT NULL,
    term TEXT
);
CREATE INDEX idx_fact_entities_term ON fact_entities(term);
CREATE INDEX idx_fact_entities_chunk ON fact_entities(chunk_id);
"
        .to_string(),
    ]
}

/// Creates or upgrades the schema. Refuses a database newer than this code.
pub fn migrate(conn: &mut Connection, dim: usize) -> Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(CoreError::Corrupt(format!(
            "klaw.db has schema version {version}, newer than this Klaw ({SCHEMA_VERSION}): \
             upgrade Klaw or run `klaw reindex`"
        )));
    }
    let all = migrations(dim);
    for (i, sql) in all.iter().enumerate().skip(version as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES ('dim', ?1)",
            [dim.to_string()],
        )?;
        tx.commit()?;
    }
    let stored: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'dim'", [], |r| r.get(0))
        .ok();
    if let Some(s) = stored {
        if s != dim.to_string() {
            return Err(CoreError::InvalidInput(format!(
                "klaw.db stores {s}-dimensional vectors but the embedding model gives {dim}: \
                 run `klaw reindex` to rebuild with the current model"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_1_database_is_upgraded_in_place() {
        crate::store::register_sqlite_vec();
        let mut c = Connection::open_in_memory().unwrap();
        c.execute_batch(&migrations(4)[0]).unwrap();
        c.pragma_update(None, "user_version", 1).unwrap();
        c.execute(
            "INSERT INTO doc_chunks(file, section, content, version) VALUES ('a.md', NULL, 'old', '0.0.1')",
            [],
        )
        .unwrap();
        migrate(&mut c, 4).unwrap();
        let v: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        let row: (i64, Option<i64>) = c
            .query_row("SELECT chunk, start_line FROM doc_chunks", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!(row, (0, None));
        let fts: i64 = c
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'docs_fts'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(fts, 0);
        // Running it again is a no-op.
        migrate(&mut c, 4).unwrap();
    }
}
