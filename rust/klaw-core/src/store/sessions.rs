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

#[cfg(test)]
mod tests {
    use crate::store::testing::open;

    #[test]
    fn a_session_keeps_its_creation_and_a_summary_file_is_recorded_once() {
        let (_d, s) = open(4);
        let (day1, day2) = ("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z");
        s.upsert_session("c1", "glm/glm-5", day1, day1).unwrap();
        s.upsert_session("c1", "deepseek/deepseek-chat", day2, day2)
            .unwrap();
        let (model, start, created) = s.get_session("c1").unwrap().unwrap();
        assert_eq!(
            (model.as_str(), start.as_str(), created.as_str()),
            ("deepseek/deepseek-chat", day2, day1)
        );
        assert_eq!(s.get_session("nope").unwrap(), None);

        let first = "summaries/c1/0001.md";
        s.add_summary("c1", Some("m1"), Some("m9"), first, day1)
            .unwrap();
        s.add_summary("c1", Some("m1"), Some("m12"), first, day2)
            .unwrap();
        s.add_summary("c1", None, None, "summaries/c1/0002.md", day2)
            .unwrap();
        let stats = s.stats().unwrap();
        assert!(stats.contains(&("summaries".to_string(), 2)), "{stats:?}");
        assert!(stats.contains(&("sessions".to_string(), 1)), "{stats:?}");
    }
}
