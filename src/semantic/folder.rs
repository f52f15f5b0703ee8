//! A sentence-transformers folder, read and checked before anything runs: its files, the
//! architecture and pooling they declare, and one content hash of all of them.
//!
//! The layout is the one `SentenceTransformer.save()` writes and model hubs ship:
//! `modules.json` lists a Transformer (the folder itself, or a subfolder), a Pooling module
//! with its `config.json`, and optionally Normalize; the Transformer folder holds
//! `config.json`, `tokenizer.json` and `model.safetensors`, and may hold
//! `sentence_bert_config.json` (the token limit) and `config_sentence_transformers.json`
//! (prompts). Every refusal names the file and what is wrong with it.

use std::path::{Path, PathBuf};

use candle_transformers::models::bert;
use serde::Deserialize;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::error::{Error, Result};

/// Changes whenever the way an embedding is computed from the same files changes, so cached
/// embeddings of an older computation are not reused.
const COMPUTATION_VERSION: &str = "toolsearch-embedding-1";

/// Tokens of one text when the folder sets no limit: BERT's own.
const DEFAULT_MAX_TOKENS: usize = 512;

pub(super) fn bad(file: &Path, message: impl Into<String>) -> Error {
    Error::BadModel {
        file: file.to_path_buf(),
        message: message.into(),
    }
}

/// How token vectors become one sentence vector (sentence-transformers' pooling modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    Mean,
    /// The first token's vector (`[CLS]`): bge.
    Cls,
    Max,
    /// The sum divided by the square root of the token count.
    MeanSqrtLen,
}

/// Prompts the model was trained with, put before the text (e5: `query: `, `passage: `).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prompts {
    pub query: Option<String>,
    pub document: Option<String>,
}

/// Everything a model is built from, checked.
pub(super) struct Folder {
    /// The folder's name, for people (`all-MiniLM-L6-v2`).
    pub name: String,
    pub bert: bert::Config,
    pub tokenizer: Tokenizer,
    pub weights: Vec<u8>,
    pub weights_file: PathBuf,
    pub pooling: Pooling,
    pub normalize: bool,
    pub lowercase: bool,
    pub prompts: Prompts,
    /// Hex SHA-256 of every file that decides an embedding, and of how it is computed.
    pub key: String,
}

#[derive(Deserialize)]
struct ModuleEntry {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct PoolingConfig {
    word_embedding_dimension: usize,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
    #[serde(default = "yes")]
    include_prompt: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize, Default)]
struct SentenceBertConfig {
    #[serde(default)]
    max_seq_length: Option<usize>,
    #[serde(default)]
    do_lower_case: bool,
}

#[derive(Deserialize, Default)]
struct SentenceTransformersConfig {
    #[serde(default)]
    prompts: std::collections::BTreeMap<String, String>,
}

/// What a module's `type` names, by its last part (`sentence_transformers.models.Pooling`).
fn module_kind(kind: &str) -> &str {
    kind.rsplit('.').next().unwrap_or(kind)
}

/// The files are read in a fixed order and each one is hashed as it is read.
struct Reader {
    hash: blake3::Hasher,
}

impl Reader {
    fn read(&mut self, file: &Path) -> Result<Vec<u8>> {
        let bytes = std::fs::read(file).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => bad(file, "missing file"),
            _ => bad(file, format!("cannot read: {e}")),
        })?;
        self.mix(file, &bytes);
        Ok(bytes)
    }

    /// An optional file: `None` when it does not exist.
    fn read_optional(&mut self, file: &Path) -> Result<Option<Vec<u8>>> {
        if !file.exists() {
            return Ok(None);
        }
        self.read(file).map(Some)
    }

    fn mix(&mut self, file: &Path, bytes: &[u8]) {
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        self.hash.update(&(name.len() as u64).to_le_bytes());
        self.hash.update(name.as_bytes());
        self.hash.update(&(bytes.len() as u64).to_le_bytes());
        self.hash.update(bytes);
    }

    fn json<T: for<'de> Deserialize<'de>>(&mut self, file: &Path) -> Result<T> {
        let bytes = self.read(file)?;
        parse(file, &bytes)
    }
}

fn parse<T: for<'de> Deserialize<'de>>(file: &Path, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| bad(file, format!("not the JSON expected: {e}")))
}

impl Folder {
    /// Reads and checks `dir`; see the module doc.
    pub fn read(dir: &Path) -> Result<Folder> {
        if !dir.is_dir() {
            return Err(bad(
                dir,
                "not a folder; `[search.semantic] model` names a sentence-transformers folder \
                 (config.json, tokenizer.json, model.safetensors, modules.json)",
            ));
        }
        let mut r = Reader {
            hash: blake3::Hasher::new(),
        };
        r.hash.update(COMPUTATION_VERSION.as_bytes());

        let modules_file = dir.join("modules.json");
        let modules: Vec<ModuleEntry> = r.json(&modules_file)?;
        let (transformer, pooling_dir, normalize) = check_modules(&modules_file, &modules)?;
        let transformer = dir.join(transformer);
        let pooling_dir = dir.join(pooling_dir);

        let config_file = transformer.join("config.json");
        let config_bytes = r.read(&config_file)?;
        let bert = bert_config(&config_file, &config_bytes)?;

        let pooling_file = pooling_dir.join("config.json");
        let pooling_config: PoolingConfig = r.json(&pooling_file)?;
        let pooling = pooling_mode(&pooling_file, &pooling_config)?;
        if pooling_config.word_embedding_dimension != bert.hidden_size {
            return Err(bad(
                &pooling_file,
                format!(
                    "wrong dimension: word_embedding_dimension is {}, but config.json's hidden_size is {}",
                    pooling_config.word_embedding_dimension, bert.hidden_size
                ),
            ));
        }

        let st_file = transformer.join("sentence_bert_config.json");
        let st: SentenceBertConfig = match r.read_optional(&st_file)? {
            Some(bytes) => parse(&st_file, &bytes)?,
            None => SentenceBertConfig::default(),
        };
        let max_tokens = st
            .max_seq_length
            .unwrap_or(DEFAULT_MAX_TOKENS)
            .min(bert.max_position_embeddings);
        if max_tokens < 2 {
            return Err(bad(
                &st_file,
                format!("max_seq_length {max_tokens} leaves no room for text"),
            ));
        }

        let prompts_file = dir.join("config_sentence_transformers.json");
        let prompts = match r.read_optional(&prompts_file)? {
            Some(bytes) => {
                let c: SentenceTransformersConfig = parse(&prompts_file, &bytes)?;
                let pick = |names: &[&str]| {
                    names
                        .iter()
                        .find_map(|n| c.prompts.get(*n))
                        .filter(|p| !p.is_empty())
                        .cloned()
                };
                Prompts {
                    query: pick(&["query"]),
                    document: pick(&["document", "passage"]),
                }
            }
            None => Prompts::default(),
        };
        if !pooling_config.include_prompt && (prompts.query.is_some() || prompts.document.is_some())
        {
            return Err(bad(
                &pooling_file,
                "unsupported pooling: include_prompt = false (prompt tokens left out of the pooling)",
            ));
        }

        let tokenizer_file = transformer.join("tokenizer.json");
        let tokenizer_bytes = r.read(&tokenizer_file)?;
        let tokenizer = tokenizer(&tokenizer_file, &tokenizer_bytes, &bert, max_tokens)?;

        let weights_file = transformer.join("model.safetensors");
        if !weights_file.exists() && transformer.join("pytorch_model.bin").exists() {
            return Err(bad(
                &weights_file,
                "missing file (pytorch_model.bin is there, but only safetensors weights are read: \
                 convert them, e.g. with safetensors' convert script)",
            ));
        }
        let weights = r.read(&weights_file)?;

        let key = r.hash.finalize().to_hex().to_string();
        Ok(Folder {
            name: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| dir.display().to_string()),
            bert,
            tokenizer,
            weights,
            weights_file,
            pooling,
            normalize,
            lowercase: st.do_lower_case,
            prompts,
            key,
        })
    }
}

/// The Transformer's folder, the Pooling's folder and whether Normalize follows, from
/// `modules.json`; any other module (Dense, a second Transformer) is refused.
fn check_modules(file: &Path, modules: &[ModuleEntry]) -> Result<(String, String, bool)> {
    let kinds: Vec<&str> = modules.iter().map(|m| module_kind(&m.kind)).collect();
    let (transformer, pooling, normalize) = match kinds.as_slice() {
        ["Transformer", "Pooling"] => (&modules[0], &modules[1], false),
        ["Transformer", "Pooling", "Normalize"] => (&modules[0], &modules[1], true),
        _ => {
            return Err(bad(
                file,
                format!(
                    "unsupported modules [{}]: a Transformer, a Pooling and optionally a Normalize are run",
                    kinds.join(", ")
                ),
            ));
        }
    };
    for m in [transformer, pooling] {
        if Path::new(&m.path).is_absolute() || m.path.split(['/', '\\']).any(|p| p == "..") {
            return Err(bad(
                file,
                format!("module path {:?} leaves the model folder", m.path),
            ));
        }
    }
    Ok((transformer.path.clone(), pooling.path.clone(), normalize))
}

/// The BERT config, after checking that `config.json` describes a BERT model.
fn bert_config(file: &Path, bytes: &[u8]) -> Result<bert::Config> {
    let value: serde_json::Value = parse(file, bytes)?;
    let model_type = value.get("model_type").and_then(|v| v.as_str());
    let architectures: Vec<&str> = value
        .get("architectures")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let is_bert = match model_type {
        Some(t) => t == "bert",
        None => architectures.iter().any(|a| a.starts_with("Bert")),
    };
    if !is_bert {
        return Err(bad(
            file,
            format!(
                "unsupported architecture {} (model_type {}): this build runs BERT models \
                 (model_type \"bert\"), such as all-MiniLM-L6-v2, bge-small-en-v1.5 or e5-small-v2",
                architectures.first().unwrap_or(&"(none)"),
                model_type.unwrap_or("(none)")
            ),
        ));
    }
    let config: bert::Config = serde_json::from_value(value)
        .map_err(|e| bad(file, format!("not a BERT config this build can run: {e}")))?;
    if config.hidden_size == 0
        || config.num_attention_heads == 0
        || !config
            .hidden_size
            .is_multiple_of(config.num_attention_heads)
    {
        return Err(bad(
            file,
            format!(
                "wrong dimension: hidden_size {} is not a multiple of num_attention_heads {}",
                config.hidden_size, config.num_attention_heads
            ),
        ));
    }
    Ok(config)
}

fn pooling_mode(file: &Path, c: &PoolingConfig) -> Result<Pooling> {
    if c.pooling_mode_weightedmean_tokens || c.pooling_mode_lasttoken {
        return Err(bad(
            file,
            "unsupported pooling (weighted mean or last token); mean, CLS, max and mean-sqrt-len are run",
        ));
    }
    let modes = [
        (c.pooling_mode_mean_tokens, Pooling::Mean),
        (c.pooling_mode_cls_token, Pooling::Cls),
        (c.pooling_mode_max_tokens, Pooling::Max),
        (c.pooling_mode_mean_sqrt_len_tokens, Pooling::MeanSqrtLen),
    ];
    let mut on = modes.iter().filter(|(set, _)| *set).map(|(_, m)| *m);
    match (on.next(), on.next()) {
        (Some(mode), None) => Ok(mode),
        (None, _) => Err(bad(file, "no pooling mode is set")),
        (Some(_), Some(_)) => Err(bad(
            file,
            "unsupported pooling: several modes at once (their vectors concatenated)",
        )),
    }
}

/// The tokenizer, truncating at the model's limit and padding a batch to its longest text
/// (whatever `tokenizer.json` itself says: sentence-transformers overrides both too).
fn tokenizer(file: &Path, bytes: &[u8], bert: &bert::Config, max: usize) -> Result<Tokenizer> {
    let mut t = Tokenizer::from_bytes(bytes)
        .map_err(|e| bad(file, format!("not a tokenizer this build can read: {e}")))?;
    let vocabulary = t.get_vocab_size(true);
    if vocabulary > bert.vocab_size {
        return Err(bad(
            file,
            format!(
                "wrong dimension: {vocabulary} tokens, but config.json's vocab_size is {}",
                bert.vocab_size
            ),
        ));
    }
    t.with_truncation(Some(TruncationParams {
        max_length: max,
        ..Default::default()
    }))
    .map_err(|e| bad(file, format!("cannot truncate at {max} tokens: {e}")))?;
    let pad_token = t
        .id_to_token(bert.pad_token_id as u32)
        .unwrap_or_else(|| "[PAD]".into());
    t.with_padding(Some(PaddingParams {
        strategy: PaddingStrategy::BatchLongest,
        pad_id: bert.pad_token_id as u32,
        pad_token,
        ..Default::default()
    }));
    Ok(t)
}
