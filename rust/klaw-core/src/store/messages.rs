//! Recall memory: the conversation messages klaw.db holds (rebuilt from the JSONL
//! logs), read back by chat, by position and by full-text search.

use super::Store;
use crate::error::{CoreError, Result};
use rusqlite::params;

#[derive(Clone, Debug)]
pub struct MessageRow {
    pub id: String,
    pub channel: String,
    pub chat_id: String,
    pub role: String,
    pub kind: Option<String>,
    pub content: String,
    pub metadata: Option<String>,
    pub created_at: String,
}

impl Store {
    /// Inserts messages; an id already present is skipped (redelivery is harmless).
    /// Returns how many were new.
    pub fn insert_messages(&self, rows: &[MessageRow]) -> Result<usize> {
        self.write(|_inner, conn| {
            let tx = conn.transaction()?;
            let mut n = 0;
            {
                let mut st = tx.prepare_cached(
                    "INSERT OR IGNORE INTO messages(id, channel, chat_id, role, type, content, metadata, \
                     created_at) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)",
                )?;
                for m in rows {
                    n += st.execute(params![
                        m.id, m.channel, m.chat_id, m.role, m.kind, m.content, m.metadata, m.created_at
                    ])?;
                }
            }
            tx.commit()?;
            Ok(n)
        })
    }

    pub fn count_messages(&self) -> Result<i64> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            Ok(r.query_row("SELECT count(*) FROM messages", [], |r| r.get(0))?)
        })
    }

    /// The last `limit` messages of a chat after `since` (segment start), oldest first.
    pub fn recent_messages(
        &self,
        chat_id: &str,
        since: Option<&str>,
        limit: usize,
    ) -> Result<Vec<MessageRow>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut st = r.prepare_cached(
                "SELECT id, channel, chat_id, role, type, content, metadata, created_at FROM messages \
                 WHERE chat_id = ?1 AND created_at >= ?2 ORDER BY created_at DESC, rowid DESC LIMIT ?3",
            )?;
            let mut rows: Vec<MessageRow> = st
                .query_map(params![chat_id, since.unwrap_or(""), limit as i64], row_to_message)?
                .collect::<rusqlite::Result<_>>()?;
            rows.reverse();
            Ok(rows)
        })
    }

    /// Messages of `chat_id` stored after row `after` (rowid order = log order), with
    /// their rowids: what the conversation index has not seen yet.
    pub fn messages_after(
        &self,
        chat_id: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, MessageRow)>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut st = r.prepare_cached(
                "SELECT id, channel, chat_id, role, type, content, metadata, created_at, rowid \
                 FROM messages WHERE chat_id = ?1 AND rowid > ?2 ORDER BY rowid LIMIT ?3",
            )?;
            let rows = st
                .query_map(params![chat_id, after, limit as i64], |r| {
                    Ok((r.get::<_, i64>(8)?, row_to_message(r)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
    }

    /// Every chat with its newest message's rowid.
    pub fn chat_heads(&self) -> Result<Vec<(String, i64)>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut st =
                r.prepare_cached("SELECT chat_id, MAX(rowid) FROM messages GROUP BY chat_id")?;
            let rows = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
    }

    /// Full-text search over messages (FTS5, unicode61), best first.
    pub fn search_messages(&self, query: &str, limit: usize) -> Result<Vec<MessageRow>> {
        let fts = fts5_or_query(query);
        if fts.is_empty() {
            return Ok(Vec::new());
        }
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut st = r.prepare_cached(
                "SELECT m.id, m.channel, m.chat_id, m.role, m.type, m.content, m.metadata, m.created_at \
                 FROM messages_fts JOIN messages m ON m.rowid = messages_fts.rowid \
                 WHERE messages_fts MATCH ?1 ORDER BY rank LIMIT ?2",
            )?;
            let rows = st
                .query_map(params![fts, limit as i64], row_to_message)?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
    }
}

fn row_to_message(r: &rusqlite::Row<'_>) -> rusqlite::Result<MessageRow> {
    Ok(MessageRow {
        id: r.get(0)?,
        channel: r.get(1)?,
        chat_id: r.get(2)?,
        role: r.get(3)?,
        kind: r.get(4)?,
        content: r.get(5)?,
        metadata: r.get(6)?,
        created_at: r.get(7)?,
    })
}

/// Turns free text into a safe FTS5 OR query of quoted terms.
pub fn fts5_or_query(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| format!("\"{w}\""))
        .collect::<Vec<_>>()
        .join(" OR ")
}
