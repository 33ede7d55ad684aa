//! Indexing one document in one call: chunk → hashes → cached embeddings →
//! `replace_file`. Python used to cross into Rust five times per file (chunk, hash,
//! each embedding batch, replace); now it hands over the text once and the whole
//! pipeline runs without the GIL, checking a cancel flag between batches.

use crate::chunk::{chunk_markdown, ChunkConfig};
use crate::embcache::{embed_with_cache, text_hash, EmbeddingCache};
use crate::embed::Embedder;
use crate::error::{CoreError, Result};
use crate::store::{FileState, NewChunk, Store};
use std::sync::atomic::{AtomicBool, Ordering};

/// A document to index and where it comes from.
pub struct Document<'a> {
    /// The label it is stored and cited under (`memory/2026-02-24.md`).
    pub path: &'a str,
    pub source: &'a str,
    pub state: FileState,
    pub created_at: &'a str,
    pub text: &'a str,
}

/// What indexing a document did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Indexed {
    pub chunks: usize,
    pub cache_hits: usize,
}

/// How embeddings are made: the model, its cache and the batch size.
pub struct Embedding<'a> {
    pub embedder: &'a Embedder,
    pub cache: &'a EmbeddingCache,
    pub model_id: &'a str,
    pub batch_size: usize,
}

/// Chunks, embeds (through the cache) and stores `doc`, replacing its old chunks in
/// one transaction. Returns `CoreError::Cancelled` as soon as `cancel` is set
/// (checked before each embedding batch); nothing is written then.
pub fn index_document(
    store: &Store,
    emb: &Embedding<'_>,
    doc: &Document<'_>,
    chunking: &ChunkConfig,
    cancel: &AtomicBool,
) -> Result<Indexed> {
    let chunks = chunk_markdown(doc.text, chunking);
    let texts: Vec<String> = chunks.iter().map(|c| c.text.clone()).collect();
    let mut vectors = Vec::with_capacity(texts.len() * emb.embedder.dim());
    let mut hits = 0;
    for batch in texts.chunks(emb.batch_size.max(1)) {
        if cancel.load(Ordering::Relaxed) {
            return Err(CoreError::Cancelled);
        }
        let (v, h) = embed_with_cache(emb.embedder, emb.cache, emb.model_id, batch)?;
        vectors.extend_from_slice(&v);
        hits += h;
    }
    if cancel.load(Ordering::Relaxed) {
        return Err(CoreError::Cancelled);
    }
    let rows: Vec<NewChunk> = chunks
        .into_iter()
        .map(|c| NewChunk {
            chunk_hash: text_hash(&c.text),
            start_line: Some(c.start_line as i64),
            end_line: Some(c.end_line as i64),
            heading: (!c.heading_path.is_empty()).then(|| c.heading_path.join(" > ")),
            content: c.text,
        })
        .collect();
    let ids = store.replace_file(
        doc.path,
        doc.source,
        &doc.state,
        doc.created_at,
        &rows,
        &vectors,
    )?;
    Ok(Indexed {
        chunks: ids.len(),
        cache_hits: hits,
    })
}
