//! The klaw.db store: the only code that opens the file. One writer connection,
//! one reader connection (WAL lets them run together), the in-memory int8 vector
//! index and the tantivy keyword index, kept in step with the tables.
//!
//! This file opens, loads and closes the store; the parts are `chunks` (archival
//! memory's writes), `search` (its reads), `messages` (recall memory), `sessions`
//! (sessions and summaries) and `docs` (Klaw's own documentation).

use crate::error::{CoreError, Result};
use crate::keyword::KeywordIndex;
use crate::schema;
use crate::timeutil::parse_iso;
use crate::vindex::VectorIndex;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once, RwLock};

mod chunks;
mod docs;
mod facts;
mod messages;
mod search;
mod sessions;
pub use chunks::{FileState, NewChunk};
pub use docs::{DocChunk, DocHit};
pub use facts::{FactRow, NewFact, FACT_SOURCE_PREFIX};
pub use messages::{fts5_or_query, MessageRow};
pub use search::{Filter, Hit};

static VEC_INIT: Once = Once::new();

/// Registers sqlite-vec (compiled in, never loaded from a file) for every connection.
pub fn register_sqlite_vec() {
    VEC_INIT.call_once(|| {
        // SAFETY: sqlite3_vec_init has the signature sqlite3_auto_extension expects;
        // the transmute only erases the argument types of the extern fn pointer.
        unsafe {
            #[allow(clippy::missing_transmute_annotations)]
            rusqlite::ffi::sqlite3_auto_extension(Some(std::mem::transmute(
                sqlite_vec::sqlite3_vec_init as *const (),
            )));
        }
    });
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Locking: the outer `RwLock<Option<Inner>>` is taken exclusively only by `close`;
/// everything else shares it. Writes serialize on the writer connection; the in-memory
/// vector index takes its own lock only for the short update after a commit, and
/// tantivy locks itself. So a search never waits for a write transaction (WAL lets
/// the reader connection see the last commit meanwhile), only for that short update.
struct Inner {
    writer: Mutex<Connection>,
    reader: Mutex<Connection>,
    mem: RwLock<MemIndex>,
    keyword: KeywordIndex,
    /// The docs' in-memory indexes, built on first search, dropped on replace.
    docs: RwLock<Option<docs::DocsIndex>>,
}

impl Inner {
    fn mem(&self) -> Result<std::sync::RwLockReadGuard<'_, MemIndex>> {
        self.mem.read().map_err(|_| CoreError::Closed)
    }

    fn mem_mut(&self) -> Result<std::sync::RwLockWriteGuard<'_, MemIndex>> {
        self.mem.write().map_err(|_| CoreError::Closed)
    }
}

/// Sources of conversation chunks start with this (`chat:<chat id>`): they are only
/// searched when asked for by their exact source, so one chat never sees another's.
pub const CHAT_SOURCE_PREFIX: &str = "chat:";

/// Conversations and facts are searched only when asked for (by their source, or a
/// fact filter), never by a plain search.
pub(crate) fn hidden_source(source: &str) -> bool {
    source.starts_with(CHAT_SOURCE_PREFIX) || source.starts_with(FACT_SOURCE_PREFIX)
}

/// The int8 vector index with each chunk's date and source (interned).
struct MemIndex {
    vindex: VectorIndex,
    sources: Vec<String>,
    source_ids: HashMap<String, u32>,
    /// Per interned source: is it a conversation (`chat:`) source.
    chat: Vec<bool>,
    has_chats: bool,
}

impl MemIndex {
    fn intern(&mut self, source: &str) -> u32 {
        if let Some(&i) = self.source_ids.get(source) {
            return i;
        }
        let i = self.sources.len() as u32;
        self.sources.push(source.to_string());
        self.source_ids.insert(source.to_string(), i);
        let chat = hidden_source(source);
        self.chat.push(chat);
        self.has_chats |= chat;
        i
    }
}

pub struct Store {
    path: PathBuf,
    dim: usize,
    threads: usize,
    inner: RwLock<Option<Inner>>,
}

fn open_conn(path: &Path, write: bool) -> Result<Connection> {
    register_sqlite_vec();
    let flags = if write {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
    } else {
        OpenFlags::SQLITE_OPEN_READ_ONLY
    } | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn)
}

fn corrupt_or(e: rusqlite::Error, path: &Path) -> CoreError {
    use rusqlite::ErrorCode;
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => CoreError::Corrupt(format!(
            "{} is damaged ({e}); stop the engine and run `klaw reindex` to rebuild it from files",
            path.display()
        )),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => CoreError::Locked(format!(
            "{} is locked by another process ({e}); is the engine running?",
            path.display()
        )),
        _ => CoreError::Sqlite(e),
    }
}

/// The keyword index directory that belongs to a database file.
pub fn keyword_dir_for(db: &Path) -> PathBuf {
    let mut name = db
        .file_name()
        .map(std::ffi::OsStr::to_os_string)
        .unwrap_or_default();
    name.push(".keyword");
    db.with_file_name(name)
}

impl Store {
    /// Opens (creating and migrating if needed) the database at `path`.
    /// The vector dimension an existing klaw.db records (None: no file or no record),
    /// so a reader that does not embed need not know the model.
    pub fn stored_dim(path: &Path) -> Result<Option<usize>> {
        if !path.is_file() {
            return Ok(None);
        }
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let dim: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'dim'", [], |r| r.get(0))
            .ok();
        Ok(dim.and_then(|d| d.parse().ok()))
    }

    pub fn open(path: &Path, dim: usize, threads: usize) -> Result<Store> {
        if dim == 0 || dim > 4096 {
            return Err(CoreError::InvalidInput(format!(
                "invalid vector dimension {dim}"
            )));
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut writer = open_conn(path, true)?;
        let setup = |c: &mut Connection| -> rusqlite::Result<()> {
            c.pragma_update(None, "journal_mode", "WAL")?;
            c.pragma_update(None, "synchronous", "NORMAL")?;
            c.pragma_update(None, "foreign_keys", "ON")?;
            c.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
                r.get::<_, i64>(0)
            })?;
            Ok(())
        };
        setup(&mut writer).map_err(|e| corrupt_or(e, path))?;
        schema::migrate(&mut writer, dim).map_err(|e| match e {
            CoreError::Sqlite(s) => corrupt_or(s, path),
            other => other,
        })?;
        let reader = open_conn(path, false)?;
        reader.pragma_update(None, "foreign_keys", "ON")?;
        let keyword = KeywordIndex::open(&keyword_dir_for(path))?;
        let mut inner = Inner {
            writer: Mutex::new(writer),
            reader: Mutex::new(reader),
            mem: RwLock::new(MemIndex {
                vindex: VectorIndex::new(dim),
                sources: Vec::new(),
                source_ids: HashMap::new(),
                chat: Vec::new(),
                has_chats: false,
            }),
            keyword,
            docs: RwLock::new(None),
        };
        Self::load(&mut inner, dim, path)?;
        trim_heap();
        Ok(Store {
            path: path.to_path_buf(),
            dim,
            threads: threads.max(1),
            inner: RwLock::new(Some(inner)),
        })
    }

    /// Loads the in-memory indexes from the tables; rebuilds the keyword index if it
    /// disagrees with `memory_chunks` (a crash between the two commits, or a copy).
    fn load(inner: &mut Inner, dim: usize, path: &Path) -> Result<()> {
        let mut rows: Vec<(i64, String, String)> = Vec::new();
        {
            let w = inner.writer.get_mut().map_err(|_| CoreError::Closed)?;
            let mut st = w
                .prepare("SELECT id, source, created_at FROM memory_chunks")
                .map_err(|e| corrupt_or(e, path))?;
            let it = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            for r in it {
                rows.push(r.map_err(|e| corrupt_or(e, path))?);
            }
        }
        let mem = inner.mem.get_mut().map_err(|_| CoreError::Closed)?;
        {
            let w = inner.writer.get_mut().map_err(|_| CoreError::Closed)?;
            let fast = load_vec_chunks(w, dim, &mut mem.vindex).unwrap_or(false);
            if !fast || mem.vindex.len() != rows.len() {
                // Rows without vectors cannot be searched by vector; they are rare
                // (a crash between the two inserts) and reindex repairs them.
                mem.vindex.clear();
                let mut st = w.prepare("SELECT rowid, embedding FROM vec_memory")?;
                let mut q = st.query([])?;
                while let Some(r) = q.next()? {
                    let id: i64 = r.get(0)?;
                    let blob: Vec<u8> = r.get(1)?;
                    if blob.len() == dim * 4 {
                        mem.vindex.upsert(id, &bytes_f32(&blob));
                    }
                }
            }
        }
        for (id, source, created) in &rows {
            let s = mem.intern(source);
            mem.vindex.set_meta(*id, parse_iso(created).unwrap_or(0), s);
        }
        let n_rows = rows.len();
        drop(rows);
        mem.vindex.shrink_to_fit();
        if inner.keyword.num_docs() != n_rows as u64 {
            let w = inner.writer.get_mut().map_err(|_| CoreError::Closed)?;
            let mut st = w.prepare("SELECT id, content, source FROM memory_chunks")?;
            let docs: Vec<(i64, String, String)> = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<_>>()?;
            inner.keyword.rebuild_flagged(
                docs.iter()
                    .map(|(i, c, s)| (*i, c.as_str(), hidden_source(s))),
            )?;
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    fn read<T>(&self, f: impl FnOnce(&Inner) -> Result<T>) -> Result<T> {
        let g = self.inner.read().map_err(|_| CoreError::Closed)?;
        f(g.as_ref().ok_or(CoreError::Closed)?)
    }

    /// Runs `f` with the writer connection: writes wait for each other, never for
    /// searches (see `Inner`).
    fn write<T>(&self, f: impl FnOnce(&Inner, &mut Connection) -> Result<T>) -> Result<T> {
        let g = self.inner.read().map_err(|_| CoreError::Closed)?;
        let inner = g.as_ref().ok_or(CoreError::Closed)?;
        let mut conn = inner.writer.lock().map_err(|_| CoreError::Closed)?;
        f(inner, &mut conn)
    }

    /// Closes the connections; later calls fail with `Closed`.
    pub fn close(&self) -> Result<()> {
        let mut g = self.inner.write().map_err(|_| CoreError::Closed)?;
        if let Some(inner) = g.take() {
            // A checkpoint leaves a compact file for backups and `reindex` swaps.
            let _ = inner
                .writer
                .lock()
                .map(|w| w.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)"));
            drop(inner);
        }
        Ok(())
    }

    pub fn is_closed(&self) -> bool {
        self.inner.read().map_or(true, |g| g.is_none())
    }

    fn check_vectors(&self, n: usize, vectors: &[f32]) -> Result<()> {
        if vectors.len() != n * self.dim {
            return Err(CoreError::InvalidInput(format!(
                "expected {n} vectors of dimension {} ({} floats), got {} floats",
                self.dim,
                n * self.dim,
                vectors.len()
            )));
        }
        if vectors.iter().any(|x| !x.is_finite()) {
            return Err(CoreError::InvalidInput(
                "vector contains NaN or infinity".into(),
            ));
        }
        Ok(())
    }

    pub fn meta_get(&self, key: &str) -> Result<Option<String>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            Ok(
                r.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
                    .optional()?,
            )
        })
    }

    pub fn meta_set(&self, key: &str, value: &str) -> Result<()> {
        self.write(|_inner, conn| {
            conn.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
                params![key, value],
            )?;
            Ok(())
        })
    }

    /// Table name -> row count, for `klaw doctor` and tests.
    pub fn stats(&self) -> Result<Vec<(String, i64)>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut out = Vec::new();
            for t in [
                "messages",
                "sessions",
                "summaries",
                "files",
                "memory_chunks",
                "doc_chunks",
            ] {
                out.push((
                    t.to_string(),
                    r.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))?,
                ));
            }
            out.push(("keyword_docs".into(), inner.keyword.num_docs() as i64));
            out.push(("vectors".into(), inner.mem()?.vindex.len() as i64));
            Ok(out)
        })
    }

    /// SQLite's integrity check plus our own cross-checks; empty when healthy.
    pub fn integrity_check(&self) -> Result<Vec<String>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut problems = Vec::new();
            let mut st = r.prepare("PRAGMA integrity_check")?;
            for row in st.query_map([], |r| r.get::<_, String>(0))? {
                let s = row?;
                if s != "ok" {
                    problems.push(s);
                }
            }
            let chunks: i64 =
                r.query_row("SELECT count(*) FROM memory_chunks", [], |r| r.get(0))?;
            let vecs: i64 = r.query_row("SELECT count(*) FROM vec_memory", [], |r| r.get(0))?;
            if chunks != vecs {
                problems.push(format!(
                    "memory_chunks has {chunks} rows but vec_memory has {vecs}"
                ));
            }
            let docs: i64 = r.query_row("SELECT count(*) FROM doc_chunks", [], |r| r.get(0))?;
            let dvecs: i64 = r.query_row("SELECT count(*) FROM vec_docs", [], |r| r.get(0))?;
            if docs != dvecs {
                problems.push(format!(
                    "doc_chunks has {docs} rows but vec_docs has {dvecs}"
                ));
            }
            Ok(problems)
        })
    }
}

/// The rows of the `scored` ids in their order, each made by `map` from its row, id
/// and score; an id without a row (deleted since it was ranked) is left out. `sql`
/// selects one row by `?1`. Memory and docs hits are both fetched this way.
fn fetch_scored<T>(
    conn: &Connection,
    sql: &str,
    scored: &[(i64, f64)],
    map: impl Fn(&rusqlite::Row<'_>, i64, f64) -> rusqlite::Result<T>,
) -> Result<Vec<T>> {
    let mut st = conn.prepare_cached(sql)?;
    let mut out = Vec::with_capacity(scored.len());
    for &(id, score) in scored {
        out.extend(st.query_row([id], |r| map(r, id, score)).optional()?);
    }
    Ok(out)
}

/// Hands freed heap back to the OS after bulk work (loading 100k rows leaves
/// megabytes of freed strings that glibc would otherwise keep resident).
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim only releases free memory; it is always safe to call.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Loads all vectors by walking sqlite-vec's chunk tables (seconds faster than a
/// `vec_memory` scan at 100k rows). Returns false when the layout is not the one
/// expected, so the caller falls back to the public scan.
fn load_vec_chunks(c: &Connection, dim: usize, ix: &mut VectorIndex) -> Result<bool> {
    let Ok(mut st) = c.prepare(
        "SELECT c.size, c.validity, c.rowids, v.vectors FROM vec_memory_chunks c \
         JOIN vec_memory_vector_chunks00 v ON v.rowid = c.chunk_id",
    ) else {
        return Ok(false);
    };
    let mut q = st.query([])?;
    while let Some(r) = q.next()? {
        let size: i64 = r.get(0)?;
        let validity: Vec<u8> = r.get(1)?;
        let rowids: Vec<u8> = r.get(2)?;
        let vectors: Vec<u8> = r.get(3)?;
        let size = size as usize;
        if rowids.len() < size * 8 || vectors.len() < size * dim * 4 || validity.len() * 8 < size {
            return Ok(false);
        }
        for i in 0..size {
            if validity[i / 8] & (1 << (i % 8)) == 0 {
                continue;
            }
            let mut idb = [0u8; 8];
            idb.copy_from_slice(&rowids[i * 8..i * 8 + 8]);
            let v = bytes_f32(&vectors[i * dim * 4..(i + 1) * dim * 4]);
            ix.upsert(i64::from_le_bytes(idb), &v);
        }
    }
    Ok(true)
}

/// What the parts' tests share: a store in a temporary directory, plain chunks, vectors.
#[cfg(test)]
mod testing {
    use super::{NewChunk, Store};

    pub fn open(dim: usize) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("klaw.db"), dim, 1).unwrap();
        (dir, s)
    }

    /// A chunk of no file lines and no heading, its text as its hash.
    pub fn chunk(text: &str) -> NewChunk {
        NewChunk {
            content: text.into(),
            start_line: None,
            end_line: None,
            heading: None,
            chunk_hash: text.into(),
        }
    }

    /// `v` scaled to length 1.
    pub fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }
}
