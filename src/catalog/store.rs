//! Planned catalogs and their indexes, kept on disk between processes.
//!
//! A CLI command is a process of its own. Without this folder each one would parse, plan
//! and index the whole catalog again: 0.8 s for 10,000 tools, and most of a short
//! `toolsearch code` run on the embedded demo. A stored catalog is what
//! [`Catalog::build`] made, and its index what the first search built; the next process
//! reads both back instead.
//!
//! **The key** is everything a planned catalog is a function of:
//! - the catalog files' paths and bytes (hashed on every run, so a change is seen however
//!   small and however soon after the last run);
//! - the effective configuration;
//! - this program: its binary's path, size, inode and modification time, so a rebuilt or
//!   upgraded toolsearch plans and ranks by its own rules, never by a stored answer;
//! - the environment variables that availability signals read: a stored catalog records
//!   each one and whether it was set, and is not used when one of them changed.
//!
//! Catalogs with upstream servers are not stored (their tools are live), nor are catalogs
//! built with a request's client tools.
//!
//! **Trust and failure.** The folder is this user's alone ([`crate::cache::prepare`]); a
//! stored catalog decides what a model may call, so one that anyone else could have
//! written is not read. Anything missing, damaged or stale is rebuilt and anything
//! unwritable is skipped, with a debug log: the store never makes a command fail. Entries
//! are written under a temporary name and renamed into place, so concurrent processes
//! never read half an entry. The folder is bounded ([`MAX_ENTRIES`], [`MAX_BYTES`]), the
//! least recently used entries going first.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::{Catalog, Entry, HiddenTool, Notice};
use crate::config::Config;
use crate::error::Result;
use crate::policy::Toolsets;
use crate::search::SearchIndex;

/// Entries kept at most; the least recently used go first.
pub const MAX_ENTRIES: usize = 32;
/// Bytes kept at most (a 10,000-tool catalog and its index take about 20 MB).
pub const MAX_BYTES: u64 = 256 * 1024 * 1024;
/// A temporary file or folder older than this was left by a process that died.
const ABANDONED_AFTER: Duration = Duration::from_secs(600);
/// Bumped when what an entry holds changes shape.
const FORMAT: &str = "toolsearch-catalog-store-1";

const CATALOG_SUFFIX: &str = ".catalog";
const INDEX_SUFFIX: &str = ".index";
const TEMP_PREFIX: &str = ".tmp-";

/// The folder of stored catalogs.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

/// What one stored catalog is keyed by, as a file name stem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key(String);

/// Where a stored catalog's index lives, or is to be written by the first search.
#[derive(Debug, Clone)]
pub(super) struct IndexHome {
    store: Store,
    key: Key,
}

/// One environment variable an availability signal read, and whether it was set (not
/// empty). Only that bit is kept: the value may be a secret.
pub type EnvFact = (String, bool);

/// A stored catalog: borrowed when written, owned when read.
#[derive(Serialize, Deserialize)]
struct Stored<'a> {
    format: Cow<'a, str>,
    env: Cow<'a, [EnvFact]>,
    entries: Cow<'a, [Entry]>,
    cataloged: usize,
    hidden: Cow<'a, [HiddenTool]>,
    notices: Cow<'a, [Notice]>,
    filtered: usize,
    toolsets: Cow<'a, Toolsets>,
}

impl Store {
    /// The `catalogs` folder of this user's cache, if there is one this user alone can
    /// write.
    pub fn open_default() -> Option<Store> {
        Store::at(crate::cache::folder("catalogs")?)
    }

    /// A store in `dir`, created if needed; none if it cannot be trusted.
    pub fn at(dir: PathBuf) -> Option<Store> {
        match crate::cache::prepare(&dir) {
            Ok(()) => Some(Store { dir }),
            Err(e) => {
                tracing::debug!("no catalog store: {e}");
                None
            }
        }
    }

    /// The key of a catalog planned under `config` from local catalog files whose content
    /// hashes to `files`.
    pub fn key(&self, config: &Config, files: &[u8; 32]) -> Option<Key> {
        let mut h = blake3::Hasher::new();
        h.update(FORMAT.as_bytes());
        h.update(program()?.as_bytes());
        // Config is plain data with ordered maps, so its Debug form is stable for one
        // build of this program, which is part of the key.
        h.update(format!("{config:?}").as_bytes());
        h.update(files);
        Some(Key(h.finalize().to_hex()[..32].to_string()))
    }

    /// The stored catalog of `key`, if there is a sound one whose environment facts still
    /// hold.
    pub fn load(&self, key: &Key, config: &Config) -> Option<Catalog> {
        let path = self.catalog_path(key);
        let file = fs::File::open(&path).ok()?;
        let meta = file.metadata().ok()?;
        if let Err(e) = crate::cache::trusted_file(&path, &meta) {
            tracing::debug!("stored catalog not used: {e}");
            return None;
        }
        if meta.len() > MAX_BYTES {
            return None;
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        std::io::Read::read_to_end(&mut &file, &mut bytes).ok()?;
        let stored: Stored<'static> = match postcard::from_bytes(&bytes) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("stored catalog {} is damaged: {e}", path.display());
                return None;
            }
        };
        if stored.format != FORMAT {
            return None;
        }
        if let Some((var, _)) = stored.env.iter().find(|(var, was)| env_set(var) != *was) {
            tracing::debug!("stored catalog not used: `{var}` changed");
            return None;
        }
        // Recently used: the bound drops the oldest first.
        let _ = file.set_modified(SystemTime::now());
        let home = IndexHome {
            store: self.clone(),
            key: key.clone(),
        };
        match Catalog::from_stored(
            stored.entries.into_owned(),
            stored.cataloged,
            stored.hidden.into_owned(),
            stored.notices.into_owned(),
            stored.filtered,
            stored.toolsets.into_owned(),
            config,
            Some(home),
        ) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::debug!("stored catalog {} not used: {e}", path.display());
                None
            }
        }
    }

    /// Keeps `catalog` under `key` (planned with the environment facts `env`) and returns
    /// it, its index to be kept too when the first search builds it.
    pub fn save(&self, key: &Key, mut catalog: Catalog, env: &[EnvFact]) -> Catalog {
        let stored = Stored {
            format: Cow::Borrowed(FORMAT),
            env: Cow::Borrowed(env),
            entries: Cow::Borrowed(&catalog.entries),
            cataloged: catalog.cataloged,
            hidden: Cow::Borrowed(&catalog.hidden),
            notices: Cow::Borrowed(&catalog.notices),
            filtered: catalog.filtered,
            toolsets: Cow::Borrowed(&catalog.toolsets),
        };
        let written = postcard::to_stdvec(&stored)
            .map_err(|e| e.to_string())
            .and_then(|bytes| self.write_file(&self.catalog_path(key), &bytes));
        match written {
            Ok(()) => {
                catalog.index_home = Some(IndexHome {
                    store: self.clone(),
                    key: key.clone(),
                });
                self.prune();
            }
            Err(e) => tracing::debug!("catalog not stored: {e}"),
        }
        catalog
    }

    fn catalog_path(&self, key: &Key) -> PathBuf {
        self.dir.join(format!("{}{CATALOG_SUFFIX}", key.0))
    }

    fn index_path(&self, key: &Key) -> PathBuf {
        self.dir.join(format!("{}{INDEX_SUFFIX}", key.0))
    }

    /// A fresh name in the store for something being written.
    fn temp_path(&self, suffix: &str) -> PathBuf {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        self.dir
            .join(format!("{TEMP_PREFIX}{}-{n}{suffix}", std::process::id()))
    }

    fn write_file(&self, path: &Path, bytes: &[u8]) -> std::result::Result<(), String> {
        use std::os::unix::fs::OpenOptionsExt;
        let temp = self.temp_path("");
        let result = (|| {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temp)?;
            f.write_all(bytes)?;
            fs::rename(&temp, path)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&temp);
        }
        result.map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// Drops what a bound leaves no room for, least recently used first, and what dead
    /// processes left half written.
    fn prune(&self) {
        let Ok(listing) = fs::read_dir(&self.dir) else {
            return;
        };
        // key -> (bytes, last use)
        let mut entries: HashMap<String, (u64, SystemTime)> = HashMap::new();
        let now = SystemTime::now();
        for item in listing.flatten() {
            let name = item.file_name().to_string_lossy().into_owned();
            let path = item.path();
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            let modified = meta.modified().unwrap_or(now);
            if name.starts_with(TEMP_PREFIX) {
                let old = now.duration_since(modified).unwrap_or_default() > ABANDONED_AFTER;
                if old {
                    remove(&path);
                }
                continue;
            }
            let key = match (
                name.strip_suffix(CATALOG_SUFFIX),
                name.strip_suffix(INDEX_SUFFIX),
            ) {
                (Some(k), _) | (_, Some(k)) => k.to_string(),
                _ => continue,
            };
            let bytes = if meta.is_dir() {
                folder_bytes(&path)
            } else {
                meta.len()
            };
            let e = entries.entry(key).or_insert((0, SystemTime::UNIX_EPOCH));
            e.0 += bytes;
            // The catalog file is touched on use; an index alone counts by its own age.
            e.1 = e.1.max(modified);
        }
        let mut by_age: Vec<(String, u64, SystemTime)> =
            entries.into_iter().map(|(k, (b, t))| (k, b, t)).collect();
        by_age.sort_by_key(|e| std::cmp::Reverse(e.2));
        let mut total = 0;
        for (i, (key, bytes, _)) in by_age.into_iter().enumerate() {
            total += bytes;
            if i >= MAX_ENTRIES || total > MAX_BYTES {
                let key = Key(key);
                remove(&self.catalog_path(&key));
                remove(&self.index_path(&key));
            }
        }
    }
}

impl IndexHome {
    /// The stored index, or one built now from `docs` and stored; in memory when it
    /// cannot be stored. `keys` are the (id, name) of the indexed entries, in order.
    pub(super) fn index<'a>(
        &self,
        keys: impl ExactSizeIterator<Item = (&'a str, &'a str)> + Clone,
        docs: impl FnOnce() -> Vec<crate::search::IndexDoc>,
    ) -> Result<SearchIndex> {
        let path = self.store.index_path(&self.key);
        if path.exists() {
            match SearchIndex::open(&path, keys.clone()) {
                Ok(index) => return Ok(index),
                Err(e) => {
                    tracing::debug!("stored index not used, rebuilding: {e}");
                    remove(&path);
                }
            }
        }
        let docs = docs();
        let temp = self.store.temp_path(INDEX_SUFFIX);
        let built = fs::create_dir(&temp)
            .map_err(|e| e.to_string())
            .and_then(|()| SearchIndex::build_in(&temp, &docs).map_err(|e| e.to_string()));
        let index = match built {
            Ok(index) => index,
            Err(e) => {
                tracing::debug!("index not stored: {e}");
                remove(&temp);
                return SearchIndex::build(&docs);
            }
        };
        // Another process may have stored the same index first: theirs stays, and ours,
        // already open, is used as it is (its files stay readable once unlinked).
        if fs::rename(&temp, &path).is_err() {
            remove(&temp);
        }
        Ok(index)
    }
}

/// Whether `var` is set and not empty, as the `env` availability signal reads it.
pub fn env_set(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| !v.is_empty())
}

/// This program's identity: a rebuilt or replaced binary is another program.
fn program() -> Option<&'static str> {
    static PROGRAM: OnceLock<Option<String>> = OnceLock::new();
    PROGRAM
        .get_or_init(|| {
            let exe = std::env::current_exe().ok()?;
            let meta = fs::metadata(&exe).ok()?;
            Some(format!(
                "{}|{}|dev={}|ino={}|len={}|mtime={}.{}",
                env!("CARGO_PKG_VERSION"),
                exe.display(),
                meta.dev(),
                meta.ino(),
                meta.len(),
                meta.mtime(),
                meta.mtime_nsec()
            ))
        })
        .as_deref()
}

fn folder_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|items| {
            items
                .flatten()
                .filter_map(|i| i.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn remove(path: &Path) {
    let result = match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(_) => return,
    };
    if let Err(e) = result {
        tracing::debug!("cannot remove {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Facts, embedded};

    fn demo(config: &Config) -> Catalog {
        Catalog::build(
            embedded::demo_descriptors().unwrap(),
            &Facts {
                config,
                env: &|_| None,
                sources_down: &Default::default(),
            },
        )
        .unwrap()
    }

    fn ids(hits: &[crate::CompactDescriptor]) -> Vec<&str> {
        hits.iter().map(|h| h.id.as_str()).collect()
    }

    #[test]
    fn a_stored_catalog_and_index_answer_as_the_built_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().join("catalogs")).unwrap();
        let config = Config::default();
        let key = store.key(&config, &[7; 32]).unwrap();
        assert!(store.load(&key, &config).is_none());

        let built = store.save(&key, demo(&config), &[]);
        let first = built.search("create a GitHub issue", Some(5)).unwrap();
        assert!(
            store.index_path(&key).is_dir(),
            "the first search stores the index"
        );

        let stored = store.load(&key, &config).expect("stored");
        assert_eq!(stored.counts(), built.counts());
        assert_eq!(stored.hidden(), built.hidden());
        assert_eq!(stored.notices(), built.notices());
        for query in [
            "create a GitHub issue",
            "schedule a meeting",
            "delete a file",
        ] {
            assert_eq!(
                ids(&stored.search(query, Some(8)).unwrap()),
                ids(&built.search(query, Some(8)).unwrap()),
                "{query}"
            );
        }
        assert_eq!(ids(&first)[0], "openclaw:github:create_issue");
        let d = stored.describe("create_issue").unwrap();
        assert_eq!(
            d.input_schema,
            built.describe("create_issue").unwrap().input_schema
        );
        // Toolsets come back (the policy is made from them and the config again).
        assert_eq!(stored.toolsets(), built.toolsets());
    }

    #[test]
    fn another_config_or_catalog_is_another_key() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().to_path_buf()).unwrap();
        let config = Config::default();
        let mut other = Config::default();
        other.tools.deny = vec!["message".into()];
        let a = store.key(&config, &[1; 32]).unwrap();
        assert_eq!(a, store.key(&config, &[1; 32]).unwrap());
        assert_ne!(a, store.key(&config, &[2; 32]).unwrap());
        assert_ne!(a, store.key(&other, &[1; 32]).unwrap());
    }

    #[test]
    fn damaged_entries_are_rebuilt_not_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().to_path_buf()).unwrap();
        let config = Config::default();
        let key = store.key(&config, &[3; 32]).unwrap();
        let built = store.save(&key, demo(&config), &[]);
        built.search("issue", None).unwrap();

        // A cut catalog file: not used.
        let path = store.catalog_path(&key);
        let bytes = fs::read(&path).unwrap();
        fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        assert!(store.load(&key, &config).is_none());

        // A damaged index: rebuilt at the first search, and stored again.
        fs::write(&path, &bytes).unwrap();
        let lengths = store.index_path(&key).join(crate::search::LENGTHS_FILE);
        fs::write(&lengths, b"xyz").unwrap();
        let stored = store.load(&key, &config).unwrap();
        let hits = stored.search("create a GitHub issue", None).unwrap();
        assert_eq!(hits[0].id, "openclaw:github:create_issue");
        assert_eq!(fs::read(&lengths).unwrap().len() % 8, 0);

        // A file others may write is not believed.
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(store.load(&key, &config).is_none());
    }

    #[test]
    fn a_changed_environment_fact_is_a_miss() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().to_path_buf()).unwrap();
        let config = Config::default();
        let key = store.key(&config, &[4; 32]).unwrap();
        // PATH is set in any test process; a catalog planned while it was unset is stale.
        store.save(&key, demo(&config), &[("PATH".into(), false)]);
        assert!(store.load(&key, &config).is_none());
        store.save(&key, demo(&config), &[("PATH".into(), true)]);
        assert!(store.load(&key, &config).is_some());
    }

    #[test]
    fn the_folder_is_bounded_least_recently_used_first() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().to_path_buf()).unwrap();
        let config = Config::default();
        let catalog = demo(&config);
        let mut keys = Vec::new();
        for i in 0..MAX_ENTRIES + 3 {
            let key = store.key(&config, &[i as u8; 32]).unwrap();
            let file = store.catalog_path(&key);
            fs::write(&file, b"{}").unwrap();
            let age = SystemTime::now() - Duration::from_secs(1000 - i as u64);
            fs::File::options()
                .write(true)
                .open(&file)
                .unwrap()
                .set_modified(age)
                .unwrap();
            keys.push(key);
        }
        let newest = store.key(&config, &[255; 32]).unwrap();
        store.save(&newest, catalog, &[]);
        assert!(store.catalog_path(&newest).exists());
        let left = keys
            .iter()
            .filter(|k| store.catalog_path(k).exists())
            .count();
        assert_eq!(left, MAX_ENTRIES - 1);
        assert!(
            !store.catalog_path(&keys[0]).exists(),
            "the oldest is dropped"
        );
        assert!(store.catalog_path(&keys[MAX_ENTRIES + 2]).exists());
    }
}
