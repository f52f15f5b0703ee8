//! A local sentence-embedding model: texts to vectors whose cosine says how alike their
//! meanings are, for the semantic half of search (`[search.semantic]`).
//!
//! A [`Model`] is a sentence-transformers folder of a BERT-family model (all-MiniLM-L6-v2,
//! bge-small-en-v1.5, e5-small-v2...) run on the CPU in pure Rust: [`folder`] reads and
//! checks the files, [`encoder`] runs them. A model that cannot be loaded is an error that
//! names the file at fault, never a quiet fallback to lexical search. Tool texts are
//! embedded once and kept, in memory and on disk ([`cache`], keyed by the model's content
//! hash and the text); queries are embedded per search.
//!
//! This module knows nothing of tools or rankings: [`crate::search`] decides what text of
//! a tool is embedded and how the two rankings are fused.

pub mod cache;
mod encoder;
mod folder;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub use folder::{Pooling, Prompts};

use crate::config::SemanticConfig;
use crate::error::Result;
use cache::{Store, TextKey};

/// A job of at least this many texts to embed says so on stderr, with its progress.
const PROGRESS_MIN_TEXTS: usize = 64;
/// How often progress is reported.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// Tool vectors kept in memory per model: beyond it the memory cache starts afresh (a
/// catalog keeps its own vectors; this only spares rebuilt catalogs the embedding).
const MAX_MEMORY_VECTORS: usize = 100_000;

/// Makes every matrix product of the encoder run on the thread that asks for it, so a
/// search's query costs one core and a catalog's texts are embedded a batch per core
/// ([`encoder`]). candle splits each product among `RAYON_NUM_THREADS` threads, reading
/// that variable at every product (and, when it is unset, `/proc/cpuinfo` too: about 48
/// reads per query); its threads then wait for one another at every product, which on a
/// loaded machine made a query 1.7 times slower than one thread (README, "Semantic
/// search"). A value the user set is kept.
///
/// # Safety
/// Call before any other thread exists (first thing in `main`): it sets an environment
/// variable.
pub unsafe fn pin_threads() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        // SAFETY: the caller promises no other thread runs yet.
        unsafe { std::env::set_var("RAYON_NUM_THREADS", "1") };
    }
}

/// A loaded model; see the module doc. Shared by every catalog of a process
/// ([`Model::shared`]).
pub struct Model {
    name: String,
    key: String,
    dir: PathBuf,
    encoder: encoder::Encoder,
    query_prefix: String,
    document_prefix: String,
    loaded_in: Duration,
    /// Where tool vectors are kept on disk (`<cache root>/embeddings`), if anywhere.
    cache_root: Option<PathBuf>,
    /// Tool vectors by text, and whether the disk cache has been read into it.
    memory: Mutex<Memory>,
}

#[derive(Default)]
struct Memory {
    vectors: HashMap<TextKey, Vec<f32>>,
    store: Option<Store>,
    disk_read: bool,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .field("dim", &self.dim())
            .finish()
    }
}

impl Model {
    /// Loads the configured folder; an error names the file at fault and what is wrong.
    pub fn load(config: &SemanticConfig) -> Result<Model> {
        let cache = match config.cache {
            true => crate::cache::folder("embeddings"),
            false => None,
        };
        Model::load_caching_in(config, cache)
    }

    /// As [`Model::load`], keeping tool vectors under `cache` (none: in memory only).
    pub fn load_caching_in(config: &SemanticConfig, cache: Option<PathBuf>) -> Result<Model> {
        let started = Instant::now();
        let folder = folder::Folder::read(&config.model)?;
        let encoder = encoder::Encoder::new(&folder)?;
        let prefix = |configured: &Option<String>, folder: &Option<String>| {
            configured.clone().or(folder.clone()).unwrap_or_default()
        };
        Ok(Model {
            name: folder.name.clone(),
            key: folder.key.clone(),
            dir: config.model.clone(),
            query_prefix: prefix(&config.query_prefix, &folder.prompts.query),
            document_prefix: prefix(&config.document_prefix, &folder.prompts.document),
            encoder,
            loaded_in: started.elapsed(),
            cache_root: cache,
            memory: Mutex::new(Memory::default()),
        })
    }

    /// The model of `config`, loaded once per process: every catalog built from one config
    /// (rebuilt after an MCP server's change, or per gateway request) shares it and its
    /// memory of tool vectors.
    pub fn shared(config: &SemanticConfig) -> Result<Arc<Model>> {
        static MODELS: Mutex<Vec<(SemanticConfig, Arc<Model>)>> = Mutex::new(Vec::new());
        let mut models = MODELS.lock();
        if let Some((_, m)) = models.iter().find(|(c, _)| c == config) {
            return Ok(Arc::clone(m));
        }
        let model = Arc::new(Model::load(config)?);
        tracing::debug!(
            "embedding model {} loaded in {:?}",
            model.name,
            model.loaded_in
        );
        models.push((config.clone(), Arc::clone(&model)));
        Ok(model)
    }

    /// The folder's name (`all-MiniLM-L6-v2`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The hex content hash of the model's files.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Floats per vector.
    pub fn dim(&self) -> usize {
        self.encoder.dim()
    }

    /// How long reading the folder and building the encoder took.
    pub fn load_time(&self) -> Duration {
        self.loaded_in
    }

    /// The token ids a query text becomes (prefix and special tokens included).
    pub fn query_token_ids(&self, text: &str) -> Result<Vec<u32>> {
        self.encoder
            .token_ids(&format!("{}{text}", self.query_prefix))
    }

    /// One vector per query, `dim` floats each, in order; never cached (a query is new
    /// each time).
    pub fn embed_queries(&self, texts: &[&str]) -> Result<Vec<f32>> {
        self.embed_queries_cut(texts, &vec![usize::MAX; texts.len()])
    }

    /// As [`Model::embed_queries`], each query cut to its `limits` tokens at most (as
    /// [`Model::query_token_counts`] counts them): what one search may spend is bounded.
    pub fn embed_queries_cut(&self, texts: &[&str], limits: &[usize]) -> Result<Vec<f32>> {
        self.encoder.embed_cut(&self.query_texts(texts), limits)
    }

    /// The tokens each query becomes (prefix and special tokens included): the encoder's
    /// work grows with them.
    pub fn query_token_counts(&self, texts: &[&str]) -> Result<Vec<usize>> {
        self.encoder.token_counts(&self.query_texts(texts))
    }

    fn query_texts(&self, texts: &[&str]) -> Vec<String> {
        texts
            .iter()
            .map(|t| format!("{}{t}", self.query_prefix))
            .collect()
    }

    /// One vector per tool text, `dim` floats each, in order: from memory, else from the
    /// disk cache, else embedded now (and kept in both). A job of many texts reports its
    /// progress on stderr.
    pub fn embed_documents(&self, texts: &[String]) -> Result<Vec<f32>> {
        let dim = self.dim();
        let texts: Vec<String> = texts
            .iter()
            .map(|t| format!("{}{t}", self.document_prefix))
            .collect();
        let keys: Vec<TextKey> = texts.iter().map(|t| cache::text_key(t)).collect();
        let mut memory = self.memory.lock();
        if !memory.disk_read {
            memory.disk_read = true;
            memory.store = self
                .cache_root
                .as_ref()
                .and_then(|root| Store::open(root, &self.key, dim));
            if let Some(store) = &memory.store {
                let (stored, _) = store.load();
                memory.vectors.extend(stored);
            }
        }
        let mut missing: Vec<usize> = Vec::new();
        let mut seen = HashSet::new();
        for (i, k) in keys.iter().enumerate() {
            if !memory.vectors.contains_key(k) && seen.insert(*k) {
                missing.push(i);
            }
        }
        if !missing.is_empty() {
            let todo: Vec<String> = missing.iter().map(|&i| texts[i].clone()).collect();
            let vectors = self.embed_reporting(&todo, memory.store.as_ref().map(Store::dir))?;
            if memory.vectors.len() + missing.len() > MAX_MEMORY_VECTORS {
                memory.vectors.clear();
            }
            for (row, &i) in missing.iter().enumerate() {
                memory
                    .vectors
                    .insert(keys[i], vectors[row * dim..(row + 1) * dim].to_vec());
            }
            if let Some(store) = &memory.store {
                let fresh: Vec<(TextKey, &[f32])> = missing
                    .iter()
                    .enumerate()
                    .map(|(row, &i)| (keys[i], &vectors[row * dim..(row + 1) * dim]))
                    .collect();
                if store.save(&fresh) > cache::MAX_SEGMENTS {
                    // This catalog's vectors first: they are what a cut must keep.
                    let current: HashSet<&TextKey> = keys.iter().collect();
                    let ordered: Vec<(TextKey, &[f32])> = keys
                        .iter()
                        .collect::<HashSet<_>>()
                        .into_iter()
                        .chain(memory.vectors.keys().filter(|k| !current.contains(k)))
                        .filter_map(|k| memory.vectors.get(k).map(|v| (*k, v.as_slice())))
                        .collect();
                    store.merge(&ordered);
                }
            }
        }
        let mut out = Vec::with_capacity(texts.len() * dim);
        for k in &keys {
            match memory.vectors.get(k) {
                Some(v) => out.extend_from_slice(v),
                None => out.extend(std::iter::repeat_n(0.0, dim)),
            }
        }
        Ok(out)
    }

    /// Embeds `texts`, saying on stderr what it does and how far it is when they are many.
    fn embed_reporting(
        &self,
        texts: &[String],
        cache: Option<&std::path::Path>,
    ) -> Result<Vec<f32>> {
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        if texts.len() < PROGRESS_MIN_TEXTS {
            return self.encoder.embed(texts, workers, &|_| {});
        }
        let total = texts.len();
        let kept = match cache {
            Some(dir) => format!("kept in {}", dir.display()),
            None => "not kept: no cache".to_string(),
        };
        crate::shown::to_stderr(&format!(
            "toolsearch: embedding {total} tool texts with {} (once; {kept})\n",
            self.name
        ));
        let started = Instant::now();
        let last = Mutex::new(started);
        let vectors = self.encoder.embed(texts, workers, &|done| {
            let mut last = last.lock();
            if last.elapsed() >= PROGRESS_EVERY && done < total {
                *last = Instant::now();
                crate::shown::to_stderr(&format!(
                    "toolsearch: embedded {done}/{total} ({:.0}%)\n",
                    100.0 * done as f64 / total as f64
                ));
            }
        })?;
        crate::shown::to_stderr(&format!(
            "toolsearch: embedded {total} tool texts in {:.1} s\n",
            started.elapsed().as_secs_f64()
        ));
        Ok(vectors)
    }
}
