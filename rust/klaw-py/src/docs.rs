//! Klaw's documentation: the Markdown files of `docs/`, compiled into the extension
//! so every install (editable, wheel, sdist) carries them, and `DocHit`, a result
//! of `Store.search_docs`, and `DocChunk`, what `Store.replace_docs` stores.
//!
//! `build.rs` lists `docs/*.md`, so a new page is bundled by the next build.

use klaw_core::store::DocChunk;
use pyo3::prelude::*;

/// (file name, Markdown text), sorted by name; the list is made by `build.rs`.
const BUNDLED: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/bundled_docs.rs"));

/// The docs compiled into this build: (file name, Markdown text), sorted by name.
#[pyfunction]
pub fn bundled_docs() -> Vec<(&'static str, &'static str)> {
    BUNDLED.to_vec()
}

#[pyclass(frozen, get_all, module = "klaw._core", name = "DocHit")]
pub struct PyDocHit {
    pub id: i64,
    pub file: String,
    pub section: Option<String>,
    pub content: String,
    pub chunk: i64,
    pub start_line: Option<i64>,
    pub end_line: Option<i64>,
    pub version: String,
    pub score: f64,
}

#[pymethods]
impl PyDocHit {
    fn __repr__(&self) -> String {
        format!(
            "DocHit(file={:?}, chunk={}, score={:.4})",
            self.file, self.chunk, self.score
        )
    }
}

impl From<klaw_core::store::DocHit> for PyDocHit {
    fn from(h: klaw_core::store::DocHit) -> Self {
        PyDocHit {
            id: h.id,
            file: h.file,
            section: h.section,
            content: h.content,
            chunk: h.chunk,
            start_line: h.start_line,
            end_line: h.end_line,
            version: h.version,
            score: h.score,
        }
    }
}

/// One chunk of a documentation page (`Store.replace_docs`); its vector is passed
/// alongside.
#[pyclass(frozen, module = "klaw._core", name = "DocChunk")]
pub struct PyDocChunk(DocChunk);

#[pymethods]
impl PyDocChunk {
    #[new]
    #[pyo3(signature = (*, file, content, chunk, section = None, start_line = None, end_line = None))]
    fn new(
        file: String,
        content: String,
        chunk: i64,
        section: Option<String>,
        start_line: Option<i64>,
        end_line: Option<i64>,
    ) -> Self {
        PyDocChunk(DocChunk {
            file,
            section,
            content,
            chunk,
            start_line,
            end_line,
        })
    }

    #[getter]
    fn file(&self) -> &str {
        &self.0.file
    }

    #[getter]
    fn content(&self) -> &str {
        &self.0.content
    }

    #[getter]
    fn chunk(&self) -> i64 {
        self.0.chunk
    }

    #[getter]
    fn section(&self) -> Option<&str> {
        self.0.section.as_deref()
    }

    #[getter]
    fn start_line(&self) -> Option<i64> {
        self.0.start_line
    }

    #[getter]
    fn end_line(&self) -> Option<i64> {
        self.0.end_line
    }

    fn __repr__(&self) -> String {
        format!(
            "DocChunk(file={:?}, chunk={}, section={:?})",
            self.0.file, self.0.chunk, self.0.section
        )
    }
}

impl PyDocChunk {
    /// Owned copies, so the GIL can be released around the write.
    pub fn owned(chunks: &[Bound<'_, PyDocChunk>]) -> Vec<DocChunk> {
        chunks.iter().map(|c| c.get().0.clone()).collect()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDocHit>()?;
    m.add_class::<PyDocChunk>()?;
    m.add_function(wrap_pyfunction!(bundled_docs, m)?)?;
    Ok(())
}
