//! Sentence embeddings with ONNX Runtime (loaded dynamically) and HF tokenizers:
//! a BERT-style encoder (all-MiniLM-L6-v2, multilingual-e5-small), mean pooling over
//! the attention mask, L2 normalisation. Texts longer than the model's window are
//! embedded in windows whose token vectors are pooled together, so no text is cut.

use crate::error::{CoreError, Result};
use crate::unigram::Unigram;
use ort::execution_providers::CPUExecutionProvider;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{RunOptions, Session};
use ort::value::Tensor;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use tokenizers::Tokenizer;

static ORT_INIT: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Points `ort` at a libonnxruntime.so once per process.
fn init_ort(lib: Option<&Path>) -> Result<()> {
    let r = ORT_INIT.get_or_init(|| {
        let path = match lib {
            Some(p) => p.to_path_buf(),
            None => std::env::var_os("ORT_DYLIB_PATH")
                .map_or_else(|| "libonnxruntime.so".into(), Into::into),
        };
        if path.is_absolute() && !path.exists() {
            return Err(format!(
                "ONNX Runtime library not found at {}",
                path.display()
            ));
        }
        let p = path.to_string_lossy().into_owned();
        // ort panics when the library cannot be loaded; turn that into an error.
        std::panic::catch_unwind(move || ort::init_from(p).with_name("klaw").commit().map(|_| ()))
            .map_err(|_| format!("could not load ONNX Runtime from {}", path.display()))?
            .map_err(|e| e.to_string())
    });
    r.clone().map_err(|e| {
        CoreError::ModelNotFound(format!(
            "{e}. Install it with `pip install onnxruntime` (Klaw loads its libonnxruntime.so) \
             or set memory.embedding.ortLibrary in engine.yaml"
        ))
    })
}

/// Texts longer than this (bytes, ~64 wordpieces) trigger the arena trim after a batch.
const SHRINK_AFTER_BYTES: usize = 256;

pub struct EmbedderConfig {
    pub threads: usize,
    /// Tokens per model run, specials included (the model's window).
    pub max_length: usize,
    /// Longer texts: true embeds every window and pools them, false keeps the first.
    pub windows: bool,
    /// Prepended to queries / to stored texts (E5: "query: " / "passage: ").
    pub query_prefix: String,
    pub passage_prefix: String,
    /// Upper bound on padded tokens per ONNX run; 0 runs one text at a time.
    /// One at a time is the default: a dynamically quantized model scales its
    /// activations per run, so batching would make a text's vector depend on its
    /// neighbours (and the cache on batch order); on CPU batching gains nothing
    /// measurable, and one 256-token run keeps peak memory lowest.
    pub max_batch_tokens: usize,
}

impl Default for EmbedderConfig {
    fn default() -> Self {
        EmbedderConfig {
            threads: 1,
            max_length: 256,
            windows: true,
            query_prefix: String::new(),
            passage_prefix: String::new(),
            max_batch_tokens: 0,
        }
    }
}

/// HF `tokenizers` for WordPiece/BPE models; Klaw's lean Unigram for SentencePiece
/// ones, whose large vocabularies HF keeps at ~270 MB (see `unigram`).
enum Tok {
    Hf(Box<Tokenizer>),
    Unigram(Box<Unigram>),
}

impl Tok {
    /// Token ids with special tokens, and the special-tokens mask.
    fn encode(&self, text: &str) -> Result<(Vec<u32>, Vec<u32>)> {
        match self {
            Tok::Hf(t) => {
                let e = t.encode_fast(text, true).map_err(model_err)?;
                Ok((e.get_ids().to_vec(), e.get_special_tokens_mask().to_vec()))
            }
            Tok::Unigram(u) => u.encode(text),
        }
    }
}

pub struct Embedder {
    session: Mutex<Session>,
    tokenizer: Tok,
    dim: usize,
    token_type: bool,
    cfg: EmbedderConfig,
}

fn model_err(e: impl std::fmt::Display) -> CoreError {
    CoreError::Model(e.to_string())
}

impl Embedder {
    pub fn load(
        model: &Path,
        tokenizer: &Path,
        ort_lib: Option<&Path>,
        cfg: EmbedderConfig,
    ) -> Result<Self> {
        for (p, what) in [(model, "model.onnx"), (tokenizer, "tokenizer.json")] {
            if !p.is_file() {
                return Err(CoreError::ModelNotFound(format!(
                    "{what} not found at {}. Install the model: `klaw model install`",
                    p.display()
                )));
            }
        }
        if cfg.max_length < 8 || cfg.max_length > 512 {
            return Err(CoreError::InvalidInput(format!(
                "max_length must be 8..=512, got {}",
                cfg.max_length
            )));
        }
        init_ort(ort_lib)?;
        let tok = if let Some(u) = Unigram::from_file(tokenizer)? {
            Tok::Unigram(Box::new(u))
        } else {
            let mut tok = Tokenizer::from_file(tokenizer).map_err(model_err)?;
            // Packaged tokenizers may pad and truncate to a fixed length; Klaw cuts texts
            // into model windows itself and pads each run to its longest text.
            tok.with_truncation(None).map_err(model_err)?;
            tok.with_padding(None);
            Tok::Hf(Box::new(tok))
        };
        let session = Session::builder()
            .and_then(|b| b.with_optimization_level(GraphOptimizationLevel::Level3))
            .and_then(|b| b.with_intra_threads(cfg.threads.max(1)))
            .and_then(|b| b.with_inter_threads(1))
            // The arena is kept: one text per run bounds its size (≈ one 256-token
            // run), and without it every run paid for fresh pages (25% slower,
            // and glibc fragmentation left peak RSS higher, docs/decisions.md).
            .and_then(|b| {
                b.with_execution_providers([CPUExecutionProvider::default()
                    .with_arena_allocator(true)
                    .build()])
            })
            .and_then(|b| b.with_memory_pattern(true))
            .and_then(|b| b.commit_from_file(model))
            .map_err(model_err)?;
        let token_type = session.inputs.iter().any(|i| i.name == "token_type_ids");
        let mut e = Embedder {
            session: Mutex::new(session),
            tokenizer: tok,
            dim: 0,
            token_type,
            cfg,
        };
        e.dim = e.embed_batch(&["dimension probe".to_string()])?.len();
        Ok(e)
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Token count of `text` (specials included, before any windowing).
    pub fn count_tokens(&self, text: &str) -> Result<usize> {
        Ok(self.tokenizer.encode(text)?.0.len())
    }

    /// Embeds stored texts (with the passage prefix); `texts.len() * dim` unit floats.
    pub fn embed_batch(&self, texts: &[String]) -> Result<Vec<f32>> {
        self.embed_with(texts, &self.cfg.passage_prefix)
    }

    /// Embeds search queries (with the query prefix).
    pub fn embed_queries(&self, texts: &[String]) -> Result<Vec<f32>> {
        self.embed_with(texts, &self.cfg.query_prefix)
    }

    /// The model windows of one tokenized text: its leading and trailing special
    /// tokens around each slice of at most `max_length - specials` content tokens.
    fn windows(&self, ids: &[u32], special: &[u32]) -> Vec<Vec<u32>> {
        let max = self.cfg.max_length;
        if ids.len() <= max {
            return vec![ids.to_vec()];
        }
        let head = special.iter().take_while(|&&m| m == 1).count();
        let tail = special.iter().rev().take_while(|&&m| m == 1).count();
        let (pre, body, post) = if head + tail < ids.len() {
            (
                &ids[..head],
                &ids[head..ids.len() - tail],
                &ids[ids.len() - tail..],
            )
        } else {
            (&ids[..0], ids, &ids[..0])
        };
        let room = max.saturating_sub(pre.len() + post.len()).max(1);
        let mut out: Vec<Vec<u32>> = body.chunks(room).map(|c| [pre, c, post].concat()).collect();
        if !self.cfg.windows {
            out.truncate(1);
        }
        out
    }

    fn embed_with(&self, texts: &[String], prefix: &str) -> Result<Vec<f32>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        // Every window of every text is one run (or shares a run when batching is on);
        // a text's vector is the mean of all its windows' token vectors.
        let mut runs: Vec<(usize, Vec<u32>)> = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            let (ids, special) = self.tokenizer.encode(&format!("{prefix}{t}"))?;
            for w in self.windows(&ids, &special) {
                runs.push((i, w));
            }
        }
        runs.sort_by_key(|r| r.1.len());
        let dim = self.dim.max(1);
        let mut sums: Vec<f32> = Vec::new();
        let mut start = 0;
        while start < runs.len() {
            let longest = runs[start].1.len();
            let mut end = start + 1;
            while self.cfg.max_batch_tokens > 0
                && end < runs.len()
                && runs[end].1.len().max(longest) * (end - start + 1) <= self.cfg.max_batch_tokens
            {
                end += 1;
            }
            let seqs: Vec<&[u32]> = runs[start..end].iter().map(|r| r.1.as_slice()).collect();
            let (vecs, d) = self.run(&seqs, false)?;
            if sums.is_empty() {
                sums = vec![0f32; texts.len() * d];
            }
            for (j, r) in runs[start..end].iter().enumerate() {
                for (a, x) in sums[r.0 * d..(r.0 + 1) * d]
                    .iter_mut()
                    .zip(&vecs[j * d..(j + 1) * d])
                {
                    *a += x;
                }
            }
            start = end;
        }
        let d = if sums.is_empty() {
            dim
        } else {
            sums.len() / texts.len()
        };
        for o in sums.chunks_mut(d) {
            // Mean pooling then L2: the mean's divisor cancels, so normalise the sum.
            let norm = o.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
            let scale = 1.0 / norm;
            for x in o.iter_mut() {
                *x *= scale;
            }
        }
        // Long texts grow ONNX Runtime's arena and it never gives the growth back; one
        // tiny run with shrinkage after the batch returns it (~30 MB after 256-token
        // chunks) without slowing the batch itself, as shrinking every run would (~20%).
        if texts.iter().any(|t| t.len() > SHRINK_AFTER_BYTES) {
            self.run(&[&[]], true)?;
        }
        Ok(sums)
    }

    /// One ONNX run over `seqs` (padded to the longest): per sequence, the sum of its
    /// token vectors (not normalised), and the model dimension.
    fn run(&self, seqs: &[&[u32]], shrink: bool) -> Result<(Vec<f32>, usize)> {
        let b = seqs.len();
        let s = seqs.iter().map(|q| q.len()).max().unwrap_or(0).max(1);
        let mut ids = Vec::with_capacity(b * s);
        let mut mask = Vec::with_capacity(b * s);
        for q in seqs {
            for k in 0..s {
                ids.push(q.get(k).map_or(0, |&x| i64::from(x)));
                mask.push(i64::from(k < q.len()));
            }
        }
        // An empty sequence (the arena-trim run) still needs one live position.
        if seqs.iter().all(|q| q.is_empty()) {
            mask[0] = 1;
        }
        let shape = vec![b as i64, s as i64];
        let t_ids = Tensor::from_array((shape.clone(), ids)).map_err(model_err)?;
        let t_mask = Tensor::from_array((shape.clone(), mask.clone())).map_err(model_err)?;
        let mut session = self
            .session
            .lock()
            .map_err(|_| CoreError::Model("embedder lock poisoned".into()))?;
        let mut opts = RunOptions::new().map_err(model_err)?;
        if shrink {
            opts.add_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
                .map_err(model_err)?;
        }
        let outputs = if self.token_type {
            let t_types = Tensor::from_array((shape, vec![0i64; b * s])).map_err(model_err)?;
            session.run_with_options(
                ort::inputs![
                    "input_ids" => t_ids,
                    "attention_mask" => t_mask,
                    "token_type_ids" => t_types
                ],
                &opts,
            )
        } else {
            session.run_with_options(
                ort::inputs!["input_ids" => t_ids, "attention_mask" => t_mask],
                &opts,
            )
        }
        .map_err(model_err)?;
        let (oshape, data) = outputs[0].try_extract_tensor::<f32>().map_err(model_err)?;
        let dim = *oshape
            .last()
            .ok_or_else(|| CoreError::Model("model output has no shape".into()))?
            as usize;
        // [batch, dim]: the model pools itself (a sentence encoder such as USE).
        if oshape.len() == 2 && data.len() == b * dim {
            return Ok((data.to_vec(), dim));
        }
        if oshape.len() != 3 || data.len() != b * s * dim {
            return Err(CoreError::Model(format!(
                "unexpected model output shape {oshape:?}"
            )));
        }
        // [batch, seq, dim]: token vectors, summed over the real tokens.
        let mut out = vec![0f32; b * dim];
        for bi in 0..b {
            let o = &mut out[bi * dim..(bi + 1) * dim];
            for k in 0..s {
                if mask[bi * s + k] == 0 {
                    continue;
                }
                let row = &data[(bi * s + k) * dim..(bi * s + k + 1) * dim];
                for (a, x) in o.iter_mut().zip(row) {
                    *a += x;
                }
            }
        }
        Ok((out, dim))
    }
}
