//! Klaw's documentation: the Markdown files of `docs/`, compiled into the extension
//! so every install (editable, wheel, sdist) carries them, and `DocHit`, a result
//! of `Store.search_docs`.
//!
//! `build.rs` lists `docs/*.md`, so a new page is bundled by the next build.

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

/// (file, section, content, chunk index, start_line, end_line) of a doc chunk.
pub type DocTuple = (
    String,
    Option<String>,
    String,
    i64,
    Option<i64>,
    Option<i64>,
);

pub fn doc_chunks(t: Vec<DocTuple>) -> Vec<klaw_core::store::DocChunk> {
    t.into_iter()
        .map(
            |(file, section, content, chunk, start_line, end_line)| klaw_core::store::DocChunk {
                file,
                section,
                content,
                chunk,
                start_line,
                end_line,
            },
        )
        .collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDocHit>()?;
    m.add_function(wrap_pyfunction!(bundled_docs, m)?)?;
    Ok(())
}
