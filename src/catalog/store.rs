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
//!   each one and whether it was set, and is not used when one of them changed (it is then
//!   planned again and replaces the entry of its key).
//!
//! Catalogs with upstream servers are not stored (their tools are live), nor are catalogs
//! built with a request's client tools.
//!
//! **Every entry vouches for itself.** A stored catalog decides what a model may call, so
//! it is believed only when all of this holds: the folder is this user's alone (and was
//! emptied if others could ever write into it, [`crate::cache::prepare`]); the file is a
//! regular file of this user's, opened without following links or blocking; it begins with
//! [`MAGIC`], and the BLAKE3 hash after it is the hash of the rest, which names the key it
//! was stored under. An index is bound to the one catalog it was built for: its manifest,
//! written last, holds that catalog's hash and the length and hash of every file in it, and
//! a folder with anything else in it is not opened. Anything missing, damaged or stale is
//! rebuilt and anything unwritable is skipped, with a debug log: the store never makes a
//! command fail. Entries are written under random temporary names, synced and renamed into
//! place. The folder is bounded ([`MAX_ENTRIES`], [`MAX_BYTES`], temporary files
//! included), the least recently used entries going first.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::{Catalog, Entry, HiddenTool, Notice};
use crate::cache::{self, TEMP_PREFIX};
use crate::config::Config;
use crate::error::Result;
use crate::policy::Toolsets;
use crate::search::{IndexDoc, SearchIndex};

/// Entries kept at most; the least recently used go first.
pub const MAX_ENTRIES: usize = 32;
/// Bytes kept at most (a 10,000-tool catalog and its index take about 10 MB). A catalog
/// larger than this is not stored at all.
pub const MAX_BYTES: u64 = 256 * 1024 * 1024;
/// A temporary file or folder older than this was left by a process that died.
const ABANDONED_AFTER: Duration = Duration::from_secs(600);
/// What a stored catalog file begins with; changed when what an entry holds changes shape.
pub const MAGIC: &[u8] = b"toolsearch stored catalog 2\n";

const CATALOG_SUFFIX: &str = ".catalog";
const INDEX_SUFFIX: &str = ".index";
/// The last file written into an index folder: what it was built for, and its files.
const MANIFEST: &str = "manifest";
/// Tantivy's lock files: made (empty) when an index is written or opened.
const LOCK_FILES: [&str; 2] = [".tantivy-meta.lock", ".tantivy-writer.lock"];

/// The folder of stored catalogs.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

/// What one stored catalog is keyed by, as a file name stem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key(String);

/// Where a stored catalog's index lives, or is to be written by the first search; `catalog`
/// is the hash of the stored catalog it belongs to.
#[derive(Debug, Clone)]
pub(super) struct IndexHome {
    store: Store,
    key: Key,
    catalog: [u8; 32],
}

/// One environment variable an availability signal read, and whether it was set (not
/// empty). Only that bit is kept: the value may be a secret.
pub type EnvFact = (String, bool);

/// A stored catalog's payload: borrowed when written, owned when read.
#[derive(Serialize, Deserialize)]
struct Stored<'a> {
    key: Cow<'a, Key>,
    env: Cow<'a, [EnvFact]>,
    entries: Cow<'a, [Entry]>,
    cataloged: usize,
    hidden: Cow<'a, [HiddenTool]>,
    notices: Cow<'a, [Notice]>,
    filtered: usize,
    toolsets: Cow<'a, Toolsets>,
}

/// An index folder's manifest.
#[derive(Serialize, Deserialize)]
struct Manifest {
    catalog: [u8; 32],
    /// (file name, length, BLAKE3) of every file but the manifest and the lock files.
    files: Vec<(String, u64, [u8; 32])>,
}

impl Store {
    /// The `catalogs` folder of this user's cache, if there is one this user alone can
    /// write.
    pub fn open_default() -> Option<Store> {
        Store::at(cache::folder("catalogs")?)
    }

    /// A store in `dir`, created if needed; none if it cannot be trusted.
    pub fn at(dir: PathBuf) -> Option<Store> {
        match cache::prepare(&dir) {
            Ok(dir) => Some(Store { dir }),
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
        h.update(MAGIC);
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
        let bytes = match cache::read_trusted(&path, MAX_BYTES) {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!("no stored catalog: {e}");
                return None;
            }
        };
        let Some((hash, stored)) = decode(&bytes) else {
            tracing::debug!("stored catalog {} is damaged", path.display());
            return None;
        };
        if *stored.key != *key {
            tracing::debug!("{} holds another key's catalog", path.display());
            return None;
        }
        if let Some((var, _)) = stored.env.iter().find(|(var, was)| env_set(var) != *was) {
            tracing::debug!("stored catalog not used: `{var}` changed");
            return None;
        }
        // Recently used: the bound drops the oldest first.
        if let Ok(f) = fs::File::open(&path) {
            let _ = f.set_modified(SystemTime::now());
        }
        let home = IndexHome {
            store: self.clone(),
            key: key.clone(),
            catalog: hash,
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
            key: Cow::Borrowed(key),
            env: Cow::Borrowed(env),
            entries: Cow::Borrowed(&catalog.entries),
            cataloged: catalog.cataloged,
            hidden: Cow::Borrowed(&catalog.hidden),
            notices: Cow::Borrowed(&catalog.notices),
            filtered: catalog.filtered,
            toolsets: Cow::Borrowed(&catalog.toolsets),
        };
        let payload = match postcard::to_stdvec(&stored) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!("catalog not stored: {e}");
                return catalog;
            }
        };
        if (MAGIC.len() + 32 + payload.len()) as u64 > MAX_BYTES {
            tracing::debug!("catalog not stored: over {MAX_BYTES} bytes");
            return catalog;
        }
        let hash = *blake3::hash(&payload).as_bytes();
        let mut bytes = Vec::with_capacity(MAGIC.len() + 32 + payload.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&hash);
        bytes.extend_from_slice(&payload);
        // The index of the catalog this one replaces (another environment) is not its own.
        remove(&self.index_path(key));
        match cache::write_atomic(&self.dir, &self.catalog_path(key), &bytes) {
            Ok(()) => {
                catalog.index_home = Some(IndexHome {
                    store: self.clone(),
                    key: key.clone(),
                    catalog: hash,
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

    /// Drops what the bounds leave no room for, least recently used first, and what dead
    /// processes left half written. Temporary files count toward the bytes.
    fn prune(&self) {
        let Ok(listing) = fs::read_dir(&self.dir) else {
            return;
        };
        // key -> (bytes, last use)
        let mut entries: HashMap<String, (u64, SystemTime)> = HashMap::new();
        let mut temp_bytes = 0;
        let now = SystemTime::now();
        for item in listing.flatten() {
            let name = item.file_name().to_string_lossy().into_owned();
            let path = item.path();
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            let modified = meta.modified().unwrap_or(now);
            let bytes = if meta.is_dir() {
                folder_bytes(&path)
            } else {
                meta.len()
            };
            if name.starts_with(TEMP_PREFIX) {
                if now.duration_since(modified).unwrap_or_default() > ABANDONED_AFTER {
                    remove(&path);
                } else {
                    temp_bytes += bytes;
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
            let e = entries.entry(key).or_insert((0, SystemTime::UNIX_EPOCH));
            e.0 += bytes;
            // The catalog file is touched on use; an index alone counts by its own age.
            e.1 = e.1.max(modified);
        }
        let mut by_age: Vec<(String, u64, SystemTime)> =
            entries.into_iter().map(|(k, (b, t))| (k, b, t)).collect();
        by_age.sort_by_key(|e| std::cmp::Reverse(e.2));
        let (mut kept, mut total) = (0, temp_bytes);
        for (key, bytes, _) in by_age {
            if kept < MAX_ENTRIES && total + bytes <= MAX_BYTES {
                kept += 1;
                total += bytes;
            } else {
                let key = Key(key);
                remove(&self.catalog_path(&key));
                remove(&self.index_path(&key));
            }
        }
    }
}

/// The hash and payload of a stored catalog file, if it is one and whole.
fn decode(bytes: &[u8]) -> Option<([u8; 32], Stored<'static>)> {
    let rest = bytes.strip_prefix(MAGIC)?;
    let (hash, payload) = rest.split_first_chunk::<32>()?;
    if blake3::hash(payload).as_bytes() != hash {
        return None;
    }
    Some((*hash, postcard::from_bytes(payload).ok()?))
}

impl IndexHome {
    /// The stored index, or one built now from `docs` and stored; in memory when it
    /// cannot be stored. `keys` are the (id, name) of the indexed entries, in order.
    pub(super) fn index<'a>(
        &self,
        keys: impl ExactSizeIterator<Item = (&'a str, &'a str)> + Clone,
        docs: impl FnOnce() -> Vec<IndexDoc>,
    ) -> Result<SearchIndex> {
        let path = self.store.index_path(&self.key);
        if fs::symlink_metadata(&path).is_ok() {
            match self.open(&path, keys.clone()) {
                Ok(index) => return Ok(index),
                Err(e) => {
                    tracing::debug!("stored index not used, rebuilding: {e}");
                    remove(&path);
                }
            }
        }
        let docs = docs();
        match self.write(&path, &docs) {
            Ok(index) => Ok(index),
            Err(e) => {
                tracing::debug!("index not stored: {e}");
                SearchIndex::build(&docs)
            }
        }
    }

    /// Opens the index at `path` if its manifest names this catalog and every file in the
    /// folder is the one the manifest lists.
    fn open<'a>(
        &self,
        path: &Path,
        keys: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    ) -> std::result::Result<SearchIndex, String> {
        let manifest = cache::read_trusted(&path.join(MANIFEST), 1 << 20)?;
        let manifest: Manifest =
            postcard::from_bytes(&manifest).map_err(|e| format!("manifest: {e}"))?;
        if manifest.catalog != self.catalog {
            return Err("built for another catalog".into());
        }
        let listed: BTreeSet<&str> = manifest.files.iter().map(|f| f.0.as_str()).collect();
        for item in fs::read_dir(path).map_err(|e| e.to_string())? {
            let item = item.map_err(|e| e.to_string())?;
            let name = item.file_name().to_string_lossy().into_owned();
            let meta = fs::symlink_metadata(item.path()).map_err(|e| e.to_string())?;
            cache::trusted_file(&item.path(), &meta)?;
            let known = name == MANIFEST
                || listed.contains(name.as_str())
                || (LOCK_FILES.contains(&name.as_str()) && meta.len() == 0);
            if !known {
                return Err(format!("{name} is not the index's"));
            }
        }
        for (name, len, hash) in &manifest.files {
            let bytes = cache::read_trusted(&path.join(name), MAX_BYTES)?;
            if bytes.len() as u64 != *len || blake3::hash(&bytes).as_bytes() != hash {
                return Err(format!("{name} is damaged"));
            }
        }
        // Every byte was checked above; a panic in the index reader all the same is a
        // rebuild, not a failed command.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            SearchIndex::open(path, keys)
        }))
        .map_err(|_| "the index reader panicked".to_string())?
        .map_err(|e| e.to_string())
    }

    /// Builds the index into a temporary folder, writes its manifest last and renames it
    /// into place.
    fn write(&self, path: &Path, docs: &[IndexDoc]) -> std::result::Result<SearchIndex, String> {
        let temp = tempfile::Builder::new()
            .prefix(TEMP_PREFIX)
            .tempdir_in(&self.store.dir)
            .map_err(|e| e.to_string())?;
        let index = SearchIndex::build_in(temp.path(), docs).map_err(|e| e.to_string())?;
        let mut files = Vec::new();
        for item in fs::read_dir(temp.path()).map_err(|e| e.to_string())? {
            let item = item.map_err(|e| e.to_string())?;
            let name = item.file_name().to_string_lossy().into_owned();
            if LOCK_FILES.contains(&name.as_str()) {
                continue;
            }
            let bytes = fs::read(item.path()).map_err(|e| e.to_string())?;
            if let Ok(f) = fs::File::open(item.path()) {
                let _ = f.sync_all();
            }
            files.push((name, bytes.len() as u64, *blake3::hash(&bytes).as_bytes()));
        }
        let manifest = Manifest {
            catalog: self.catalog,
            files,
        };
        let bytes = postcard::to_stdvec(&manifest).map_err(|e| e.to_string())?;
        cache::write_atomic(temp.path(), &temp.path().join(MANIFEST), &bytes)?;
        // Another process may have stored the same index first: theirs stays, and ours,
        // already open, is used as it is (its files stay readable once unlinked).
        if fs::rename(temp.path(), path).is_ok() {
            let _ = temp.keep();
        }
        Ok(index)
    }
}

/// Whether `var` is set and not empty, as the `env` availability signal reads it (through
/// [`super::Facts::process_env`]: a value that is not Unicode is not set).
pub fn env_set(var: &str) -> bool {
    super::Facts::process_env(var).is_some_and(|v| !v.is_empty())
}

/// This program's identity: a rebuilt or replaced binary is another program.
fn program() -> Option<&'static str> {
    static PROGRAM: OnceLock<Option<String>> = OnceLock::new();
    PROGRAM
        .get_or_init(|| {
            use std::os::unix::fs::MetadataExt;
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
    if !cache::removable(path) {
        tracing::debug!("{} is not the store's to remove: kept", path.display());
        return;
    }
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
    use crate::search::LENGTHS_FILE as LENGTHS;

    fn demo(config: &Config) -> Catalog {
        Catalog::build(embedded::demo_descriptors().unwrap(), &Facts::bare(config)).unwrap()
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

    /// Every file of a stored entry, the catalog first.
    fn files_of(store: &Store, key: &Key) -> Vec<PathBuf> {
        let mut files = vec![store.catalog_path(key)];
        let mut index: Vec<PathBuf> = fs::read_dir(store.index_path(key))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        index.sort();
        files.extend(index);
        files
    }

    #[test]
    fn damaged_entries_are_rebuilt_never_believed_or_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().to_path_buf()).unwrap();
        let config = Config::default();
        let key = store.key(&config, &[3; 32]).unwrap();
        let fresh = demo(&config);
        let query = "create a GitHub issue";
        let want = ids(&fresh.search(query, Some(8)).unwrap())
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        let built = store.save(&key, demo(&config), &[]);
        built.search(query, None).unwrap();
        let files = files_of(&store, &key);
        assert!(files.len() > 4, "{files:?}");

        // One byte flipped anywhere in any file of the entry, at several places: the
        // answers stay those of a fresh catalog (the damaged part is rebuilt), never
        // damaged ones, never a panic or an error.
        for file in &files {
            let Ok(original) = fs::read(file) else {
                continue;
            };
            if original.is_empty() {
                continue;
            }
            for at in [
                0,
                original.len() / 3,
                original.len() / 2,
                original.len() - 1,
            ] {
                let mut damaged = original.clone();
                damaged[at] ^= 0x5a;
                fs::write(file, &damaged).unwrap();
                let got = match store.load(&key, &config) {
                    Some(c) => c.search(query, Some(8)).unwrap(),
                    None => demo(&config).search(query, Some(8)).unwrap(),
                };
                assert_eq!(ids(&got), want, "{} byte {at}", file.display());
                // Put the entry back whole for the next trial.
                let _ = fs::remove_dir_all(store.index_path(&key));
                fs::write(
                    store.catalog_path(&key),
                    fs::read(&files[0]).unwrap_or_default(),
                )
                .ok();
                let rebuilt = store.save(&key, demo(&config), &[]);
                rebuilt.search(query, None).unwrap();
            }
        }

        // A file others may write is not believed.
        use std::os::unix::fs::PermissionsExt;
        let path = store.catalog_path(&key);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(store.load(&key, &config).is_none());
    }

    #[test]
    fn an_entry_is_believed_only_under_its_own_key_and_its_index_only_with_its_catalog() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().to_path_buf()).unwrap();
        let config = Config::default();
        let (a, b) = (
            store.key(&config, &[1; 32]).unwrap(),
            store.key(&config, &[2; 32]).unwrap(),
        );
        store.save(&a, demo(&config), &[]);
        fs::rename(store.catalog_path(&a), store.catalog_path(&b)).unwrap();
        assert!(store.load(&b, &config).is_none(), "a renamed entry");

        // The same key planned again in another environment: the index of the first plan
        // is not used for the second (its positions would be another catalog's).
        // (Two plans of as many tools: the index's size alone cannot tell them apart.)
        let (mut one, mut other_config) = (Config::default(), Config::default());
        one.tools.deny = vec!["openclaw:tickets:create_ticket".into()];
        other_config.tools.deny = vec!["openclaw:github:create_issue".into()];
        let denied = other_config;
        let first = store.save(&a, demo(&one), &[]);
        first.search("create a GitHub issue", None).unwrap();
        let other = store.save(&a, demo(&denied), &[]);
        assert_eq!(first.counts().cataloged, other.counts().cataloged);
        let hits = other.search("create a GitHub issue", Some(8)).unwrap();
        assert!(ids(&hits).iter().all(|id| !id.ends_with(":create_issue")));
        let fresh = demo(&denied);
        assert_eq!(
            ids(&hits),
            ids(&fresh.search("create a GitHub issue", Some(8)).unwrap())
        );
    }

    #[test]
    fn planted_files_are_refused_without_following_or_waiting() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().to_path_buf()).unwrap();
        let config = Config::default();
        let key = store.key(&config, &[5; 32]).unwrap();
        store
            .save(&key, demo(&config), &[])
            .search("issue", None)
            .unwrap();
        let index = store.index_path(&key);

        // A link among the index's files, and an extra file: rebuilt, the link untouched.
        let outside = tmp.path().join("outside");
        std::os::unix::fs::symlink(&outside, index.join(".tantivy-meta.lock.x")).unwrap();
        let c = store.load(&key, &config).unwrap();
        assert!(!c.search("create a GitHub issue", None).unwrap().is_empty());
        assert!(!outside.exists());

        // A FIFO in place of the catalog or of an index file: refused at once.
        for fifo in [store.catalog_path(&key), index.join(LENGTHS)] {
            let _ = fs::remove_file(&fifo);
            let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            if let Some(c) = store.load(&key, &config) {
                assert!(!c.search("create a GitHub issue", None).unwrap().is_empty());
            }
            let _ = fs::remove_file(&fifo);
            store
                .save(&key, demo(&config), &[])
                .search("issue", None)
                .unwrap();
        }
    }

    #[test]
    fn a_catalog_over_the_bound_is_not_stored_and_empties_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().to_path_buf()).unwrap();
        let config = Config::default();
        let small = store.key(&config, &[6; 32]).unwrap();
        store.save(&small, demo(&config), &[]);
        let mut big = demo(&config);
        let huge = "x".repeat(64 * 1024);
        let entry = big.entries[0].clone();
        big.entries = (0..(MAX_BYTES / huge.len() as u64 + 2))
            .map(|i| {
                let mut e = entry.clone();
                e.id = format!("{}{i}", e.id);
                e.descriptor.description = huge.clone();
                e
            })
            .collect();
        big.cataloged = big.entries.len();
        let big_key = store.key(&config, &[7; 32]).unwrap();
        store.save(&big_key, big, &[]);
        assert!(!store.catalog_path(&big_key).exists());
        assert!(store.catalog_path(&small).exists());
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
