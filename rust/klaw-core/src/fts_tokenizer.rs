//! `klaw_unicode61`: FTS5's `unicode61 remove_diacritics 0` tokenizer with each
//! code point's class and case fold looked up once, for `klaw reindex`'s full-text
//! build (its binary searches were a quarter of the build's instructions).
//!
//! It cannot drift from SQLite's: every code point is classified by asking the
//! real `unicode61` (alone, then after an `a`), and the walk over the text is the
//! one of `fts5UnicodeTokenize`, so both give the same tokens (a test compares
//! them over every code point and over bytes that are not UTF-8). `klaw.db` keeps
//! declaring `unicode61`: queries and later inserts use SQLite's own.

use rusqlite::{ffi, Connection};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::ptr;

pub const NAME: &str = "klaw_unicode61";

type XToken =
    Option<unsafe extern "C" fn(*mut c_void, c_int, *const c_char, c_int, c_int, c_int) -> c_int>;

/// A memo entry: bits 0-31 the folded bytes, 32-34 their count, then the class.
const KNOWN: u64 = 1 << 63;
/// Starts or continues a token (`fts5UnicodeIsAlnum`).
const ALNUM: u64 = 1 << 62;
/// Continues a token only (`sqlite3Fts5UnicodeIsdiacritic`).
const DIACRITIC: u64 = 1 << 61;

/// `sqlite3Utf8Trans1`: the value bits of a UTF-8 lead byte from 0xc0.
const TRANS1: [u8; 64] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x00, 0x01, 0x02, 0x03, 0x00, 0x01, 0x00, 0x00,
];

/// SQLite's `unicode61 remove_diacritics 0`, the oracle.
struct Real {
    api: ffi::fts5_tokenizer,
    tok: *mut ffi::Fts5Tokenizer,
}

/// A token as FTS5 receives it: (bytes, start, end).
type Token = (Vec<u8>, c_int, c_int);

/// Runs a tokenizer instance of `api` over `text`, collecting its tokens.
fn run(api: &ffi::fts5_tokenizer, tok: *mut ffi::Fts5Tokenizer, text: &[u8]) -> Option<Vec<Token>> {
    unsafe extern "C" fn collect(
        ctx: *mut c_void,
        _flags: c_int,
        tok: *const c_char,
        n: c_int,
        start: c_int,
        end: c_int,
    ) -> c_int {
        // SAFETY: `ctx` is the Vec passed below; FTS5 gives `n` readable bytes.
        let out = unsafe { &mut *ctx.cast::<Vec<Token>>() };
        let bytes = if n > 0 {
            unsafe { std::slice::from_raw_parts(tok.cast::<u8>(), n as usize) }.to_vec()
        } else {
            Vec::new()
        };
        out.push((bytes, start, end));
        ffi::SQLITE_OK
    }
    let mut out: Vec<Token> = Vec::new();
    let tokenize = api.xTokenize?;
    // SAFETY: `tok` is a live instance of `api`; `collect` only pushes into `out`.
    let rc = unsafe {
        tokenize(
            tok,
            ptr::from_mut(&mut out).cast(),
            0,
            text.as_ptr().cast(),
            c_int::try_from(text.len()).ok()?,
            Some(collect),
        )
    };
    (rc == ffi::SQLITE_OK).then_some(out)
}

impl Real {
    fn tokens(&self, text: &[u8]) -> Option<Vec<Vec<u8>>> {
        run(&self.api, self.tok, text).map(|v| v.into_iter().map(|t| t.0).collect())
    }
}

impl Drop for Real {
    fn drop(&mut self) {
        if let Some(delete) = self.api.xDelete {
            // SAFETY: created by this API's xCreate, deleted once.
            unsafe { delete(self.tok) };
        }
    }
}

/// One tokenizer instance: the oracle and what it has said so far, keyed by the
/// code point as FTS5's `READ_UTF8` decodes it (so even bytes that are not UTF-8
/// get SQLite's answer).
struct Memo {
    real: Real,
    bmp: Vec<u64>,
    other: HashMap<u32, u64>,
    out: Vec<u8>,
}

/// The entry for a token character folded to `fold` (at most 4 bytes).
fn entry(class: u64, fold: &[u8]) -> Option<u64> {
    if fold.len() > 4 {
        return None;
    }
    let mut b = [0u8; 4];
    b[..fold.len()].copy_from_slice(fold);
    Some(KNOWN | class | ((fold.len() as u64) << 32) | u64::from(u32::from_le_bytes(b)))
}

impl Memo {
    /// The entry of the character whose bytes are `raw`, asking SQLite; `None` if
    /// its answer has a shape unicode61 cannot give (the build then fails loudly).
    #[cold]
    #[inline(never)]
    fn probe(&self, raw: &[u8]) -> Option<u64> {
        match &self.real.tokens(raw)?[..] {
            [t] => return entry(ALNUM, t),
            [] => {}
            _ => return None,
        }
        let mut two = vec![b'a'];
        two.extend_from_slice(raw);
        match &self.real.tokens(&two)?[..] {
            [t] if t == b"a" => Some(KNOWN),
            [t] if t.first() == Some(&b'a') => entry(DIACRITIC, &t[1..]),
            _ => None,
        }
    }

    /// Reads one character at `*i` the way `READ_UTF8` does and returns its entry.
    #[allow(clippy::inline_always)] // called per character: a call costs ~40%
    #[inline(always)]
    fn next(&mut self, t: &[u8], i: &mut usize) -> Option<u64> {
        let start = *i;
        let mut c = u32::from(t[start]);
        *i += 1;
        if c < 0x80 {
            return Some(self.bmp[c as usize]);
        }
        if c >= 0xc0 {
            c = u32::from(TRANS1[(c - 0xc0) as usize]);
            while *i < t.len() && t[*i] & 0xc0 == 0x80 {
                c = c.wrapping_shl(6).wrapping_add(u32::from(t[*i] & 0x3f));
                *i += 1;
            }
            if c < 0x80 || c & 0xFFFF_F800 == 0xD800 || c & 0xFFFF_FFFE == 0xFFFE {
                c = 0xFFFD;
            }
        }
        let known = if c < 0x10000 {
            self.bmp[c as usize]
        } else {
            self.other.get(&c).copied().unwrap_or(0)
        };
        if known != 0 {
            return Some(known);
        }
        let v = self.probe(&t[start..*i])?;
        if c < 0x10000 {
            self.bmp[c as usize] = v;
        } else {
            self.other.insert(c, v);
        }
        Some(v)
    }

    /// `fts5UnicodeTokenize`'s walk: skip separators, then take token characters
    /// (a diacritic continues a token but does not start one), folded.
    fn tokenize(&mut self, t: &[u8], ctx: *mut c_void, x_token: XToken) -> c_int {
        let Some(emit) = x_token else {
            return ffi::SQLITE_ERROR;
        };
        let mut i = 0;
        loop {
            let start = loop {
                if i >= t.len() {
                    return ffi::SQLITE_OK;
                }
                let at = i;
                let Some(v) = self.next(t, &mut i) else {
                    return ffi::SQLITE_ERROR;
                };
                if v & ALNUM != 0 {
                    self.out.clear();
                    push_fold(&mut self.out, v);
                    break at;
                }
            };
            let mut end = i;
            while i < t.len() {
                let Some(v) = self.next(t, &mut i) else {
                    return ffi::SQLITE_ERROR;
                };
                if v & (ALNUM | DIACRITIC) == 0 {
                    break;
                }
                push_fold(&mut self.out, v);
                end = i;
            }
            // SAFETY: the callback FTS5 gave us, with a buffer valid for the call.
            let rc = unsafe {
                emit(
                    ctx,
                    0,
                    self.out.as_ptr().cast(),
                    self.out.len() as c_int,
                    start as c_int,
                    end as c_int,
                )
            };
            if rc != ffi::SQLITE_OK {
                return if rc == ffi::SQLITE_DONE {
                    ffi::SQLITE_OK
                } else {
                    rc
                };
            }
        }
    }
}

#[allow(clippy::inline_always)]
#[inline(always)]
fn push_fold(out: &mut Vec<u8>, v: u64) {
    let n = ((v >> 32) & 7) as usize;
    // A fixed 4-byte copy, then the length: no memcpy call per character.
    let len = out.len();
    out.extend_from_slice(&(v as u32).to_le_bytes());
    out.truncate(len + n);
}

/// What `xCreate` needs: SQLite's unicode61 to instantiate as the oracle.
struct Factory {
    api: ffi::fts5_tokenizer,
    user: *mut c_void,
}

unsafe extern "C" fn x_create(
    user: *mut c_void,
    _args: *mut *const c_char,
    _n: c_int,
    out: *mut *mut ffi::Fts5Tokenizer,
) -> c_int {
    let f = &*user.cast::<Factory>();
    let Some(create) = f.api.xCreate else {
        return ffi::SQLITE_ERROR;
    };
    let mut args = [c"remove_diacritics".as_ptr(), c"0".as_ptr()];
    let mut tok = ptr::null_mut();
    let rc = create(f.user, args.as_mut_ptr(), 2, &raw mut tok);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    let mut memo = Box::new(Memo {
        real: Real { api: f.api, tok },
        bmp: vec![0; 0x10000],
        other: HashMap::new(),
        out: Vec::with_capacity(64),
    });
    // ASCII up front: its hot path then has no probe.
    for b in 0u8..0x80 {
        match memo.probe(&[b]) {
            Some(v) => memo.bmp[usize::from(b)] = v,
            None => return ffi::SQLITE_ERROR,
        }
    }
    *out = Box::into_raw(memo).cast();
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_delete(tok: *mut ffi::Fts5Tokenizer) {
    if !tok.is_null() {
        drop(Box::from_raw(tok.cast::<Memo>()));
    }
}

unsafe extern "C" fn x_tokenize(
    tok: *mut ffi::Fts5Tokenizer,
    ctx: *mut c_void,
    _flags: c_int,
    text: *const c_char,
    n: c_int,
    x_token: XToken,
) -> c_int {
    let memo = &mut *tok.cast::<Memo>();
    let bytes = if n > 0 && !text.is_null() {
        std::slice::from_raw_parts(text.cast::<u8>(), n as usize)
    } else {
        &[]
    };
    memo.tokenize(bytes, ctx, x_token)
}

unsafe extern "C" fn x_destroy(user: *mut c_void) {
    drop(Box::from_raw(user.cast::<Factory>()));
}

fn fail(what: &str) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        ffi::Error::new(ffi::SQLITE_ERROR),
        Some(format!("{NAME}: {what}")),
    )
}

/// The connection's FTS5 API (`SELECT fts5(?1)` with a pointer bound).
fn fts5_api(conn: &Connection) -> rusqlite::Result<&ffi::fts5_api> {
    let mut api: *mut ffi::fts5_api = ptr::null_mut();
    // SAFETY: the raw handle is used on this thread while `conn` is borrowed; the
    // statement is finalized before returning; the API lives as long as `conn`.
    unsafe {
        let mut stmt = ptr::null_mut();
        let sql = c"SELECT fts5(?1)";
        if ffi::sqlite3_prepare_v2(
            conn.handle(),
            sql.as_ptr(),
            -1,
            &raw mut stmt,
            ptr::null_mut(),
        ) != ffi::SQLITE_OK
        {
            return Err(fail("FTS5 is not available"));
        }
        let slot = ptr::from_mut(&mut api).cast();
        ffi::sqlite3_bind_pointer(stmt, 1, slot, c"fts5_api_ptr".as_ptr(), None);
        ffi::sqlite3_step(stmt);
        ffi::sqlite3_finalize(stmt);
        api.as_ref().ok_or_else(|| fail("no fts5_api"))
    }
}

/// A tokenizer module of the connection: (user data, function table).
fn find(api: &ffi::fts5_api, name: &CStr) -> rusqlite::Result<(*mut c_void, ffi::fts5_tokenizer)> {
    let find = api
        .xFindTokenizer
        .ok_or_else(|| fail("no xFindTokenizer"))?;
    let mut user = ptr::null_mut();
    let mut t = ffi::fts5_tokenizer {
        xCreate: None,
        xDelete: None,
        xTokenize: None,
    };
    // SAFETY: `api` is the connection's; `find` fills `user` and `t`.
    let rc = unsafe {
        find(
            ptr::from_ref(api).cast_mut(),
            name.as_ptr(),
            &raw mut user,
            &raw mut t,
        )
    };
    if rc == ffi::SQLITE_OK {
        Ok((user, t))
    } else {
        Err(fail(&format!("{} not found", name.to_string_lossy())))
    }
}

/// Registers `klaw_unicode61` on `conn` (for this connection only).
pub fn register(conn: &Connection) -> rusqlite::Result<()> {
    let api = fts5_api(conn)?;
    let create = api
        .xCreateTokenizer
        .ok_or_else(|| fail("no xCreateTokenizer"))?;
    let (user, real) = find(api, c"unicode61")?;
    let factory = Box::into_raw(Box::new(Factory { api: real, user }));
    let mut ours = ffi::fts5_tokenizer {
        xCreate: Some(x_create),
        xDelete: Some(x_delete),
        xTokenize: Some(x_tokenize),
    };
    let name = CString::new(NAME).expect("no NUL in the name");
    // SAFETY: FTS5 copies `ours`; it owns `factory` from here (x_destroy) unless
    // the call fails, when it never saw it.
    let rc = unsafe {
        create(
            ptr::from_ref(api).cast_mut(),
            name.as_ptr(),
            factory.cast(),
            &raw mut ours,
            Some(x_destroy),
        )
    };
    if rc != ffi::SQLITE_OK {
        drop(unsafe { Box::from_raw(factory) });
        return Err(fail("could not register"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live instance of a tokenizer module, deleted on drop.
    struct Instance(ffi::fts5_tokenizer, *mut ffi::Fts5Tokenizer);

    impl Instance {
        fn new(api: &ffi::fts5_api, name: &CStr) -> Self {
            let (user, t) = find(api, name).unwrap();
            let mut args = [c"remove_diacritics".as_ptr(), c"0".as_ptr()];
            let mut tok = ptr::null_mut();
            let rc = unsafe { t.xCreate.unwrap()(user, args.as_mut_ptr(), 2, &raw mut tok) };
            assert_eq!(rc, ffi::SQLITE_OK);
            Instance(t, tok)
        }
        fn tokens(&self, text: &[u8]) -> Vec<Token> {
            run(&self.0, self.1, text).unwrap()
        }
    }

    impl Drop for Instance {
        fn drop(&mut self) {
            unsafe { self.0.xDelete.unwrap()(self.1) };
        }
    }

    #[test]
    fn same_tokens_as_unicode61_for_every_code_point_and_for_broken_utf8() {
        let conn = Connection::open_in_memory().unwrap();
        register(&conn).unwrap();
        let api = fts5_api(&conn).unwrap();
        let real = Instance::new(api, c"unicode61");
        let ours = Instance::new(api, &CString::new(NAME).unwrap());
        // Each code point alone, after a letter, before one, and in runs: starting
        // and continuing a token are different (a diacritic only continues one).
        let all: Vec<char> = (1..=0x10_FFFF).filter_map(char::from_u32).collect();
        for chunk in all.chunks(2048) {
            let mut s = String::new();
            for (i, c) in chunk.iter().enumerate() {
                s.push(*c);
                s.push_str(if i % 3 == 0 { " a" } else { "Ä" });
                s.push(*c);
                s.push('b');
                if i % 5 == 0 {
                    s.push(' ');
                }
            }
            assert_eq!(ours.tokens(s.as_bytes()), real.tokens(s.as_bytes()));
        }
        // Bytes that are not UTF-8: stray continuations, truncated and overlong
        // sequences, surrogates, lead bytes past U+10FFFF.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            let mut text = Vec::new();
            for _ in 0..(x % 24) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let b = (x >> 24) as u8;
                text.push(if x.is_multiple_of(4) {
                    b & 0x7f
                } else {
                    b | 0x80
                });
            }
            assert_eq!(ours.tokens(&text), real.tokens(&text), "{text:?}");
        }
        for text in [
            &b""[..],
            b"   ",
            b"\xc0\x80",
            b"\xed\xa0\x80x",
            b"A\xef\xbf\xbeB",
        ] {
            assert_eq!(ours.tokens(text), real.tokens(text), "{text:?}");
        }
    }

    #[test]
    fn a_table_built_with_it_matches_one_built_with_unicode61() {
        let conn = Connection::open_in_memory().unwrap();
        register(&conn).unwrap();
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE a USING fts5(x, tokenize='unicode61 remove_diacritics 0');
             CREATE VIRTUAL TABLE b USING fts5(x, tokenize='{NAME}');
             INSERT INTO a VALUES ('Straße ÉCOLE école 会议项目 Встреча, встреча!');
             INSERT INTO b SELECT x FROM a;"
        ))
        .unwrap();
        let blocks = |t: &str| -> Vec<(i64, Vec<u8>)> {
            let mut st = conn
                .prepare(&format!("SELECT id, block FROM {t}_data ORDER BY id"))
                .unwrap();
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(std::result::Result::unwrap)
                .collect()
        };
        assert_eq!(blocks("a"), blocks("b"));
    }
}
