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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::open;

    fn msg(id: &str, chat_id: &str, role: &str, content: &str, at: &str) -> MessageRow {
        MessageRow {
            id: id.into(),
            channel: "telegram".into(),
            chat_id: chat_id.into(),
            role: role.into(),
            kind: None,
            content: content.into(),
            metadata: None,
            created_at: at.into(),
        }
    }

    fn ids(rows: Vec<MessageRow>) -> Vec<String> {
        rows.into_iter().map(|m| m.id).collect()
    }

    #[test]
    fn messages_are_stored_once_and_read_back_in_log_order() {
        let (_d, s) = open(4);
        let rows = [
            msg(
                "m1",
                "c1",
                "user",
                "hello about the garden",
                "2026-01-01T10:00:00Z",
            ),
            msg(
                "m2",
                "c1",
                "assistant",
                "the garden needs water",
                "2026-01-01T10:00:01Z",
            ),
            msg("m3", "c2", "user", "another chat", "2026-01-01T10:00:02Z"),
        ];
        assert_eq!(s.insert_messages(&rows).unwrap(), 3);
        assert_eq!(s.insert_messages(&rows).unwrap(), 0); // redelivery is harmless
        assert_eq!(s.count_messages().unwrap(), 3);

        assert_eq!(
            ids(s.recent_messages("c1", None, 20).unwrap()),
            ["m1", "m2"]
        );
        assert_eq!(ids(s.recent_messages("c1", None, 1).unwrap()), ["m2"]);
        let since = Some("2026-01-01T10:00:01Z");
        assert_eq!(ids(s.recent_messages("c1", since, 20).unwrap()), ["m2"]);

        let after = s.messages_after("c1", 0, 500).unwrap();
        let got: Vec<_> = after.iter().map(|(_, m)| m.id.as_str()).collect();
        assert_eq!(got, ["m1", "m2"]);
        assert!(s.messages_after("c1", after[1].0, 500).unwrap().is_empty());
        let mut heads = s.chat_heads().unwrap();
        heads.sort();
        assert_eq!(heads[0], ("c1".to_string(), after[1].0));
        assert_eq!(heads[1].0, "c2");

        assert_eq!(ids(s.search_messages("water", 20).unwrap()), ["m2"]);
        assert!(s.search_messages("!!!", 20).unwrap().is_empty());
    }

    #[test]
    fn free_text_becomes_an_fts5_query_of_quoted_words() {
        assert_eq!(
            fts5_or_query("where's the \"key\"? NEAR(x"),
            "\"where\" OR \"s\" OR \"the\" OR \"key\" OR \"NEAR\" OR \"x\""
        );
        assert_eq!(fts5_or_query("?! --"), "");
    }
}
