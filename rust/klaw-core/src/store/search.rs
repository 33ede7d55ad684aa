//! Archival memory's reads: vector, keyword and hybrid search with their filters, and
//! the hits they return.

use super::{f32_bytes, fetch_scored, Inner, MemIndex, Store, CHAT_SOURCE_PREFIX};
use crate::error::{CoreError, Result};
use crate::search::{hybrid_terms, int8_candidates, rescore, FusionParams};
use rusqlite::{params, Connection, OptionalExtension};
use std::sync::Arc;

#[derive(Clone, Debug)]
pub struct Hit {
    pub id: i64,
    pub content: String,
    pub source: String,
    pub chat_id: Option<String>,
    pub start_line: Option<i64>,
    pub end_line: Option<i64>,
    pub heading: Option<String>,
    pub created_at: String,
    pub score: f64,
}

impl Hit {
    /// Where the hit came from, as the model and the owner cite it:
    /// `memory/2026-02-24.md#L12-L30`, or the bare source when it has no lines; a past
    /// conversation's round (a `chat:` source whose heading holds the round's message
    /// ids): `chat:<chat id> 2026-02-24 msg <first id>…<last id>`.
    pub fn citation(&self) -> String {
        if self.source.starts_with(CHAT_SOURCE_PREFIX) {
            let mut ids = self.heading.as_deref().unwrap_or("").split_whitespace();
            if let Some(first) = ids.next() {
                let day: String = self.created_at.chars().take(10).collect();
                return match ids.last() {
                    Some(last) => format!("{} {day} msg {first}…{last}", self.source),
                    None => format!("{} {day} msg {first}", self.source),
                };
            }
        }
        match self.start_line {
            Some(start) => format!(
                "{}#L{start}-L{}",
                self.source,
                self.end_line.unwrap_or(start)
            ),
            None => self.source.clone(),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub source: Option<String>,
    /// Only these chunks (sorted ids: the facts a kind or entity filter selects),
    /// hidden sources included.
    pub ids: Option<Arc<Vec<i64>>>,
}

impl Filter {
    pub fn is_empty(&self) -> bool {
        self.since.is_none() && self.until.is_none() && self.source.is_none() && self.ids.is_none()
    }

    fn in_time(&self, created: i64) -> bool {
        self.since.is_none_or(|s| created >= s) && self.until.is_none_or(|u| created <= u)
    }
}

impl MemIndex {
    /// Whether a search with `f` must look at each candidate's metadata.
    fn filters(&self, f: &Filter) -> bool {
        !f.is_empty() || self.has_chats
    }

    fn allows(&self, id: i64, f: &Filter, source: Option<u32>) -> bool {
        self.vindex
            .meta(id)
            .is_some_and(|(created, src)| self.allows_meta(created, src, f, source))
    }

    fn allows_meta(&self, created: i64, src: u32, f: &Filter, source: Option<u32>) -> bool {
        f.in_time(created)
            && match f.source {
                None => !self.chat.get(src as usize).copied().unwrap_or(false),
                Some(_) => Some(src) == source,
            }
    }
}

impl Store {
    fn source_filter(mem: &MemIndex, f: &Filter) -> Option<u32> {
        f.source
            .as_ref()
            .and_then(|s| mem.source_ids.get(s).copied())
    }

    fn vector_ids(
        &self,
        inner: &Inner,
        query: &[f32],
        k: usize,
        f: &Filter,
    ) -> Result<Vec<(i64, f32)>> {
        if query.len() != self.dim {
            return Err(CoreError::InvalidInput(format!(
                "query vector has dimension {}, expected {}",
                query.len(),
                self.dim
            )));
        }
        let cands = {
            let mem = inner.mem()?;
            if let Some(ids) = &f.ids {
                // A known set: score just its chunks (int8), then rescore the best.
                let mut scored: Vec<(i64, f32)> = mem
                    .vindex
                    .score_ids(query, ids)
                    .into_iter()
                    .filter(|&(_, _, created, _)| f.in_time(created))
                    .map(|(id, score, _, _)| (id, score))
                    .collect();
                scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                scored.truncate(int8_candidates(k));
                scored
            } else {
                let src = Self::source_filter(&mem, f);
                if f.source.is_some() && src.is_none() {
                    return Ok(Vec::new());
                }
                let check = mem.filters(f);
                let allow = |created: i64, s: u32| !check || mem.allows_meta(created, s, f, src);
                mem.vindex
                    .search(query, int8_candidates(k), self.threads, &allow)
            }
        };
        // Exact float rescoring from vec_memory.
        let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
        let mut buf = vec![0u8; self.dim * 4];
        rescore(cands, k, |id| {
            Ok(read_vector(&r, id, &mut buf)?.then(|| dot_bytes(&buf, query)))
        })
    }

    fn keyword_ids(inner: &Inner, text: &str, k: usize, f: &Filter) -> Result<Vec<(i64, f32)>> {
        if let Some(ids) = &f.ids {
            let mut got = inner.keyword.search_in(text, k.max(1) * 4, ids)?;
            let mem = inner.mem()?;
            got.retain(|(id, _)| mem.vindex.meta(*id).is_some_and(|(c, _)| f.in_time(c)));
            got.truncate(k);
            return Ok(got);
        }
        // A plain search leaves hidden documents out in the query itself: with many
        // conversation or fact chunks, over-fetching past them cost tens of ms.
        let visible = f.source.is_none();
        if f.since.is_none() && f.until.is_none() && visible {
            return inner.keyword.search_visible(text, k);
        }
        let src = Self::source_filter(&*inner.mem()?, f);
        if f.source.is_some() && src.is_none() {
            return Ok(Vec::new());
        }
        // Over-fetch, then filter by the in-memory metadata.
        let mut want = k * 8;
        loop {
            let got = if visible {
                inner.keyword.search_visible(text, want)?
            } else {
                inner.keyword.search(text, want)?
            };
            let full = got.len() < want;
            let mem = inner.mem()?;
            let kept: Vec<_> = got
                .into_iter()
                .filter(|(id, _)| mem.allows(*id, f, src))
                .collect();
            drop(mem);
            if kept.len() >= k || full || want > 100_000 {
                return Ok(kept.into_iter().take(k).collect());
            }
            want *= 8;
        }
    }

    /// Exact-rescored vector search: (id, cosine) best first.
    pub fn vector_search(&self, query: &[f32], k: usize, f: &Filter) -> Result<Vec<(i64, f32)>> {
        self.read(|inner| self.vector_ids(inner, query, k, f))
    }

    /// BM25 keyword search over archival memory: (id, score) best first.
    pub fn keyword_search(&self, text: &str, k: usize, f: &Filter) -> Result<Vec<(i64, f32)>> {
        self.read(|inner| Self::keyword_ids(inner, text, k, f))
    }

    /// sqlite-vec's own float KNN (the design's reference path; used to measure recall).
    pub fn vector_search_exact(&self, query: &[f32], k: usize) -> Result<Vec<(i64, f32)>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut st = r.prepare_cached(
                "SELECT rowid, distance FROM vec_memory WHERE embedding MATCH ?1 AND k = ?2 ORDER BY distance",
            )?;
            let rows = st
                .query_map(params![f32_bytes(query), k as i64], |r| {
                    let d: f64 = r.get(1)?;
                    // L2 distance between unit vectors -> cosine.
                    Ok((r.get::<_, i64>(0)?, (1.0 - d * d / 2.0) as f32))
                })?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
    }

    /// Hybrid search: vector and keyword candidates fused (`FusionParams`).
    pub fn search(
        &self,
        query_vec: Option<&[f32]>,
        query_text: &str,
        top_k: usize,
        p: &FusionParams,
        f: &Filter,
    ) -> Result<Vec<Hit>> {
        let terms = if p.keyword_pivot > 0 {
            let mut t = crate::analyze::analyze(query_text, crate::analyze::Mode::Query);
            t.sort_unstable();
            t.dedup();
            t.len()
        } else {
            0
        };
        self.read(|inner| {
            let fused = hybrid_terms(
                |want| match query_vec {
                    Some(q) => self.vector_ids(inner, q, want, f),
                    None => Ok(Vec::new()),
                },
                |want| Self::keyword_ids(inner, query_text, want, f),
                |id| {
                    inner
                        .mem()
                        .ok()
                        .and_then(|m| m.vindex.meta(id).map(|x| x.0))
                },
                p,
                top_k,
                terms,
            )?;
            Self::fetch(inner, &fused)
        })
    }

    fn fetch(inner: &Inner, scored: &[(i64, f64)]) -> Result<Vec<Hit>> {
        let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
        fetch_scored(
            &r,
            "SELECT c.content, COALESCE(f.path, c.source), c.chat_id, c.start_line, c.end_line, c.heading, \
             c.created_at FROM memory_chunks c LEFT JOIN files f ON c.file_id = f.id WHERE c.id = ?1",
            scored,
            |r, id, score| {
                Ok(Hit {
                    id,
                    content: r.get(0)?,
                    source: r.get(1)?,
                    chat_id: r.get(2)?,
                    start_line: r.get(3)?,
                    end_line: r.get(4)?,
                    heading: r.get(5)?,
                    created_at: r.get(6)?,
                    score,
                })
            },
        )
    }

    pub fn get_chunks(&self, ids: &[i64]) -> Result<Vec<Hit>> {
        self.read(|inner| {
            let scored: Vec<(i64, f64)> = ids.iter().map(|i| (*i, 0.0)).collect();
            Self::fetch(inner, &scored)
        })
    }
}

fn dot_bytes(b: &[u8], q: &[f32]) -> f32 {
    b.chunks_exact(4)
        .zip(q)
        .map(|(c, x)| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * x)
        .sum()
}

/// Reads one float vector of `vec_memory` into `buf`. sqlite-vec keeps vectors in
/// chunk blobs of 1024; a `vec_memory` point query reads a whole chunk, so this
/// goes to the slot directly with incremental blob I/O (layout of sqlite-vec 0.1,
/// the version compiled in), falling back to the public query if that fails.
fn read_vector(c: &Connection, id: i64, buf: &mut [u8]) -> Result<bool> {
    let slot: Option<(i64, i64)> = c
        .prepare_cached("SELECT chunk_id, chunk_offset FROM vec_memory_rowids WHERE rowid = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if let Some((chunk, off)) = slot {
        if let Ok(blob) = c.blob_open(
            rusqlite::MAIN_DB,
            "vec_memory_vector_chunks00",
            "vectors",
            chunk,
            true,
        ) {
            if blob.read_at_exact(buf, off as usize * buf.len()).is_ok() {
                return Ok(true);
            }
        }
    }
    let v: Option<Vec<u8>> = c
        .prepare_cached("SELECT embedding FROM vec_memory WHERE rowid = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?;
    match v {
        Some(v) if v.len() == buf.len() => {
            buf.copy_from_slice(&v);
            Ok(true)
        }
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::{chunk, open, unit};
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::time::Duration;

    fn hit(source: &str, lines: Option<(i64, i64)>, heading: Option<&str>) -> Hit {
        Hit {
            id: 1,
            content: String::new(),
            source: source.into(),
            chat_id: None,
            start_line: lines.map(|l| l.0),
            end_line: lines.map(|l| l.1),
            heading: heading.map(Into::into),
            created_at: "2026-02-24T18:30:00Z".into(),
            score: 0.5,
        }
    }

    #[test]
    fn a_citation_names_the_lines_or_the_round() {
        let note = hit("memory/2026-02-24.md", Some((12, 30)), Some("Garden"));
        assert_eq!(note.citation(), "memory/2026-02-24.md#L12-L30");
        assert_eq!(hit("manual", None, None).citation(), "manual");
        let round = hit("chat:telegram_1", None, Some("m1 m2 m3"));
        assert_eq!(round.citation(), "chat:telegram_1 2026-02-24 msg m1…m3");
        let one = hit("chat:telegram_1", None, Some("m7"));
        assert_eq!(one.citation(), "chat:telegram_1 2026-02-24 msg m7");
        // A round without ids is cited by its source alone (the Python copy raised).
        assert_eq!(hit("chat:x", None, Some(" ")).citation(), "chat:x");
    }

    #[test]
    fn hits_come_in_the_order_asked_without_unknown_ids() {
        let (_d, s) = open(4);
        let v = [unit(&[1.0, 0.0, 0.0, 0.0]), unit(&[0.0, 1.0, 0.0, 0.0])].concat();
        let at = "2026-01-01T00:00:00Z";
        let ids = s
            .add_chunks("manual", None, at, &[chunk("first"), chunk("second")], &v)
            .unwrap();
        let hits = s.get_chunks(&[ids[1], 999, ids[0]]).unwrap();
        let got: Vec<_> = hits.iter().map(|h| (h.id, h.content.as_str())).collect();
        assert_eq!(got, [(ids[1], "second"), (ids[0], "first")]);
        assert_eq!(hits[0].source, "manual");
    }

    /// A search, a keyword search and a read of `meta` finish while another thread is
    /// inside a write transaction (before the split, every write held the store-wide
    /// exclusive guard and they waited for it). Driven by channels, not by time: the
    /// timeout only turns a deadlock into a failure.
    #[test]
    fn searches_do_not_wait_for_a_write_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("klaw.db"), 4, 1).unwrap());
        let v = [1.0f32, 0.0, 0.0, 0.0];
        store
            .add_chunks(
                "memory",
                None,
                "2026-01-01T00:00:00Z",
                &[chunk("boiler code 4471")],
                &v,
            )
            .unwrap();
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let writer = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                store
                    .write(|_inner, conn| {
                        let tx = conn.transaction()?;
                        tx.execute("INSERT INTO meta(key, value) VALUES ('held', '1')", [])?;
                        entered_tx.send(()).unwrap();
                        release_rx.recv().unwrap(); // the transaction stays open until told
                        tx.commit()?;
                        Ok(())
                    })
                    .unwrap();
            })
        };
        entered.recv().unwrap();
        let (done_tx, done) = mpsc::channel();
        {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let f = Filter::default();
                let hits = store.vector_search(&v, 5, &f).unwrap();
                let words = store.keyword_search("boiler", 5, &f).unwrap();
                let held = store.meta_get("held").unwrap(); // not committed yet
                done_tx.send((hits.len(), words.len(), held)).unwrap();
            });
        }
        let got = done.recv_timeout(Duration::from_mins(1));
        release.send(()).unwrap();
        writer.join().unwrap();
        assert_eq!(got.expect("searches waited for the write"), (1, 1, None));
        assert_eq!(store.meta_get("held").unwrap().as_deref(), Some("1"));
    }
}
