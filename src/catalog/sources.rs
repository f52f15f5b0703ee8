//! What a catalog is built from: the local tools (catalog files, the embedded demo) and the
//! tools of upstream servers. Hosts build every catalog through [`Sources::build`], at the
//! start and after each change, so a rebuilt catalog follows the same rules.
//!
//! The upstream side is a trait, [`Upstream`], so the catalog does not depend on the MCP
//! client that implements it (the MCP `Hub`). A catalog of local tools alone is kept in
//! the [`Store`] and read back by the next process that would build the same one.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use super::load::{self, CatalogText};
use super::store::{EnvFact, Store};
use super::{Catalog, Facts, Source, ToolDescriptor, embedded};
use crate::config::Config;
use crate::error::Result;

/// The local tools: catalog files (or the embedded demo) as read, parsed at first need,
/// with a hash of what was read. A host whose catalog the store kept never parses them.
pub struct Local {
    files: Vec<CatalogText>,
    /// The paths and bytes of `files`, hashed; none for descriptors made in code.
    fingerprint: Option<[u8; 32]>,
    parsed: OnceLock<Vec<ToolDescriptor>>,
}

impl Local {
    /// Reads `paths` (else the config's `[catalog] paths`, else the embedded demo). A file
    /// that cannot be read is an error now; one that does not parse, when it is parsed.
    pub fn read(config: &Config, paths: &[PathBuf]) -> Result<Local> {
        let paths = if paths.is_empty() {
            &config.catalog.paths[..]
        } else {
            paths
        };
        let files = if paths.is_empty() {
            embedded::demo_texts()
        } else {
            let mut files = Vec::new();
            for p in paths {
                files.extend(load::read_path(p)?);
            }
            files
        };
        let mut h = blake3::Hasher::new();
        for f in &files {
            let path = f.path.as_os_str().as_encoded_bytes();
            h.update(&(path.len() as u64).to_le_bytes());
            h.update(path);
            h.update(&(f.text.len() as u64).to_le_bytes());
            h.update(f.text.as_bytes());
        }
        Ok(Local {
            files,
            fingerprint: Some(*h.finalize().as_bytes()),
            parsed: OnceLock::new(),
        })
    }

    /// Descriptors made in code (benches, embedders): never stored.
    pub fn from_descriptors(descriptors: Vec<ToolDescriptor>) -> Local {
        Local {
            files: Vec::new(),
            fingerprint: None,
            parsed: OnceLock::from(descriptors),
        }
    }

    /// Every local descriptor, in load order.
    pub fn descriptors(&self) -> Result<&[ToolDescriptor]> {
        if let Some(parsed) = self.parsed.get() {
            return Ok(parsed);
        }
        let mut all = Vec::new();
        for f in &self.files {
            all.extend(f.parse()?);
        }
        Ok(self.parsed.get_or_init(|| all))
    }
}

/// Servers whose tools join the catalog and change while it is in use.
pub trait Upstream: Send + Sync + 'static {
    /// The tools of the servers that are up, and the servers that are down with why
    /// (`mcp:NAME` -> reason): their tools are hidden.
    fn snapshot(&self) -> (Vec<ToolDescriptor>, BTreeMap<String, String>);
    /// Changes whenever the servers' tools may have changed.
    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64>;
}

/// Everything a catalog is built from.
pub struct Sources {
    pub config: Config,
    pub local: Local,
    pub upstream: Option<Arc<dyn Upstream>>,
    /// Where catalogs of local tools alone are kept ([`store`]); none when `[catalog]
    /// cache = false` or this user has no cache folder to trust.
    store: Option<Store>,
}

impl Sources {
    pub fn new(config: Config, local: Local, upstream: Option<Arc<dyn Upstream>>) -> Sources {
        let store = if config.catalog.cache {
            Store::open_default()
        } else {
            None
        };
        Sources {
            config,
            local,
            upstream,
            store,
        }
    }

    /// The local descriptors plus the tools of the servers that are up; the tools of a
    /// server that is down are hidden, with why.
    pub fn build(&self) -> Result<Catalog> {
        let key = match (&self.store, &self.upstream, &self.local.fingerprint) {
            (Some(store), None, Some(files)) => store.key(&self.config, files),
            _ => None,
        };
        let (Some(store), Some(key)) = (&self.store, key) else {
            return self.build_with(Vec::new());
        };
        if let Some(catalog) = store.load(&key, &self.config) {
            return Ok(catalog);
        }
        // What availability signals read of the environment is part of what was planned:
        // each variable once, with what the plan saw of it.
        let seen: RefCell<BTreeMap<String, bool>> = RefCell::new(BTreeMap::new());
        let env = |var: &str| {
            let value = Facts::process_env(var);
            let set = value.as_deref().is_some_and(|v| !v.is_empty());
            seen.borrow_mut().insert(var.to_string(), set);
            value
        };
        let catalog = Catalog::build(
            self.local.descriptors()?.to_vec(),
            &Facts {
                config: &self.config,
                env: &env,
                sources_down: &BTreeMap::new(),
            },
        )?;
        let env: Vec<EnvFact> = seen.into_inner().into_iter().collect();
        Ok(store.save(&key, catalog, &env))
    }

    /// The catalog with `extra` descriptors (a gateway request's client tools) joining;
    /// never stored. A client tool of `extra` replaces a local client tool of the same
    /// name: the client that sends a tool is the one that runs it, and its schema is the
    /// one it answers to.
    pub fn build_with(&self, extra: Vec<ToolDescriptor>) -> Result<Catalog> {
        let (upstream, down) = match &self.upstream {
            Some(up) => up.snapshot(),
            None => Default::default(),
        };
        let replaced = |d: &ToolDescriptor| {
            d.source == Source::Client
                && extra
                    .iter()
                    .any(|e| e.source == Source::Client && e.name == d.name)
        };
        let mut all: Vec<ToolDescriptor> = self
            .local
            .descriptors()?
            .iter()
            .filter(|d| !replaced(d))
            .cloned()
            .collect();
        all.extend(upstream);
        all.extend(extra);
        Catalog::build(
            all,
            &Facts {
                config: &self.config,
                env: &Facts::process_env,
                sources_down: &down,
            },
        )
    }

    /// The catalog now, and a receiver that gets a rebuilt one after every change of the
    /// upstream servers (on the current tokio runtime).
    pub fn live(self: Arc<Self>) -> Result<tokio::sync::watch::Receiver<Arc<Catalog>>> {
        let (tx, rx) = tokio::sync::watch::channel(Arc::new(self.build()?));
        if let Some(up) = &self.upstream {
            let mut changes = up.subscribe();
            let sources = Arc::downgrade(&self);
            tokio::spawn(async move {
                while changes.changed().await.is_ok() {
                    let Some(sources) = sources.upgrade() else {
                        return;
                    };
                    // A build (the plan, every schema, the index) takes seconds for a
                    // server of 10,000 tools: on a blocking thread, since on one of the
                    // runtime's workers it held every run's deadline up as long (review 23
                    // F2: a 1 s deadline kept 4.5 s). Changes that come meanwhile make one
                    // build after it, of the newest list.
                    let built = tokio::task::spawn_blocking(move || {
                        let c = sources.build()?;
                        // Only long-lived hosts follow changes: they search again soon.
                        c.warm();
                        Ok::<_, crate::error::Error>(c)
                    })
                    .await;
                    match built {
                        Ok(Ok(c)) => {
                            if tx.send(Arc::new(c)).is_err() {
                                return;
                            }
                        }
                        Ok(Err(e)) => {
                            tracing::warn!("catalog not rebuilt after an upstream change: {e}")
                        }
                        Err(e) => {
                            tracing::warn!("catalog not rebuilt after an upstream change: {e}")
                        }
                    }
                }
            });
        }
        Ok(rx)
    }
}
