//! `backup_database`: klaw.db's online backup (`klaw backup`).

use crate::errors::to_py;
use pyo3::prelude::*;
use std::path::PathBuf;

/// Copies the database at `src` into the new file `dst` as one consistent snapshot
/// (SQLite's online backup, safe while the engine writes); returns the copy's schema
/// version (`PRAGMA user_version`).
#[pyfunction]
pub fn backup_database(py: Python<'_>, src: PathBuf, dst: PathBuf) -> PyResult<i64> {
    let stats = py
        .detach(|| klaw_core::backup::backup_db(&src, &dst))
        .map_err(to_py)?;
    Ok(stats.schema_version)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(backup_database, m)?)?;
    m.add("KLAW_DB_SCHEMA_VERSION", klaw_core::schema::SCHEMA_VERSION)?;
    Ok(())
}
