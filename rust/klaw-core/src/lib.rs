//! Klaw's Rust core: chunking, token counting, embeddings, the klaw.db store,
//! hybrid search, reindex and photos for vision models. No pyo3 here; `klaw-py` is
//! the binding shell.

pub mod analyze;
pub mod backup;
pub mod chunk;
pub mod embcache;
pub mod embed;
pub mod error;
pub mod fts_tokenizer;
pub mod index;
pub mod keyword;
pub mod record;
pub mod reindex;
pub mod schema;
pub mod search;
pub mod store;
pub mod timeutil;
pub mod tokens;
pub mod unigram;
pub mod vindex;
pub mod vision;

pub use error::{CoreError, Result};
