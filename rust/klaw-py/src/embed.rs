//! `Embedder`, `EmbeddingCache`, `embed_cached`: embeddings for Python.

use crate::errors::to_py;
use crate::store::floats;
use klaw_core::embcache::{embed_with_cache, text_hash, EmbeddingCache};
use klaw_core::embed::{Embedder, EmbedderConfig};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::PathBuf;

#[pyclass(frozen, module = "klaw._core", name = "Embedder")]
pub struct PyEmbedder {
    inner: Embedder,
}

#[pymethods]
impl PyEmbedder {
    #[new]
    #[pyo3(signature = (model_path, tokenizer_path, ort_library = None, threads = 1,
                        max_length = 256, max_batch_tokens = 0))]
    fn new(
        py: Python<'_>,
        model_path: PathBuf,
        tokenizer_path: PathBuf,
        ort_library: Option<PathBuf>,
        threads: usize,
        max_length: usize,
        max_batch_tokens: usize,
    ) -> PyResult<Self> {
        let cfg = EmbedderConfig {
            threads,
            max_length,
            max_batch_tokens,
        };
        let inner = py
            .detach(|| Embedder::load(&model_path, &tokenizer_path, ort_library.as_deref(), cfg))
            .map_err(to_py)?;
        Ok(PyEmbedder { inner })
    }

    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    /// One text → list of `dim` floats (unit length).
    fn embed(&self, py: Python<'_>, text: String) -> PyResult<Vec<f32>> {
        py.detach(|| self.inner.embed_batch(&[text])).map_err(to_py)
    }

    /// Many texts → float32 bytes, `len(texts) * dim` values, row-major.
    fn embed_batch<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let v = py
            .detach(|| self.inner.embed_batch(&texts))
            .map_err(to_py)?;
        Ok(PyBytes::new(py, &klaw_core::store::f32_bytes(&v)))
    }

    fn count_tokens(&self, py: Python<'_>, text: String) -> PyResult<usize> {
        py.detach(|| self.inner.count_tokens(&text)).map_err(to_py)
    }
}

#[pyclass(frozen, module = "klaw._core", name = "EmbeddingCache")]
pub struct PyEmbeddingCache {
    inner: EmbeddingCache,
}

#[pymethods]
impl PyEmbeddingCache {
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let inner = py.detach(|| EmbeddingCache::open(&path)).map_err(to_py)?;
        Ok(PyEmbeddingCache { inner })
    }

    fn get_many<'py>(
        &self,
        py: Python<'py>,
        model: String,
        hashes: Vec<String>,
        dim: usize,
    ) -> PyResult<Vec<Option<Bound<'py, PyBytes>>>> {
        let got = py
            .detach(|| self.inner.get_many(&model, &hashes, dim))
            .map_err(to_py)?;
        Ok(got
            .into_iter()
            .map(|v| v.map(|v| PyBytes::new(py, &klaw_core::store::f32_bytes(&v))))
            .collect())
    }

    fn put_many(
        &self,
        py: Python<'_>,
        model: String,
        hashes: Vec<String>,
        vectors: &[u8],
        dim: usize,
    ) -> PyResult<()> {
        let v = floats(vectors)?;
        if v.len() != hashes.len() * dim {
            return Err(to_py(klaw_core::CoreError::InvalidInput(format!(
                "{} hashes need {} floats, got {}",
                hashes.len(),
                hashes.len() * dim,
                v.len()
            ))));
        }
        py.detach(|| self.inner.put_many(&model, &hashes, &v, dim))
            .map_err(to_py)
    }

    #[pyo3(signature = (model = None))]
    fn count(&self, py: Python<'_>, model: Option<String>) -> PyResult<i64> {
        py.detach(|| self.inner.len(model.as_deref()))
            .map_err(to_py)
    }
}

/// Embeds through the cache in one call; returns (float32 bytes, cache hits).
#[pyfunction]
pub fn embed_cached<'py>(
    py: Python<'py>,
    embedder: &PyEmbedder,
    cache: &PyEmbeddingCache,
    model_id: String,
    texts: Vec<String>,
) -> PyResult<(Bound<'py, PyBytes>, usize)> {
    let (v, hits) = py
        .detach(|| embed_with_cache(&embedder.inner, &cache.inner, &model_id, &texts))
        .map_err(to_py)?;
    Ok((PyBytes::new(py, &klaw_core::store::f32_bytes(&v)), hits))
}

/// The cache key of a text (128-bit xxh3, hex).
#[pyfunction]
pub fn text_hashes(py: Python<'_>, texts: Vec<String>) -> Vec<String> {
    py.detach(|| texts.iter().map(|t| text_hash(t)).collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEmbedder>()?;
    m.add_class::<PyEmbeddingCache>()?;
    m.add_function(wrap_pyfunction!(embed_cached, m)?)?;
    m.add_function(wrap_pyfunction!(text_hashes, m)?)?;
    Ok(())
}
