//! Tool embeddings on disk, so a catalog is embedded once and not in every process.
//!
//! One folder per model under `<cache root>/embeddings/`, named by the model's content hash
//! (so a changed or different model never reads another's vectors), holding segment files:
//! each a batch of (text hash, vector) pairs written whole to a temporary name and renamed
//! into place, so a reader never sees half a file and writers never lock each other out.
//! A process reads every segment once, then adds one segment with what it had to embed.
//!
//! Bounded: past [`MAX_SEGMENTS`] files the segments are merged into one, keeping at most
//! [`MAX_BYTES`] of vectors (the newest segments' first), and at most [`MAX_MODELS`] model
//! folders are kept (the least recently written go). A file that is short, has the wrong
//! header or checksum, or another dimension is deleted and its vectors embedded again; a
//! folder that cannot be written leaves the cache read-only or off. Nothing here is ever
//! an error to the caller.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A text's identity in the cache: the first 16 bytes of its SHA-256.
pub type TextKey = [u8; 16];

const MAGIC: &[u8; 8] = b"TSEMB\x00\x00\x01";
const HEADER: usize = 16;
const CHECKSUM: usize = 32;
const EXTENSION: &str = "emb";
/// Segment files kept before they are merged into one.
pub const MAX_SEGMENTS: usize = 8;
/// Vector bytes kept per model: about 43,000 vectors of 384 floats.
pub const MAX_BYTES: usize = 64 << 20;
/// Model folders kept.
pub const MAX_MODELS: usize = 4;

pub fn text_key(text: &str) -> TextKey {
    let digest = blake3::hash(text.as_bytes());
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest.as_bytes()[..16]);
    key
}

/// One model's folder of segments.
pub struct Store {
    dir: PathBuf,
    dim: usize,
    /// Vector bytes a merge keeps ([`MAX_BYTES`]).
    max_bytes: usize,
}

impl Store {
    /// The store of the model `key` under `root` (the embeddings folder), created if
    /// missing; `None` when it cannot be.
    pub fn open(root: &Path, key: &str, dim: usize) -> Option<Store> {
        // Vectors decide rankings: only a folder this user alone can write is used, by
        // its resolved path.
        let dir = match crate::cache::prepare(&root.join(key.get(..32).unwrap_or(key))) {
            Ok(dir) => dir,
            Err(e) => {
                tracing::debug!("embedding cache off: {e}");
                return None;
            }
        };
        // Among its neighbours by the same resolved path, so the one kept is recognised.
        if let Some(resolved_root) = dir.parent() {
            prune_models(resolved_root, &dir);
        }
        Some(Store {
            dir,
            dim,
            max_bytes: MAX_BYTES,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every vector stored, and the segment files read (newest first). Corrupt files are
    /// deleted.
    pub fn load(&self) -> (HashMap<TextKey, Vec<f32>>, Vec<PathBuf>) {
        let mut out = HashMap::new();
        let files = self.segments();
        for file in &files {
            match read_segment(file, self.dim) {
                Ok(entries) => {
                    for (k, v) in entries {
                        out.entry(k).or_insert(v);
                    }
                }
                Err(why) => {
                    tracing::debug!("embedding cache: {} dropped: {why}", file.display());
                    let _ = std::fs::remove_file(file);
                }
            }
        }
        (out, files)
    }

    /// Segment files, newest first.
    fn segments(&self) -> Vec<PathBuf> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut files: Vec<(std::time::SystemTime, PathBuf)> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == EXTENSION))
            .map(|p| {
                let t = p
                    .metadata()
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                (t, p)
            })
            .collect();
        files.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
        files.into_iter().map(|(_, p)| p).collect()
    }

    /// Adds `entries` as a new segment; returns how many segments there are now (0 when
    /// nothing could be written). Failures are logged and forgotten.
    pub fn save(&self, entries: &[(TextKey, &[f32])]) -> usize {
        if entries.is_empty() {
            return self.segments().len();
        }
        match self.write_segment(entries) {
            Ok(()) => self.segments().len(),
            Err(e) => {
                tracing::debug!("embedding cache not written in {}: {e}", self.dir.display());
                0
            }
        }
    }

    /// Replaces every segment there is now by one holding `entries`, cut at [`MAX_BYTES`]
    /// (so the ones that must stay come first). A segment another process writes meanwhile
    /// is kept; vectors only it had are embedded again by whoever needs them.
    pub fn merge(&self, entries: &[(TextKey, &[f32])]) {
        let files = self.segments();
        let keep = (self.max_bytes / (16 + 4 * self.dim)).max(1);
        if self
            .write_segment(&entries[..entries.len().min(keep)])
            .is_ok()
        {
            for f in files {
                let _ = std::fs::remove_file(f);
            }
        }
    }

    fn write_segment(&self, entries: &[(TextKey, &[f32])]) -> std::io::Result<()> {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!(
            "{nanos}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let tmp = self.dir.join(format!(".{name}.tmp"));
        let bytes = encode(entries, self.dim);
        let result = std::fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_data()))
            .and_then(|()| std::fs::rename(&tmp, self.dir.join(format!("{name}.{EXTENSION}"))));
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

fn encode(entries: &[(TextKey, &[f32])], dim: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + entries.len() * (16 + 4 * dim) + CHECKSUM);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(dim as u32).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (key, vector) in entries {
        out.extend_from_slice(key);
        for x in vector.iter().take(dim) {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    out
}

fn read_segment(file: &Path, dim: usize) -> Result<Vec<(TextKey, Vec<f32>)>, String> {
    let bytes = crate::cache::read_trusted(file, (MAX_BYTES * 2) as u64)?;
    decode(&bytes, dim)
}

fn decode(bytes: &[u8], dim: usize) -> Result<Vec<(TextKey, Vec<f32>)>, String> {
    if bytes.len() < HEADER + CHECKSUM || &bytes[..8] != MAGIC {
        return Err("not a segment".into());
    }
    let word =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let (file_dim, count) = (word(8) as usize, word(12) as usize);
    if file_dim != dim {
        return Err(format!("dimension {file_dim}, expected {dim}"));
    }
    let row = 16 + 4 * dim;
    let body = bytes.len() - CHECKSUM;
    if count.checked_mul(row).and_then(|n| n.checked_add(HEADER)) != Some(body) {
        return Err("wrong length".into());
    }
    if blake3::hash(&bytes[..body]).as_bytes()[..] != bytes[body..] {
        return Err("checksum mismatch".into());
    }
    Ok(bytes[HEADER..body]
        .chunks_exact(row)
        .map(|r| {
            let mut key = [0u8; 16];
            key.copy_from_slice(&r[..16]);
            let v = r[16..]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            (key, v)
        })
        .collect())
}

/// Removes the least recently written model folders beyond [`MAX_MODELS`] (never `keep`).
fn prune_models(root: &Path, keep: &Path) {
    let Ok(dir) = std::fs::read_dir(root) else {
        return;
    };
    let mut models: Vec<(std::time::SystemTime, PathBuf)> = dir
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p != keep && crate::cache::removable(p))
        .map(|p| {
            let t = p
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            (t, p)
        })
        .collect();
    if models.len() < MAX_MODELS {
        return;
    }
    models.sort_by_key(|m| std::cmp::Reverse(m.0));
    for (_, p) in models.into_iter().skip(MAX_MODELS - 1) {
        let _ = std::fs::remove_dir_all(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(x: f32) -> Vec<f32> {
        vec![x, -x, 0.5]
    }

    #[test]
    fn segments_round_trip_and_corruption_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path(), "abc", 3).unwrap();
        let (a, b) = (text_key("a"), text_key("b"));
        assert_eq!(store.save(&[(a, &v(1.0)), (b, &v(2.0))]), 1);
        let (all, files) = store.load();
        assert_eq!(files.len(), 1);
        assert_eq!(all[&a], v(1.0));
        assert_eq!(all[&b], v(2.0));

        // A flipped byte, a cut file, a foreign file: each dropped, never an error.
        let bytes = std::fs::read(&files[0]).unwrap();
        let mut flipped = bytes.clone();
        flipped[HEADER + 20] ^= 1;
        std::fs::write(&files[0], &flipped).unwrap();
        assert!(store.load().0.is_empty());
        assert!(!files[0].exists(), "a corrupt segment is deleted");
        for broken in [&bytes[..bytes.len() - 1], b"hello".as_slice()] {
            std::fs::write(store.dir().join("x.emb"), broken).unwrap();
            assert!(store.load().0.is_empty());
        }
        // Another dimension is not this model's.
        let other = Store::open(tmp.path(), "abc", 4).unwrap();
        store.save(&[(a, &v(1.0))]);
        assert!(other.load().0.is_empty());
    }

    #[test]
    fn a_merge_replaces_the_segments_by_one_within_the_bound() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path(), "m", 3).unwrap();
        let keys: Vec<TextKey> = (0..MAX_SEGMENTS + 1)
            .map(|i| text_key(&i.to_string()))
            .collect();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(store.save(&[(*k, &v(1.0))]), i + 1);
        }
        let one = v(1.0);
        let all: Vec<(TextKey, &[f32])> = keys.iter().map(|k| (*k, one.as_slice())).collect();
        store.merge(&all);
        let (merged, files) = store.load();
        assert_eq!(files.len(), 1, "merged into one segment");
        assert_eq!(merged.len(), keys.len());
        // Past the byte bound, the first entries are the ones kept.
        let small = Store {
            max_bytes: 2 * (16 + 4 * 3),
            ..Store::open(tmp.path(), "small", 3).unwrap()
        };
        small.merge(&all);
        let (kept, _) = small.load();
        assert_eq!(kept.len(), 2);
        assert!(kept.contains_key(&keys[0]) && kept.contains_key(&keys[1]));
    }

    #[test]
    fn an_unwritable_root_is_no_cache() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("plain-file");
        std::fs::write(&file, "x").unwrap();
        assert!(Store::open(&file, "k", 3).is_none());
    }

    #[test]
    fn old_model_folders_are_pruned() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..MAX_MODELS + 2 {
            Store::open(tmp.path(), &format!("model{i}"), 3).unwrap();
        }
        let n = std::fs::read_dir(tmp.path()).unwrap().count();
        assert!(n <= MAX_MODELS, "{n} model folders kept");
        assert!(tmp.path().join(format!("model{}", MAX_MODELS + 1)).exists());
    }

    /// A folder `prepare` set aside may hold what is not the cache's (a folder of this
    /// user's that another user moved in): pruning old models never removes one, nor
    /// anything not this user's (ninth sandbox review).
    #[test]
    fn pruning_keeps_what_was_set_aside() {
        let tmp = tempfile::tempdir().unwrap();
        let aside = tmp.path().join(".untrusted-model0-1-2");
        std::fs::create_dir_all(aside.join("precious")).unwrap();
        std::fs::write(aside.join("precious/work"), "x").unwrap();
        for i in 0..MAX_MODELS + 2 {
            Store::open(tmp.path(), &format!("model{i}"), 3).unwrap();
        }
        assert!(aside.join("precious/work").exists());
    }
}
