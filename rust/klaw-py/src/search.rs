//! `SearchParams`: how a hybrid search ranks, one record for `Store.search` and
//! `Store.search_docs` (the filters stay the searches' own arguments).

use crate::errors::to_py;
use klaw_core::search::{Fusion, FusionParams};
use klaw_core::CoreError;
use pyo3::prelude::*;

#[pyclass(frozen, module = "klaw._core", name = "SearchParams")]
#[derive(Clone)]
pub struct PySearchParams {
    pub top_k: usize,
    pub fusion: FusionParams,
}

#[pymethods]
impl PySearchParams {
    /// The defaults are `FusionParams::default()`'s (pyo3 needs them spelled out).
    #[new]
    #[pyo3(signature = (*, top_k = 10, candidates = 20, rrf_k = 60.0, vector_weight = 0.7,
                        keyword_weight = 0.3, fusion = "convex", recency = 0.0,
                        keyword_pivot = 0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        top_k: usize,
        candidates: usize,
        rrf_k: f64,
        vector_weight: f64,
        keyword_weight: f64,
        fusion: &str,
        recency: f64,
        keyword_pivot: usize,
    ) -> PyResult<Self> {
        Ok(PySearchParams {
            top_k,
            fusion: FusionParams {
                candidates,
                fusion: fusion_named(fusion)?,
                rrf_k,
                vector_weight,
                keyword_weight,
                recency,
                keyword_pivot,
            },
        })
    }

    #[getter]
    fn top_k(&self) -> usize {
        self.top_k
    }

    #[getter]
    fn candidates(&self) -> usize {
        self.fusion.candidates
    }

    #[getter]
    fn rrf_k(&self) -> f64 {
        self.fusion.rrf_k
    }

    #[getter]
    fn vector_weight(&self) -> f64 {
        self.fusion.vector_weight
    }

    #[getter]
    fn keyword_weight(&self) -> f64 {
        self.fusion.keyword_weight
    }

    #[getter]
    fn fusion(&self) -> &'static str {
        match self.fusion.fusion {
            Fusion::Convex => "convex",
            Fusion::Rrf => "rrf",
            Fusion::Peaked => "peaked",
        }
    }

    #[getter]
    fn recency(&self) -> f64 {
        self.fusion.recency
    }

    #[getter]
    fn keyword_pivot(&self) -> usize {
        self.fusion.keyword_pivot
    }

    fn __repr__(&self) -> String {
        let p = &self.fusion;
        format!(
            "SearchParams(top_k={}, candidates={}, rrf_k={}, vector_weight={}, keyword_weight={}, \
             fusion={:?}, recency={}, keyword_pivot={})",
            self.top_k,
            p.candidates,
            p.rrf_k,
            p.vector_weight,
            p.keyword_weight,
            self.fusion(),
            p.recency,
            p.keyword_pivot
        )
    }
}

impl PySearchParams {
    /// `given`, or the defaults with `top_k` results.
    pub fn or_default(given: Option<&Bound<'_, Self>>, top_k: usize) -> Self {
        given.map_or_else(
            || PySearchParams {
                top_k,
                fusion: FusionParams::default(),
            },
            |p| p.get().clone(),
        )
    }
}

fn fusion_named(name: &str) -> PyResult<Fusion> {
    match name {
        "convex" => Ok(Fusion::Convex),
        "rrf" => Ok(Fusion::Rrf),
        "peaked" => Ok(Fusion::Peaked),
        other => Err(to_py(CoreError::InvalidInput(format!(
            "fusion must be peaked, convex or rrf, got {other:?}"
        )))),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySearchParams>()
}
