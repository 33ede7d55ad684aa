//! `rebuild_messages`: the messages side of `klaw reindex`.

use crate::errors::to_py;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;

/// Builds a new database at `db_path` from `data_dir`'s conversations and summaries.
/// Returns the counts and the first skipped lines (path, line, reason).
#[pyfunction]
#[pyo3(signature = (db_path, data_dir, dim = 384, default_model = "local/default".to_string(), progress = false))]
pub fn rebuild_messages(
    py: Python<'_>,
    db_path: PathBuf,
    data_dir: PathBuf,
    dim: usize,
    default_model: String,
    progress: bool,
) -> PyResult<Bound<'_, PyDict>> {
    let s = py
        .detach(|| {
            klaw_core::reindex::rebuild_into(&db_path, &data_dir, dim, &default_model, progress)
        })
        .map_err(to_py)?;
    let d = PyDict::new(py);
    d.set_item("files", s.files)?;
    d.set_item("lines", s.lines)?;
    d.set_item("messages", s.messages)?;
    d.set_item("duplicates", s.duplicates)?;
    d.set_item("skipped", s.skipped)?;
    d.set_item("sessions", s.sessions)?;
    d.set_item("summaries", s.summaries)?;
    let samples: Vec<(String, u64, String)> = s
        .skipped_samples
        .into_iter()
        .map(|k| (k.path, k.line, k.reason))
        .collect();
    d.set_item("skipped_samples", samples)?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(rebuild_messages, m)?)?;
    Ok(())
}
