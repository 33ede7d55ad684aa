//! Maps `CoreError` variants to the Python exception tree (see klaw/errors.py).
//! The classes need multiple bases (e.g. `InvalidInput(KlawError, ValueError)`),
//! so they are defined by a few lines of Python run at module init.

use klaw_core::CoreError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

static CLASSES: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

const CODE: &std::ffi::CStr = cr#"
class KlawError(Exception):
    """Root of everything Klaw raises on purpose."""

class InvalidInput(KlawError, ValueError):
    """A bad argument: empty text, wrong vector size, bad path."""

class StoreError(KlawError, OSError):
    """klaw.db could not be opened, read or written."""

class StoreCorrupt(StoreError):
    """klaw.db is damaged: run `klaw reindex`."""

class StoreLocked(StoreError):
    """Another process (the engine) holds the database."""

class ModelError(KlawError):
    """The embedding model could not be loaded or run."""

class ModelNotFound(ModelError, FileNotFoundError):
    """The model or ONNX Runtime is missing; the message says what to install."""

class Cancelled(KlawError):
    """Long work (indexing) was stopped on request, e.g. because the engine is stopping."""

for _c in (KlawError, InvalidInput, StoreError, StoreCorrupt, StoreLocked, ModelError, ModelNotFound, Cancelled):
    _c.__module__ = "klaw._core"
"#;

pub const NAMES: [&str; 8] = [
    "KlawError",
    "InvalidInput",
    "StoreError",
    "StoreCorrupt",
    "StoreLocked",
    "ModelError",
    "ModelNotFound",
    "Cancelled",
];

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let module = CLASSES.get_or_try_init(py, || -> PyResult<Py<PyModule>> {
        Ok(PyModule::from_code(py, CODE, c"klaw_errors.py", c"klaw._core_errors")?.unbind())
    })?;
    for name in NAMES {
        m.add(name, module.bind(py).getattr(name)?)?;
    }
    Ok(())
}

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    let module = CLASSES
        .get(py)
        .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("klaw._core not initialised"))?;
    Ok(module.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

pub fn to_py(e: CoreError) -> PyErr {
    let name = match &e {
        CoreError::InvalidInput(_) => "InvalidInput",
        CoreError::Io(_) | CoreError::Sqlite(_) | CoreError::Keyword(_) | CoreError::Closed => {
            "StoreError"
        }
        CoreError::Corrupt(_) => "StoreCorrupt",
        CoreError::Locked(_) => "StoreLocked",
        CoreError::Model(_) => "ModelError",
        CoreError::ModelNotFound(_) => "ModelNotFound",
        CoreError::Cancelled => "Cancelled",
    };
    let msg = e.to_string();
    Python::attach(|py| match class(py, name) {
        Ok(cls) => PyErr::from_type(cls, msg),
        Err(err) => err,
    })
}
