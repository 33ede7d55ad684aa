//! `klaw reindex`, the messages side: streams every `conversations/**/*.jsonl`
//! into a fresh database in constant memory. A parser thread feeds batches to
//! the writer so the two cores share the work; the full-text index is written
//! in the same pass instead of a second `rebuild` pass over the content.

use crate::error::{CoreError, Result};
use crate::record::LogLineRef;
use crate::store::MessageRow;
use crate::timeutil::parse_iso;
use rusqlite::{params, Connection, OptionalExtension};
use serde::Deserialize;
use std::borrow::Cow;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

#[derive(Debug, Clone)]
pub struct Skipped {
    pub path: String,
    pub line: u64,
    pub reason: String,
}

#[derive(Debug, Default, Clone)]
pub struct ReindexStats {
    pub files: u64,
    pub lines: u64,
    pub messages: u64,
    pub duplicates: u64,
    pub skipped: u64,
    /// The first few skipped lines, for the report.
    pub skipped_samples: Vec<Skipped>,
    pub sessions: u64,
    pub summaries: u64,
}

#[derive(Deserialize)]
struct MetaFields<'a> {
    #[serde(default, borrow)]
    channel: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
}

/// One valid line, borrowing from it: the record, its channel and `meta.model`.
struct Parsed<'a> {
    line: LogLineRef<'a>,
    channel: Cow<'a, str>,
    model: Option<Cow<'a, str>>,
}

/// Parses one JSONL line into a message of `chat_id`, or says why not.
pub fn parse_line(raw: &[u8], chat_id: &str) -> std::result::Result<MessageRow, String> {
    let p = parse(raw, chat_id)?;
    let l = p.line.into_owned();
    Ok(MessageRow {
        id: l.id,
        channel: p.channel.into_owned(),
        chat_id: chat_id.to_string(),
        role: l.role,
        kind: l.kind,
        content: l.content,
        metadata: l.meta,
        created_at: l.ts,
    })
}

/// The rules are `record::check_line`'s, shared with every Python reader.
fn parse<'a>(raw: &'a [u8], chat_id: &'a str) -> std::result::Result<Parsed<'a>, String> {
    let line = crate::record::check_line_ref(raw)?;
    let (channel, model) = match line.meta {
        Some(m) => match serde_json::from_str::<MetaFields<'a>>(m) {
            Ok(f) => (f.channel, f.model),
            Err(_) => (None, None),
        },
        None => (None, None),
    };
    let channel =
        channel.unwrap_or_else(|| Cow::Borrowed(chat_id.split('_').next().unwrap_or(chat_id)));
    Ok(Parsed {
        line,
        channel,
        model,
    })
}

/// Every `*.jsonl` under `conversations/{chat}/`, chats and days in order.
pub fn conversation_files(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    if !root.is_dir() {
        return Ok(out);
    }
    let mut chats: Vec<_> = std::fs::read_dir(root)?
        .filter_map(std::result::Result::ok)
        .collect();
    chats.sort_by_key(std::fs::DirEntry::file_name);
    for chat in chats {
        if !chat.path().is_dir() {
            continue;
        }
        let chat_id = chat.file_name().to_string_lossy().into_owned();
        let mut days: Vec<_> = std::fs::read_dir(chat.path())?
            .filter_map(std::result::Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .collect();
        days.sort();
        out.extend(days.into_iter().map(|p| (chat_id.clone(), p)));
    }
    Ok(out)
}

/// A field of a row: a range of its batch's text.
#[derive(Clone, Copy)]
struct Span(usize, usize);

struct Row {
    id: Span,
    channel: Span,
    role: Span,
    kind: Option<Span>,
    content: Span,
    meta: Option<Span>,
    ts: Span,
}

/// Parsed rows of one chat, every string in one buffer: two allocations per batch
/// instead of eight per row, each freed on another thread than the one it came from.
struct Lines {
    chat_id: String,
    text: String,
    rows: Vec<Row>,
}

impl Lines {
    /// A batch sized like `like` (the previous one of the file), or small.
    fn new(chat_id: &str, like: Option<&Lines>) -> Self {
        Lines {
            chat_id: chat_id.to_string(),
            text: String::with_capacity(like.map_or(1 << 16, |l| l.text.len())),
            rows: Vec::with_capacity(like.map_or(256, |l| l.rows.len())),
        }
    }

    fn put(&mut self, s: &str) -> Span {
        let start = self.text.len();
        self.text.push_str(s);
        Span(start, self.text.len())
    }

    fn push(&mut self, p: &Parsed<'_>) {
        let l = &p.line;
        let row = Row {
            id: self.put(&l.id),
            channel: self.put(&p.channel),
            role: self.put(&l.role),
            kind: l.kind.as_deref().map(|k| self.put(k)),
            content: self.put(&l.content),
            meta: l.meta.map(|m| self.put(m)),
            ts: self.put(&l.ts),
        };
        self.rows.push(row);
    }

    fn get(&self, s: Span) -> &str {
        &self.text[s.0..s.1]
    }
}

enum Batch {
    Rows(Lines, u64),
    Skip(Skipped),
    FileDone,
}

const BATCH: usize = 8192;

/// Per chat: first message time, the last session_break (its time starts the
/// segment) and the latest line that named a model. The chat's model is a running
/// state: a `model_switch` line sets it, a `session_break` with `meta.model` sets
/// it, a `session_break` without one keeps it. Lines are ordered by (ts, order read).
#[derive(Default)]
struct SessionAcc {
    first: String,
    segment: Option<String>,
    model: Option<(String, u64, String)>,
}

impl SessionAcc {
    fn see(&mut self, p: &Parsed<'_>, seq: u64) {
        let ts: &str = &p.line.ts;
        if self.first.is_empty() || ts < self.first.as_str() {
            ts.clone_into(&mut self.first);
        }
        let kind = p.line.kind.as_deref();
        if kind == Some("session_break") && self.segment.as_deref().is_none_or(|s| ts >= s) {
            self.segment = Some(ts.to_string());
        }
        if !matches!(kind, Some("session_break" | "model_switch")) {
            return;
        }
        let Some(model) = p.model.as_deref().filter(|s| !s.trim().is_empty()) else {
            return;
        };
        let later = self
            .model
            .as_ref()
            .is_none_or(|(t, s, _)| (ts, seq) >= (t.as_str(), *s));
        if later {
            self.model = Some((ts.to_string(), seq, model.to_string()));
        }
    }

    /// (segment start, model) of the chat.
    fn session<'a>(&'a self, default_model: &'a str) -> (&'a str, &'a str) {
        let start = self.segment.as_deref().unwrap_or(&self.first);
        let model = self.model.as_ref().map_or(default_model, |(_, _, m)| m);
        (start, model)
    }
}

type Sessions = std::collections::BTreeMap<String, SessionAcc>;

fn parse_files(
    files: Vec<(String, PathBuf)>,
    tx: &mpsc::SyncSender<Batch>,
) -> std::io::Result<Sessions> {
    let mut sessions = Sessions::new();
    let mut seq = 0u64;
    let mut buf = Vec::with_capacity(4096);
    for (chat_id, path) in files {
        let f = std::fs::File::open(&path)?;
        let mut r = BufReader::with_capacity(1 << 20, f);
        let mut rows = Lines::new(&chat_id, None);
        let mut bytes = 0u64;
        let mut line_no = 0u64;
        loop {
            buf.clear();
            let n = r.read_until(b'\n', &mut buf)?;
            if n == 0 {
                break;
            }
            line_no += 1;
            bytes += n as u64;
            match parse(&buf, &chat_id) {
                Ok(p) => {
                    seq += 1;
                    let acc = match sessions.get_mut(&chat_id) {
                        Some(acc) => acc,
                        None => sessions.entry(chat_id.clone()).or_default(),
                    };
                    acc.see(&p, seq);
                    rows.push(&p);
                }
                Err(reason) => {
                    let s = Skipped {
                        path: path.display().to_string(),
                        line: line_no,
                        reason,
                    };
                    if tx.send(Batch::Skip(s)).is_err() {
                        return Ok(sessions);
                    }
                }
            }
            if rows.rows.len() == BATCH {
                let next = Lines::new(&chat_id, Some(&rows));
                let full = std::mem::replace(&mut rows, next);
                if tx.send(Batch::Rows(full, bytes)).is_err() {
                    return Ok(sessions);
                }
                bytes = 0;
            }
        }
        if tx.send(Batch::Rows(rows, bytes)).is_err() || tx.send(Batch::FileDone).is_err() {
            return Ok(sessions);
        }
    }
    Ok(sessions)
}

/// Progress output on stderr (a plain bar; the GIL is released around this work).
struct Progress {
    total: u64,
    done: u64,
    shown: u64,
    enabled: bool,
}

impl Progress {
    fn add(&mut self, n: u64) {
        self.done += n;
        if !self.enabled || self.total == 0 {
            return;
        }
        let pct = self.done * 100 / self.total;
        if pct != self.shown {
            self.shown = pct;
            let bar = "#".repeat((pct / 4) as usize);
            let mut e = std::io::stderr();
            let _ = write!(e, "\rreindex messages [{bar:<25}] {pct:>3}%");
            if pct >= 100 {
                let _ = writeln!(e);
            }
        }
    }
}

/// FTS5's buffer of terms before it writes a segment, for the build only (1 MB by
/// default): fewer, larger first segments leave less merging (~8% of the full-text
/// thread, which is the build's longest); it is not copied into klaw.db.
const FTS_BUILD_HASHSIZE: i64 = 64 << 20;

/// Builds the full-text index in its own database file on another thread (SQLite
/// has one writer per file), fed with (rowid, content) as messages are inserted;
/// its shadow tables are copied into klaw.db at the end, a plain page copy.
/// The build's tokenizer is `klaw_unicode61`, unicode61's twin that looks each code
/// point up once (`fts_tokenizer`): tokenizing was ~40% of this thread.
fn fts_worker(path: &Path, rx: mpsc::Receiver<(Lines, Vec<(i64, Span)>)>) -> Result<()> {
    let mut c = Connection::open(path)?;
    crate::fts_tokenizer::register(&c)?;
    let tokenizer = crate::fts_tokenizer::NAME;
    c.execute_batch(&format!(
        "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;
         CREATE TABLE messages(content TEXT);
         CREATE VIRTUAL TABLE messages_fts USING fts5(content, content=messages, content_rowid=rowid, detail=column, tokenize='{tokenizer}');
         INSERT INTO messages_fts(messages_fts, rank) VALUES ('hashsize', {FTS_BUILD_HASHSIZE});"
    ))?;

    let t = c.transaction()?;
    {
        let mut ins = t.prepare("INSERT INTO messages_fts(rowid, content) VALUES (?1, ?2)")?;
        for (rows, inserted) in rx {
            for (rowid, content) in inserted {
                ins.raw_bind_parameter(1, rowid)?;
                ins.raw_bind_parameter(2, rows.get(content))?;
                ins.raw_execute()?;
            }
        }
    }
    t.commit()?;
    Ok(())
}

/// Fills `messages` (+ `messages_fts`), `sessions` and `summaries` of an already
/// migrated, empty database from the files under `data_dir`.
pub fn rebuild_messages(
    conn: &mut Connection,
    db_path: &Path,
    data_dir: &Path,
    default_model: &str,
    progress: bool,
) -> Result<ReindexStats> {
    let t0 = std::time::Instant::now();
    let trace = std::env::var_os("KLAW_REINDEX_TRACE").is_some();
    let mark = |what: &str| {
        if trace {
            eprintln!("reindex: {what} at {:.2}s", t0.elapsed().as_secs_f64());
        }
    };
    let files = conversation_files(&data_dir.join("conversations"))?;
    let total: u64 = files
        .iter()
        .filter_map(|(_, p)| p.metadata().ok())
        .map(|m| m.len())
        .sum();
    let mut stats = ReindexStats {
        files: files.len() as u64,
        ..Default::default()
    };
    let mut prog = Progress {
        total,
        done: 0,
        shown: u64::MAX,
        enabled: progress,
    };

    // A fresh file that is swapped in only when complete: durability comes from
    // the final fsync + rename, so the build itself skips the journal.
    conn.execute_batch(
        "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-65536; \
         PRAGMA temp_store=MEMORY; DROP TRIGGER IF EXISTS messages_ai;",
    )?;
    let mut fts_path = db_path.as_os_str().to_owned();
    fts_path.push(".fts-build");
    let fts_path = PathBuf::from(fts_path);
    let _ = std::fs::remove_file(&fts_path);
    // idx_messages_chat is built once the rows are in (a sort), while the full-text
    // thread finishes, rather than kept up row by row; its definition is the schema's.
    let chat_index: Option<String> = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'idx_messages_chat'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if chat_index.is_some() {
        conn.execute_batch("DROP INDEX idx_messages_chat;")?;
    }
    let (tx, rx) = mpsc::sync_channel::<Batch>(4);
    let (ftx, frx) = mpsc::sync_channel::<(Lines, Vec<(i64, Span)>)>(4);
    let parser = std::thread::spawn(move || parse_files(files, &tx));
    let fts_file = fts_path.clone();
    let fts = std::thread::spawn(move || fts_worker(&fts_file, frx));
    let t = conn.transaction()?;
    let mut waited = std::time::Duration::ZERO;
    let mut blocked = std::time::Duration::ZERO;
    {
        let mut ins = t.prepare(
            "INSERT OR IGNORE INTO messages(id, channel, chat_id, role, type, content, metadata, created_at) \
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8)",
        )?;
        loop {
            let w0 = std::time::Instant::now();
            let Ok(b) = rx.recv() else { break };
            waited += w0.elapsed();
            match b {
                Batch::Rows(rows, bytes) => {
                    let mut out = Vec::with_capacity(rows.rows.len());
                    ins.raw_bind_parameter(3, rows.chat_id.as_str())?;
                    for m in &rows.rows {
                        stats.lines += 1;
                        // Raw binds: no per-row parameter-count checks or dyn dispatch.
                        ins.raw_bind_parameter(1, rows.get(m.id))?;
                        ins.raw_bind_parameter(2, rows.get(m.channel))?;
                        ins.raw_bind_parameter(4, rows.get(m.role))?;
                        ins.raw_bind_parameter(5, m.kind.map(|k| rows.get(k)))?;
                        ins.raw_bind_parameter(6, rows.get(m.content))?;
                        ins.raw_bind_parameter(7, m.meta.map(|k| rows.get(k)))?;
                        ins.raw_bind_parameter(8, rows.get(m.ts))?;
                        let n = ins.raw_execute()?;
                        if n == 0 {
                            stats.duplicates += 1;
                            continue;
                        }
                        out.push((t.last_insert_rowid(), m.content));
                        stats.messages += 1;
                    }
                    let s0 = std::time::Instant::now();
                    let sent = ftx.send((rows, out));
                    blocked += s0.elapsed();
                    if sent.is_err() {
                        break; // the worker failed; its error is reported below
                    }
                    prog.add(bytes);
                }
                Batch::Skip(s) => {
                    stats.lines += 1;
                    stats.skipped += 1;
                    if stats.skipped_samples.len() < 50 {
                        stats.skipped_samples.push(s);
                    }
                }
                Batch::FileDone => {}
            }
        }
    }
    drop(ftx);
    mark(&format!(
        "messages inserted (waited {:.2}s for the parser, {:.2}s for the full-text thread)",
        waited.as_secs_f64(),
        blocked.as_secs_f64()
    ));
    if let Some(sql) = &chat_index {
        t.execute_batch(sql)?;
        mark("idx_messages_chat built");
    }
    let sessions = match parser.join() {
        Ok(r) => r?,
        Err(_) => {
            return Err(CoreError::Io(std::io::Error::other(
                "JSONL parser thread panicked",
            )))
        }
    };
    match fts.join() {
        Ok(r) => r?,
        Err(_) => {
            return Err(CoreError::Io(std::io::Error::other(
                "full-text build thread panicked",
            )))
        }
    }
    mark("full-text built");
    // Sessions: the segment starts at the last session_break of each chat; the
    // model is the last one a model_switch or session_break named (SessionAcc).
    {
        let mut ins = t.prepare(
            "INSERT INTO sessions(chat_id, model, segment_start, created_at) VALUES (?1, ?2, ?3, ?4)",
        )?;
        for (chat, acc) in &sessions {
            let (start, model) = acc.session(default_model);
            ins.execute(params![chat, model, start, acc.first])?;
            stats.sessions += 1;
        }
    }
    stats.summaries = insert_summaries(&t, &data_dir.join("summaries"))?;
    t.commit()?;
    mark("sessions, summaries, index, commit");
    conn.execute("ATTACH DATABASE ?1 AS ftsb", [fts_path.to_string_lossy()])?;
    conn.execute_batch(
        "BEGIN;
         DELETE FROM main.messages_fts_data; DELETE FROM main.messages_fts_idx;
         DELETE FROM main.messages_fts_docsize; DELETE FROM main.messages_fts_config;
         INSERT INTO main.messages_fts_data SELECT * FROM ftsb.messages_fts_data;
         INSERT INTO main.messages_fts_idx SELECT * FROM ftsb.messages_fts_idx;
         INSERT INTO main.messages_fts_docsize SELECT * FROM ftsb.messages_fts_docsize;
         INSERT INTO main.messages_fts_config SELECT * FROM ftsb.messages_fts_config WHERE k <> 'hashsize';
         COMMIT;",
    )?;
    conn.execute("DETACH DATABASE ftsb", [])?;
    mark("full-text copied");
    let _ = std::fs::remove_file(&fts_path);
    conn.execute_batch(
        "CREATE TRIGGER IF NOT EXISTS messages_ai AFTER INSERT ON messages BEGIN
             INSERT INTO messages_fts(rowid, content) VALUES (new.rowid, new.content);
         END;",
    )?;
    if prog.enabled && prog.shown != 100 {
        prog.shown = 99;
        prog.done = prog.total;
        prog.add(0);
    }
    Ok(stats)
}

/// `summaries/{chat_id}/{date}_{from}_{to}.md` → rows of `summaries`.
fn insert_summaries(t: &rusqlite::Transaction<'_>, root: &Path) -> Result<u64> {
    let mut n = 0;
    if !root.is_dir() {
        return Ok(0);
    }
    let mut chats: Vec<_> = std::fs::read_dir(root)?
        .filter_map(std::result::Result::ok)
        .collect();
    chats.sort_by_key(std::fs::DirEntry::file_name);
    for chat in chats.into_iter().filter(|c| c.path().is_dir()) {
        let chat_id = chat.file_name().to_string_lossy().into_owned();
        let mut files: Vec<PathBuf> = std::fs::read_dir(chat.path())?
            .filter_map(std::result::Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        files.sort();
        for p in files {
            let stem = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            // 2026-02-24_msg_001_050 → from msg_001 to msg_050, dated by the prefix.
            let parts: Vec<&str> = stem.splitn(2, '_').collect();
            let date = parts.first().copied().unwrap_or("");
            let created = if parse_iso(date).is_some() {
                format!("{date}T00:00:00Z")
            } else {
                crate::timeutil::format_iso(crate::timeutil::now_secs())
            };
            let (from, to) = parts.get(1).map_or((None, None), |rest| {
                let bits: Vec<&str> = rest.split('_').collect();
                if bits.len() == 3 {
                    (
                        Some(format!("{}_{}", bits[0], bits[1])),
                        Some(format!("{}_{}", bits[0], bits[2])),
                    )
                } else {
                    (None, None)
                }
            });
            t.execute(
                "INSERT OR REPLACE INTO summaries(chat_id, from_message_id, to_message_id, file_path, created_at) \
                 VALUES (?1,?2,?3,?4,?5)",
                params![chat_id, from, to, p.display().to_string(), created],
            )?;
            n += 1;
        }
    }
    Ok(n)
}

/// Creates a new database at `db` (which must not exist) and fills its messages side.
pub fn rebuild_into(
    db: &Path,
    data_dir: &Path,
    dim: usize,
    default_model: &str,
    progress: bool,
) -> Result<ReindexStats> {
    if db.exists() {
        return Err(CoreError::InvalidInput(format!(
            "{} already exists; reindex builds into a new file",
            db.display()
        )));
    }
    crate::store::register_sqlite_vec();
    let mut conn = Connection::open(db)?;
    crate::schema::migrate(&mut conn, dim)?;
    let stats = rebuild_messages(&mut conn, db, data_dir, default_model, progress)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    drop(conn);
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_line_cases() {
        let ok = br#"{"id":"m1","ts":"2026-02-24T14:30:00Z","role":"user","content":"hi","meta":{"channel":"telegram"}}"#;
        let m = parse_line(ok, "telegram_1").unwrap();
        assert_eq!(
            (m.id.as_str(), m.channel.as_str(), m.content.as_str()),
            ("m1", "telegram", "hi")
        );
        assert!(parse_line(b"{\"id\":\"m1\",\"ts\":\"2026", "c")
            .unwrap_err()
            .starts_with("torn last line (no newline): invalid JSON"));
        assert_eq!(parse_line(b"\xff\xfe\n", "c").unwrap_err(), "invalid UTF-8");
        let bad_role = br#"{"id":"m1","ts":"2026-02-24T14:30:00Z","role":"robot","content":"x"}"#;
        assert!(parse_line(bad_role, "c").is_err());
        let obj = br#"{"id":2,"ts":"2026-02-24T14:30:00Z","role":"tool","content":{"a":1}}"#;
        let m = parse_line(obj, "cli_x").unwrap();
        assert_eq!(
            (m.id.as_str(), m.content.as_str(), m.channel.as_str()),
            ("2", "{\"a\":1}", "cli")
        );
    }

    fn line(id: &str, ts: &str, kind: Option<&str>, model: Option<&str>) -> String {
        let mut v = serde_json::json!({
            "id": id, "ts": ts, "role": if kind.is_some() { "system" } else { "user" },
            "content": "x", "meta": {"channel": "telegram"}
        });
        if let Some(k) = kind {
            v["type"] = k.into();
        }
        if let Some(m) = model {
            v["meta"]["model"] = m.into();
        }
        v.to_string()
    }

    /// Rebuilds from one chat's day files and returns (model, segment_start).
    fn session_of(days: &[(&str, Vec<String>)]) -> (String, String) {
        let dir = tempfile::tempdir().unwrap();
        let chat = dir.path().join("data/conversations/telegram_1");
        std::fs::create_dir_all(&chat).unwrap();
        for (day, lines) in days {
            std::fs::write(chat.join(format!("{day}.jsonl")), lines.join("\n") + "\n").unwrap();
        }
        let db = dir.path().join("klaw.db");
        let stats = rebuild_into(&db, &dir.path().join("data"), 4, "default/m", false).unwrap();
        assert_eq!(stats.sessions, 1);
        let store = crate::store::Store::open(&db, 4, 1).unwrap();
        let (model, start, _) = store.get_session("telegram_1").unwrap().unwrap();
        store.close().unwrap();
        (model, start)
    }

    const T: [&str; 5] = [
        "2026-02-24T10:00:00Z",
        "2026-02-24T10:01:00Z",
        "2026-02-24T10:02:00Z",
        "2026-02-24T10:03:00Z",
        "2026-02-24T10:04:00Z",
    ];

    #[test]
    fn session_model_follows_breaks_and_switches() {
        let plain = |i: usize| line(&format!("m{i}"), T[i], None, None);
        let brk = |i: usize, m| line(&format!("b{i}"), T[i], Some("session_break"), m);
        let sw = |i: usize, m| line(&format!("s{i}"), T[i], Some("model_switch"), Some(m));
        // No markers: the default model, the segment from the first message.
        assert_eq!(
            session_of(&[("2026-02-24", vec![plain(0), plain(1)])]),
            ("default/m".into(), T[0].into())
        );
        // A break with a model, then a switch after it: the switched model.
        assert_eq!(
            session_of(&[(
                "2026-02-24",
                vec![plain(0), brk(1, Some("a/1")), plain(2), sw(3, "b/2")]
            )]),
            ("b/2".into(), T[1].into())
        );
        // A switch, then a later break without a model: the switch is kept.
        assert_eq!(
            session_of(&[(
                "2026-02-24",
                vec![plain(0), sw(1, "b/2"), plain(2), brk(3, None)]
            )]),
            ("b/2".into(), T[3].into())
        );
        // A switch, then a later break that names a model: the break's model.
        assert_eq!(
            session_of(&[(
                "2026-02-24",
                vec![sw(1, "b/2"), brk(2, Some("c/3")), plain(3)]
            )]),
            ("c/3".into(), T[2].into())
        );
        // Several switches across day files: the latest one wins.
        assert_eq!(
            session_of(&[
                ("2026-02-24", vec![brk(0, None), sw(1, "b/2")]),
                ("2026-02-25", vec![sw(2, "d/4"), plain(3)]),
            ]),
            ("d/4".into(), T[0].into())
        );
        // A switch line without meta.model changes nothing; order of lines in the
        // file does not beat timestamps.
        assert_eq!(
            session_of(&[(
                "2026-02-24",
                vec![
                    sw(3, "late/1"),
                    sw(2, "early/1"),
                    line("s9", T[4], Some("model_switch"), None)
                ]
            )]),
            ("late/1".into(), T[2].into())
        );
    }
}
