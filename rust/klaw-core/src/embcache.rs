//! Embedding cache outside klaw.db (`$XDG_CACHE_HOME/klaw/embeddings.db`), keyed by
//! (model id, text hash): a rebuild re-embeds nothing it has seen, and a new
//! model id misses everything, so a model change re-embeds all.

use crate::error::Result;
use crate::store::{bytes_f32, f32_bytes};
use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;
use std::sync::Mutex;

pub struct EmbeddingCache {
    conn: Mutex<Connection>,
}

/// 128-bit content hash of a text, hex.
pub fn text_hash(text: &str) -> String {
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(text.as_bytes()))
}

impl EmbeddingCache {
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p)?;
        }
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS embeddings (model TEXT NOT NULL, hash TEXT NOT NULL, \
             vector BLOB NOT NULL, PRIMARY KEY (model, hash)) WITHOUT ROWID",
        )?;
        Ok(EmbeddingCache {
            conn: Mutex::new(conn),
        })
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Connection>> {
        self.conn
            .lock()
            .map_err(|_| crate::error::CoreError::Closed)
    }

    /// One entry per hash: the cached vector or None.
    pub fn get_many(
        &self,
        model: &str,
        hashes: &[String],
        dim: usize,
    ) -> Result<Vec<Option<Vec<f32>>>> {
        let c = self.lock()?;
        let mut st =
            c.prepare_cached("SELECT vector FROM embeddings WHERE model = ?1 AND hash = ?2")?;
        let mut out = Vec::with_capacity(hashes.len());
        for h in hashes {
            let v: Option<Vec<u8>> = st.query_row(params![model, h], |r| r.get(0)).optional()?;
            out.push(v.filter(|b| b.len() == dim * 4).map(|b| bytes_f32(&b)));
        }
        Ok(out)
    }

    pub fn put_many(
        &self,
        model: &str,
        hashes: &[String],
        vectors: &[f32],
        dim: usize,
    ) -> Result<()> {
        let mut c = self.lock()?;
        let tx = c.transaction()?;
        {
            let mut st = tx.prepare_cached(
                "INSERT OR REPLACE INTO embeddings(model, hash, vector) VALUES (?1, ?2, ?3)",
            )?;
            for (i, h) in hashes.iter().enumerate() {
                st.execute(params![
                    model,
                    h,
                    f32_bytes(&vectors[i * dim..(i + 1) * dim])
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    pub fn len(&self, model: Option<&str>) -> Result<i64> {
        let c = self.lock()?;
        Ok(match model {
            Some(m) => c.query_row(
                "SELECT count(*) FROM embeddings WHERE model = ?1",
                [m],
                |r| r.get(0),
            )?,
            None => c.query_row("SELECT count(*) FROM embeddings", [], |r| r.get(0))?,
        })
    }
}

/// Embeds `texts` through the cache: hits are read, misses embedded and stored.
/// Returns the vectors (`texts.len() * dim` floats) and how many were cache hits.
pub fn embed_with_cache(
    embedder: &crate::embed::Embedder,
    cache: &EmbeddingCache,
    model_id: &str,
    texts: &[String],
) -> Result<(Vec<f32>, usize)> {
    let dim = embedder.dim();
    let hashes: Vec<String> = texts.iter().map(|t| text_hash(t)).collect();
    let cached = cache.get_many(model_id, &hashes, dim)?;
    let miss_idx: Vec<usize> = (0..texts.len()).filter(|&i| cached[i].is_none()).collect();
    let miss_texts: Vec<String> = miss_idx.iter().map(|&i| texts[i].clone()).collect();
    let fresh = embedder.embed_batch(&miss_texts)?;
    let miss_hashes: Vec<String> = miss_idx.iter().map(|&i| hashes[i].clone()).collect();
    cache.put_many(model_id, &miss_hashes, &fresh, dim)?;
    let mut out = vec![0f32; texts.len() * dim];
    for (i, c) in cached.iter().enumerate() {
        if let Some(v) = c {
            out[i * dim..(i + 1) * dim].copy_from_slice(v);
        }
    }
    for (j, &i) in miss_idx.iter().enumerate() {
        out[i * dim..(i + 1) * dim].copy_from_slice(&fresh[j * dim..(j + 1) * dim]);
    }
    Ok((out, texts.len() - miss_idx.len()))
}
