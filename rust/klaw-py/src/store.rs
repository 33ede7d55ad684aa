//! `Store`, `Hit`: the klaw.db API for Python. Every call releases the GIL.

use crate::docs::{PyDocChunk, PyDocHit};
use crate::errors::to_py;
use crate::facts::{PyFactRow, PyNewFact};
use crate::search::PySearchParams;
use klaw_core::store::{FileState, Filter, Hit, MessageRow, NewChunk, Store};
use klaw_core::timeutil::parse_iso;
use klaw_core::CoreError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::path::PathBuf;

/// A search result; `citation` says where it came from.
#[pyclass(frozen, module = "klaw._core", name = "Hit")]
pub struct PyHit(Hit);

#[pymethods]
impl PyHit {
    #[getter]
    fn id(&self) -> i64 {
        self.0.id
    }

    #[getter]
    fn content(&self) -> &str {
        &self.0.content
    }

    #[getter]
    fn source(&self) -> &str {
        &self.0.source
    }

    #[getter]
    fn chat_id(&self) -> Option<&str> {
        self.0.chat_id.as_deref()
    }

    #[getter]
    fn start_line(&self) -> Option<i64> {
        self.0.start_line
    }

    #[getter]
    fn end_line(&self) -> Option<i64> {
        self.0.end_line
    }

    #[getter]
    fn heading(&self) -> Option<&str> {
        self.0.heading.as_deref()
    }

    #[getter]
    fn created_at(&self) -> &str {
        &self.0.created_at
    }

    #[getter]
    fn score(&self) -> f64 {
        self.0.score
    }

    #[getter]
    fn citation(&self) -> String {
        self.0.citation()
    }

    /// The same hit with other text (hits are frozen).
    fn with_content(&self, content: String) -> PyHit {
        PyHit(Hit {
            content,
            ..self.0.clone()
        })
    }

    /// The fields and the citation, for JSON.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let h = &self.0;
        let d = PyDict::new(py);
        d.set_item("content", &h.content)?;
        d.set_item("source", &h.source)?;
        d.set_item("start_line", h.start_line)?;
        d.set_item("end_line", h.end_line)?;
        d.set_item("created_at", &h.created_at)?;
        d.set_item("score", h.score)?;
        d.set_item("id", h.id)?;
        d.set_item("chat_id", &h.chat_id)?;
        d.set_item("heading", &h.heading)?;
        d.set_item("citation", h.citation())?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "Hit(id={}, source={:?}, score={:.4})",
            self.0.id, self.0.source, self.0.score
        )
    }
}

/// A chunk to store (`Store.replace_file`, `Store.add_chunks`); its vector is passed
/// alongside.
#[pyclass(frozen, module = "klaw._core", name = "NewChunk")]
pub struct PyNewChunk(NewChunk);

#[pymethods]
impl PyNewChunk {
    #[new]
    #[pyo3(signature = (*, content, chunk_hash, start_line = None, end_line = None, heading = None))]
    fn new(
        content: String,
        chunk_hash: String,
        start_line: Option<i64>,
        end_line: Option<i64>,
        heading: Option<String>,
    ) -> Self {
        PyNewChunk(NewChunk {
            content,
            start_line,
            end_line,
            heading,
            chunk_hash,
        })
    }

    #[getter]
    fn content(&self) -> &str {
        &self.0.content
    }

    #[getter]
    fn chunk_hash(&self) -> &str {
        &self.0.chunk_hash
    }

    #[getter]
    fn start_line(&self) -> Option<i64> {
        self.0.start_line
    }

    #[getter]
    fn end_line(&self) -> Option<i64> {
        self.0.end_line
    }

    #[getter]
    fn heading(&self) -> Option<&str> {
        self.0.heading.as_deref()
    }

    fn __repr__(&self) -> String {
        format!(
            "NewChunk(lines={:?}-{:?}, heading={:?}, chunk_hash={:?})",
            self.0.start_line, self.0.end_line, self.0.heading, self.0.chunk_hash
        )
    }
}

/// One conversation message as klaw.db stores it (what reindex makes of a JSONL
/// line); `metadata` is the `meta` object's JSON text. Equal and hashed by value, in
/// Rust: a turn's window rows key the engine's cache of built messages without a getter
/// (a new Python string) per field.
#[pyclass(frozen, eq, hash, get_all, module = "klaw._core", name = "Message")]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PyMessage {
    pub id: String,
    pub channel: String,
    pub chat_id: String,
    pub role: String,
    pub kind: Option<String>,
    pub content: String,
    pub metadata: Option<String>,
    pub created_at: String,
}

#[pymethods]
impl PyMessage {
    #[new]
    #[pyo3(signature = (*, id, channel, chat_id, role, content, created_at, kind = None, metadata = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        id: String,
        channel: String,
        chat_id: String,
        role: String,
        content: String,
        created_at: String,
        kind: Option<String>,
        metadata: Option<String>,
    ) -> Self {
        PyMessage {
            id,
            channel,
            chat_id,
            role,
            kind,
            content,
            metadata,
            created_at,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Message(id={:?}, chat_id={:?}, role={:?}, kind={:?})",
            self.id, self.chat_id, self.role, self.kind
        )
    }
}

impl From<MessageRow> for PyMessage {
    fn from(m: MessageRow) -> Self {
        PyMessage {
            id: m.id,
            channel: m.channel,
            chat_id: m.chat_id,
            role: m.role,
            kind: m.kind,
            content: m.content,
            metadata: m.metadata,
            created_at: m.created_at,
        }
    }
}

impl From<PyMessage> for MessageRow {
    fn from(m: PyMessage) -> Self {
        MessageRow {
            id: m.id,
            channel: m.channel,
            chat_id: m.chat_id,
            role: m.role,
            kind: m.kind,
            content: m.content,
            metadata: m.metadata,
            created_at: m.created_at,
        }
    }
}

/// What klaw.db knows of an indexed file (to skip unchanged ones).
#[pyclass(frozen, get_all, module = "klaw._core", name = "FileState")]
pub struct PyFileState {
    pub path: String,
    pub source: String,
    pub hash: String,
    pub mtime: f64,
    pub size: i64,
}

#[pymethods]
impl PyFileState {
    fn __repr__(&self) -> String {
        format!("FileState(path={:?}, hash={:?})", self.path, self.hash)
    }
}

/// A chat's current session: its model and where its segment starts.
#[pyclass(frozen, get_all, module = "klaw._core", name = "Session")]
pub struct PySession {
    pub model: String,
    pub segment_start: String,
    pub created_at: String,
}

#[pymethods]
impl PySession {
    fn __repr__(&self) -> String {
        format!(
            "Session(model={:?}, segment_start={:?})",
            self.model, self.segment_start
        )
    }
}

/// Owned copies, so the GIL can be released around the write.
fn chunks_from(chunks: &[Bound<'_, PyNewChunk>]) -> Vec<NewChunk> {
    chunks.iter().map(|c| c.get().0.clone()).collect()
}

pub fn floats(b: &[u8]) -> PyResult<Vec<f32>> {
    if !b.len().is_multiple_of(4) {
        return Err(to_py(CoreError::InvalidInput(format!(
            "vector buffer of {} bytes is not float32 data",
            b.len()
        ))));
    }
    Ok(klaw_core::store::bytes_f32(b))
}

fn iso(name: &str, v: Option<String>) -> PyResult<Option<i64>> {
    v.map(|s| {
        parse_iso(&s).ok_or_else(|| {
            to_py(CoreError::InvalidInput(format!(
                "{name} is not an ISO 8601 time: {s:?}"
            )))
        })
    })
    .transpose()
}

#[pyclass(frozen, module = "klaw._core", name = "Store")]
pub struct PyStore {
    inner: Store,
}

impl PyStore {
    pub(crate) fn core(&self) -> &Store {
        &self.inner
    }
}

#[pymethods]
impl PyStore {
    #[new]
    #[pyo3(signature = (path, dim = None, threads = 2))]
    fn new(py: Python<'_>, path: PathBuf, dim: Option<usize>, threads: usize) -> PyResult<Self> {
        let inner = py
            .detach(|| {
                // No dimension given: the one the file records, else the historic 384.
                let dim = match dim {
                    Some(d) => d,
                    None => Store::stored_dim(&path)?.unwrap_or(384),
                };
                Store::open(&path, dim, threads)
            })
            .map_err(to_py)?;
        Ok(PyStore { inner })
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.close()).map_err(to_py)
    }

    /// The indexed state of `path` (its `source` is left empty), or None.
    fn file_state(&self, py: Python<'_>, path: String) -> PyResult<Option<PyFileState>> {
        let s = py.detach(|| self.inner.file_state(&path)).map_err(to_py)?;
        Ok(s.map(|s| PyFileState {
            path,
            source: String::new(),
            hash: s.hash,
            mtime: s.mtime,
            size: s.size,
        }))
    }

    fn list_files(&self, py: Python<'_>) -> PyResult<Vec<PyFileState>> {
        let rows = py.detach(|| self.inner.list_files()).map_err(to_py)?;
        Ok(rows
            .into_iter()
            .map(|(path, source, s)| PyFileState {
                path,
                source,
                hash: s.hash,
                mtime: s.mtime,
                size: s.size,
            })
            .collect())
    }

    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (path, source, hash, mtime, size, created_at, chunks, vectors))]
    fn replace_file(
        &self,
        py: Python<'_>,
        path: String,
        source: String,
        hash: String,
        mtime: f64,
        size: i64,
        created_at: String,
        chunks: Vec<Bound<'_, PyNewChunk>>,
        vectors: &[u8],
    ) -> PyResult<Vec<i64>> {
        let v = floats(vectors)?;
        let chunks = chunks_from(&chunks);
        let state = FileState { hash, mtime, size };
        py.detach(|| {
            self.inner
                .replace_file(&path, &source, &state, &created_at, &chunks, &v)
        })
        .map_err(to_py)
    }

    fn remove_file(&self, py: Python<'_>, path: String) -> PyResult<usize> {
        py.detach(|| self.inner.remove_file(&path)).map_err(to_py)
    }

    #[pyo3(signature = (source, chat_id, created_at, chunks, vectors))]
    fn add_chunks(
        &self,
        py: Python<'_>,
        source: String,
        chat_id: Option<String>,
        created_at: String,
        chunks: Vec<Bound<'_, PyNewChunk>>,
        vectors: &[u8],
    ) -> PyResult<Vec<i64>> {
        let v = floats(vectors)?;
        let chunks = chunks_from(&chunks);
        py.detach(|| {
            self.inner
                .add_chunks(&source, chat_id.as_deref(), &created_at, &chunks, &v)
        })
        .map_err(to_py)
    }

    fn count_chunks(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.inner.count_chunks()).map_err(to_py)
    }

    /// Hybrid search ranked by `params` (the defaults when None), filtered by time
    /// and source.
    #[pyo3(signature = (query_vec, query_text, params = None, *, since = None, until = None,
                        source = None, ids = None))]
    #[allow(clippy::too_many_arguments)]
    fn search(
        &self,
        py: Python<'_>,
        query_vec: Option<&[u8]>,
        query_text: String,
        params: Option<&Bound<'_, PySearchParams>>,
        since: Option<String>,
        until: Option<String>,
        source: Option<String>,
        ids: Option<Vec<i64>>,
    ) -> PyResult<Vec<PyHit>> {
        let q = query_vec.map(floats).transpose()?;
        let f = Filter {
            since: iso("since", since)?,
            until: iso("until", until)?,
            source,
            ids: ids.map(std::sync::Arc::new),
        };
        let p = PySearchParams::or_default(params, 10);
        let hits = py
            .detach(|| {
                self.inner
                    .search(q.as_deref(), &query_text, p.top_k, &p.fusion, &f)
            })
            .map_err(to_py)?;
        Ok(hits.into_iter().map(PyHit).collect())
    }

    #[pyo3(signature = (query_vec, k = 10, since = None, until = None, source = None))]
    fn vector_search(
        &self,
        py: Python<'_>,
        query_vec: &[u8],
        k: usize,
        since: Option<String>,
        until: Option<String>,
        source: Option<String>,
    ) -> PyResult<Vec<(i64, f32)>> {
        let q = floats(query_vec)?;
        let f = Filter {
            since: iso("since", since)?,
            until: iso("until", until)?,
            source,
            ids: None,
        };
        py.detach(|| self.inner.vector_search(&q, k, &f))
            .map_err(to_py)
    }

    #[pyo3(signature = (query_vec, k = 10))]
    fn vector_search_exact(
        &self,
        py: Python<'_>,
        query_vec: &[u8],
        k: usize,
    ) -> PyResult<Vec<(i64, f32)>> {
        let q = floats(query_vec)?;
        py.detach(|| self.inner.vector_search_exact(&q, k))
            .map_err(to_py)
    }

    #[pyo3(signature = (text, k = 10, since = None, until = None, source = None))]
    fn keyword_search(
        &self,
        py: Python<'_>,
        text: String,
        k: usize,
        since: Option<String>,
        until: Option<String>,
        source: Option<String>,
    ) -> PyResult<Vec<(i64, f32)>> {
        let f = Filter {
            since: iso("since", since)?,
            until: iso("until", until)?,
            source,
            ids: None,
        };
        py.detach(|| self.inner.keyword_search(&text, k, &f))
            .map_err(to_py)
    }

    fn get_chunks(&self, py: Python<'_>, ids: Vec<i64>) -> PyResult<Vec<PyHit>> {
        let hits = py.detach(|| self.inner.get_chunks(&ids)).map_err(to_py)?;
        Ok(hits.into_iter().map(PyHit).collect())
    }

    fn insert_messages(&self, py: Python<'_>, rows: Vec<PyMessage>) -> PyResult<usize> {
        let rows: Vec<MessageRow> = rows.into_iter().map(MessageRow::from).collect();
        py.detach(|| self.inner.insert_messages(&rows))
            .map_err(to_py)
    }

    fn count_messages(&self, py: Python<'_>) -> PyResult<i64> {
        py.detach(|| self.inner.count_messages()).map_err(to_py)
    }

    #[pyo3(signature = (chat_id, since = None, limit = 20))]
    fn recent_messages(
        &self,
        py: Python<'_>,
        chat_id: String,
        since: Option<String>,
        limit: usize,
    ) -> PyResult<Vec<PyMessage>> {
        let rows = py
            .detach(|| {
                self.inner
                    .recent_messages(&chat_id, since.as_deref(), limit)
            })
            .map_err(to_py)?;
        Ok(rows.into_iter().map(PyMessage::from).collect())
    }

    #[pyo3(signature = (chat_id, after = 0, limit = 500))]
    fn messages_after(
        &self,
        py: Python<'_>,
        chat_id: String,
        after: i64,
        limit: usize,
    ) -> PyResult<Vec<(i64, PyMessage)>> {
        let rows = py
            .detach(|| self.inner.messages_after(&chat_id, after, limit))
            .map_err(to_py)?;
        Ok(rows
            .into_iter()
            .map(|(rowid, m)| (rowid, PyMessage::from(m)))
            .collect())
    }

    fn chat_heads(&self, py: Python<'_>) -> PyResult<Vec<(String, i64)>> {
        py.detach(|| self.inner.chat_heads()).map_err(to_py)
    }

    #[pyo3(signature = (query, limit = 20))]
    fn search_messages(
        &self,
        py: Python<'_>,
        query: String,
        limit: usize,
    ) -> PyResult<Vec<PyMessage>> {
        let rows = py
            .detach(|| self.inner.search_messages(&query, limit))
            .map_err(to_py)?;
        Ok(rows.into_iter().map(PyMessage::from).collect())
    }

    fn upsert_session(
        &self,
        py: Python<'_>,
        chat_id: String,
        model: String,
        segment_start: String,
        created_at: String,
    ) -> PyResult<()> {
        py.detach(|| {
            self.inner
                .upsert_session(&chat_id, &model, &segment_start, &created_at)
        })
        .map_err(to_py)
    }

    fn get_session(&self, py: Python<'_>, chat_id: String) -> PyResult<Option<PySession>> {
        let s = py
            .detach(|| self.inner.get_session(&chat_id))
            .map_err(to_py)?;
        Ok(s.map(|(model, segment_start, created_at)| PySession {
            model,
            segment_start,
            created_at,
        }))
    }

    #[pyo3(signature = (chat_id, from_id, to_id, file_path, created_at))]
    fn add_summary(
        &self,
        py: Python<'_>,
        chat_id: String,
        from_id: Option<String>,
        to_id: Option<String>,
        file_path: String,
        created_at: String,
    ) -> PyResult<()> {
        py.detach(|| {
            self.inner.add_summary(
                &chat_id,
                from_id.as_deref(),
                to_id.as_deref(),
                &file_path,
                &created_at,
            )
        })
        .map_err(to_py)
    }

    fn meta_get(&self, py: Python<'_>, key: String) -> PyResult<Option<String>> {
        py.detach(|| self.inner.meta_get(&key)).map_err(to_py)
    }

    fn meta_set(&self, py: Python<'_>, key: String, value: String) -> PyResult<()> {
        py.detach(|| self.inner.meta_set(&key, &value))
            .map_err(to_py)
    }

    /// Replaces the whole documentation index; `meta` (key, value) is recorded in
    /// the same transaction.
    #[pyo3(signature = (version, chunks, vectors, meta = None))]
    fn replace_docs(
        &self,
        py: Python<'_>,
        version: String,
        chunks: Vec<Bound<'_, PyDocChunk>>,
        vectors: &[u8],
        meta: Option<(String, String)>,
    ) -> PyResult<usize> {
        let v = floats(vectors)?;
        let chunks = PyDocChunk::owned(&chunks);
        py.detach(|| {
            let meta = meta.as_ref().map(|(k, v)| (k.as_str(), v.as_str()));
            self.inner.replace_docs(&version, &chunks, &v, meta)
        })
        .map_err(to_py)
    }

    fn count_docs(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.inner.count_docs()).map_err(to_py)
    }

    /// Hybrid search of the docs ranked by `params` (the defaults and 5 results when
    /// None).
    #[pyo3(signature = (query_vec, query_text, params = None))]
    fn search_docs(
        &self,
        py: Python<'_>,
        query_vec: Option<&[u8]>,
        query_text: String,
        params: Option<&Bound<'_, PySearchParams>>,
    ) -> PyResult<Vec<PyDocHit>> {
        let q = query_vec.map(floats).transpose()?;
        let p = PySearchParams::or_default(params, 5);
        let hits = py
            .detach(|| {
                self.inner
                    .search_docs(q.as_deref(), &query_text, p.top_k, &p.fusion)
            })
            .map_err(to_py)?;
        Ok(hits.into_iter().map(PyDocHit::from).collect())
    }

    /// Replaces the retained facts of the indexed file `path`; returns their chunk ids.
    fn replace_facts(
        &self,
        py: Python<'_>,
        path: String,
        facts: Vec<PyNewFact>,
        vectors: &[u8],
    ) -> PyResult<Vec<i64>> {
        let v = floats(vectors)?;
        let facts: Vec<_> = facts.into_iter().map(|f| f.0).collect();
        py.detach(|| self.inner.replace_facts(&path, &facts, &v))
            .map_err(to_py)
    }

    /// Chunk ids of the facts of `kinds` (any when empty) about one of `entities`
    /// (each the analysed terms of a name; any entity when empty).
    #[pyo3(signature = (kinds = Vec::new(), entities = Vec::new()))]
    fn fact_ids(
        &self,
        py: Python<'_>,
        kinds: Vec<String>,
        entities: Vec<Vec<String>>,
    ) -> PyResult<Vec<i64>> {
        py.detach(|| self.inner.fact_ids(&kinds, &entities))
            .map_err(to_py)
    }

    /// The facts with these chunk ids (in that order), or of `path`, or all.
    #[pyo3(signature = (ids = None, path = None))]
    fn facts(
        &self,
        py: Python<'_>,
        ids: Option<Vec<i64>>,
        path: Option<String>,
    ) -> PyResult<Vec<PyFactRow>> {
        let rows = py
            .detach(|| self.inner.facts(ids.as_deref(), path.as_deref()))
            .map_err(to_py)?;
        Ok(rows.into_iter().map(PyFactRow::from).collect())
    }

    /// Sets (None: clears) the fact id superseding each fact chunk; returns rows changed.
    fn set_superseded(
        &self,
        py: Python<'_>,
        changes: Vec<(i64, Option<String>)>,
    ) -> PyResult<usize> {
        py.detach(|| self.inner.set_superseded(&changes))
            .map_err(to_py)
    }

    fn stats(&self, py: Python<'_>) -> PyResult<Vec<(String, i64)>> {
        py.detach(|| self.inner.stats()).map_err(to_py)
    }

    fn integrity_check(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        py.detach(|| self.inner.integrity_check()).map_err(to_py)
    }
}

/// Float32 bytes of a list of floats (for callers without numpy).
#[pyfunction]
pub fn pack_f32(py: Python<'_>, values: Vec<f32>) -> Bound<'_, PyBytes> {
    PyBytes::new(py, &klaw_core::store::f32_bytes(&values))
}

/// List of floats from float32 bytes.
#[pyfunction]
pub fn unpack_f32(data: &[u8]) -> PyResult<Vec<f32>> {
    floats(data)
}

/// Multilingual keyword analysis (what the keyword index stores / queries).
#[pyfunction]
#[pyo3(signature = (text, query = false))]
pub fn analyze(py: Python<'_>, text: String, query: bool) -> Vec<String> {
    use klaw_core::analyze::{analyze as run, Mode};
    py.detach(|| run(&text, if query { Mode::Query } else { Mode::Index }))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyStore>()?;
    m.add_class::<PyHit>()?;
    m.add_class::<PyNewChunk>()?;
    m.add_class::<PyMessage>()?;
    m.add_class::<PyFileState>()?;
    m.add_class::<PySession>()?;
    m.add_function(wrap_pyfunction!(pack_f32, m)?)?;
    m.add_function(wrap_pyfunction!(unpack_f32, m)?)?;
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    Ok(())
}
