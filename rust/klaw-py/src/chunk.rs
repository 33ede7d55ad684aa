//! Markdown chunking: `Chunk`, `chunk_markdown`, `chunk_all`.
use klaw_core::chunk::{self, ChunkConfig};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// One chunk: exact source text, 1-based inclusive line range, heading path
/// and estimated tokens.
#[pyclass(frozen, get_all, module = "klaw._core", name = "Chunk")]
struct PyChunk {
    text: String,
    start_line: usize,
    end_line: usize,
    heading_path: Vec<String>,
    tokens: usize,
}

#[pymethods]
impl PyChunk {
    fn __repr__(&self) -> String {
        format!(
            "Chunk(lines={}-{}, tokens={}, heading_path={:?})",
            self.start_line, self.end_line, self.tokens, self.heading_path
        )
    }
}

impl From<chunk::Chunk> for PyChunk {
    fn from(c: chunk::Chunk) -> Self {
        Self {
            text: c.text,
            start_line: c.start_line,
            end_line: c.end_line,
            heading_path: c.heading_path,
            tokens: c.tokens,
        }
    }
}

/// Validates sizes here so the error names the Python argument.
fn config(size: i64, overlap: i64) -> PyResult<ChunkConfig> {
    if size <= 0 {
        return Err(PyValueError::new_err(format!(
            "size must be > 0, got {size}"
        )));
    }
    if overlap < 0 || overlap >= size {
        return Err(PyValueError::new_err(format!(
            "overlap must be >= 0 and < size ({size}), got {overlap}"
        )));
    }
    Ok(ChunkConfig {
        size: size as usize,
        overlap: overlap as usize,
    })
}

#[pyfunction]
#[pyo3(signature = (text, size=400, overlap=80))]
fn chunk_markdown(py: Python<'_>, text: &str, size: i64, overlap: i64) -> PyResult<Vec<PyChunk>> {
    let cfg = config(size, overlap)?;
    let chunks = py.detach(|| chunk::chunk_markdown(text, &cfg));
    Ok(chunks.into_iter().map(PyChunk::from).collect())
}

// Owned on purpose: extracted with the GIL held, then used without it.
#[allow(clippy::needless_pass_by_value)]
#[pyfunction]
#[pyo3(signature = (texts, size=400, overlap=80))]
fn chunk_all(
    py: Python<'_>,
    texts: Vec<String>,
    size: i64,
    overlap: i64,
) -> PyResult<Vec<Vec<PyChunk>>> {
    let cfg = config(size, overlap)?;
    let all = py.detach(|| chunk::chunk_all(&texts, &cfg));
    Ok(all
        .into_iter()
        .map(|cs| cs.into_iter().map(PyChunk::from).collect())
        .collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyChunk>()?;
    m.add_function(wrap_pyfunction!(chunk_markdown, m)?)?;
    m.add_function(wrap_pyfunction!(chunk_all, m)?)?;
    Ok(())
}
