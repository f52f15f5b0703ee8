//! Texts to sentence vectors: tokenize, run the BERT encoder (candle, on the CPU), pool the
//! token vectors as the folder says, normalise when it says so. The arithmetic is
//! sentence-transformers' own, so a vector here equals the reference implementation's to
//! float rounding (the tests check known answers).

use std::sync::atomic::{AtomicUsize, Ordering};

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
    /// after each batch. The batches are shared out among `workers` threads, each running
    /// its batch on one core: on a few cores, whole batches side by side keep every core
    /// busy, where splitting each matrix product between them leaves cores waiting at every
    /// product (see [`super::pin_threads`]).
    pub fn embed(
        &self,
        texts: &[String],
        workers: usize,
        done: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<f32>> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let batches: Vec<&[usize]> = order.chunks(BATCH).collect();
        let next = AtomicUsize::new(0);
        let finished = AtomicUsize::new(0);
        let work = || -> Result<Vec<Embedded>> {
            let mut mine = Vec::new();
            loop {
                let b = next.fetch_add(1, Ordering::Relaxed);
                let Some(chunk) = batches.get(b) else {
                    return Ok(mine);
                };
                let batch: Vec<String> = chunk.iter().map(|&i| self.prepare(&texts[i])).collect();
                let vectors = self.embed_batch(batch, None)?;
                done(finished.fetch_add(chunk.len(), Ordering::Relaxed) + chunk.len());
                mine.push((b, vectors));
            }
        };
        let workers = workers.clamp(1, batches.len().max(1));
        let results: Vec<Result<Vec<Embedded>>> = if workers == 1 {
            vec![work()]
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..workers).map(|_| scope.spawn(work)).collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(failed("an embedding thread panicked")))
                    })
                    .collect()
            })
        };
        let mut out = vec![0.0f32; texts.len() * self.dim];
        for result in results {
            for (b, vectors) in result? {
                for (row, &i) in batches[b].iter().enumerate() {
                    out[i * self.dim..(i + 1) * self.dim]
                        .copy_from_slice(&vectors[row * self.dim..(row + 1) * self.dim]);
                }
            }
        }
        Ok(out)
    }

    /// One vector per text, each cut to its `limits` tokens at most (special tokens
    /// included), in one batch: the few texts of one search.
    pub fn embed_cut(&self, texts: &[String], limits: &[usize]) -> Result<Vec<f32>> {
        let batch: Vec<String> = texts.iter().map(|t| self.prepare(t)).collect();
        self.embed_batch(batch, Some(limits))
    }

    /// The number of tokens each text becomes (special tokens included, cut at the model's
    /// limit).
    pub fn token_counts(&self, texts: &[String]) -> Result<Vec<usize>> {
        let batch: Vec<String> = texts.iter().map(|t| self.prepare(t)).collect();
        let encodings = self
            .tokenizer
            .encode_batch_fast(batch, true)
            .map_err(failed)?;
        Ok(encodings.iter().map(real_tokens).collect())
    }

    fn embed_batch(&self, texts: Vec<String>, limits: Option<&[usize]>) -> Result<Vec<f32>> {
        let n = texts.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let encodings = self
            .tokenizer
            .encode_batch_fast(texts, true)
            .map_err(failed)?;
        // Each text's real tokens, cut to its limit with its closing special token kept,
        // then padded to the longest of the batch.
        let rows: Vec<(Vec<u32>, usize)> = encodings
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let real = real_tokens(e);
                let ids = &e.get_ids()[..real];
                let keep = limits
                    .and_then(|l| l.get(i))
                    .map_or(real, |&l| real.min(l.max(2)));
                let mut row = ids[..keep].to_vec();
                if keep < real
                    && let (Some(last), Some(&close)) = (row.last_mut(), ids.last())
                {
                    *last = close;
                }
                (row, keep)
            })
            .collect();
        let len = rows.iter().map(|r| r.1).max().unwrap_or(0);
        let pad = self.tokenizer.get_padding().map_or(0, |p| p.pad_id);
        let mut ids = Vec::with_capacity(n * len);
        let mut mask = Vec::with_capacity(n * len);
        for (row, keep) in &rows {
            ids.extend_from_slice(row);
            ids.extend(std::iter::repeat_n(pad, len - keep));
            mask.extend(std::iter::repeat_n(1u32, *keep));
            mask.extend(std::iter::repeat_n(0u32, len - keep));
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

/// A batch's index and its vectors.
type Embedded = (usize, Vec<f32>);

/// The tokens of an encoding that are not padding.
fn real_tokens(e: &tokenizers::Encoding) -> usize {
    e.get_attention_mask().iter().filter(|&&m| m != 0).count()
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
