//! `fit_image`: photos for vision models (`klaw_core::vision`).
use klaw_core::vision;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::to_py;

/// An image ready for a model: its bytes, type and pixel size.
#[pyclass(frozen, module = "klaw._core", name = "FittedImage")]
struct PyFitted {
    data: Py<PyBytes>,
    #[pyo3(get)]
    mime: &'static str,
    #[pyo3(get)]
    width: u32,
    #[pyo3(get)]
    height: u32,
    #[pyo3(get)]
    resized: bool,
}

#[pymethods]
impl PyFitted {
    #[getter]
    fn data(&self, py: Python<'_>) -> Py<PyBytes> {
        self.data.clone_ref(py)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "FittedImage(mime={:?}, width={}, height={}, bytes={}, resized={})",
            self.mime,
            self.width,
            self.height,
            self.data.bind(py).as_bytes().len(),
            if self.resized { "True" } else { "False" }
        )
    }
}

/// `data` within `max_side` pixels and `max_bytes` bytes (decoding and shrinking run
/// without the GIL). Raises InvalidInput with the reason an image cannot be used.
#[pyfunction]
fn fit_image(py: Python<'_>, data: &[u8], max_side: u32, max_bytes: usize) -> PyResult<PyFitted> {
    let fitted = py
        .detach(|| vision::fit_image(data, max_side, max_bytes))
        .map_err(to_py)?;
    Ok(PyFitted {
        data: PyBytes::new(py, &fitted.data).unbind(),
        mime: fitted.mime,
        width: fitted.width,
        height: fitted.height,
        resized: fitted.resized,
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyFitted>()?;
    m.add_function(wrap_pyfunction!(fit_image, m)?)?;
    Ok(())
}
