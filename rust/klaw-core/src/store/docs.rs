//! The documentation index (`doc_chunks` + `vec_docs` + `docs_fts`): Klaw's own
//! docs, chunked and embedded, replaced as a whole when the docs or Klaw change.
//!
//! The docs are a few hundred chunks, so search is exact: sqlite-vec's brute-force
//! KNN over `vec_docs` and FTS5 BM25 over `docs_fts` (headings weighted double),
//! fused by the same weighted RRF as archival memory.

use super::{f32_bytes, fts5_or_query, Store};
use crate::error::{CoreError, Result};
use crate::search::{rrf, FusionParams};
use rusqlite::{params, Connection, OptionalExtension};

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
        self.write(|_inner, conn| {
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
            // A few hundred rows: rebuilding the keyword index from them is cheap.
            tx.execute("INSERT INTO docs_fts(docs_fts) VALUES ('rebuild')", [])?;
            if let Some((key, value)) = meta {
                tx.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
                    params![key, value],
                )?;
            }
            tx.commit()?;
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

    /// Hybrid docs search: exact vector KNN and BM25 candidates fused by RRF.
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
        let want = p.candidates.max(top_k);
        self.read(|inner| {
            let conn = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let by_vector = match query_vec {
                Some(q) => doc_vector_ids(&conn, q, want)?,
                None => Vec::new(),
            };
            let by_keyword = doc_keyword_ids(&conn, query_text, want)?;
            let fused = rrf(&by_vector, &by_keyword, p, top_k);
            fetch_docs(&conn, &fused)
        })
    }
}

fn doc_vector_ids(r: &Connection, q: &[f32], k: usize) -> Result<Vec<(i64, f32)>> {
    let mut st = r.prepare_cached(
        "SELECT rowid, distance FROM vec_docs WHERE embedding MATCH ?1 AND k = ?2 ORDER BY distance",
    )?;
    let rows = st
        .query_map(params![f32_bytes(q), k as i64], |r| {
            let d: f64 = r.get(1)?;
            // L2 distance between unit vectors -> cosine.
            Ok((r.get::<_, i64>(0)?, (1.0 - d * d / 2.0) as f32))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

fn doc_keyword_ids(r: &Connection, text: &str, k: usize) -> Result<Vec<(i64, f32)>> {
    let fts = fts5_or_query(text);
    if fts.is_empty() {
        return Ok(Vec::new());
    }
    // bm25() is lower-is-better; the score is negated so higher is better.
    let mut st = r.prepare_cached(
        "SELECT rowid, bm25(docs_fts, 2.0, 1.0) AS s FROM docs_fts WHERE docs_fts MATCH ?1 \
         ORDER BY s LIMIT ?2",
    )?;
    let rows = st
        .query_map(params![fts, k as i64], |r| {
            Ok((r.get::<_, i64>(0)?, -(r.get::<_, f64>(1)? as f32)))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

fn fetch_docs(r: &Connection, scored: &[(i64, f64)]) -> Result<Vec<DocHit>> {
    let mut st = r.prepare_cached(
        "SELECT file, section, content, chunk, start_line, end_line, version FROM doc_chunks \
         WHERE id = ?1",
    )?;
    let mut hits = Vec::with_capacity(scored.len());
    for &(id, score) in scored {
        let row = st
            .query_row([id], |r| {
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
            })
            .optional()?;
        hits.extend(row);
    }
    Ok(hits)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIM: usize = 4;

    fn unit(v: [f32; DIM]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
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
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("klaw.db"), DIM, 1).unwrap();
        (dir, s)
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
