//! A startup snapshot of the runtime, built at first use and cached.
//!
//! Any V8 flag on the command line (the heap cap is one) makes Node reject its embedded
//! code cache, which costs ~6 ms per start here (13–16 ms measured on a busier
//! machine). A snapshot built with the same V8 flags (`--build-snapshot`) wins it back: the
//! child then starts from `--snapshot-blob` instead of `-e RUNTIME`.
//!
//! What goes into the snapshot is deliberately little: the builder only registers the
//! runtime as the function to run after deserialization (the runtime needs no module the
//! snapshot does not already hold but `vm`; it reads and writes fd 3 with `fs`). `vm` is loaded
//! and the guest context created after the child starts, as with `-e`, because Node warns
//! that `vm` "is not yet fully verified" in user snapshots (and aborts when a vm context
//! is in one), and the vm context is the innermost security layer: it must be exactly the
//! one the escape suite tests. Nothing touches fd 3 in the builder.
//!
//! The blob is code the child runs outside the vm, so the cache is trusted only as far as
//! its directory is: it must be owned by this user and writable by no one else, and every
//! blob is written under a fresh name and linked into place, never over one that exists
//! (a child's Landlock rule allows the inode present when its spawn was prepared, so a blob
//! replaced in between is unreadable to it). A blob is never deleted
//! by a host either, but for one whose length is not the one its name says (cut short):
//! one that Node refuses is only not used by that host.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::NodeInfo;

/// The builder script: the runtime, wrapped as the deserialize-main function. `require`
/// inside it is the builder's, which serves built-in modules after deserialization.
pub fn builder_source(runtime: &str) -> String {
    format!(
        "'use strict';\n\
         require('v8').startupSnapshot.setDeserializeMainFunction(function toolsearchRuntime() {{\n\
         {runtime}\n\
         }});\n"
    )
}

/// Where blobs are kept: the `snapshots` folder of [`crate::cache`]; none without a cache
/// root (no snapshot is used).
pub fn default_dir() -> Option<PathBuf> {
    crate::cache::folder("snapshots")
}

/// The blob for this Node, these V8 flags and this runtime: the cached one if present,
/// else built now. `flags` are the V8 flags the children are started with; a blob built
/// with others is refused by Node (exit 14), so they are part of the key.
pub fn ensure(
    dir: &Path,
    node: &NodeInfo,
    flags: &[String],
    runtime: &str,
) -> Result<PathBuf, String> {
    let source = builder_source(runtime);
    // The resolved folder from here on: Node and Landlock open the blob's path again at
    // every spawn, and a link on the way as given could be swapped by then.
    let dir = &crate::cache::prepare(dir)?;
    let key = key(node, flags, &source);
    if let Some(blob) = cached(dir, &key)? {
        return Ok(blob);
    }
    build(dir, &key, node, flags, &source)
}

/// A blob's name says its length (`runtime-KEY.LEN.blob`; two builds of one key may differ
/// by a few bytes, so a race of first builds may leave two, either good): Node trusts a
/// blob whole, and
/// one cut short (a full disk, a copy interrupted) made children die at random (signal 11)
/// in every later process, each death taken for a failed start (review 24 F2).
fn blob_name(key: &str, len: u64) -> String {
    format!("runtime-{key}.{len}.blob")
}

/// The cached blob of `key` whose length is the one its name says. One whose length is
/// not is set aside (renamed, then removed: a child already started keeps its copy open),
/// so the build that follows can take its name.
fn cached(dir: &Path, key: &str) -> Result<Option<PathBuf>, String> {
    let prefix = format!("runtime-{key}.");
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(None);
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(said) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|n| n.strip_suffix(".blob"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let blob = entry.path();
        let Ok(meta) = fs::symlink_metadata(&blob) else {
            continue;
        };
        // Not a blob (a link, a FIFO, a folder put at its name): set aside, and built again,
        // rather than every later host going without a snapshot.
        if !meta.is_file() {
            set_aside(&blob);
            continue;
        }
        trusted(&blob, &meta)?;
        if meta.len() == said {
            return Ok(Some(blob));
        }
        set_aside(&blob);
    }
    Ok(None)
}

fn key(node: &NodeInfo, flags: &[String], source: &str) -> String {
    // SipHash with fixed keys: stable for one toolchain; a new toolchain hashing
    // differently only costs one rebuild.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    node.path.hash(&mut h);
    node.version.hash(&mut h);
    flags.hash(&mut h);
    source.hash(&mut h);
    format!("{:016x}", h.finish())
}

fn trusted(blob: &Path, meta: &fs::Metadata) -> Result<(), String> {
    crate::cache::trusted_file(blob, meta)
}

fn build(
    dir: &Path,
    key: &str,
    node: &NodeInfo,
    flags: &[String],
    source: &str,
) -> Result<PathBuf, String> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let stem = format!(".build-{}-{n}", std::process::id());
    let script = dir.join(format!("{stem}.js"));
    let partial = dir.join(format!("{stem}.blob"));
    // stderr to a file, not a pipe: a builder that writes more than a pipe holds would
    // block until the deadline while nobody reads.
    let errors = dir.join(format!("{stem}.err"));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&script)
            .map_err(|e| format!("cannot write {}: {e}", script.display()))?;
        f.write_all(source.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", script.display()))?;
        drop(f);
        let err_file = fs::File::create(&errors)
            .map_err(|e| format!("cannot write {}: {e}", errors.display()))?;
        let mut child = Command::new(&node.path)
            .args(flags)
            .arg("--snapshot-blob")
            .arg(&partial)
            .arg("--build-snapshot")
            .arg(&script)
            .env_clear()
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err_file)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", node.path.display()))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err("building the snapshot took more than 30 s".to_string());
                }
            }
        };
        if !status.success() {
            let err = fs::read_to_string(&errors).unwrap_or_default();
            let tail: String = err.trim().lines().last().unwrap_or("").to_string();
            return Err(format!(
                "node --build-snapshot exited with {status}: {tail}"
            ));
        }
        fs::set_permissions(&partial, fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("{}: {e}", partial.display()))?;
        // On disk before it has a name: a blob linked first and lost to a power cut could
        // be left as zeros of the right length (review 25 F2).
        let written = fs::File::open(&partial)
            .and_then(|f| f.sync_all().and_then(|()| f.metadata()))
            .map_err(|e| format!("{}: {e}", partial.display()))?;
        let len = written.len();
        let blob = dir.join(blob_name(key, len));
        // A hard link, not a rename: atomic (a concurrent process sees no blob or a whole
        // one) and it never replaces a blob another process built first. Replacing would
        // break a child of that process being spawned: its Landlock rule allows the inode
        // that was there when the spawn was prepared, not the path.
        match fs::hard_link(&partial, &blob) {
            Ok(()) => Ok(blob),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(blob),
            Err(e) => Err(format!("cannot store {}: {e}", blob.display())),
        }
    })();
    let _ = fs::remove_file(&script);
    let _ = fs::remove_file(&partial);
    let _ = fs::remove_file(&errors);
    result
}

/// The blob at `path`, opened for one child's start: a regular file of this user that
/// others cannot write, opened without following a link or waiting (a FIFO put there held
/// every later start of a running host to its startup timeout: sandbox round 28 F2). The
/// child's Landlock rule is made from this handle.
pub fn open(path: &Path) -> Result<fs::File, String> {
    crate::cache::open_trusted(path).map(|(file, _)| file)
}

/// Sets aside a blob Node refused where an inline start worked (damaged in a way its length
/// does not show), so the next host builds it again instead of every host paying a failed
/// start for it (review 25 F2).
pub fn discard(blob: &Path) {
    set_aside(blob);
}

/// Takes a blob out of the cache: renamed (to a hidden name no lookup matches), then
/// removed; a child already started keeps its copy open.
fn set_aside(blob: &Path) {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let aside = blob.with_file_name(format!(".aside-{}-{n}", std::process::id()));
    if fs::rename(blob, &aside).is_ok() {
        // A folder put in its place goes too (sandbox round 28: one was left for good);
        // `remove_dir_all` follows no link.
        let _ = match fs::symlink_metadata(&aside) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(&aside),
            _ => fs::remove_file(&aside),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn node() -> Option<NodeInfo> {
        let path = super::super::node::choose(None).ok()?;
        super::super::node::probe(&path).ok()
    }

    #[test]
    fn builds_once_then_reuses_and_keys_by_flags() {
        let Some(node) = node() else { return };
        let dir = tempfile::tempdir().unwrap();
        let snaps = dir.path().join("s");
        let flags = vec!["--max-old-space-size=64".to_string()];
        let a = ensure(&snaps, &node, &flags, "process.exit(0)").unwrap();
        let built = fs::metadata(&a).unwrap().modified().unwrap();
        let again = ensure(&snaps, &node, &flags, "process.exit(0)").unwrap();
        assert_eq!(a, again);
        assert_eq!(fs::metadata(&again).unwrap().modified().unwrap(), built);
        let other = vec!["--max-old-space-size=65".to_string()];
        assert_ne!(ensure(&snaps, &node, &other, "process.exit(0)").unwrap(), a);
        assert_ne!(ensure(&snaps, &node, &flags, "process.exit(1)").unwrap(), a);
        let mode = fs::metadata(&snaps).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // Nothing of the builds is left beside the blobs.
        let names: Vec<String> = fs::read_dir(&snaps)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| n.starts_with("runtime-")), "{names:?}");
        // The blob runs the runtime under the same flags.
        let status = Command::new(&node.path)
            .args(&flags)
            .arg("--snapshot-blob")
            .arg(&a)
            .env_clear()
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn a_second_build_never_replaces_the_blob_in_place() {
        let Some(node) = node() else { return };
        let dir = tempfile::tempdir().unwrap();
        let flags = vec!["--max-old-space-size=64".to_string()];
        let source = builder_source("0");
        let blob = ensure(dir.path(), &node, &flags, "0").unwrap();
        let inode = fs::metadata(&blob).unwrap().ino();
        // As a concurrent process that found no blob and built one too.
        // (Builds differ in length by a few bytes, so its blob may have a name of its own.)
        let key = key(&node, &flags, &source);
        build(dir.path(), &key, &node, &flags, &source).unwrap();
        assert_eq!(fs::metadata(&blob).unwrap().ino(), inode);
        assert!(fs::read_dir(dir.path()).unwrap().count() <= 2);
    }

    /// A blob cut short is not used: it is set aside and built again (review 24 F2: a
    /// blob cut to 3 MB made 3 runs of 10 die with signal 11, in every later process).
    #[test]
    fn a_blob_cut_short_is_built_again() {
        let Some(node) = node() else { return };
        let dir = tempfile::tempdir().unwrap();
        let flags = vec!["--max-old-space-size=64".to_string()];
        let blob = ensure(dir.path(), &node, &flags, "0").unwrap();
        let len = fs::metadata(&blob).unwrap().len();
        fs::OpenOptions::new()
            .write(true)
            .open(&blob)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
        let again = ensure(dir.path(), &node, &flags, "0").unwrap();
        let said: u64 = again
            .to_str()
            .and_then(|n| n.strip_suffix(".blob"))
            .and_then(|n| n.rsplit('.').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        assert_eq!(fs::metadata(&again).unwrap().len(), said);
        assert!(said > len / 2);
        // The blob cut short is gone.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_link_or_fifo_at_a_blobs_name_is_set_aside_and_built_again() {
        let Some(node) = node() else { return };
        let dir = tempfile::tempdir().unwrap();
        let flags = vec!["--max-old-space-size=64".to_string()];
        let blob = ensure(dir.path(), &node, &flags, "0").unwrap();
        fs::remove_file(&blob).unwrap();
        std::os::unix::fs::symlink("/nowhere", &blob).unwrap();
        let again = ensure(dir.path(), &node, &flags, "0").unwrap();
        let meta = fs::symlink_metadata(&again).unwrap();
        assert!(meta.is_file(), "{meta:?}");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn refuses_a_cache_under_a_directory_others_can_write() {
        let Some(node) = node() else { return };
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let err = ensure(&open.join("cache"), &node, &[], "0").unwrap_err();
        assert!(err.contains("writable by others"), "{err}");
    }

    #[test]
    fn refuses_a_blob_others_can_write() {
        let Some(node) = node() else { return };
        let dir = tempfile::tempdir().unwrap();
        let flags = vec!["--max-old-space-size=64".to_string()];
        let a = ensure(dir.path(), &node, &flags, "0").unwrap();
        fs::set_permissions(&a, fs::Permissions::from_mode(0o666)).unwrap();
        let err = ensure(dir.path(), &node, &flags, "0").unwrap_err();
        assert!(err.contains("writable by others"), "{err}");
    }

    #[test]
    fn a_failed_build_names_the_cause_and_leaves_nothing() {
        let Some(node) = node() else { return };
        let dir = tempfile::tempdir().unwrap();
        let err = ensure(dir.path(), &node, &[], "}{ not javascript").unwrap_err();
        assert!(err.contains("--build-snapshot exited"), "{err}");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
