//! `rebuild_messages`: the messages side of `klaw reindex`.

use crate::errors::to_py;
use pyo3::prelude::*;
use std::path::PathBuf;

/// What `rebuild_messages` did; `skipped_samples` holds the first skipped lines as
/// (path, line, reason).
#[pyclass(frozen, get_all, module = "klaw._core", name = "ReindexStats")]
pub struct PyReindexStats {
    files: u64,
    lines: u64,
    messages: u64,
    duplicates: u64,
    skipped: u64,
    sessions: u64,
    summaries: u64,
    skipped_samples: Vec<(String, u64, String)>,
}

/// Builds a new database at `db_path` from `data_dir`'s conversations and summaries.
#[pyfunction]
#[pyo3(signature = (db_path, data_dir, dim = 384, default_model = "local/default".to_string(), progress = false))]
pub fn rebuild_messages(
    py: Python<'_>,
    db_path: PathBuf,
    data_dir: PathBuf,
    dim: usize,
    default_model: String,
    progress: bool,
) -> PyResult<PyReindexStats> {
    let s = py
        .detach(|| {
            klaw_core::reindex::rebuild_into(&db_path, &data_dir, dim, &default_model, progress)
        })
        .map_err(to_py)?;
    Ok(PyReindexStats {
        files: s.files,
        lines: s.lines,
        messages: s.messages,
        duplicates: s.duplicates,
        skipped: s.skipped,
        sessions: s.sessions,
        summaries: s.summaries,
        skipped_samples: s
            .skipped_samples
            .into_iter()
            .map(|k| (k.path, k.line, k.reason))
            .collect(),
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyReindexStats>()?;
    m.add_function(wrap_pyfunction!(rebuild_messages, m)?)?;
    Ok(())
}
