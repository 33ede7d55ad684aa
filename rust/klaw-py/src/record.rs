//! `check_log_line`, `parse_record_ts`: the one conversation-log validator
//! (`klaw_core::record`), shared by every Python reader and by reindex.
use klaw_core::record;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

/// One valid log line. `meta` is the object's JSON text (or None).
#[pyclass(frozen, get_all, module = "klaw._core", name = "RecordLine")]
struct PyRecordLine {
    id: String,
    ts: String,
    ts_us: i64,
    role: String,
    content: String,
    kind: Option<String>,
    meta: Option<String>,
}

#[pymethods]
impl PyRecordLine {
    fn __repr__(&self) -> String {
        format!(
            "RecordLine(id={:?}, ts={:?}, role={:?})",
            self.id, self.ts, self.role
        )
    }
}

/// The line as a `RecordLine`, or the reason it is skipped (a `str`). Lines are short,
/// so the GIL is kept: releasing it would cost more than the parse.
#[pyfunction]
fn check_log_line(py: Python<'_>, raw: &[u8]) -> PyResult<Py<PyAny>> {
    match record::check_line(raw) {
        Ok(l) => PyRecordLine {
            id: l.id,
            ts: l.ts,
            ts_us: l.ts_us,
            role: l.role,
            content: l.content,
            kind: l.kind,
            meta: l.meta,
        }
        .into_py_any(py),
        Err(reason) => reason.into_py_any(py),
    }
}

/// A record timestamp as Unix microseconds, or None if it is not one.
#[pyfunction]
fn parse_record_ts(ts: &str) -> Option<i64> {
    record::parse_ts(ts)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRecordLine>()?;
    m.add_function(wrap_pyfunction!(check_log_line, m)?)?;
    m.add_function(wrap_pyfunction!(parse_record_ts, m)?)?;
    Ok(())
}
