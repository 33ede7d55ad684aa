//! The `klaw._core` extension: thin adapters over `klaw-core`.
// Arguments are extracted as owned values so the GIL can be released around the
// work (conventions: "extract owned inputs before releasing the GIL").
#![allow(clippy::needless_pass_by_value)]
use pyo3::prelude::*;

mod backup;
mod chunk;
mod docs;
mod embed;
mod errors;
mod facts;
mod record;
mod reindex;
mod search;
mod store;
mod tokens;
mod vision;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    chunk::register(m)?;
    tokens::register(m)?;
    store::register(m)?;
    facts::register(m)?;
    search::register(m)?;
    docs::register(m)?;
    embed::register(m)?;
    record::register(m)?;
    reindex::register(m)?;
    backup::register(m)?;
    vision::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
