//! The documentation index (`doc_chunks` + `vec_docs` + `docs_fts`): Klaw's own
//! docs, chunked and embedded, replaced as a whole when the docs or Klaw change.
//!
//! Search is archival memory's (`search::hybrid`): an int8 vector index rescored
//! with the exact vectors and a tantivy BM25 index (headings counted twice), fused by
//! weighted RRF. The docs are a few hundred chunks, so both indexes live in memory,
//! built from `doc_chunks`/`vec_docs` on the first search after open or a replace.

use super::{bytes_f32, f32_bytes, fetch_scored, Inner, Store};
use crate::error::{CoreError, Result};
use crate::keyword::KeywordIndex;
use crate::search::{hybrid, int8_candidates, rescore, FusionParams};
use crate::vindex::VectorIndex;
use rusqlite::{params, Connection};
use std::collections::HashMap;

/// The docs' search indexes, derived from the tables.
pub(super) struct DocsIndex {
    vindex: VectorIndex,
    keyword: KeywordIndex,
    /// Exact vectors for rescoring (a few hundred: ~0.5 MB at 384 dimensions).
    exact: HashMap<i64, Vec<f32>>,
}

impl DocsIndex {
    fn build(conn: &Connection, dim: usize) -> Result<Self> {
        let mut vindex = VectorIndex::new(dim);
        let mut exact = HashMap::new();
        let mut st = conn.prepare("SELECT rowid, embedding FROM vec_docs")?;
        let mut q = st.query([])?;
        while let Some(r) = q.next()? {
            let blob: Vec<u8> = r.get(1)?;
            if blob.len() == dim * 4 {
                let id: i64 = r.get(0)?;
                let v = bytes_f32(&blob);
                vindex.upsert(id, &v);
                exact.insert(id, v);
            }
        }
        let mut st = conn.prepare("SELECT id, COALESCE(section, ''), content FROM doc_chunks")?;
        let texts: Vec<(i64, String)> = st
            .query_map([], |r| {
                let section: String = r.get(1)?;
                let content: String = r.get(2)?;
                // Headings twice: a query naming a section should find it first.
                Ok((r.get(0)?, format!("{section}\n{section}\n{content}")))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let keyword = KeywordIndex::in_ram()?;
        keyword.rebuild(texts.iter().map(|(i, t)| (*i, t.as_str())))?;
        Ok(DocsIndex {
            vindex,
            keyword,
            exact,
        })
    }

    fn vector_ids(&self, q: &[f32], k: usize) -> Result<Vec<(i64, f32)>> {
        let cands = self.vindex.search(q, int8_candidates(k), 1, &|_, _| true);
        rescore(cands, k, |id| {
            Ok(self
                .exact
                .get(&id)
                .map(|v| v.iter().zip(q).map(|(a, b)| a * b).sum()))
        })
    }
}

/// One chunk of a documentation file (its vector is passed alongside).
#[derive(Clone, Debug)]
pub struct DocChunk {
    /// Path relative to the docs directory (`memory.md`).
    pub file: String,
    /// Enclosing headings, joined with " > ".
    pub section: Option<String>,
    pub content: String,
    /// Position of the chunk within its file, from 0.
    pub chunk: i64,
    pub start_line: Option<i64>,
    pub end_line: Option<i64>,
}

#[derive(Clone, Debug)]
pub struct DocHit {
    pub id: i64,
    pub file: String,
    pub section: Option<String>,
    pub content: String,
    pub chunk: i64,
    pub start_line: Option<i64>,
    pub end_line: Option<i64>,
    pub version: String,
    pub score: f64,
}

impl Store {
    /// Replaces every doc chunk in one transaction; `meta` (key, value) is written in
    /// the same transaction, so a recorded docs stamp always matches the rows.
    pub fn replace_docs(
        &self,
        version: &str,
        chunks: &[DocChunk],
        vectors: &[f32],
        meta: Option<(&str, &str)>,
    ) -> Result<usize> {
        self.check_vectors(chunks.len(), vectors)?;
        if let Some(c) = chunks.iter().find(|c| c.file.trim().is_empty()) {
            return Err(CoreError::InvalidInput(format!(
                "doc chunk {} has an empty file name",
                c.chunk
            )));
        }
        let dim = self.dim;
        self.write(|inner, conn| {
            let tx = conn.transaction()?;
            tx.execute_batch("DELETE FROM vec_docs; DELETE FROM doc_chunks;")?;
            {
                let mut ins = tx.prepare(
                    "INSERT INTO doc_chunks(file, section, content, version, chunk, start_line, end_line) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )?;
                let mut vins = tx.prepare("INSERT INTO vec_docs(rowid, embedding) VALUES (?1, ?2)")?;
                for (i, c) in chunks.iter().enumerate() {
                    ins.execute(params![
                        c.file,
                        c.section,
                        c.content,
                        version,
                        c.chunk,
                        c.start_line,
                        c.end_line
                    ])?;
                    let id = tx.last_insert_rowid();
                    vins.execute(params![id, f32_bytes(&vectors[i * dim..(i + 1) * dim])])?;
                }
            }
            if let Some((key, value)) = meta {
                tx.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
                    params![key, value],
                )?;
            }
            tx.commit()?;
            // The in-memory indexes are rebuilt from the new rows on the next search.
            *inner.docs.write().map_err(|_| CoreError::Closed)? = None;
            Ok(chunks.len())
        })
    }

    /// Number of doc chunks stored.
    pub fn count_docs(&self) -> Result<usize> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let n: i64 = r.query_row("SELECT count(*) FROM doc_chunks", [], |r| r.get(0))?;
            Ok(n as usize)
        })
    }

    /// Hybrid docs search, the same as archival memory's; best first.
    /// Either half may be absent (no vector, or a query without words).
    pub fn search_docs(
        &self,
        query_vec: Option<&[f32]>,
        query_text: &str,
        top_k: usize,
        p: &FusionParams,
    ) -> Result<Vec<DocHit>> {
        if let Some(q) = query_vec {
            if q.len() != self.dim {
                return Err(CoreError::InvalidInput(format!(
                    "query vector has dimension {}, expected {}",
                    q.len(),
                    self.dim
                )));
            }
        }
        if top_k == 0 {
            return Ok(Vec::new());
        }
        self.read(|inner| {
            let index = self.docs_index(inner)?;
            let ix = index.as_ref().ok_or(CoreError::Closed)?;
            let fused = hybrid(
                |want| match query_vec {
                    Some(q) => ix.vector_ids(q, want),
                    None => Ok(Vec::new()),
                },
                |want| ix.keyword.search(query_text, want),
                |_| None, // docs have no dates that matter
                p,
                top_k,
            )?;
            let conn = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            fetch_docs(&conn, &fused)
        })
    }

    /// The docs indexes, built from the tables if this is the first search.
    fn docs_index<'a>(
        &self,
        inner: &'a Inner,
    ) -> Result<std::sync::RwLockReadGuard<'a, Option<DocsIndex>>> {
        {
            let ready = inner.docs.read().map_err(|_| CoreError::Closed)?;
            if ready.is_some() {
                return Ok(ready);
            }
        }
        {
            let mut slot = inner.docs.write().map_err(|_| CoreError::Closed)?;
            if slot.is_none() {
                let conn = inner.reader.lock().map_err(|_| CoreError::Closed)?;
                *slot = Some(DocsIndex::build(&conn, self.dim)?);
            }
        }
        inner.docs.read().map_err(|_| CoreError::Closed)
    }
}

fn fetch_docs(r: &Connection, scored: &[(i64, f64)]) -> Result<Vec<DocHit>> {
    fetch_scored(
        r,
        "SELECT file, section, content, chunk, start_line, end_line, version FROM doc_chunks \
         WHERE id = ?1",
        scored,
        |r, id, score| {
            Ok(DocHit {
                id,
                file: r.get(0)?,
                section: r.get(1)?,
                content: r.get(2)?,
                chunk: r.get(3)?,
                start_line: r.get(4)?,
                end_line: r.get(5)?,
                version: r.get(6)?,
                score,
            })
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing;

    const DIM: usize = 4;

    fn unit(v: [f32; DIM]) -> Vec<f32> {
        testing::unit(&v)
    }

    fn chunk(file: &str, i: i64, section: &str, content: &str) -> DocChunk {
        DocChunk {
            file: file.into(),
            section: Some(section.into()),
            content: content.into(),
            chunk: i,
            start_line: Some(i * 10 + 1),
            end_line: Some(i * 10 + 9),
        }
    }

    fn open() -> (tempfile::TempDir, Store) {
        testing::open(DIM)
    }

    fn docs() -> (Vec<DocChunk>, Vec<f32>) {
        let chunks = vec![
            chunk(
                "memory.md",
                0,
                "Memory > Core memory",
                "Core memory holds key facts about the user.",
            ),
            chunk(
                "storage.md",
                0,
                "Storage > Paths",
                "klaw.db lives in the data directory; reindex rebuilds it.",
            ),
            chunk(
                "storage.md",
                1,
                "Storage > Backups",
                "Copy the conversations folder to back up chats.",
            ),
        ];
        let mut v = unit([1.0, 0.0, 0.0, 0.0]);
        v.extend(unit([0.0, 1.0, 0.0, 0.0]));
        v.extend(unit([0.0, 0.0, 1.0, 0.1]));
        (chunks, v)
    }

    #[test]
    fn replace_search_and_replace_again() {
        let (_d, s) = open();
        assert_eq!(s.count_docs().unwrap(), 0);
        let (chunks, vecs) = docs();
        let p = FusionParams::default();
        assert_eq!(
            s.replace_docs("0.1.0", &chunks, &vecs, Some(("docs_index", "stamp-1")))
                .unwrap(),
            3
        );
        assert_eq!(s.count_docs().unwrap(), 3);
        assert_eq!(
            s.meta_get("docs_index").unwrap().as_deref(),
            Some("stamp-1")
        );

        // Vector only: the nearest chunk first, with its citation fields.
        let q = unit([0.0, 0.9, 0.1, 0.0]);
        let hits = s.search_docs(Some(&q), "", 2, &p).unwrap();
        assert_eq!(hits.len(), 2);
        let best = &hits[0];
        assert_eq!(
            (
                best.file.as_str(),
                best.chunk,
                best.start_line,
                best.end_line
            ),
            ("storage.md", 0, Some(1), Some(9))
        );
        assert_eq!(best.section.as_deref(), Some("Storage > Paths"));
        assert_eq!(best.version, "0.1.0");

        // Keyword only, with Porter stemming ("backing" ~ "back", "chat" ~ "chats").
        let hits = s.search_docs(None, "backing up chat", 5, &p).unwrap();
        assert_eq!(hits[0].section.as_deref(), Some("Storage > Backups"));
        // Headings are searchable too.
        let hits = s.search_docs(None, "paths", 5, &p).unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].file, "storage.md");
        // Both halves agree: that chunk ranks first.
        let q = unit([1.0, 0.0, 0.0, 0.0]);
        let hits = s.search_docs(Some(&q), "core memory facts", 3, &p).unwrap();
        assert_eq!(hits[0].file, "memory.md");
        // Punctuation only: no keyword half, no error.
        assert!(s.search_docs(None, "?!", 3, &p).unwrap().is_empty());

        // A second replace drops every old row, vector and keyword entry.
        let one = vec![chunk("new.md", 0, "New", "Something else entirely.")];
        let v1 = unit([0.0, 0.0, 0.0, 1.0]);
        s.replace_docs("0.2.0", &one, &v1, None).unwrap();
        assert_eq!(s.count_docs().unwrap(), 1);
        assert_eq!(
            s.meta_get("docs_index").unwrap().as_deref(),
            Some("stamp-1")
        );
        assert!(s.search_docs(None, "backups", 5, &p).unwrap().is_empty());
        let hits = s.search_docs(Some(&q), "", 5, &p).unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(
            (hits[0].file.as_str(), hits[0].version.as_str()),
            ("new.md", "0.2.0")
        );
        assert!(s.integrity_check().unwrap().is_empty());

        // And an empty set clears the index.
        s.replace_docs("0.2.0", &[], &[], None).unwrap();
        assert_eq!(s.count_docs().unwrap(), 0);
        assert!(s.search_docs(Some(&q), "new", 5, &p).unwrap().is_empty());
        s.close().unwrap();
    }

    #[test]
    fn bad_input_changes_nothing() {
        let (_d, s) = open();
        let (chunks, v) = docs();
        s.replace_docs("0.1.0", &chunks, &v, None).unwrap();
        let err = s
            .replace_docs("0.2.0", &chunks, &v[..DIM], Some(("k", "v")))
            .unwrap_err();
        assert!(matches!(err, CoreError::InvalidInput(_)), "{err}");
        let mut unnamed = chunks.clone();
        unnamed[1].file = " ".into();
        assert!(matches!(
            s.replace_docs("0.2.0", &unnamed, &v, None),
            Err(CoreError::InvalidInput(_))
        ));
        assert_eq!(s.count_docs().unwrap(), 3);
        assert_eq!(s.meta_get("k").unwrap(), None);
        let p = FusionParams::default();
        assert!(matches!(
            s.search_docs(Some(&[1.0, 0.0]), "x", 3, &p),
            Err(CoreError::InvalidInput(_))
        ));
        assert!(s.search_docs(None, "memory", 0, &p).unwrap().is_empty());
        s.close().unwrap();
        assert!(matches!(s.count_docs(), Err(CoreError::Closed)));
    }
}
