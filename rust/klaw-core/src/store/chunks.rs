//! Archival memory's writes: chunks of a file (replaced as a whole) and chunks of no
//! file (saved facts, conversation rounds), each with its vector and keyword entry.

use super::{f32_bytes, Inner, Store};
use crate::error::{CoreError, Result};
use crate::timeutil::parse_iso;
use rusqlite::{params, OptionalExtension};

/// A chunk to insert (its vector is passed alongside).
#[derive(Clone, Debug)]
pub struct NewChunk {
    pub content: String,
    pub start_line: Option<i64>,
    pub end_line: Option<i64>,
    pub heading: Option<String>,
    pub chunk_hash: String,
}

#[derive(Clone, Debug)]
pub struct FileState {
    pub hash: String,
    pub mtime: f64,
    pub size: i64,
}

impl Store {
    #[allow(clippy::too_many_arguments)]
    fn insert_chunks(
        tx: &rusqlite::Transaction<'_>,
        dim: usize,
        source: &str,
        chat_id: Option<&str>,
        created_at: &str,
        file_id: Option<i64>,
        chunks: &[NewChunk],
        vectors: &[f32],
    ) -> Result<Vec<i64>> {
        let mut ids = Vec::with_capacity(chunks.len());
        let mut ins = tx.prepare_cached(
            "INSERT INTO memory_chunks(source, chat_id, content, created_at, file_id, start_line, \
             end_line, heading, chunk_hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?;
        let mut vins =
            tx.prepare_cached("INSERT INTO vec_memory(rowid, embedding) VALUES (?1, ?2)")?;
        for (i, c) in chunks.iter().enumerate() {
            ins.execute(params![
                source,
                chat_id,
                c.content,
                created_at,
                file_id,
                c.start_line,
                c.end_line,
                c.heading,
                c.chunk_hash
            ])?;
            let id = tx.last_insert_rowid();
            vins.execute(params![id, f32_bytes(&vectors[i * dim..(i + 1) * dim])])?;
            ids.push(id);
        }
        Ok(ids)
    }

    #[allow(clippy::too_many_arguments)]
    fn after_insert(
        inner: &Inner,
        ids: &[i64],
        removed: &[i64],
        source: &str,
        created_at: &str,
        chunks: &[NewChunk],
        vectors: &[f32],
        dim: usize,
    ) -> Result<()> {
        {
            let mut mem = inner.mem_mut()?;
            for r in removed {
                mem.vindex.remove(*r);
            }
            let s = mem.intern(source);
            let created = parse_iso(created_at).unwrap_or(0);
            for (i, id) in ids.iter().enumerate() {
                mem.vindex
                    .upsert_meta(*id, &vectors[i * dim..(i + 1) * dim], created, s);
            }
        }
        let add: Vec<(i64, &str)> = ids
            .iter()
            .zip(chunks)
            .map(|(i, c)| (*i, c.content.as_str()))
            .collect();
        inner
            .keyword
            .apply_hidden(&add, removed, super::hidden_source(source))
    }

    /// Adds chunks that belong to no file (saved facts, conversation excerpts).
    pub fn add_chunks(
        &self,
        source: &str,
        chat_id: Option<&str>,
        created_at: &str,
        chunks: &[NewChunk],
        vectors: &[f32],
    ) -> Result<Vec<i64>> {
        self.check_vectors(chunks.len(), vectors)?;
        if parse_iso(created_at).is_none() {
            return Err(CoreError::InvalidInput(format!(
                "created_at is not ISO 8601: {created_at:?}"
            )));
        }
        let dim = self.dim;
        self.write(|inner, conn| {
            let tx = conn.transaction()?;
            let ids =
                Self::insert_chunks(&tx, dim, source, chat_id, created_at, None, chunks, vectors)?;
            tx.commit()?;
            Self::after_insert(inner, &ids, &[], source, created_at, chunks, vectors, dim)?;
            Ok(ids)
        })
    }

    pub fn file_state(&self, path: &str) -> Result<Option<FileState>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            Ok(r.query_row(
                "SELECT hash, mtime, size FROM files WHERE path = ?1",
                [path],
                |r| {
                    Ok(FileState {
                        hash: r.get(0)?,
                        mtime: r.get(1)?,
                        size: r.get(2)?,
                    })
                },
            )
            .optional()?)
        })
    }

    /// Replaces every chunk of `path` in one transaction.
    #[allow(clippy::too_many_arguments)]
    pub fn replace_file(
        &self,
        path: &str,
        source: &str,
        state: &FileState,
        created_at: &str,
        chunks: &[NewChunk],
        vectors: &[f32],
    ) -> Result<Vec<i64>> {
        self.check_vectors(chunks.len(), vectors)?;
        let dim = self.dim;
        let now = crate::timeutil::format_iso(crate::timeutil::now_secs());
        self.write(|inner, conn| {
            let tx = conn.transaction()?;
            let removed = Self::delete_file_rows(&tx, path)?;
            tx.execute(
                "INSERT INTO files(path, source, hash, mtime, size, indexed_at) VALUES (?1,?2,?3,?4,?5,?6)",
                params![path, source, state.hash, state.mtime, state.size, now],
            )?;
            let file_id = tx.last_insert_rowid();
            let ids = Self::insert_chunks(&tx, dim, source, None, created_at, Some(file_id), chunks, vectors)?;
            tx.commit()?;
            Self::after_insert(inner, &ids, &removed, source, created_at, chunks, vectors, dim)?;
            Ok(ids)
        })
    }

    fn delete_file_rows(tx: &rusqlite::Transaction<'_>, path: &str) -> Result<Vec<i64>> {
        let mut st = tx.prepare_cached(
            "SELECT c.id FROM memory_chunks c JOIN files f ON c.file_id = f.id WHERE f.path = ?1",
        )?;
        let removed: Vec<i64> = st
            .query_map([path], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let mut del = tx.prepare_cached("DELETE FROM vec_memory WHERE rowid = ?1")?;
        for id in &removed {
            del.execute([id])?;
        }
        // memory_chunks rows go with the files row (ON DELETE CASCADE).
        tx.execute("DELETE FROM files WHERE path = ?1", [path])?;
        Ok(removed)
    }

    /// Forgets a file that was deleted from the workspace. Returns chunks removed.
    pub fn remove_file(&self, path: &str) -> Result<usize> {
        self.write(|inner, conn| {
            let tx = conn.transaction()?;
            let removed = Self::delete_file_rows(&tx, path)?;
            tx.commit()?;
            {
                let mut mem = inner.mem_mut()?;
                for r in &removed {
                    mem.vindex.remove(*r);
                }
            }
            inner.keyword.apply(&[], &removed)?;
            Ok(removed.len())
        })
    }

    pub fn list_files(&self) -> Result<Vec<(String, String, FileState)>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut st =
                r.prepare("SELECT path, source, hash, mtime, size FROM files ORDER BY path")?;
            let rows = st
                .query_map([], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        FileState {
                            hash: r.get(2)?,
                            mtime: r.get(3)?,
                            size: r.get(4)?,
                        },
                    ))
                })?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
    }

    pub fn count_chunks(&self) -> Result<usize> {
        self.read(|inner| Ok(inner.mem()?.vindex.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::{chunk, open, unit};
    use crate::store::Filter;

    const AT: &str = "2026-01-01T00:00:00Z";

    fn line(text: &str, n: i64) -> NewChunk {
        NewChunk {
            start_line: Some(n),
            end_line: Some(n),
            heading: Some("H".into()),
            ..chunk(text)
        }
    }

    fn state(hash: &str) -> FileState {
        FileState {
            hash: hash.into(),
            mtime: 1.0,
            size: 10,
        }
    }

    #[test]
    fn replace_file_replaces_every_chunk_and_remove_file_forgets_them() {
        let (_d, s) = open(4);
        let v = [unit(&[1.0, 0.0, 0.0, 0.0]), unit(&[0.0, 1.0, 0.0, 0.0])].concat();
        let two = [line("line one", 1), line("line two", 2)];
        let ids = s
            .replace_file("MEMORY.md", "MEMORY.md", &state("h1"), AT, &two, &v)
            .unwrap();
        assert_eq!(ids.len(), 2);
        let known = s.file_state("MEMORY.md").unwrap().unwrap();
        assert_eq!((known.hash.as_str(), known.size), ("h1", 10));

        let one = s
            .replace_file(
                "MEMORY.md",
                "MEMORY.md",
                &state("h2"),
                AT,
                &two[..1],
                &v[..4],
            )
            .unwrap();
        assert_eq!(s.count_chunks().unwrap(), 1);
        assert!(s
            .keyword_search("two", 5, &Filter::default())
            .unwrap()
            .is_empty());
        let files = s.list_files().unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(
            (files[0].0.as_str(), files[0].2.hash.as_str()),
            ("MEMORY.md", "h2")
        );
        assert_eq!(s.get_chunks(&one).unwrap()[0].citation(), "MEMORY.md#L1-L1");

        assert_eq!(s.remove_file("MEMORY.md").unwrap(), 1);
        assert_eq!(s.count_chunks().unwrap(), 0);
        assert!(s.file_state("MEMORY.md").unwrap().is_none());
        assert_eq!(s.remove_file("MEMORY.md").unwrap(), 0);
        assert!(s.integrity_check().unwrap().is_empty());
    }

    #[test]
    fn chunks_with_a_bad_date_or_bad_vectors_write_nothing() {
        let (_d, s) = open(4);
        let v = unit(&[1.0, 0.0, 0.0, 0.0]);
        for (at, chunks, vectors) in [
            ("yesterday", vec![chunk("x")], v.clone()),
            (AT, vec![chunk("x"), chunk("y")], v.clone()),
            (AT, vec![chunk("x")], vec![f32::NAN; 4]),
        ] {
            let err = s
                .add_chunks("manual", None, at, &chunks, &vectors)
                .unwrap_err();
            assert!(matches!(err, CoreError::InvalidInput(_)), "{err}");
        }
        assert_eq!(s.count_chunks().unwrap(), 0);
        let ids = s
            .add_chunks("chat:c1", Some("c1"), AT, &[chunk("x")], &v)
            .unwrap();
        assert_eq!(
            s.get_chunks(&ids).unwrap()[0].chat_id.as_deref(),
            Some("c1")
        );
    }
}
