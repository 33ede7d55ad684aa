//! One error enum for the core; `klaw-py` maps each variant to a Python class.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CoreError {
    /// The caller passed something unusable (maps to `InvalidInput`, a `ValueError`).
    #[error("{0}")]
    InvalidInput(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The database file exists but is not usable; `klaw reindex` rebuilds it.
    #[error("{0}")]
    Corrupt(String),
    /// Another process holds the database.
    #[error("{0}")]
    Locked(String),
    #[error("keyword index error: {0}")]
    Keyword(String),
    #[error("embedding model error: {0}")]
    Model(String),
    #[error("{0}")]
    ModelNotFound(String),
    #[error("the store is closed")]
    Closed,
    /// Long work stopped because its cancel flag was set (the engine is stopping).
    #[error("indexing cancelled: memory is closing")]
    Cancelled,
}

impl From<tantivy::TantivyError> for CoreError {
    fn from(e: tantivy::TantivyError) -> Self {
        CoreError::Keyword(e.to_string())
    }
}

impl From<tantivy::directory::error::OpenDirectoryError> for CoreError {
    fn from(e: tantivy::directory::error::OpenDirectoryError) -> Self {
        CoreError::Keyword(e.to_string())
    }
}

impl From<tantivy::query::QueryParserError> for CoreError {
    fn from(e: tantivy::query::QueryParserError) -> Self {
        CoreError::Keyword(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, CoreError>;
