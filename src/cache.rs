//! This user's cache folder, `$XDG_CACHE_HOME/toolsearch` (else `~/.cache/toolsearch`),
//! and the one rule for trusting a folder under it.
//!
//! What is kept there is work a process need not repeat: the sandbox's startup snapshots
//! and probe results, planned catalogs and their indexes. Some of it is run (a snapshot is
//! code the child executes) or believed (a stored catalog decides what a model may call),
//! so a folder is used only when no other user could have written into it: see
//! [`prepare`]. Everything kept here can be rebuilt; deleting the folder is always safe.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// `$XDG_CACHE_HOME/toolsearch`, else `$HOME/.cache/toolsearch`; none without either
/// (nothing is cached). A relative `XDG_CACHE_HOME` is ignored, as the XDG base directory
/// specification asks; so is a relative `HOME`.
pub fn root() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from) {
        Some(d) if d.is_absolute() => d,
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    };
    base.is_absolute().then(|| base.join("toolsearch"))
}

/// A folder of the cache root by name (`snapshots`, `hosts`, `catalogs`).
pub fn folder(name: &str) -> Option<PathBuf> {
    root().map(|r| r.join(name))
}

/// Creates `dir` if needed and checks that only this user can change what is in it: it
/// must be a real folder owned by this user (made private, 0700, if it was not), and every
/// ancestor must belong to root or this user and be writable by no one else unless sticky
/// (as `/tmp`, where others cannot rename what is ours). Whoever can rename entries in a
/// parent could swap the whole folder.
pub fn prepare(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let meta = fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!("{} is not owned by this user", dir.display()));
    }
    if meta.mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make {} private: {e}", dir.display()))?;
    }
    for parent in dir.ancestors().skip(1) {
        let m = fs::metadata(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        let sticky = m.mode() & 0o1000 != 0;
        if (m.uid() != 0 && m.uid() != me) || (m.mode() & 0o022 != 0 && !sticky) {
            return Err(format!(
                "{} is writable by others or owned by another user; nothing is cached under it",
                parent.display()
            ));
        }
    }
    Ok(())
}

/// A file in a prepared folder may be believed: a regular file (not a link), owned by this
/// user and writable by no one else.
pub fn trusted_file(path: &Path, meta: &fs::Metadata) -> Result<(), String> {
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is writable by others or not owned by this user",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_folder_others_can_write_is_made_private_and_a_shared_parent_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        prepare(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);

        let shared = tmp.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
        let err = prepare(&shared.join("inner")).unwrap_err();
        assert!(err.contains("writable by others"), "{err}");
    }

    #[test]
    fn a_link_is_not_a_trusted_file() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("t");
        fs::write(&target, "x").unwrap();
        let link = tmp.path().join("l");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let meta = fs::symlink_metadata(&link).unwrap();
        assert!(trusted_file(&link, &meta).is_err());
        let meta = fs::symlink_metadata(&target).unwrap();
        trusted_file(&target, &meta).unwrap();
    }
}
