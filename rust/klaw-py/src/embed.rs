//! `Embedder`, `EmbeddingCache`, `embed_cached`: embeddings for Python.

use crate::errors::to_py;
use crate::store::floats;
use crate::store::PyStore;
use klaw_core::chunk::ChunkConfig;
use klaw_core::embcache::{embed_with_cache, text_hash, EmbeddingCache};
use klaw_core::embed::{Embedder, EmbedderConfig};
use klaw_core::index::{self, Document, Embedding};
use klaw_core::store::FileState;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

#[pyclass(frozen, module = "klaw._core", name = "Embedder")]
pub struct PyEmbedder {
    pub(crate) inner: Embedder,
}

#[pymethods]
impl PyEmbedder {
    #[new]
    #[pyo3(signature = (model_path, tokenizer_path, ort_library = None, threads = 1,
                        max_length = 256, max_batch_tokens = 0, windows = true,
                        query_prefix = None, passage_prefix = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model_path: PathBuf,
        tokenizer_path: PathBuf,
        ort_library: Option<PathBuf>,
        threads: usize,
        max_length: usize,
        max_batch_tokens: usize,
        windows: bool,
        query_prefix: Option<String>,
        passage_prefix: Option<String>,
    ) -> PyResult<Self> {
        let cfg = EmbedderConfig {
            threads,
            max_length,
            windows,
            query_prefix: query_prefix.unwrap_or_default(),
            passage_prefix: passage_prefix.unwrap_or_default(),
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

    /// Search queries → float32 bytes (the model's query prefix applied).
    fn embed_queries<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let v = py
            .detach(|| self.inner.embed_queries(&texts))
            .map_err(to_py)?;
        Ok(PyBytes::new(py, &klaw_core::store::f32_bytes(&v)))
    }

    fn count_tokens(&self, py: Python<'_>, text: String) -> PyResult<usize> {
        py.detach(|| self.inner.count_tokens(&text)).map_err(to_py)
    }
}

#[pyclass(frozen, module = "klaw._core", name = "EmbeddingCache")]
pub struct PyEmbeddingCache {
    pub(crate) inner: EmbeddingCache,
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

/// A flag long Rust work checks to stop early (set from any thread).
#[pyclass(frozen, module = "klaw._core", name = "CancelFlag")]
#[derive(Default)]
pub struct PyCancelFlag {
    pub(crate) flag: AtomicBool,
}

#[pymethods]
impl PyCancelFlag {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    fn set(&self) {
        self.flag.store(true, Ordering::Relaxed);
    }

    fn is_set(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }
}

/// Chunks, embeds through the cache and stores one document, without the GIL and
/// in one crossing; returns (chunks stored, cache hits). Raises `Cancelled` once
/// `cancel` is set (before anything is written).
#[pyfunction]
#[pyo3(signature = (store, embedder, cache, model_id, *, path, source, hash, mtime, size,
                    created_at, text, chunk_size, chunk_overlap, batch_size, cancel))]
#[allow(clippy::too_many_arguments)]
pub fn index_document(
    py: Python<'_>,
    store: &PyStore,
    embedder: &PyEmbedder,
    cache: &PyEmbeddingCache,
    model_id: String,
    path: String,
    source: String,
    hash: String,
    mtime: f64,
    size: i64,
    created_at: String,
    text: String,
    chunk_size: usize,
    chunk_overlap: usize,
    batch_size: usize,
    cancel: &PyCancelFlag,
) -> PyResult<(usize, usize)> {
    let emb = Embedding {
        embedder: &embedder.inner,
        cache: &cache.inner,
        model_id: &model_id,
        batch_size,
    };
    let doc = Document {
        path: &path,
        source: &source,
        state: FileState { hash, mtime, size },
        created_at: &created_at,
        text: &text,
    };
    let chunking = ChunkConfig {
        size: chunk_size,
        overlap: chunk_overlap,
    };
    let done = py
        .detach(|| index::index_document(store.core(), &emb, &doc, &chunking, &cancel.flag))
        .map_err(to_py)?;
    Ok((done.chunks, done.cache_hits))
}

/// The cache key of a text (128-bit xxh3, hex).
#[pyfunction]
pub fn text_hashes(py: Python<'_>, texts: Vec<String>) -> Vec<String> {
    py.detach(|| texts.iter().map(|t| text_hash(t)).collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEmbedder>()?;
    m.add_class::<PyEmbeddingCache>()?;
    m.add_class::<PyCancelFlag>()?;
    m.add_function(wrap_pyfunction!(embed_cached, m)?)?;
    m.add_function(wrap_pyfunction!(index_document, m)?)?;
    m.add_function(wrap_pyfunction!(text_hashes, m)?)?;
    Ok(())
}
