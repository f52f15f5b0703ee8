//! What one Node start costs is paid once per machine, not per command: the probe of a
//! Node binary (its version and permission flag: two or three `node --version` runs) and
//! the calibration of the barriers (one real start to `ready`) are kept under
//! `$XDG_CACHE_HOME/toolsearch/hosts`, so a one-shot `toolsearch code` starts Node once.
//!
//! The cache is trusted only as far as its directory is (owned by this user, writable by
//! no one else, as for the startup snapshots), and even then an entry cannot weaken the
//! sandbox:
//! - an entry is keyed by everything it depends on, and holds that key in full: the
//!   binary's path, device, inode, size, modification and change times (a replaced or
//!   rebuilt Node is probed again), and for a calibration also the kernel release, the
//!   user, the policy, the runtime and this program's version;
//! - only a calibration that applied every barrier of the plan is stored, so an entry can
//!   only ever say "everything applies": it can never switch a barrier off;
//! - values are checked on the way in (the permission flag must be one of the two Node
//!   knows, the version must look like one), so a tampered entry cannot add a flag;
//! - a child that fails to start under a cached calibration removes the entry, and the
//!   next host calibrates again.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::NodeInfo;

/// The folder of entries: beside the snapshots.
pub fn default_dir() -> Option<PathBuf> {
    crate::cache::folder("hosts")
}

/// Everything a probe of `path` depends on, from its metadata (no Node run).
pub fn binary_key(path: &Path) -> Option<String> {
    let meta = fs::metadata(path).ok()?;
    Some(format!(
        "{}|dev={}|ino={}|len={}|mtime={}.{}|ctime={}.{}",
        path.display(),
        meta.dev(),
        meta.ino(),
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec()
    ))
}

/// Everything a calibration depends on besides the binary.
pub fn host_key(binary: &str, policy: &str, runtime: &str, snapshot: Option<&Path>) -> String {
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    policy.hash(&mut h);
    runtime.hash(&mut h);
    format!(
        "{binary}|kernel={}|euid={}|toolsearch={}|policy+runtime={:016x}|snapshot={}",
        kernel.trim(),
        nix::unistd::geteuid().as_raw(),
        env!("CARGO_PKG_VERSION"),
        h.finish(),
        snapshot
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    )
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    key: String,
    version: String,
    permission_flag: String,
}

fn file_for(dir: &Path, kind: &str, key: &str) -> PathBuf {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    dir.join(format!("{kind}-{:016x}.json", h.finish()))
}

/// A cached probe or calibration for `key`, checked; `None` for anything else.
pub fn load(dir: &Path, kind: &str, key: &str, node_path: &Path) -> Option<NodeInfo> {
    let dir = crate::cache::prepare(dir).ok()?;
    let file = file_for(&dir, kind, key);
    // Checked on the file opened, never read through a link or waited on: a FIFO swapped
    // in after a look by path hung every host's start (sandbox round 28 F3).
    let bytes = crate::cache::read_trusted(&file, 64 * 1024).ok()?;
    let entry: Entry = serde_json::from_slice(&bytes).ok()?;
    let version_ok = entry.version.len() < 32
        && entry.version.starts_with('v')
        && entry.version[1..]
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let flag_ok = matches!(
        entry.permission_flag.as_str(),
        "--permission" | "--experimental-permission"
    );
    (entry.key == key && version_ok && flag_ok).then(|| NodeInfo {
        path: node_path.to_path_buf(),
        version: entry.version,
        permission_flag: entry.permission_flag,
    })
}

/// Stores an entry (written under a fresh name, then renamed into place: a reader sees a
/// whole entry or none). Failures only cost the next command a probe.
pub fn store(dir: &Path, kind: &str, key: &str, node: &NodeInfo) {
    let Ok(dir) = crate::cache::prepare(dir) else {
        return;
    };
    let entry = Entry {
        key: key.to_string(),
        version: node.version.clone(),
        permission_flag: node.permission_flag.clone(),
    };
    let Ok(text) = serde_json::to_vec(&entry) else {
        return;
    };
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let partial = dir.join(format!(".{kind}-{}-{n}.partial", std::process::id()));
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .and_then(|mut f| f.write_all(&text));
    if written.is_err() || fs::rename(&partial, file_for(&dir, kind, key)).is_err() {
        let _ = fs::remove_file(&partial);
    }
}

/// Forgets an entry that turned out wrong; whether there was one.
pub fn forget(dir: &Path, kind: &str, key: &str) -> bool {
    fs::remove_file(file_for(dir, kind, key)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeInfo {
        NodeInfo {
            path: PathBuf::from("/usr/bin/node"),
            version: "v20.20.2".into(),
            permission_flag: "--experimental-permission".into(),
        }
    }

    #[test]
    fn an_entry_is_read_back_only_for_its_own_key_and_checked_values() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().join("hosts");
        store(&dir, "probe", "k1", &node());
        assert_eq!(
            load(&dir, "probe", "k1", Path::new("/usr/bin/node")),
            Some(node())
        );
        assert_eq!(load(&dir, "probe", "k2", Path::new("/usr/bin/node")), None);
        // A tampered entry that would add a grant to the command line is not trusted.
        let file = file_for(&dir, "probe", "k1");
        for bad in [
            r#"{"key":"k1","version":"v20.20.2","permission_flag":"--allow-fs-read=/"}"#,
            r#"{"key":"k1","version":"v20 --allow-fs-read=/","permission_flag":"--permission"}"#,
            r#"{"key":"other","version":"v20.20.2","permission_flag":"--permission"}"#,
            r#"{"key":"k1","version":"v20.20.2","permission_flag":"--permission","extra":1}"#,
            "not json",
        ] {
            fs::write(&file, bad).unwrap();
            assert_eq!(
                load(&dir, "probe", "k1", Path::new("/usr/bin/node")),
                None,
                "{bad}"
            );
        }
        // Writable by others: not trusted either.
        store(&dir, "probe", "k1", &node());
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&file, fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(load(&dir, "probe", "k1", Path::new("/usr/bin/node")), None);
        forget(&dir, "probe", "k1");
        assert!(!file.exists());
    }

    #[test]
    fn a_changed_binary_has_another_key() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("node");
        fs::write(&bin, b"one").unwrap();
        let before = binary_key(&bin).unwrap();
        fs::write(&bin, b"two!").unwrap();
        assert_ne!(before, binary_key(&bin).unwrap());
    }
}
