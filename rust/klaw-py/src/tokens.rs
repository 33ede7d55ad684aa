//! Token counting: `estimate_tokens`, `count_tokens_batch`, `TokenCounter`.
use std::path::PathBuf;

use klaw_core::tokens::{self, TokenError};
use pyo3::prelude::*;

/// Below this many bytes the estimate takes less time than releasing the GIL.
const DETACH_MIN_BYTES: usize = 16 * 1024;

/// The one place that maps `TokenError` to Python (to become KlawError subclasses).
fn token_error(e: &TokenError) -> PyErr {
    crate::errors::to_py(klaw_core::CoreError::InvalidInput(format!(
        "{e}; pass the path of a HuggingFace tokenizer.json"
    )))
}

#[pyfunction]
fn estimate_tokens(py: Python<'_>, text: &str) -> usize {
    if text.len() < DETACH_MIN_BYTES {
        tokens::estimate_tokens(text)
    } else {
        py.detach(|| tokens::estimate_tokens(text))
    }
}

// Owned on purpose: extracted with the GIL held, then used without it.
#[allow(clippy::needless_pass_by_value)]
#[pyfunction]
fn count_tokens_batch(py: Python<'_>, texts: Vec<String>) -> Vec<usize> {
    py.detach(|| texts.iter().map(|t| tokens::estimate_tokens(t)).collect())
}

/// Exact counts with a tokenizer.json, or the estimate without one.
#[pyclass(frozen, module = "klaw._core", name = "TokenCounter")]
struct PyTokenCounter {
    inner: tokens::TokenCounter,
}

#[pymethods]
impl PyTokenCounter {
    #[new]
    #[pyo3(signature = (tokenizer_json=None))]
    fn new(py: Python<'_>, tokenizer_json: Option<PathBuf>) -> PyResult<Self> {
        let inner = match tokenizer_json {
            None => tokens::TokenCounter::estimate(),
            Some(path) => py
                .detach(|| tokens::TokenCounter::from_file(&path))
                .map_err(|e| token_error(&e))?,
        };
        Ok(Self { inner })
    }

    fn count(&self, py: Python<'_>, text: &str) -> usize {
        if !self.inner.is_exact() && text.len() < DETACH_MIN_BYTES {
            return self.inner.count(text);
        }
        py.detach(|| self.inner.count(text))
    }

    #[allow(clippy::needless_pass_by_value)]
    fn count_batch(&self, py: Python<'_>, texts: Vec<String>) -> Vec<usize> {
        py.detach(|| self.inner.count_batch(&texts))
    }

    #[getter]
    fn exact(&self) -> bool {
        self.inner.is_exact()
    }

    fn __repr__(&self) -> String {
        format!(
            "TokenCounter(exact={})",
            if self.inner.is_exact() {
                "True"
            } else {
                "False"
            }
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(estimate_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(count_tokens_batch, m)?)?;
    m.add_class::<PyTokenCounter>()?;
    Ok(())
}
