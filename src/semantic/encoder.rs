//! Texts to sentence vectors: tokenize, run the BERT encoder (candle, on the CPU), pool the
//! token vectors as the folder says, normalise when it says so. The arithmetic is
//! sentence-transformers' own, so a vector here equals the reference implementation's to
//! float rounding (the tests check known answers).

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::BertModel;
use tokenizers::Tokenizer;

use super::folder::{Folder, Pooling, bad};
use crate::error::{Error, Result};

/// Texts run through the encoder at once. Texts are sorted by length first, so a batch
/// pads little; larger batches gain nothing on two cores.
const BATCH: usize = 32;

pub(super) struct Encoder {
    model: BertModel,
    tokenizer: Tokenizer,
    pooling: Pooling,
    normalize: bool,
    lowercase: bool,
    dim: usize,
}

fn failed(e: impl std::fmt::Display) -> Error {
    Error::Index(format!("embedding failed: {e}"))
}

impl Encoder {
    /// The encoder of a checked folder; weights that do not fit its config are refused,
    /// naming the weights file.
    pub fn new(folder: &Folder) -> Result<Encoder> {
        let vb = VarBuilder::from_slice_safetensors(&folder.weights, DType::F32, &Device::Cpu)
            .map_err(|e| {
                bad(
                    &folder.weights_file,
                    format!("not safetensors weights: {e}"),
                )
            })?;
        let model = BertModel::load(vb, &folder.bert).map_err(|e| {
            bad(
                &folder.weights_file,
                format!("wrong dimension or missing weights for config.json: {e}"),
            )
        })?;
        Ok(Encoder {
            model,
            tokenizer: folder.tokenizer.clone(),
            pooling: folder.pooling,
            normalize: folder.normalize,
            lowercase: folder.lowercase,
            dim: folder.bert.hidden_size,
        })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The token ids of `text` as the encoder sees them (special tokens included, cut at
    /// the model's limit).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        let text = self.prepare(text);
        let e = self.tokenizer.encode_fast(text, true).map_err(failed)?;
        Ok(e.get_ids().to_vec())
    }

    fn prepare(&self, text: &str) -> String {
        if self.lowercase {
            text.to_lowercase()
        } else {
            text.to_string()
        }
    }

    /// One vector per text, `dim` floats each, in order; `done` is told how many are done
    /// after each batch.
    pub fn embed(&self, texts: &[String], done: &mut dyn FnMut(usize)) -> Result<Vec<f32>> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out = vec![0.0f32; texts.len() * self.dim];
        let mut finished = 0;
        for chunk in order.chunks(BATCH) {
            let batch: Vec<String> = chunk.iter().map(|&i| self.prepare(&texts[i])).collect();
            let vectors = self.embed_batch(batch)?;
            for (row, &i) in chunk.iter().enumerate() {
                out[i * self.dim..(i + 1) * self.dim]
                    .copy_from_slice(&vectors[row * self.dim..(row + 1) * self.dim]);
            }
            finished += chunk.len();
            done(finished);
        }
        Ok(out)
    }

    fn embed_batch(&self, texts: Vec<String>) -> Result<Vec<f32>> {
        let n = texts.len();
        let encodings = self
            .tokenizer
            .encode_batch_fast(texts, true)
            .map_err(failed)?;
        let len = encodings.first().map(|e| e.len()).unwrap_or(0);
        let mut ids = Vec::with_capacity(n * len);
        let mut mask = Vec::with_capacity(n * len);
        for e in &encodings {
            ids.extend_from_slice(e.get_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        let device = Device::Cpu;
        let ids = Tensor::from_vec(ids, (n, len), &device).map_err(failed)?;
        let mask = Tensor::from_vec(mask, (n, len), &device).map_err(failed)?;
        let types = ids.zeros_like().map_err(failed)?;
        let tokens = self
            .model
            .forward(&ids, &types, Some(&mask))
            .map_err(failed)?;
        let pooled = pool(self.pooling, &tokens, &mask).map_err(failed)?;
        let pooled = if self.normalize {
            normalize(&pooled).map_err(failed)?
        } else {
            pooled
        };
        pooled
            .flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(failed)
    }
}

/// `tokens` [batch, len, dim] and `mask` [batch, len] (1 for a token, 0 for padding) to
/// [batch, dim], as sentence-transformers' Pooling module computes it.
fn pool(mode: Pooling, tokens: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
    match mode {
        Pooling::Cls => tokens.narrow(1, 0, 1)?.squeeze(1),
        Pooling::Max => {
            // Padding set to -1e9, so it never wins (sentence-transformers does the same).
            let shifted = tokens.broadcast_add(&((&mask - 1.0)? * 1e9)?)?;
            shifted.max(1)
        }
        Pooling::Mean | Pooling::MeanSqrtLen => {
            let sum = tokens.broadcast_mul(&mask)?.sum(1)?;
            let count = mask.sum(1)?.clamp(1e-9, f64::MAX)?;
            let count = if mode == Pooling::MeanSqrtLen {
                count.sqrt()?
            } else {
                count
            };
            sum.broadcast_div(&count)
        }
    }
}

/// Unit length, as torch's `normalize` (a zero vector stays zero).
fn normalize(v: &Tensor) -> candle_core::Result<Tensor> {
    let norm = v.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
    v.broadcast_div(&norm)
}
