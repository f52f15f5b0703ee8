//! This user's cache folder, `$XDG_CACHE_HOME/toolsearch` (else `~/.cache/toolsearch`),
//! and the one rule for trusting a folder under it.
//!
//! What is kept there is work a process need not repeat: the sandbox's startup snapshots
//! and probe results, planned catalogs and their indexes. Some of it is run (a snapshot is
//! code the child executes) or believed (a stored catalog decides what a model may call),
//! so a folder is used only when no other user could have written into it: see
//! [`prepare`]. Everything kept here can be rebuilt; deleting the folder is always safe.

use rustix::fs::{self as at, AtFlags, FileType, Mode, OFlags};
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

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
/// pass through links whose targets can change after this check, the resolved path cannot
/// (every folder on it belongs to root or this user and is writable by no one else, or is
/// sticky, where others cannot rename what is not theirs).
///
/// The path is walked one step at a time from `/` through open folder handles, never by
/// name twice: each step is looked up in the folder already held and checked on the handle
/// opened for it (`O_NOFOLLOW`), links are read once and their target walked the same way,
/// and a folder is made private and emptied through its own handle. A path looked at and
/// then acted on by name again could be changed in between by whoever can write a folder
/// on it (a folder swapped for a link to `/etc` would have been made 0700 and emptied).
/// - folders are created 0700 whatever the umask (with 002, the default for users with a
///   group of their own, they would otherwise be group-writable);
/// - every link and folder on the way must belong to root or this user;
/// - above the folders this call may fix (the cache root and below, or `dir` itself when it
///   is not under the cache root), no folder may be writable by others unless sticky
///   (`/tmp`);
/// - `dir`, and each folder from the cache root down, must be a real folder owned by this
///   user and not sticky; one that others could write is made private and **emptied**
///   before anything in it is looked up: anything in it may have been planted, and
///   everything in a cache can be rebuilt.
pub fn prepare(dir: &Path) -> Result<PathBuf, String> {
    let dir = std::path::absolute(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut steps = steps_of(&dir);
    let Some(&(_, last)) = steps.back() else {
        return Err("the file system's root is not a cache folder".into());
    };
    let first_fixable = root()
        .filter(|r| dir.starts_with(r))
        .map(|r| r.components().count() - 1)
        .unwrap_or(last);
    let mut walk = Walk::start()?;
    while let Some((name, index)) = steps.pop_front() {
        walk.check_parent()?;
        if name == ".." {
            walk.up();
        } else {
            let parent = walk.top();
            let shown = walk.shown(&name);
            let meta = match at::statat(&parent.fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Err(e) if e == rustix::io::Errno::NOENT => {
                    match at::mkdirat(&parent.fd, name.as_os_str(), Mode::RWXU) {
                        Ok(()) => {}
                        Err(e) if e == rustix::io::Errno::EXIST => {}
                        Err(e) => return Err(format!("cannot create {}: {e}", shown.display())),
                    }
                    at::statat(&parent.fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                }
                other => other,
            }
            .map_err(|e| format!("{}: {e}", shown.display()))?;
            if !ours_or_root(meta.st_uid) {
                return Err(format!(
                    "{} is owned by another user; nothing is cached under it",
                    shown.display()
                ));
            }
            match FileType::from_raw_mode(meta.st_mode) {
                FileType::Symlink => walk.follow(&name, &shown, index, &mut steps)?,
                FileType::Directory => walk.down(name, &shown)?,
                _ => return Err(format!("{} is not a directory", shown.display())),
            }
        }
        // The folder this step ends in, once no later part of the same step is left.
        if index >= first_fixable && steps.front().is_none_or(|&(_, i)| i != index) {
            walk.fix_top()?;
        }
    }
    Ok(walk.path())
}

/// What a folder set aside by [`prepare`] is named with, before its name: nothing that
/// cleans a cache folder may remove one ([`removable`]), as it may hold what is not the
/// cache's.
pub const UNTRUSTED_PREFIX: &str = ".untrusted-";

/// Whether an entry of a prepared folder may be removed by what cleans the cache (pruning,
/// replacing): a file or folder this user made there, not a link (removed as itself
/// anyway), not a folder [`prepare`] set aside, and not another user's (which could only
/// have come from before the folder was private). Checked without following a link.
pub fn removable(path: &Path) -> bool {
    let aside = path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with(UNTRUSTED_PREFIX));
    !aside && fs::symlink_metadata(path).is_ok_and(|m| m.uid() == nix::unistd::geteuid().as_raw())
}

/// Whether `uid` is root or this user: the owners whose files and folders may be believed.
pub fn ours_or_root(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

/// Whether a folder of `mode` lets others change what is in it: writable by group or
/// others, and not sticky (in a sticky folder, as `/tmp`, others cannot replace what is
/// not theirs).
pub fn open_to_others(mode: u32) -> bool {
    mode & 0o022 != 0 && mode & 0o1000 == 0
}

/// The steps of an absolute `path` after `/`. Every step a link expands into keeps the
/// index of the step it replaces, so "the folder this step ends in" is known however many
/// links it passed through.
fn steps_of(path: &Path) -> VecDeque<(OsString, usize)> {
    let mut steps = VecDeque::new();
    for (i, c) in path.components().enumerate() {
        match c {
            Component::Normal(n) => steps.push_back((n.to_os_string(), i)),
            Component::ParentDir => steps.push_back(("..".into(), i)),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    steps
}

/// The largest config file read when found in the working folder.
const MAX_BELIEVED_BYTES: u64 = 1024 * 1024;

/// File systems whose files' owners say nothing of who wrote them: procfs shows a process
/// that made itself undumpable as root's, its `cmdline` whatever that process wrote (tenth
/// sandbox review: another user's config, read as root's, ran their program); FUSE shows
/// whatever owner its server says; the others are the kernel's, never a config.
const NOT_BELIEVED_FS: &[(i64, &str)] = &[
    (0x9fa0, "procfs"),
    (0x6265_6572, "sysfs"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0xcafe_4a11, "bpf"),
    (0x6265_6570, "configfs"),
    (0xde5e_81e4, "efivarfs"),
    (0x6165_676c, "pstore"),
    (0x1cd1, "devpts"),
    (0x6573_5546, "fuse"),
    (0x6573_5543, "fusectl"),
];

/// Reads a file that names programs to run (a config found in the working folder), if it
/// may be believed: walked from `/` through folder handles as [`prepare`] walks (each
/// link read once and followed the same way), every folder on the way and every link
/// belonging to root or this user and no folder writable by others unless sticky, and the
/// file itself a regular one of root's or this user's that no one else may write, on a
/// file system whose owners mean something ([`NOT_BELIEVED_FS`]), of at most 1 MiB. Checked
/// only as far as the first link, a link to a file in a folder others could write let them
/// put anything there.
pub fn read_believed(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let path = std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut steps = steps_of(&path);
    let mut walk = Walk::start()?;
    while let Some((name, index)) = steps.pop_front() {
        walk.check_parent()?;
        if name == ".." {
            walk.up();
            continue;
        }
        let parent = walk.top();
        let shown = walk.shown(&name);
        let meta = at::statat(&parent.fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| format!("{}: {e}", shown.display()))?;
        if !ours_or_root(meta.st_uid) {
            return Err(format!("{} is owned by another user", shown.display()));
        }
        match FileType::from_raw_mode(meta.st_mode) {
            FileType::Symlink => walk.follow(&name, &shown, index, &mut steps)?,
            FileType::Directory if !steps.is_empty() => walk.down(name, &shown)?,
            FileType::RegularFile if steps.is_empty() => {
                let fd = at::openat(
                    &parent.fd,
                    name.as_os_str(),
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| format!("{}: {e}", shown.display()))?;
                let st = at::fstat(&fd).map_err(|e| format!("{}: {e}", shown.display()))?;
                if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                    return Err(format!("{} is not a regular file", shown.display()));
                }
                if !ours_or_root(st.st_uid) || st.st_mode & 0o022 != 0 {
                    return Err(format!(
                        "{} belongs to another user or others can write it",
                        shown.display()
                    ));
                }
                let fs = at::fstatfs(&fd).map_err(|e| format!("{}: {e}", shown.display()))?;
                if let Some((_, kind)) = NOT_BELIEVED_FS
                    .iter()
                    .find(|(magic, _)| *magic == fs.f_type as i64)
                {
                    return Err(format!(
                        "{} is on {kind}, whose owners do not say who wrote a file",
                        shown.display()
                    ));
                }
                let mut bytes = Vec::new();
                fs::File::from(fd)
                    .take(MAX_BELIEVED_BYTES + 1)
                    .read_to_end(&mut bytes)
                    .map_err(|e| format!("{}: {e}", shown.display()))?;
                if bytes.len() as u64 > MAX_BELIEVED_BYTES {
                    return Err(format!(
                        "{} is over {MAX_BELIEVED_BYTES} bytes",
                        shown.display()
                    ));
                }
                return Ok(bytes);
            }
            FileType::Directory => return Err(format!("{} is a folder", shown.display())),
            _ if steps.is_empty() => {
                return Err(format!("{} is not a regular file", shown.display()));
            }
            _ => return Err(format!("{} is not a directory", shown.display())),
        }
    }
    Err(format!("{} is not a file", path.display()))
}

/// At most this many links on one path, as the kernel's own limit (`ELOOP`).
const MAX_LINKS: usize = 40;

/// A folder held open on the walk ([`prepare`]).
struct Held {
    fd: OwnedFd,
    name: OsString,
    /// Checked as a folder to look things up in: ours or root's, not open to others
    /// unless sticky (or made private).
    checked: bool,
}

/// The open folders from `/` to where [`prepare`] has got, each opened in its parent.
struct Walk {
    held: Vec<Held>,
    me: u32,
    /// Links followed so far.
    links: usize,
}

impl Walk {
    fn start() -> Result<Walk, String> {
        let fd = at::open(
            "/",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("/: {e}"))?;
        Ok(Walk {
            held: vec![Held {
                fd,
                name: "/".into(),
                checked: false,
            }],
            me: nix::unistd::geteuid().as_raw(),
            links: 0,
        })
    }

    fn top(&self) -> &Held {
        // Never empty: `up` and `back_to_root` keep `/`.
        &self.held[self.held.len() - 1]
    }

    fn path(&self) -> PathBuf {
        self.held.iter().map(|h| h.name.as_os_str()).collect()
    }

    fn shown(&self, name: &OsStr) -> PathBuf {
        self.path().join(name)
    }

    fn up(&mut self) {
        if self.held.len() > 1 {
            self.held.pop();
        }
    }

    fn back_to_root(&mut self) {
        self.held.truncate(1);
    }

    /// The link `name` in the top folder: its target's steps go before `steps`, walked from
    /// `/` when it is absolute, each keeping the `index` of the step it replaces.
    fn follow(
        &mut self,
        name: &OsStr,
        shown: &Path,
        index: usize,
        steps: &mut VecDeque<(OsString, usize)>,
    ) -> Result<(), String> {
        self.links += 1;
        if self.links > MAX_LINKS {
            return Err(format!("{}: too many links on the way", shown.display()));
        }
        let target = at::readlinkat(&self.top().fd, name, Vec::new())
            .map_err(|e| format!("{}: {e}", shown.display()))?;
        let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
        if target.is_absolute() {
            self.back_to_root();
        }
        for c in target.components().rev() {
            match c {
                Component::Normal(n) => steps.push_front((n.to_os_string(), index)),
                Component::ParentDir => steps.push_front(("..".into(), index)),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
        Ok(())
    }

    fn down(&mut self, name: OsString, shown: &Path) -> Result<(), String> {
        // By the handle of the parent already checked, not following a link: what was
        // looked at a moment ago may have been replaced, and whatever is opened is what
        // gets checked (on the handle).
        let fd = at::openat(
            &self.top().fd,
            name.as_os_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("{}: {e}", shown.display()))?;
        self.held.push(Held {
            fd,
            name,
            checked: false,
        });
        Ok(())
    }

    /// The top folder, about to be looked in: it must belong to root or this user and be
    /// writable by no one else unless sticky.
    fn check_parent(&mut self) -> Result<(), String> {
        if self.top().checked {
            return Ok(());
        }
        let shown = self.path();
        let st = at::fstat(&self.top().fd).map_err(|e| format!("{}: {e}", shown.display()))?;
        if !ours_or_root(st.st_uid) {
            return Err(format!("{} is owned by another user", shown.display()));
        }
        if open_to_others(st.st_mode) {
            return Err(format!("{} is writable by others", shown.display()));
        }
        if let Some(top) = self.held.last_mut() {
            top.checked = true;
        }
        Ok(())
    }

    /// The top folder is one of ours (the cache root and below, or the folder asked for):
    /// it must be a folder of this user's, not a shared one, and is made private. One that
    /// others could write is set aside whole (renamed, private) and a fresh one made in its
    /// place: anything in it may have been planted, or moved in by another user to have
    /// it deleted (a folder of this user's that they could rename, but not empty
    /// themselves), so nothing in it is used, and nothing in it is deleted either.
    fn fix_top(&mut self) -> Result<(), String> {
        let shown = self.path();
        let [.., parent, top] = &self.held[..] else {
            return Err("the file system's root is not a cache folder".into());
        };
        let st = at::fstat(&top.fd).map_err(|e| format!("{}: {e}", shown.display()))?;
        if st.st_uid != self.me {
            return Err(format!("{} is not owned by this user", shown.display()));
        }
        // A sticky folder is shared on purpose (`/tmp`): never made private or set aside.
        if st.st_mode & 0o1000 != 0 {
            return Err(format!(
                "{} is a shared folder (sticky); nothing is cached in it",
                shown.display()
            ));
        }
        // A handle that can change the folder: the walk's are path-only.
        let private = |fd: &OwnedFd| {
            at::openat(
                fd,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .and_then(|fd| at::fchmod(&fd, Mode::RWXU))
            .map_err(|e| format!("cannot make {} private: {e}", shown.display()))
        };
        if st.st_mode & 0o022 != 0 {
            // Renamed first, then made private through its handle: made private first, a
            // rename that failed (a full disk, a file system without NOREPLACE) left it
            // looking like a folder of ours with what was planted in it, trusted next time.
            // Renamed by name in the parent held: a folder no one else can change, so the
            // name still holds the folder just checked.
            let aside = OsString::from(format!(
                "{UNTRUSTED_PREFIX}{}-{}-{}",
                top.name.to_string_lossy(),
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos())
            ));
            at::renameat_with(
                &parent.fd,
                top.name.as_os_str(),
                &parent.fd,
                aside.as_os_str(),
                at::RenameFlags::NOREPLACE,
            )
            .map_err(|e| format!("cannot set {} aside: {e}", shown.display()))?;
            private(&top.fd)?;
            let name = top.name.clone();
            let aside_shown = shown.with_file_name(&aside);
            self.up();
            match at::mkdirat(&self.top().fd, name.as_os_str(), Mode::RWXU) {
                Ok(()) => {}
                Err(e) => return Err(format!("cannot create {}: {e}", shown.display())),
            }
            self.down(name, &shown)?;
            tracing::warn!(
                "{} was writable by others: set aside as {} (private; nothing in it is used, \
                 delete it once you have looked) and made again",
                shown.display(),
                aside_shown.display()
            );
            // The fresh folder: made 0700 by this process, checked as any other.
            return self.fix_top();
        }
        if st.st_mode & 0o7777 != 0o700 {
            private(&top.fd)?;
        }
        if let Some(top) = self.held.last_mut() {
            top.checked = true;
        }
        Ok(())
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

/// Opens a file of a prepared folder, if it is [`trusted_file`]: without following a link
/// and without blocking, and checked on the open file, so a link, a FIFO or a device put in
/// its place is refused, not read or waited on.
pub fn open_trusted(path: &Path) -> Result<(fs::File, fs::Metadata), String> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    trusted_file(path, &meta)?;
    Ok((file, meta))
}

/// Reads a file of a prepared folder whole ([`open_trusted`]), if it is at most `max` bytes.
pub fn read_trusted(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let (file, meta) = open_trusted(path)?;
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

/// Opens a file of a prepared folder to append to, created 0600 if missing: never through a
/// link, never blocking on a FIFO, and refused unless what was opened is a regular file of
/// this user's that no one else may write ([`trusted_file`]). A log's name is often
/// predictable (a session key): a link planted at it would have had lines appended to any
/// file the process may write (a shell's start-up file, where a logged query runs).
pub fn open_append(path: &Path) -> std::io::Result<fs::File> {
    let file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    trusted_file(path, &file.metadata()?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e))?;
    Ok(file)
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
        // Set aside whole, private, not deleted: it may hold what is not the cache's.
        let aside: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".untrusted-a-"))
            .collect();
        assert_eq!(aside.len(), 1);
        assert_eq!(aside[0].metadata().unwrap().mode() & 0o777, 0o700);
        assert!(aside[0].path().join("planted").exists());
        assert!(aside[0].path().join("planted-folder").is_dir());

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
        assert!(err.contains("open is writable by others"), "{err}");
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

    /// Links are followed as the kernel would (relative, absolute, `..`, chains), each read
    /// once, the result being the folder they lead to; a loop is an error, not a hang.
    #[test]
    fn links_on_the_way_are_followed_once_and_a_loop_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        fs::create_dir_all(base.join("real/deep")).unwrap();
        std::os::unix::fs::symlink("real/deep/..", base.join("rel")).unwrap();
        std::os::unix::fs::symlink(base.join("rel"), base.join("abs")).unwrap();
        let got = prepare(&base.join("abs/./x/../cache")).unwrap();
        assert_eq!(got, base.join("real/cache"));
        assert!(base.join("real/cache").is_dir());
        assert!(!base.join("real/x").exists() || base.join("real/x").is_dir());

        std::os::unix::fs::symlink("b", base.join("a")).unwrap();
        std::os::unix::fs::symlink("a", base.join("b")).unwrap();
        let err = prepare(&base.join("a/cache")).unwrap_err();
        assert!(err.contains("too many links"), "{err}");

        fs::write(base.join("file"), "x").unwrap();
        let err = prepare(&base.join("file/cache")).unwrap_err();
        assert!(err.contains("not a directory"), "{err}");
        assert!(prepare(Path::new("/")).is_err());
    }

    /// A folder others could write may hold links planted to any folder of ours: it is
    /// made private and emptied through its handle before anything in it is looked up, so a
    /// planted link is removed, never followed, and what it pointed at is untouched.
    #[test]
    fn a_link_planted_in_an_open_cache_folder_is_removed_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        fs::create_dir(&victim).unwrap();
        fs::write(victim.join("precious"), "x").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o757)).unwrap();
        let open = tmp.path().join("open");
        fs::create_dir(&open).unwrap();
        std::os::unix::fs::symlink(&victim, open.join("hosts")).unwrap();
        fs::create_dir(open.join("planted")).unwrap();
        std::os::unix::fs::symlink(&victim, open.join("planted/inner")).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let got = prepare(&open).unwrap();
        assert_eq!(fs::read_dir(&got).unwrap().count(), 0);
        assert_eq!(fs::metadata(&victim).unwrap().mode() & 0o777, 0o757);
        assert!(victim.join("precious").exists());
    }

    /// Another user who can write a cache folder may move into it a folder of ours they
    /// could rename but not empty (its parent open to them, it private): nothing of it is
    /// deleted, it is set aside with the rest.
    #[test]
    fn a_folder_of_ours_moved_into_an_open_cache_folder_loses_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = tmp.path().join("cache");
        fs::create_dir(&cache).unwrap();
        let precious = tmp.path().join("precious");
        fs::create_dir_all(precious.join("private")).unwrap();
        fs::write(precious.join("private/work"), "x").unwrap();
        fs::set_permissions(precious.join("private"), fs::Permissions::from_mode(0o700)).unwrap();
        fs::rename(&precious, cache.join("snapshots")).unwrap();
        fs::set_permissions(&cache, fs::Permissions::from_mode(0o777)).unwrap();
        let got = prepare(&cache).unwrap();
        assert_eq!(fs::read_dir(&got).unwrap().count(), 0);
        let aside = fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .find(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".untrusted-cache-")
            })
            .expect("set aside");
        assert_eq!(
            fs::read_to_string(aside.path().join("snapshots/private/work")).unwrap(),
            "x"
        );
    }

    /// Another user who can write a cache folder swaps a folder on the path for their link
    /// to a folder of ours, back and forth, while the path is prepared (`RENAME_EXCHANGE`,
    /// the round-D attack: by path, a check could see the folder and the chmod and emptying
    /// land on the link's target). Through handles, a run either refuses or fixes the cache
    /// folder itself: the target is never made private nor emptied.
    #[test]
    fn a_folder_swapped_for_another_user_s_link_during_the_walk_never_redirects_it() {
        if !nix::unistd::geteuid().is_root() {
            return; // a link of another user's needs root
        }
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        fs::create_dir(&victim).unwrap();
        fs::write(victim.join("precious"), "x").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o777)).unwrap();
        let outer = tmp.path().join("outer");
        fs::create_dir(&outer).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let racer = {
            let (outer, victim, stop) = (outer.clone(), victim.clone(), stop.clone());
            std::thread::spawn(move || {
                use std::sync::atomic::Ordering;
                let (a, b) = (outer.join("cache"), outer.join("evil"));
                while !stop.load(Ordering::Relaxed) {
                    // Set the stage again whatever the last prepare removed or made private.
                    let _ = fs::create_dir(&a);
                    let _ = fs::set_permissions(&a, fs::Permissions::from_mode(0o777));
                    let _ = std::os::unix::fs::symlink(&victim, &b);
                    let _ = std::os::unix::fs::lchown(&b, Some(12345), None);
                    for _ in 0..50 {
                        let _ = rustix::fs::renameat_with(
                            rustix::fs::CWD,
                            &a,
                            rustix::fs::CWD,
                            &b,
                            rustix::fs::RenameFlags::EXCHANGE,
                        );
                    }
                }
            })
        };
        for _ in 0..400 {
            let _ = prepare(&outer.join("cache"));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        racer.join().unwrap();
        assert_eq!(fs::metadata(&victim).unwrap().mode() & 0o777, 0o777);
        assert!(victim.join("precious").exists());
    }

    /// What cleans the cache removes only its own: never a folder set aside, nor another
    /// user's entry (a catalog store pruned a planted `*.index` of another user's, with a
    /// folder moved into it, when a set-aside had failed).
    #[test]
    fn only_this_user_s_entries_not_set_aside_are_removable() {
        let tmp = tempfile::tempdir().unwrap();
        let mine = tmp.path().join("k.index");
        fs::create_dir(&mine).unwrap();
        assert!(removable(&mine));
        let aside = tmp.path().join(format!("{UNTRUSTED_PREFIX}catalogs-1-2"));
        fs::create_dir(&aside).unwrap();
        assert!(!removable(&aside));
        assert!(!removable(&tmp.path().join("missing")));
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::lchown(&mine, Some(12345), None).unwrap();
            assert!(!removable(&mine));
        }
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
