//! A chat's current session (its model and segment start) and the summaries written
//! for it.

use super::Store;
use crate::error::{CoreError, Result};
use rusqlite::{params, OptionalExtension};

impl Store {
    pub fn upsert_session(
        &self,
        chat_id: &str,
        model: &str,
        segment_start: &str,
        created_at: &str,
    ) -> Result<()> {
        self.write(|_inner, conn| {
            conn.execute(
                "INSERT INTO sessions(chat_id, model, segment_start, created_at) VALUES (?1,?2,?3,?4) \
                 ON CONFLICT(chat_id) DO UPDATE SET model = excluded.model, segment_start = excluded.segment_start",
                params![chat_id, model, segment_start, created_at],
            )?;
            Ok(())
        })
    }

    pub fn get_session(&self, chat_id: &str) -> Result<Option<(String, String, String)>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            Ok(r.query_row(
                "SELECT model, segment_start, created_at FROM sessions WHERE chat_id = ?1",
                [chat_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?)
        })
    }

    pub fn add_summary(
        &self,
        chat_id: &str,
        from_id: Option<&str>,
        to_id: Option<&str>,
        file_path: &str,
        created_at: &str,
    ) -> Result<()> {
        self.write(|_inner, conn| {
            conn.execute(
                "INSERT OR REPLACE INTO summaries(chat_id, from_message_id, to_message_id, file_path, created_at) \
                 VALUES (?1,?2,?3,?4,?5)",
                params![chat_id, from_id, to_id, file_path, created_at],
            )?;
            Ok(())
        })
    }
}
