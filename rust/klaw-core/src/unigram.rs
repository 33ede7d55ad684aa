//! A lean SentencePiece-unigram tokenizer for large multilingual vocabularies.
//!
//! HF `tokenizers` keeps a Unigram vocabulary as a trie with a hash map per node: for
//! XLM-R's 250k pieces (multilingual-e5-small) that is ~270 MB resident, more than the
//! model itself (docs/decisions.md). This keeps one hash map of the pieces (~20 MB)
//! and runs the same Viterbi search over each pre-token; normalisation and
//! pre-tokenisation are still `tokenizers`' own, read from the same tokenizer.json.

use crate::error::{CoreError, Result};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{
    NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer,
};

#[derive(Deserialize)]
struct Probe {
    model: ProbeModel,
}

#[derive(Deserialize)]
struct ProbeModel {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct File {
    normalizer: Option<Value>,
    pre_tokenizer: Option<Value>,
    post_processor: Option<Value>,
    model: Model,
}

#[derive(Deserialize)]
struct Model {
    unk_id: Option<u32>,
    vocab: Vec<(String, f64)>,
    #[serde(default)]
    byte_fallback: bool,
}

pub struct Unigram {
    pieces: HashMap<Box<str>, (u32, f32)>,
    max_chars: usize,
    unk: u32,
    unk_score: f32,
    normalizer: Option<NormalizerWrapper>,
    pre_tokenizer: Option<PreTokenizerWrapper>,
    /// Special tokens the post-processor puts around a single text.
    head: Vec<u32>,
    tail: Vec<u32>,
}

fn bad(path: &Path, e: impl std::fmt::Display) -> CoreError {
    CoreError::Model(format!("{}: {e}", path.display()))
}

impl Unigram {
    /// The tokenizer of `path` when its model is a Unigram one, else None.
    pub fn from_file(path: &Path) -> Result<Option<Self>> {
        let text = std::fs::read_to_string(path).map_err(|e| bad(path, e))?;
        let probe: Probe = serde_json::from_str(&text).map_err(|e| bad(path, e))?;
        if probe.model.kind != "Unigram" {
            return Ok(None);
        }
        let file: File = serde_json::from_str(&text).map_err(|e| bad(path, e))?;
        drop(text);
        if file.model.byte_fallback {
            return Err(bad(path, "byte-fallback Unigram models are not supported"));
        }
        let unk = file
            .model
            .unk_id
            .ok_or_else(|| bad(path, "the Unigram model has no unk_id"))?;
        let mut pieces = HashMap::with_capacity(file.model.vocab.len());
        let (mut min, mut max_chars) = (f64::MAX, 1);
        for (id, (piece, score)) in file.model.vocab.into_iter().enumerate() {
            min = min.min(score);
            max_chars = max_chars.max(piece.chars().count());
            pieces
                .entry(piece.into_boxed_str())
                .or_insert((id as u32, score as f32));
        }
        let normalizer = file
            .normalizer
            .filter(|v| !v.is_null())
            .map(serde_json::from_value::<NormalizerWrapper>)
            .transpose()
            .map_err(|e| bad(path, e))?;
        let pre_tokenizer = file
            .pre_tokenizer
            .filter(|v| !v.is_null())
            .map(serde_json::from_value::<PreTokenizerWrapper>)
            .transpose()
            .map_err(|e| bad(path, e))?;
        let mut u = Unigram {
            pieces,
            max_chars,
            unk,
            // SentencePiece scores an unknown character below every piece.
            unk_score: (min - 10.0) as f32,
            normalizer,
            pre_tokenizer,
            head: Vec::new(),
            tail: Vec::new(),
        };
        (u.head, u.tail) = u.specials(file.post_processor.as_ref());
        Ok(Some(u))
    }

    fn id(&self, piece: &str) -> Option<u32> {
        self.pieces.get(piece).map(|p| p.0)
    }

    /// `<s> $A </s>` (TemplateProcessing) or cls/sep (Roberta/Bert processing).
    fn specials(&self, pp: Option<&Value>) -> (Vec<u32>, Vec<u32>) {
        let (mut head, mut tail) = (Vec::new(), Vec::new());
        let Some(pp) = pp else {
            return (head, tail);
        };
        if let Some(single) = pp.get("single").and_then(Value::as_array) {
            let mut seen_seq = false;
            for item in single {
                if item.get("Sequence").is_some() {
                    seen_seq = true;
                } else if let Some(tok) = item.pointer("/SpecialToken/id").and_then(Value::as_str) {
                    let ids: Vec<u32> = pp
                        .pointer(&format!(
                            "/special_tokens/{}/ids",
                            tok.replace('~', "~0").replace('/', "~1")
                        ))
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|x| x.as_u64().map(|x| x as u32))
                                .collect()
                        })
                        .or_else(|| self.id(tok).map(|i| vec![i]))
                        .unwrap_or_default();
                    if seen_seq {
                        tail.extend(ids);
                    } else {
                        head.extend(ids);
                    }
                }
            }
        } else if let (Some(cls), Some(sep)) = (pp.get("cls"), pp.get("sep")) {
            head.extend(cls.get(1).and_then(Value::as_u64).map(|x| x as u32));
            tail.extend(sep.get(1).and_then(Value::as_u64).map(|x| x as u32));
        }
        (head, tail)
    }

    /// Token ids of `text` with its special tokens, and the special-tokens mask.
    pub fn encode(&self, text: &str) -> Result<(Vec<u32>, Vec<u32>)> {
        let err = |e: tokenizers::Error| CoreError::Model(e.to_string());
        let mut norm = NormalizedString::from(text);
        if let Some(n) = &self.normalizer {
            n.normalize(&mut norm).map_err(err)?;
        }
        let mut pre = PreTokenizedString::from(norm);
        if let Some(p) = &self.pre_tokenizer {
            p.pre_tokenize(&mut pre).map_err(err)?;
        }
        let mut ids = self.head.clone();
        for (piece, _, _) in pre.get_splits(OffsetReferential::Normalized, OffsetType::None) {
            self.viterbi(piece, &mut ids);
        }
        ids.extend_from_slice(&self.tail);
        let mut mask = vec![0u32; ids.len()];
        mask[..self.head.len()].fill(1);
        let n = mask.len();
        mask[n - self.tail.len()..].fill(1);
        Ok((ids, mask))
    }

    /// The best-scoring segmentation of `word` into pieces, appended to `out`.
    fn viterbi(&self, word: &str, out: &mut Vec<u32>) {
        let bounds: Vec<usize> = word
            .char_indices()
            .map(|(i, _)| i)
            .chain(std::iter::once(word.len()))
            .collect();
        let n = bounds.len() - 1;
        if n == 0 {
            return;
        }
        // best[e] = (score, start char, piece id) of the best path ending at char e.
        let mut best: Vec<(f32, usize, u32)> = vec![(f32::NEG_INFINITY, 0, self.unk); n + 1];
        best[0].0 = 0.0;
        for i in 0..n {
            let here = best[i].0;
            if here == f32::NEG_INFINITY {
                continue;
            }
            for e in i + 1..=n.min(i + self.max_chars) {
                if let Some(&(id, score)) = self.pieces.get(&word[bounds[i]..bounds[e]]) {
                    if id != self.unk && here + score > best[e].0 {
                        best[e] = (here + score, i, id);
                    }
                }
            }
            if here + self.unk_score > best[i + 1].0 {
                best[i + 1] = (here + self.unk_score, i, self.unk);
            }
        }
        let start = out.len();
        let mut e = n;
        while e > 0 {
            out.push(best[e].2);
            e = best[e].1;
        }
        out[start..].reverse();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, model: &str) -> std::path::PathBuf {
        let p = dir.join("tokenizer.json");
        let json = format!(
            r#"{{"normalizer": null,
                "pre_tokenizer": {{"type": "Metaspace", "replacement": "\u2581",
                                   "prepend_scheme": "always", "split": true}},
                "post_processor": {{"type": "TemplateProcessing",
                    "single": [{{"SpecialToken": {{"id": "<s>", "type_id": 0}}}},
                               {{"Sequence": {{"id": "A", "type_id": 0}}}},
                               {{"SpecialToken": {{"id": "</s>", "type_id": 0}}}}],
                    "special_tokens": {{}}}},
                "model": {model}}}"#
        );
        std::fs::write(&p, json).unwrap();
        p
    }

    #[test]
    fn best_segmentation_specials_and_unknown_characters() {
        let dir = tempfile::tempdir().unwrap();
        let vocab = r#"{"type": "Unigram", "unk_id": 2, "vocab": [
            ["<s>", 0.0], ["</s>", 0.0], ["<unk>", 0.0],
            ["▁", -3.0], ["▁ab", -2.0], ["▁a", -1.5], ["b", -1.0], ["c", -4.0], ["▁cd", -1.0]]}"#;
        let u = Unigram::from_file(&write(dir.path(), vocab))
            .unwrap()
            .unwrap();
        // "▁ab" (-2.0) beats "▁a" + "b" (-2.5); "▁cd" is one piece; "x" is unknown.
        let (ids, mask) = u.encode("ab cd").unwrap();
        assert_eq!(ids, vec![0, 4, 8, 1]);
        assert_eq!(mask, vec![1, 0, 0, 1]);
        let (ids, _) = u.encode("ax").unwrap();
        assert_eq!(ids, vec![0, 5, 2, 1]);
        assert_eq!(u.encode("").unwrap().0, vec![0, 1]);
        // Not a Unigram model: left to HF tokenizers.
        let wp = r#"{"type": "WordPiece", "vocab": {"a": 0}}"#;
        assert!(Unigram::from_file(&write(dir.path(), wp))
            .unwrap()
            .is_none());
    }
}
