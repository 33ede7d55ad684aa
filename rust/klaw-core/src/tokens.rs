//! Token counting: a fast script-aware estimate, and exact counting with a
//! `tokenizer.json` when one is available.
//!
//! The estimate is calibrated on cl100k (the budget that matters for prompts);
//! method, constants and measured error are in `docs/token-counting.md`. It
//! works in integer milli-tokens so that the chunker can add the cost of
//! pieces split at whitespace or script boundaries and get exactly the cost
//! of their concatenation (`benches/pychunker.py` mirrors it bit for bit).

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

/// Internal fixed-point unit: one token is this many units.
pub const UNITS_PER_TOKEN: u64 = 1000;

// Costs in milli-tokens, tuned on tests/data/tokens (see docs/token-counting.md).
// Every run cost has the form max(floor, base + per_char * n) with base >= 0, so
// it is subadditive: splitting a run can only raise the summed estimate.
const LATIN_PER_CHAR: u64 = 167; // cl100k keeps most words whole: ~n/6, at least 1
const DIGIT_PER_CHAR: u64 = 334; // cl100k splits numbers into groups of 3
const CYRILLIC_BASE: u64 = 600;
const CYRILLIC_PER_CHAR: u64 = 420; // ~chars/2.4
const CJK_PER_CHAR: u64 = 1100;
const PUNCT_PER_CHAR: u64 = 800; // some runs merge ("```", "://"), most don't
const OTHER_PER_CHAR: u64 = 1000; // other scripts, emoji: untuned, one each
const RUN_FLOOR: u64 = 1000;
/// A whitespace run costs nothing when it is one plain space (it merges into
/// the next word) and one token otherwise (newlines, indentation).
const BREAK_COST: u64 = 1000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Space,
    Latin,
    Digit,
    Cyrillic,
    Cjk,
    Punct,
    Other,
}

/// Whitespace as the estimate sees it; the same explicit set as the Python
/// baseline (Rust's `is_whitespace` and Python's `isspace` disagree).
#[inline]
pub(crate) fn is_space(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t'
            | '\n'
            | '\r'
            | '\u{0b}'
            | '\u{0c}'
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'
            ..='\u{200a}' | '\u{2028}' | '\u{2029}' | '\u{202f}' | '\u{205f}' | '\u{3000}'
    )
}

#[inline]
fn class_of(c: char) -> Class {
    if c.is_ascii() {
        return if c.is_ascii_alphabetic() {
            Class::Latin
        } else if c.is_ascii_digit() {
            Class::Digit
        } else if is_space(c) {
            Class::Space
        } else {
            Class::Punct
        };
    }
    if is_space(c) {
        return Class::Space;
    }
    match c as u32 {
        0xD7 | 0xF7 | 0xA1..=0xBF | 0x2010..=0x205E | 0x3000..=0x303F | 0xFF00..=0xFFEF => {
            Class::Punct
        }
        0xC0..=0x24F | 0x1E00..=0x1EFF => Class::Latin,
        0x400..=0x52F => Class::Cyrillic,
        0x3040..=0x30FF
        | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xAC00..=0xD7AF
        | 0xF900..=0xFAFF
        | 0x20000..=0x2FFFF => Class::Cjk,
        _ => Class::Other,
    }
}

#[inline]
fn run_cost(class: Class, n: u64, has_newline: bool) -> u64 {
    match class {
        Class::Space => {
            if n == 1 && !has_newline {
                0
            } else {
                BREAK_COST
            }
        }
        Class::Latin => (LATIN_PER_CHAR * n).max(RUN_FLOOR),
        Class::Digit => (DIGIT_PER_CHAR * n).max(RUN_FLOOR),
        Class::Cyrillic => (CYRILLIC_BASE + CYRILLIC_PER_CHAR * n).max(RUN_FLOOR),
        Class::Cjk => CJK_PER_CHAR * n,
        Class::Punct => PUNCT_PER_CHAR * n,
        Class::Other => OTHER_PER_CHAR * n,
    }
}

/// The estimate in milli-tokens. Additive over pieces split where the
/// character class changes (e.g. at whitespace), subadditive otherwise.
pub fn estimate_units(text: &str) -> u64 {
    let mut total = 0;
    let mut class = Class::Space;
    let mut run = 0u64;
    let mut newline = false;
    for c in text.chars() {
        let k = class_of(c);
        // Ideographs and "other" characters are priced one by one, so a
        // run of them is just the sum; only the other classes merge.
        if k == class && run > 0 && k != Class::Cjk && k != Class::Other {
            run += 1;
        } else {
            if run > 0 {
                total += run_cost(class, run, newline);
            }
            class = k;
            run = 1;
            newline = false;
        }
        newline |= c == '\n';
    }
    if run > 0 {
        total += run_cost(class, run, newline);
    }
    total
}

/// Rounds milli-tokens to whole tokens (half up).
#[inline]
pub fn units_to_tokens(units: u64) -> usize {
    ((units + UNITS_PER_TOKEN / 2) / UNITS_PER_TOKEN) as usize
}

/// Fast script-aware token estimate (cl100k-like); see the module docs.
pub fn estimate_tokens(text: &str) -> usize {
    units_to_tokens(estimate_units(text))
}

/// Errors from loading a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read tokenizer file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid tokenizer file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// Counts tokens either with the estimate or exactly with a HuggingFace
/// tokenizer (special tokens excluded, truncation and padding disabled).
#[derive(Default)]
pub struct TokenCounter {
    tokenizer: Option<Box<Tokenizer>>,
}

impl TokenCounter {
    /// A counter that uses [`estimate_tokens`].
    pub fn estimate() -> Self {
        Self { tokenizer: None }
    }

    /// Loads a `tokenizer.json` for exact counts.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TokenError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| TokenError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let invalid = |e: &dyn std::fmt::Display| TokenError::Invalid {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        let mut tok = Tokenizer::from_bytes(&bytes).map_err(|e| invalid(&e))?;
        // The embedding model's file truncates at 128 or so; counting must not.
        tok.with_truncation(None).map_err(|e| invalid(&e))?;
        tok.with_padding(None);
        Ok(Self {
            tokenizer: Some(Box::new(tok)),
        })
    }

    /// True when counts come from a real tokenizer.
    pub fn is_exact(&self) -> bool {
        self.tokenizer.is_some()
    }

    /// Token count of `text`. An exact counter falls back to the estimate if
    /// the tokenizer fails on this input (it does not for valid UTF-8).
    pub fn count(&self, text: &str) -> usize {
        match &self.tokenizer {
            None => estimate_tokens(text),
            Some(tok) => tok
                .encode(text, false)
                .map_or_else(|_| estimate_tokens(text), |enc| enc.len()),
        }
    }

    /// Counts many texts; the exact counter encodes them in parallel.
    pub fn count_batch(&self, texts: &[String]) -> Vec<usize> {
        match &self.tokenizer {
            None => texts.iter().map(|t| estimate_tokens(t)).collect(),
            Some(tok) => {
                let inputs: Vec<&str> = texts.iter().map(String::as_str).collect();
                match tok.encode_batch(inputs, false) {
                    Ok(encs) => encs.iter().map(tokenizers::Encoding::len).collect(),
                    Err(_) => texts.iter().map(|t| self.count(t)).collect(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_empty_and_blank() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens(" "), 0);
        assert_eq!(estimate_tokens("\n"), 1);
    }

    #[test]
    fn tokens_latin_words() {
        assert_eq!(estimate_tokens("a"), 1);
        assert_eq!(estimate_tokens("hello world"), 2);
        assert_eq!(estimate_tokens("hello, world!"), 4);
        // 24 letters: ~n/6
        assert_eq!(estimate_tokens("internationalizationxxxx"), 4);
        assert_eq!(estimate_tokens("2024"), 1);
        assert_eq!(estimate_tokens("123456789"), 3);
    }

    #[test]
    fn tokens_scripts() {
        // 6 Cyrillic letters: 0.6 + 6 * 0.42 = 3.12
        assert_eq!(estimate_tokens("привет"), 3);
        // 4 ideographs at 1.1
        assert_eq!(estimate_tokens("你好世界"), 4);
        assert_eq!(estimate_tokens("你好，世界。"), 6);
        assert_eq!(estimate_tokens("😀"), 1);
    }

    #[test]
    fn tokens_additive_at_class_boundaries() {
        let parts = ["Hello,", " ", "мир", "。", "你好", "\n\n", "42"];
        let sum: u64 = parts.iter().map(|p| estimate_units(p)).sum();
        assert_eq!(sum, estimate_units(&parts.concat()));
    }

    #[test]
    fn tokens_subadditive_inside_runs() {
        let word = "supercalifragilisticexpialidocious";
        for i in 1..word.len() {
            let (a, b) = word.split_at(i);
            assert!(estimate_units(word) <= estimate_units(a) + estimate_units(b));
        }
    }

    #[test]
    fn tokens_counter_estimate_and_errors() {
        let c = TokenCounter::estimate();
        assert!(!c.is_exact());
        assert_eq!(c.count("hello world"), 2);
        assert_eq!(
            c.count_batch(&["a b".to_string(), String::new()]),
            vec![2, 0]
        );
        assert!(matches!(
            TokenCounter::from_file("/nonexistent/tokenizer.json"),
            Err(TokenError::Io { .. })
        ));
        let dir = std::env::temp_dir().join(format!("klaw-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{not json").unwrap();
        assert!(matches!(
            TokenCounter::from_file(&bad),
            Err(TokenError::Invalid { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
