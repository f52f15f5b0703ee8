//! This user's cache folder, `$XDG_CACHE_HOME/toolsearch` (else `~/.cache/toolsearch`),
//! and the one rule for trusting a folder under it.
//!
//! What is kept there is work a process need not repeat: the sandbox's startup snapshots
//! and probe results, planned catalogs and their indexes. Some of it is run (a snapshot is
//! code the child executes) or believed (a stored catalog decides what a model may call),
//! so a folder is used only when no other user could have written into it: see
//! [`prepare`]. Everything kept here can be rebuilt; deleting the folder is always safe.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A new folder in the temp dir, `<prefix>XXXXXXXX` (0700, a random tail, made by this
/// call: never one that was there), for whatever a process keeps in the shared temp dir.
/// A name others can predict (a PID, a counter) they can create first, with a link or a
/// config planted in it for this process to follow or run. Kept (not removed on drop):
/// the caller removes it.
pub fn private_temp_dir(prefix: &str) -> std::io::Result<PathBuf> {
    Ok(tempfile::Builder::new()
        .prefix(prefix)
        .permissions(fs::Permissions::from_mode(0o700))
        .tempdir_in(std::env::temp_dir())?
        .keep())
}

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

/// Creates `dir` if needed and makes sure that only this user can have changed what is in
/// it, so that what a process finds there is what a process of this user left. Returns the
/// folder's resolved path, **the one every later use must go through**: `dir` as given may
/// pass through links whose targets can change after this check (a link another user
/// could swap would hand later opens a folder of theirs), the resolved path cannot.
/// - folders are created 0700 whatever the umask (with 002, the default for users with a
///   group of their own, they would otherwise be group-writable);
/// - both the path as given and the path resolved are checked, so a symlink can neither
///   hide an ancestor another user owns nor be one: every link and folder on the way as
///   given must belong to root or this user;
/// - `dir` must be a real folder owned by this user. Above the cache root, every ancestor
///   must belong to root or this user and be writable by no one else unless sticky (as
///   `/tmp`, where others cannot rename what is ours): whoever can rename entries in a
///   parent could swap the whole folder. From the cache root down, a folder of ours that
///   others could write is made private and **emptied**: anything in it may have been
///   planted, and everything in a cache can be rebuilt.
pub fn prepare(dir: &Path) -> Result<PathBuf, String> {
    let me = nix::unistd::geteuid().as_raw();
    // The path as given, without following links. A link another user owns, or one in a
    // folder others may write (where it can be replaced), could resolve differently from
    // one look to the next: between the check and the creation, or between two
    // resolutions, turning the folder made private and emptied below into anyone's
    // (`/tmp`'s contents emptied, `/etc` made 0700). So every step must belong to root or
    // this user, every link must sit in a folder only they can change (or a sticky one,
    // where others cannot replace what is not theirs), and above the folders this call may
    // fix (the cache root and below, or `dir` itself) no folder may be open to others
    // unless sticky. Checked before anything is made (nothing is created through another
    // user's link) and again after (a step that did not exist yet, made meanwhile by
    // someone else, is seen). Later swaps cannot reach this process: it goes through the
    // resolved path only.
    let fixable = root()
        .filter(|r| dir.starts_with(r))
        .unwrap_or_else(|| dir.to_path_buf());
    let given = |dir: &Path| -> Result<(), String> {
        if !dir.is_absolute() {
            return Ok(());
        }
        for step in dir.ancestors() {
            let Ok(m) = fs::symlink_metadata(step) else {
                continue;
            };
            if m.uid() != 0 && m.uid() != me {
                return Err(format!(
                    "{} is owned by another user; nothing is cached under it",
                    step.display()
                ));
            }
            let open = |m: &fs::Metadata| m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0;
            if m.file_type().is_symlink()
                && let Some(parent) = step.parent()
                && fs::symlink_metadata(parent).is_ok_and(|p| open(&p))
            {
                return Err(format!(
                    "{} is a link in a folder others can write; nothing is cached under it",
                    step.display()
                ));
            }
            if m.is_dir() && !step.starts_with(&fixable) && open(&m) {
                return Err(format!(
                    "{} is writable by others; nothing is cached under it",
                    step.display()
                ));
            }
        }
        Ok(())
    };
    given(dir)?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    given(dir)?;
    let real = dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let meta = fs::symlink_metadata(&real).map_err(|e| format!("{}: {e}", real.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", real.display()));
    }
    if meta.uid() != me {
        return Err(format!("{} is not owned by this user", real.display()));
    }
    // The cache root as found from this same resolution (never resolved again): `dir`'s
    // steps below the root, taken off `real`.
    let below_root = root()
        .and_then(|r| dir.strip_prefix(r).ok().map(|t| t.components().count()))
        .unwrap_or(0);
    let real_root = real
        .ancestors()
        .nth(below_root)
        .unwrap_or(&real)
        .to_path_buf();
    for folder in real.ancestors() {
        let m = fs::symlink_metadata(folder).map_err(|e| format!("{}: {e}", folder.display()))?;
        let ours = folder.starts_with(&real_root);
        let writable_by_others = m.mode() & 0o022 != 0;
        let sticky = m.mode() & 0o1000 != 0;
        if ours && m.uid() == me {
            // A sticky folder is shared on purpose (`/tmp`): never made private or emptied.
            if sticky {
                return Err(format!(
                    "{} is a shared folder (sticky); nothing is cached in it",
                    folder.display()
                ));
            }
            if writable_by_others {
                make_private(folder)?;
                empty(folder);
                tracing::warn!(
                    "{} was writable by others: made private and emptied",
                    folder.display()
                );
            } else if m.mode() & 0o077 != 0 {
                make_private(folder)?;
            }
            continue;
        }
        if (m.uid() != 0 && m.uid() != me) || (writable_by_others && !sticky) {
            return Err(format!(
                "{} is writable by others or owned by another user; nothing is cached under it",
                folder.display()
            ));
        }
    }
    Ok(real)
}

fn make_private(dir: &Path) -> Result<(), String> {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot make {} private: {e}", dir.display()))
}

/// Removes everything in `dir` (not following links).
fn empty(dir: &Path) {
    let Ok(items) = fs::read_dir(dir) else { return };
    for item in items.flatten() {
        let path = item.path();
        let removed = match item.file_type() {
            Ok(t) if t.is_dir() => fs::remove_dir_all(&path),
            _ => fs::remove_file(&path),
        };
        if let Err(e) = removed {
            tracing::debug!("cannot remove {}: {e}", path.display());
        }
    }
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

/// Reads a file of a prepared folder whole, if it is [`trusted_file`] and at most `max`
/// bytes. Opened without following a link and without blocking, and checked on the open
/// file, so a link, a FIFO or a device put in its place is refused, not read or waited on.
pub fn read_trusted(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    trusted_file(path, &meta)?;
    if meta.len() > max {
        return Err(format!(
            "{} is {} bytes, over {max}",
            path.display(),
            meta.len()
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(bytes)
}

/// Writes `bytes` to `path` in `dir` atomically: a fresh file of a random name (0600),
/// synced, then renamed into place, so that a reader sees the old file or the new one,
/// never half of one, and a crash leaves at most a temporary file of this process's own.
pub fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let mut temp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempfile_in(dir)
        .map_err(fail)?;
    temp.write_all(bytes).map_err(fail)?;
    temp.as_file().sync_all().map_err(fail)?;
    temp.persist(path).map_err(|e| fail(e.error))?;
    Ok(())
}

/// What temporary files and folders in a cache folder begin with: anything of that name
/// older than a few minutes was left by a process that died.
pub const TEMP_PREFIX: &str = ".tmp-";

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_folder_others_can_write_is_made_private_and_a_shared_parent_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("planted"), "x").unwrap();
        fs::create_dir(dir.join("planted-folder")).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        prepare(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            0,
            "anything in it may be planted"
        );

        // Readable by others only: made private, kept.
        fs::write(dir.join("kept"), "x").unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        prepare(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert!(dir.join("kept").exists());

        // Created private whatever is missing of the path.
        let deep = tmp.path().join("x/y/z");
        prepare(&deep).unwrap();
        for d in ["x", "x/y", "x/y/z"] {
            assert_eq!(
                fs::metadata(tmp.path().join(d)).unwrap().mode() & 0o777,
                0o700,
                "{d}"
            );
        }

        let shared = tmp.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
        let err = prepare(&shared.join("inner")).unwrap_err();
        assert!(err.contains("writable by others"), "{err}");

        // Reached through a link, the shared parent is still seen.
        fs::create_dir(shared.join("inner")).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(shared.join("inner"), &link).unwrap();
        let err = prepare(&link).unwrap_err();
        assert!(err.contains("writable by others"), "{err}");
    }

    /// The folder is used by the path it resolved to when checked: a link swapped later
    /// cannot redirect this process. A link another user owns (or one in a folder of
    /// theirs) is refused outright, as they could point it anywhere before the next process.
    #[test]
    fn a_folder_is_used_by_its_resolved_path_and_another_user_s_link_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let mine = tmp.path().join("mine");
        fs::create_dir(&mine).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&mine, &link).unwrap();
        let resolved = prepare(&link.join("snapshots")).unwrap();
        assert_eq!(resolved, mine.canonicalize().unwrap().join("snapshots"));
        // Swapping the link afterwards changes nothing for whoever holds `resolved`.
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        assert!(resolved.starts_with(mine.canonicalize().unwrap()));

        // A link where others can replace it could resolve to any folder between two looks
        // (one race emptied a stand-in for /tmp): refused, though the link is ours.
        let open = tmp.path().join("open");
        fs::create_dir(&open).unwrap();
        std::os::unix::fs::symlink(&mine, open.join("cache")).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let err = prepare(&open.join("cache").join("snapshots")).unwrap_err();
        assert!(err.contains("a link in a folder others can write"), "{err}");
        // A shared (sticky) folder reached as the folder itself is never made private.
        let shared = tmp.path().join("sticky");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
        let err = prepare(&shared).unwrap_err();
        assert!(err.contains("sticky"), "{err}");
        assert_eq!(fs::metadata(&shared).unwrap().mode() & 0o7777, 0o1777);

        if !nix::unistd::geteuid().is_root() {
            return; // giving a link to another user needs root
        }
        let other = 12345;
        let theirs = tmp.path().join("theirs");
        fs::create_dir(&theirs).unwrap();
        fs::set_permissions(&theirs, fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(other), None).unwrap();
        std::os::unix::fs::symlink(&mine, theirs.join("toolsearch")).unwrap();
        std::os::unix::fs::lchown(theirs.join("toolsearch"), Some(other), None).unwrap();
        let err = prepare(&theirs.join("toolsearch").join("snapshots")).unwrap_err();
        assert!(err.contains("owned by another user"), "{err}");
        // A link of ours inside their folder: they can still replace it, so refused too.
        let ours_in_theirs = theirs.join("ours");
        std::os::unix::fs::symlink(&mine, &ours_in_theirs).unwrap();
        let err = prepare(&ours_in_theirs.join("snapshots")).unwrap_err();
        assert!(err.contains("owned by another user"), "{err}");
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
