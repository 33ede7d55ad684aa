//! Retained facts' records for Python (klaw.memory.facts); the Store methods that
//! take and return them are in store.rs.

use klaw_core::store::{FactRow, NewFact};
use pyo3::prelude::*;

#[pyclass(frozen, module = "klaw._core", name = "NewFact")]
#[derive(Clone)]
pub struct PyNewFact(pub NewFact);

#[pymethods]
impl PyNewFact {
    #[new]
    #[pyo3(signature = (*, fact_id, content, created_at, line, end_line, kind = None,
                        confidence = None, attribute = None, day = None, start_day = None,
                        end_day = None, entities = Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        fact_id: String,
        content: String,
        created_at: String,
        line: i64,
        end_line: i64,
        kind: Option<String>,
        confidence: Option<f64>,
        attribute: Option<String>,
        day: Option<String>,
        start_day: Option<String>,
        end_day: Option<String>,
        entities: Vec<(String, Vec<String>)>,
    ) -> Self {
        PyNewFact(NewFact {
            fact_id,
            kind,
            confidence,
            attribute,
            day,
            start_day,
            end_day,
            created_at,
            content,
            line,
            end_line,
            entities,
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "NewFact(fact_id={:?}, line={})",
            self.0.fact_id, self.0.line
        )
    }
}

#[pyclass(frozen, get_all, module = "klaw._core", name = "FactRow")]
#[derive(Clone)]
pub struct PyFactRow {
    pub chunk_id: i64,
    pub fact_id: String,
    pub kind: Option<String>,
    pub confidence: Option<f64>,
    pub attribute: Option<String>,
    pub day: Option<String>,
    pub start_day: Option<String>,
    pub end_day: Option<String>,
    pub created_at: String,
    pub content: String,
    pub path: String,
    pub line: i64,
    pub end_line: i64,
    pub entities: Vec<String>,
    pub superseded_by: Option<String>,
}

#[pymethods]
impl PyFactRow {
    fn __repr__(&self) -> String {
        format!(
            "FactRow(fact_id={:?}, path={:?}, line={}, superseded_by={:?})",
            self.fact_id, self.path, self.line, self.superseded_by
        )
    }
}

impl From<FactRow> for PyFactRow {
    fn from(f: FactRow) -> Self {
        PyFactRow {
            chunk_id: f.chunk_id,
            fact_id: f.fact_id,
            kind: f.kind,
            confidence: f.confidence,
            attribute: f.attribute,
            day: f.day,
            start_day: f.start_day,
            end_day: f.end_day,
            created_at: f.created_at,
            content: f.content,
            path: f.path,
            line: f.line,
            end_line: f.end_line,
            entities: f.entities,
            superseded_by: f.superseded_by,
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyNewFact>()?;
    m.add_class::<PyFactRow>()?;
    Ok(())
}
