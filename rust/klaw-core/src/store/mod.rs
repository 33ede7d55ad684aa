//! The klaw.db store: the only code that opens the file. One writer connection,
//! one reader connection (WAL lets them run together), the in-memory int8 vector
//! index and the tantivy keyword index, kept in step with the tables.

use crate::error::{CoreError, Result};
use crate::keyword::KeywordIndex;
use crate::schema;
use crate::search::{hybrid_terms, int8_candidates, rescore, FusionParams};
use crate::timeutil::parse_iso;
use crate::vindex::VectorIndex;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once, RwLock};

mod docs;
pub use docs::{DocChunk, DocHit};

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

/// A chunk to insert (its vector is passed alongside).
#[derive(Clone, Debug)]
pub struct NewChunk {
    pub content: String,
    pub start_line: Option<i64>,
    pub end_line: Option<i64>,
    pub heading: Option<String>,
    pub chunk_hash: String,
}

#[derive(Clone, Debug)]
pub struct Hit {
    pub id: i64,
    pub content: String,
    pub source: String,
    pub chat_id: Option<String>,
    pub start_line: Option<i64>,
    pub end_line: Option<i64>,
    pub heading: Option<String>,
    pub created_at: String,
    pub score: f64,
}

impl Hit {
    /// Where the hit came from, as the model and the owner cite it:
    /// `memory/2026-02-24.md#L12-L30`, or the bare source when it has no lines; a past
    /// conversation's round (a `chat:` source whose heading holds the round's message
    /// ids): `chat:<chat id> 2026-02-24 msg <first id>…<last id>`.
    pub fn citation(&self) -> String {
        if self.source.starts_with(CHAT_SOURCE_PREFIX) {
            let mut ids = self.heading.as_deref().unwrap_or("").split_whitespace();
            if let Some(first) = ids.next() {
                let day: String = self.created_at.chars().take(10).collect();
                return match ids.last() {
                    Some(last) => format!("{} {day} msg {first}…{last}", self.source),
                    None => format!("{} {day} msg {first}", self.source),
                };
            }
        }
        match self.start_line {
            Some(start) => format!(
                "{}#L{start}-L{}",
                self.source,
                self.end_line.unwrap_or(start)
            ),
            None => self.source.clone(),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub source: Option<String>,
}

impl Filter {
    pub fn is_empty(&self) -> bool {
        self.since.is_none() && self.until.is_none() && self.source.is_none()
    }
}

#[derive(Clone, Debug)]
pub struct MessageRow {
    pub id: String,
    pub channel: String,
    pub chat_id: String,
    pub role: String,
    pub kind: Option<String>,
    pub content: String,
    pub metadata: Option<String>,
    pub created_at: String,
}

#[derive(Clone, Debug)]
pub struct FileState {
    pub hash: String,
    pub mtime: f64,
    pub size: i64,
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
        let chat = source.starts_with(CHAT_SOURCE_PREFIX);
        self.chat.push(chat);
        self.has_chats |= chat;
        i
    }

    /// Whether a search with `f` must look at each candidate's metadata.
    fn filters(&self, f: &Filter) -> bool {
        !f.is_empty() || self.has_chats
    }

    fn allows(&self, id: i64, f: &Filter, source: Option<u32>) -> bool {
        self.vindex
            .meta(id)
            .is_some_and(|(created, src)| self.allows_meta(created, src, f, source))
    }

    fn allows_meta(&self, created: i64, src: u32, f: &Filter, source: Option<u32>) -> bool {
        f.since.is_none_or(|s| created >= s)
            && f.until.is_none_or(|u| created <= u)
            && match f.source {
                None => !self.chat.get(src as usize).copied().unwrap_or(false),
                Some(_) => Some(src) == source,
            }
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
            let mut st = w.prepare("SELECT id, content FROM memory_chunks")?;
            let docs: Vec<(i64, String)> = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            inner
                .keyword
                .rebuild(docs.iter().map(|(i, c)| (*i, c.as_str())))?;
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

    #[allow(clippy::too_many_arguments)]
    fn insert_chunks(
        tx: &rusqlite::Transaction<'_>,
        dim: usize,
        source: &str,
        chat_id: Option<&str>,
        created_at: &str,
        file_id: Option<i64>,
        chunks: &[NewChunk],
        vectors: &[f32],
    ) -> Result<Vec<i64>> {
        let mut ids = Vec::with_capacity(chunks.len());
        let mut ins = tx.prepare_cached(
            "INSERT INTO memory_chunks(source, chat_id, content, created_at, file_id, start_line, \
             end_line, heading, chunk_hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?;
        let mut vins =
            tx.prepare_cached("INSERT INTO vec_memory(rowid, embedding) VALUES (?1, ?2)")?;
        for (i, c) in chunks.iter().enumerate() {
            ins.execute(params![
                source,
                chat_id,
                c.content,
                created_at,
                file_id,
                c.start_line,
                c.end_line,
                c.heading,
                c.chunk_hash
            ])?;
            let id = tx.last_insert_rowid();
            vins.execute(params![id, f32_bytes(&vectors[i * dim..(i + 1) * dim])])?;
            ids.push(id);
        }
        Ok(ids)
    }

    #[allow(clippy::too_many_arguments)]
    fn after_insert(
        inner: &Inner,
        ids: &[i64],
        removed: &[i64],
        source: &str,
        created_at: &str,
        chunks: &[NewChunk],
        vectors: &[f32],
        dim: usize,
    ) -> Result<()> {
        {
            let mut mem = inner.mem_mut()?;
            for r in removed {
                mem.vindex.remove(*r);
            }
            let s = mem.intern(source);
            let created = parse_iso(created_at).unwrap_or(0);
            for (i, id) in ids.iter().enumerate() {
                mem.vindex
                    .upsert_meta(*id, &vectors[i * dim..(i + 1) * dim], created, s);
            }
        }
        let add: Vec<(i64, &str)> = ids
            .iter()
            .zip(chunks)
            .map(|(i, c)| (*i, c.content.as_str()))
            .collect();
        inner.keyword.apply(&add, removed)
    }

    /// Adds chunks that belong to no file (saved facts, conversation excerpts).
    pub fn add_chunks(
        &self,
        source: &str,
        chat_id: Option<&str>,
        created_at: &str,
        chunks: &[NewChunk],
        vectors: &[f32],
    ) -> Result<Vec<i64>> {
        self.check_vectors(chunks.len(), vectors)?;
        if parse_iso(created_at).is_none() {
            return Err(CoreError::InvalidInput(format!(
                "created_at is not ISO 8601: {created_at:?}"
            )));
        }
        let dim = self.dim;
        self.write(|inner, conn| {
            let tx = conn.transaction()?;
            let ids =
                Self::insert_chunks(&tx, dim, source, chat_id, created_at, None, chunks, vectors)?;
            tx.commit()?;
            Self::after_insert(inner, &ids, &[], source, created_at, chunks, vectors, dim)?;
            Ok(ids)
        })
    }

    pub fn file_state(&self, path: &str) -> Result<Option<FileState>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            Ok(r.query_row(
                "SELECT hash, mtime, size FROM files WHERE path = ?1",
                [path],
                |r| {
                    Ok(FileState {
                        hash: r.get(0)?,
                        mtime: r.get(1)?,
                        size: r.get(2)?,
                    })
                },
            )
            .optional()?)
        })
    }

    /// Replaces every chunk of `path` in one transaction.
    #[allow(clippy::too_many_arguments)]
    pub fn replace_file(
        &self,
        path: &str,
        source: &str,
        state: &FileState,
        created_at: &str,
        chunks: &[NewChunk],
        vectors: &[f32],
    ) -> Result<Vec<i64>> {
        self.check_vectors(chunks.len(), vectors)?;
        let dim = self.dim;
        let now = crate::timeutil::format_iso(crate::timeutil::now_secs());
        self.write(|inner, conn| {
            let tx = conn.transaction()?;
            let removed = Self::delete_file_rows(&tx, path)?;
            tx.execute(
                "INSERT INTO files(path, source, hash, mtime, size, indexed_at) VALUES (?1,?2,?3,?4,?5,?6)",
                params![path, source, state.hash, state.mtime, state.size, now],
            )?;
            let file_id = tx.last_insert_rowid();
            let ids = Self::insert_chunks(&tx, dim, source, None, created_at, Some(file_id), chunks, vectors)?;
            tx.commit()?;
            Self::after_insert(inner, &ids, &removed, source, created_at, chunks, vectors, dim)?;
            Ok(ids)
        })
    }

    fn delete_file_rows(tx: &rusqlite::Transaction<'_>, path: &str) -> Result<Vec<i64>> {
        let mut st = tx.prepare_cached(
            "SELECT c.id FROM memory_chunks c JOIN files f ON c.file_id = f.id WHERE f.path = ?1",
        )?;
        let removed: Vec<i64> = st
            .query_map([path], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let mut del = tx.prepare_cached("DELETE FROM vec_memory WHERE rowid = ?1")?;
        for id in &removed {
            del.execute([id])?;
        }
        // memory_chunks rows go with the files row (ON DELETE CASCADE).
        tx.execute("DELETE FROM files WHERE path = ?1", [path])?;
        Ok(removed)
    }

    /// Forgets a file that was deleted from the workspace. Returns chunks removed.
    pub fn remove_file(&self, path: &str) -> Result<usize> {
        self.write(|inner, conn| {
            let tx = conn.transaction()?;
            let removed = Self::delete_file_rows(&tx, path)?;
            tx.commit()?;
            {
                let mut mem = inner.mem_mut()?;
                for r in &removed {
                    mem.vindex.remove(*r);
                }
            }
            inner.keyword.apply(&[], &removed)?;
            Ok(removed.len())
        })
    }

    pub fn list_files(&self) -> Result<Vec<(String, String, FileState)>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut st =
                r.prepare("SELECT path, source, hash, mtime, size FROM files ORDER BY path")?;
            let rows = st
                .query_map([], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        FileState {
                            hash: r.get(2)?,
                            mtime: r.get(3)?,
                            size: r.get(4)?,
                        },
                    ))
                })?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
    }

    pub fn count_chunks(&self) -> Result<usize> {
        self.read(|inner| Ok(inner.mem()?.vindex.len()))
    }

    fn source_filter(mem: &MemIndex, f: &Filter) -> Option<u32> {
        f.source
            .as_ref()
            .and_then(|s| mem.source_ids.get(s).copied())
    }

    fn vector_ids(
        &self,
        inner: &Inner,
        query: &[f32],
        k: usize,
        f: &Filter,
    ) -> Result<Vec<(i64, f32)>> {
        if query.len() != self.dim {
            return Err(CoreError::InvalidInput(format!(
                "query vector has dimension {}, expected {}",
                query.len(),
                self.dim
            )));
        }
        let cands = {
            let mem = inner.mem()?;
            let src = Self::source_filter(&mem, f);
            if f.source.is_some() && src.is_none() {
                return Ok(Vec::new());
            }
            let check = mem.filters(f);
            let allow = |created: i64, s: u32| !check || mem.allows_meta(created, s, f, src);
            mem.vindex
                .search(query, int8_candidates(k), self.threads, &allow)
        };
        // Exact float rescoring from vec_memory.
        let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
        let mut buf = vec![0u8; self.dim * 4];
        rescore(cands, k, |id| {
            Ok(read_vector(&r, id, &mut buf)?.then(|| dot_bytes(&buf, query)))
        })
    }

    fn keyword_ids(inner: &Inner, text: &str, k: usize, f: &Filter) -> Result<Vec<(i64, f32)>> {
        if !inner.mem()?.filters(f) {
            return inner.keyword.search(text, k);
        }
        let src = Self::source_filter(&*inner.mem()?, f);
        if f.source.is_some() && src.is_none() {
            return Ok(Vec::new());
        }
        // Over-fetch, then filter by the in-memory metadata.
        let mut want = k * 8;
        loop {
            let got = inner.keyword.search(text, want)?;
            let full = got.len() < want;
            let mem = inner.mem()?;
            let kept: Vec<_> = got
                .into_iter()
                .filter(|(id, _)| mem.allows(*id, f, src))
                .collect();
            drop(mem);
            if kept.len() >= k || full || want > 100_000 {
                return Ok(kept.into_iter().take(k).collect());
            }
            want *= 8;
        }
    }

    /// Exact-rescored vector search: (id, cosine) best first.
    pub fn vector_search(&self, query: &[f32], k: usize, f: &Filter) -> Result<Vec<(i64, f32)>> {
        self.read(|inner| self.vector_ids(inner, query, k, f))
    }

    /// BM25 keyword search over archival memory: (id, score) best first.
    pub fn keyword_search(&self, text: &str, k: usize, f: &Filter) -> Result<Vec<(i64, f32)>> {
        self.read(|inner| Self::keyword_ids(inner, text, k, f))
    }

    /// sqlite-vec's own float KNN (the design's reference path; used to measure recall).
    pub fn vector_search_exact(&self, query: &[f32], k: usize) -> Result<Vec<(i64, f32)>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut st = r.prepare_cached(
                "SELECT rowid, distance FROM vec_memory WHERE embedding MATCH ?1 AND k = ?2 ORDER BY distance",
            )?;
            let rows = st
                .query_map(params![f32_bytes(query), k as i64], |r| {
                    let d: f64 = r.get(1)?;
                    // L2 distance between unit vectors -> cosine.
                    Ok((r.get::<_, i64>(0)?, (1.0 - d * d / 2.0) as f32))
                })?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
    }

    /// Hybrid search: vector and keyword candidates fused (`FusionParams`).
    pub fn search(
        &self,
        query_vec: Option<&[f32]>,
        query_text: &str,
        top_k: usize,
        p: &FusionParams,
        f: &Filter,
    ) -> Result<Vec<Hit>> {
        let terms = if p.keyword_pivot > 0 {
            let mut t = crate::analyze::analyze(query_text, crate::analyze::Mode::Query);
            t.sort_unstable();
            t.dedup();
            t.len()
        } else {
            0
        };
        self.read(|inner| {
            let fused = hybrid_terms(
                |want| match query_vec {
                    Some(q) => self.vector_ids(inner, q, want, f),
                    None => Ok(Vec::new()),
                },
                |want| Self::keyword_ids(inner, query_text, want, f),
                |id| {
                    inner
                        .mem()
                        .ok()
                        .and_then(|m| m.vindex.meta(id).map(|x| x.0))
                },
                p,
                top_k,
                terms,
            )?;
            Self::fetch(inner, &fused)
        })
    }

    fn fetch(inner: &Inner, scored: &[(i64, f64)]) -> Result<Vec<Hit>> {
        let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
        let mut st = r.prepare_cached(
            "SELECT c.content, COALESCE(f.path, c.source), c.chat_id, c.start_line, c.end_line, c.heading, \
             c.created_at FROM memory_chunks c LEFT JOIN files f ON c.file_id = f.id WHERE c.id = ?1",
        )?;
        let mut hits = Vec::with_capacity(scored.len());
        for &(id, score) in scored {
            let row = st
                .query_row([id], |r| {
                    Ok(Hit {
                        id,
                        content: r.get(0)?,
                        source: r.get(1)?,
                        chat_id: r.get(2)?,
                        start_line: r.get(3)?,
                        end_line: r.get(4)?,
                        heading: r.get(5)?,
                        created_at: r.get(6)?,
                        score,
                    })
                })
                .optional()?;
            hits.extend(row);
        }
        Ok(hits)
    }

    pub fn get_chunks(&self, ids: &[i64]) -> Result<Vec<Hit>> {
        self.read(|inner| {
            let scored: Vec<(i64, f64)> = ids.iter().map(|i| (*i, 0.0)).collect();
            Self::fetch(inner, &scored)
        })
    }

    // --- messages (recall memory) ---

    /// Inserts messages; an id already present is skipped (redelivery is harmless).
    /// Returns how many were new.
    pub fn insert_messages(&self, rows: &[MessageRow]) -> Result<usize> {
        self.write(|_inner, conn| {
            let tx = conn.transaction()?;
            let mut n = 0;
            {
                let mut st = tx.prepare_cached(
                    "INSERT OR IGNORE INTO messages(id, channel, chat_id, role, type, content, metadata, \
                     created_at) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)",
                )?;
                for m in rows {
                    n += st.execute(params![
                        m.id, m.channel, m.chat_id, m.role, m.kind, m.content, m.metadata, m.created_at
                    ])?;
                }
            }
            tx.commit()?;
            Ok(n)
        })
    }

    pub fn count_messages(&self) -> Result<i64> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            Ok(r.query_row("SELECT count(*) FROM messages", [], |r| r.get(0))?)
        })
    }

    /// The last `limit` messages of a chat after `since` (segment start), oldest first.
    pub fn recent_messages(
        &self,
        chat_id: &str,
        since: Option<&str>,
        limit: usize,
    ) -> Result<Vec<MessageRow>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut st = r.prepare_cached(
                "SELECT id, channel, chat_id, role, type, content, metadata, created_at FROM messages \
                 WHERE chat_id = ?1 AND created_at >= ?2 ORDER BY created_at DESC, rowid DESC LIMIT ?3",
            )?;
            let mut rows: Vec<MessageRow> = st
                .query_map(params![chat_id, since.unwrap_or(""), limit as i64], row_to_message)?
                .collect::<rusqlite::Result<_>>()?;
            rows.reverse();
            Ok(rows)
        })
    }

    /// Messages of `chat_id` stored after row `after` (rowid order = log order), with
    /// their rowids: what the conversation index has not seen yet.
    pub fn messages_after(
        &self,
        chat_id: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, MessageRow)>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut st = r.prepare_cached(
                "SELECT id, channel, chat_id, role, type, content, metadata, created_at, rowid \
                 FROM messages WHERE chat_id = ?1 AND rowid > ?2 ORDER BY rowid LIMIT ?3",
            )?;
            let rows = st
                .query_map(params![chat_id, after, limit as i64], |r| {
                    Ok((r.get::<_, i64>(8)?, row_to_message(r)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
    }

    /// Every chat with its newest message's rowid.
    pub fn chat_heads(&self) -> Result<Vec<(String, i64)>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut st =
                r.prepare_cached("SELECT chat_id, MAX(rowid) FROM messages GROUP BY chat_id")?;
            let rows = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
    }

    /// Full-text search over messages (FTS5, unicode61), best first.
    pub fn search_messages(&self, query: &str, limit: usize) -> Result<Vec<MessageRow>> {
        let fts = fts5_or_query(query);
        if fts.is_empty() {
            return Ok(Vec::new());
        }
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut st = r.prepare_cached(
                "SELECT m.id, m.channel, m.chat_id, m.role, m.type, m.content, m.metadata, m.created_at \
                 FROM messages_fts JOIN messages m ON m.rowid = messages_fts.rowid \
                 WHERE messages_fts MATCH ?1 ORDER BY rank LIMIT ?2",
            )?;
            let rows = st
                .query_map(params![fts, limit as i64], row_to_message)?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
    }

    pub fn upsert_session(
        &self,
        chat_id: &str,
        model: &str,
        segment_start: &str,
        created_at: &str,
    ) -> Result<()> {
        self.write(|_inner, conn| {
            conn.execute(
                "INSERT INTO sessions(chat_id, model, segment_start, created_at) VALUES (?1,?2,?3,?4) \
                 ON CONFLICT(chat_id) DO UPDATE SET model = excluded.model, segment_start = excluded.segment_start",
                params![chat_id, model, segment_start, created_at],
            )?;
            Ok(())
        })
    }

    pub fn get_session(&self, chat_id: &str) -> Result<Option<(String, String, String)>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            Ok(r.query_row(
                "SELECT model, segment_start, created_at FROM sessions WHERE chat_id = ?1",
                [chat_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?)
        })
    }

    pub fn add_summary(
        &self,
        chat_id: &str,
        from_id: Option<&str>,
        to_id: Option<&str>,
        file_path: &str,
        created_at: &str,
    ) -> Result<()> {
        self.write(|_inner, conn| {
            conn.execute(
                "INSERT OR REPLACE INTO summaries(chat_id, from_message_id, to_message_id, file_path, created_at) \
                 VALUES (?1,?2,?3,?4,?5)",
                params![chat_id, from_id, to_id, file_path, created_at],
            )?;
            Ok(())
        })
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

fn dot_bytes(b: &[u8], q: &[f32]) -> f32 {
    b.chunks_exact(4)
        .zip(q)
        .map(|(c, x)| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * x)
        .sum()
}

/// Reads one float vector of `vec_memory` into `buf`. sqlite-vec keeps vectors in
/// chunk blobs of 1024; a `vec_memory` point query reads a whole chunk, so this
/// goes to the slot directly with incremental blob I/O (layout of sqlite-vec 0.1,
/// the version compiled in), falling back to the public query if that fails.
fn read_vector(c: &Connection, id: i64, buf: &mut [u8]) -> Result<bool> {
    let slot: Option<(i64, i64)> = c
        .prepare_cached("SELECT chunk_id, chunk_offset FROM vec_memory_rowids WHERE rowid = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if let Some((chunk, off)) = slot {
        if let Ok(blob) = c.blob_open(
            rusqlite::MAIN_DB,
            "vec_memory_vector_chunks00",
            "vectors",
            chunk,
            true,
        ) {
            if blob.read_at_exact(buf, off as usize * buf.len()).is_ok() {
                return Ok(true);
            }
        }
    }
    let v: Option<Vec<u8>> = c
        .prepare_cached("SELECT embedding FROM vec_memory WHERE rowid = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?;
    match v {
        Some(v) if v.len() == buf.len() => {
            buf.copy_from_slice(&v);
            Ok(true)
        }
        _ => Ok(false),
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

fn row_to_message(r: &rusqlite::Row<'_>) -> rusqlite::Result<MessageRow> {
    Ok(MessageRow {
        id: r.get(0)?,
        channel: r.get(1)?,
        chat_id: r.get(2)?,
        role: r.get(3)?,
        kind: r.get(4)?,
        content: r.get(5)?,
        metadata: r.get(6)?,
        created_at: r.get(7)?,
    })
}

/// Turns free text into a safe FTS5 OR query of quoted terms.
pub fn fts5_or_query(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| format!("\"{w}\""))
        .collect::<Vec<_>>()
        .join(" OR ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::time::Duration;

    fn chunk(text: &str) -> NewChunk {
        NewChunk {
            content: text.into(),
            start_line: None,
            end_line: None,
            heading: None,
            chunk_hash: text.into(),
        }
    }

    fn hit(source: &str, lines: Option<(i64, i64)>, heading: Option<&str>) -> Hit {
        Hit {
            id: 1,
            content: String::new(),
            source: source.into(),
            chat_id: None,
            start_line: lines.map(|l| l.0),
            end_line: lines.map(|l| l.1),
            heading: heading.map(Into::into),
            created_at: "2026-02-24T18:30:00Z".into(),
            score: 0.5,
        }
    }

    #[test]
    fn a_citation_names_the_lines_or_the_round() {
        let note = hit("memory/2026-02-24.md", Some((12, 30)), Some("Garden"));
        assert_eq!(note.citation(), "memory/2026-02-24.md#L12-L30");
        assert_eq!(hit("manual", None, None).citation(), "manual");
        let round = hit("chat:telegram_1", None, Some("m1 m2 m3"));
        assert_eq!(round.citation(), "chat:telegram_1 2026-02-24 msg m1…m3");
        let one = hit("chat:telegram_1", None, Some("m7"));
        assert_eq!(one.citation(), "chat:telegram_1 2026-02-24 msg m7");
        // A round without ids is cited by its source alone (the Python copy raised).
        assert_eq!(hit("chat:x", None, Some(" ")).citation(), "chat:x");
    }

    /// A search, a keyword search and a read of `meta` finish while another thread is
    /// inside a write transaction (before the split, every write held the store-wide
    /// exclusive guard and they waited for it). Driven by channels, not by time: the
    /// timeout only turns a deadlock into a failure.
    #[test]
    fn searches_do_not_wait_for_a_write_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("klaw.db"), 4, 1).unwrap());
        let v = [1.0f32, 0.0, 0.0, 0.0];
        store
            .add_chunks(
                "memory",
                None,
                "2026-01-01T00:00:00Z",
                &[chunk("boiler code 4471")],
                &v,
            )
            .unwrap();
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let writer = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                store
                    .write(|_inner, conn| {
                        let tx = conn.transaction()?;
                        tx.execute("INSERT INTO meta(key, value) VALUES ('held', '1')", [])?;
                        entered_tx.send(()).unwrap();
                        release_rx.recv().unwrap(); // the transaction stays open until told
                        tx.commit()?;
                        Ok(())
                    })
                    .unwrap();
            })
        };
        entered.recv().unwrap();
        let (done_tx, done) = mpsc::channel();
        {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let f = Filter::default();
                let hits = store.vector_search(&v, 5, &f).unwrap();
                let words = store.keyword_search("boiler", 5, &f).unwrap();
                let held = store.meta_get("held").unwrap(); // not committed yet
                done_tx.send((hits.len(), words.len(), held)).unwrap();
            });
        }
        let got = done.recv_timeout(Duration::from_mins(1));
        release.send(()).unwrap();
        writer.join().unwrap();
        assert_eq!(got.expect("searches waited for the write"), (1, 1, None));
        assert_eq!(store.meta_get("held").unwrap().as_deref(), Some("1"));
    }
}
