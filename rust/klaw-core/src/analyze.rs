//! Multilingual keyword analysis shared by the archival keyword index and its
//! benchmarks: English and Russian words are stemmed (Snowball), CJK runs become
//! overlapping bigrams plus unigrams so a word is found inside an unsegmented
//! sentence. Index and query go through the same code, so they always agree.

use rust_stemmers::{Algorithm, Stemmer};
use std::sync::OnceLock;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Latin,
    Cyrillic,
    Cjk,
    Other,
}

fn class(c: char) -> Option<Class> {
    let u = c as u32;
    if c.is_ascii_alphanumeric() {
        return Some(Class::Latin);
    }
    match u {
        0x0400..=0x052F => Some(Class::Cyrillic),
        // CJK ideographs, extension A, compatibility ideographs, kana, hangul.
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0xAC00..=0xD7AF => {
            Some(Class::Cjk)
        }
        _ if c.is_alphanumeric() => Some(if c.is_alphabetic() && u < 0x0250 {
            Class::Latin
        } else {
            Class::Other
        }),
        _ => None,
    }
}

fn stemmers() -> &'static (Stemmer, Stemmer) {
    static S: OnceLock<(Stemmer, Stemmer)> = OnceLock::new();
    S.get_or_init(|| {
        (
            Stemmer::create(Algorithm::English),
            Stemmer::create(Algorithm::Russian),
        )
    })
}

/// Whether analysis is for the index (CJK unigrams too) or for a query.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Index,
    Query,
}

fn push_cjk(run: &[char], mode: Mode, out: &mut Vec<String>) {
    if run.len() == 1 || mode == Mode::Index {
        for c in run {
            out.push(c.to_string());
        }
    }
    for w in run.windows(2) {
        let mut s = String::with_capacity(6);
        s.push(w[0]);
        s.push(w[1]);
        out.push(s);
    }
}

fn push_word(word: &str, cls: Class, out: &mut Vec<String>) {
    let lower = word.to_lowercase();
    let (en, ru) = stemmers();
    let stem = match cls {
        // ё and е are the same letter for search purposes.
        Class::Cyrillic => {
            let norm = lower.replace('ё', "е");
            // Snowball over-stems some nouns ("память" loses "ть" like a verb), so a
            // 5-letter prefix term is indexed too: inflected forms still meet there.
            if norm.chars().count() >= 6 {
                let mut p = String::from("~");
                p.extend(norm.chars().take(5));
                out.push(p);
            }
            ru.stem(&norm).into_owned()
        }
        Class::Latin => en.stem(&lower).into_owned(),
        _ => lower,
    };
    out.push(stem);
}

/// Splits `text` into search terms.
pub fn analyze(text: &str, mode: Mode) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut word_cls = Class::Other;
    let mut cjk: Vec<char> = Vec::new();
    for c in text.chars() {
        match class(c) {
            Some(Class::Cjk) => {
                if !word.is_empty() {
                    push_word(&word, word_cls, &mut out);
                    word.clear();
                }
                cjk.push(c);
            }
            Some(cls) => {
                if !cjk.is_empty() {
                    push_cjk(&cjk, mode, &mut out);
                    cjk.clear();
                }
                // A word takes the class of its first letter of a known script.
                if word.is_empty() || (cls != Class::Other && word_cls == Class::Other) {
                    word_cls = cls;
                }
                word.push(c);
            }
            None => {
                if !word.is_empty() {
                    push_word(&word, word_cls, &mut out);
                    word.clear();
                }
                if !cjk.is_empty() {
                    push_cjk(&cjk, mode, &mut out);
                    cjk.clear();
                }
            }
        }
    }
    if !word.is_empty() {
        push_word(&word, word_cls, &mut out);
    }
    if !cjk.is_empty() {
        push_cjk(&cjk, mode, &mut out);
    }
    out
}

/// The analysed terms joined by spaces: what the keyword index stores.
pub fn analyze_joined(text: &str, mode: Mode) -> String {
    analyze(text, mode).join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn russian_inflections_share_a_stem() {
        let a = analyze("памяти", Mode::Query);
        let b = analyze("Память", Mode::Index);
        assert!(a.iter().any(|t| b.contains(t)));
        assert!(a.contains(&"~памят".to_string()));
        assert_eq!(
            analyze("встречу", Mode::Query),
            analyze("встреча", Mode::Query)
        );
    }

    #[test]
    fn chinese_word_found_inside_sentence() {
        let doc = analyze("我下周二要去看医生", Mode::Index);
        let q = analyze("医生", Mode::Query);
        assert_eq!(q, vec!["医生".to_string()]);
        assert!(doc.contains(&q[0]));
        assert_eq!(analyze("药", Mode::Query), vec!["药".to_string()]);
    }

    #[test]
    fn english_is_stemmed_and_lowercased() {
        assert_eq!(analyze("Running dogs", Mode::Query), vec!["run", "dog"]);
        assert!(analyze("", Mode::Query).is_empty());
        assert!(analyze("  ,.!  ", Mode::Query).is_empty());
    }

    #[test]
    fn mixed_scripts_split() {
        let t = analyze("RPi5 и Docker на 树莓派", Mode::Query);
        assert_eq!(t, vec!["rpi5", "и", "docker", "на", "树莓", "莓派"]);
    }
}
