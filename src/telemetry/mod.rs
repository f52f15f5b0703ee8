//! Counters and the JSONL session log.
//!
//! The session log lets anyone tell, after the fact, how many tool schemas the model saw at
//! first, how many searches and describes it made, which final tool ran and where it came
//! from. One event a line, each line written with a single `write` on a file opened in
//! append mode and never buffered, so a process killed between two events loses neither
//! (and a process killed in the middle of one leaves at most that one line short).
//!
//! A long-lived host (the gateway) holds many sessions: [`SessionLog::release`] closes a
//! session's file between its turns, and the next event opens it again, so the files a
//! host holds open grow with its turns in flight, not with its sessions. A session key
//! becomes a file name that names no other key ([`session_file_name`]).
//!
//! This module records; it decides nothing.

pub mod stderr;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{Value, json};

use crate::catalog::Source;
use crate::error::{Error, Result};

/// Counts per catalog: what a run did, and with which sources.
#[derive(Debug, Default)]
pub struct Counters {
    searches: AtomicU64,
    describes: AtomicU64,
    calls: AtomicU64,
    /// Calls whose executor ran.
    executed: AtomicU64,
    by_source: parking_lot::Mutex<BTreeMap<String, u64>>,
    /// The most recent [`MAX_SELECTED`] tool ids executed.
    selected: parking_lot::Mutex<std::collections::VecDeque<String>>,
}

/// Tool ids [`Counters`] remembers: a session that lives for days keeps its latest.
pub const MAX_SELECTED: usize = 1024;

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CounterSnapshot {
    pub search_count: u64,
    pub describe_count: u64,
    pub call_count: u64,
    pub executed_count: u64,
    /// Executed calls by source.
    pub executed_by_source: BTreeMap<String, u64>,
    /// Ids of the tools executed, in order (the latest [`MAX_SELECTED`]).
    pub selected: Vec<String>,
}

impl Counters {
    pub fn searched(&self, queries: u64) {
        self.searches.fetch_add(queries, Ordering::Relaxed);
    }

    pub fn described(&self) {
        self.describes.fetch_add(1, Ordering::Relaxed);
    }

    pub fn called(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    pub fn executed(&self, id: &str, source: Source) {
        self.executed.fetch_add(1, Ordering::Relaxed);
        *self
            .by_source
            .lock()
            .entry(source.as_str().to_string())
            .or_default() += 1;
        let mut selected = self.selected.lock();
        if selected.len() == MAX_SELECTED {
            selected.pop_front();
        }
        selected.push_back(id.to_string());
    }

    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            search_count: self.searches.load(Ordering::Relaxed),
            describe_count: self.describes.load(Ordering::Relaxed),
            call_count: self.calls.load(Ordering::Relaxed),
            executed_count: self.executed.load(Ordering::Relaxed),
            executed_by_source: self.by_source.lock().clone(),
            selected: self.selected.lock().iter().cloned().collect(),
        }
    }
}

/// The session log: one JSON event a line.
#[derive(Debug)]
pub struct SessionLog {
    session: String,
    path: Option<PathBuf>,
    /// The open file, `None` inside while released; `None` outside when disabled.
    file: Option<parking_lot::Mutex<Option<File>>>,
    seq: AtomicU64,
    /// What [`SessionLog::no_effect`] may still write.
    no_effect: parking_lot::Mutex<NoEffectBudget>,
    /// The last rotation found the lock held past [`LOCK_WAIT`]: the next ones only try it.
    rotation_blocked: std::sync::atomic::AtomicBool,
}

/// Events of requests that acted on nothing (searches, describes, refusals), and tools'
/// progress lines, written at most
/// [`NO_EFFECT_PER_SECOND`] (after a burst of [`NO_EFFECT_BURST`]), the rest counted: such
/// requests cost a caller nothing,
/// and 300,000 refusals in 50 s rotated a session's log twice and took with it the record
/// of a call that had run (review 12). Calls that ran are always written.
pub const NO_EFFECT_PER_SECOND: f64 = 50.0;
pub const NO_EFFECT_BURST: f64 = 500.0;

#[derive(Debug)]
struct NoEffectBudget {
    tokens: f64,
    at: std::time::Instant,
    unwritten: u64,
}

impl Default for NoEffectBudget {
    fn default() -> Self {
        NoEffectBudget {
            tokens: NO_EFFECT_BURST,
            at: std::time::Instant::now(),
            unwritten: 0,
        }
    }
}

impl SessionLog {
    /// Opens (appending) `{state_dir}/sessions/{session}.jsonl`.
    pub fn open(state_dir: &Path, session: &str) -> Result<Self> {
        let dir = sessions_dir(state_dir)?;
        let path = dir.join(session_file_name(session));
        let file = crate::cache::open_append(&path).map_err(|e| {
            Error::Usage(format!(
                "cannot open the session log {}: {e}",
                path.display()
            ))
        })?;
        Ok(SessionLog {
            session: session.to_string(),
            path: Some(path),
            file: Some(parking_lot::Mutex::new(Some(file))),
            seq: AtomicU64::new(0),
            no_effect: Default::default(),
            rotation_blocked: Default::default(),
        })
    }

    /// A log of `session` in `{state_dir}/sessions/{file}.jsonl`, created only by its
    /// first event: a server opens one per request before it knows the request is
    /// valid, and a refused request leaves no file. Several sessions may share a file
    /// (`session` names each line's).
    pub fn lazy(state_dir: &Path, file: &str, session: &str) -> Result<Self> {
        let dir = sessions_dir(state_dir)?;
        Ok(SessionLog {
            session: session.to_string(),
            path: Some(dir.join(session_file_name(file))),
            file: Some(parking_lot::Mutex::new(None)),
            seq: AtomicU64::new(0),
            no_effect: Default::default(),
            rotation_blocked: Default::default(),
        })
    }

    /// Closes the file until the next event, which opens it again (a long-lived host
    /// calls this between a session's turns).
    pub fn release(&self) {
        if let Some(file) = &self.file {
            file.lock().take();
        }
    }

    /// Whether the file is open now.
    pub fn is_open(&self) -> bool {
        self.file.as_ref().is_some_and(|f| f.lock().is_some())
    }

    /// A log that records nothing (embedders that keep no state, unit tests).
    pub fn disabled(session: &str) -> Self {
        SessionLog {
            session: session.to_string(),
            path: None,
            file: None,
            seq: AtomicU64::new(0),
            no_effect: Default::default(),
            rotation_blocked: Default::default(),
        }
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn session(&self) -> &str {
        &self.session
    }

    /// Appends the event of a request that acted on nothing (a search, a describe, a call
    /// refused before anything ran), unless this session's such events are past their
    /// rate: then it is counted, and the next one written says how many were not
    /// (`events_not_written`). Rate-limited refusals alone, 2,300 runs of successful
    /// searches still pushed a call that ran out of the log (review 13).
    pub fn no_effect(&self, event: &str, fields: Value) {
        {
            let mut r = self.no_effect.lock();
            let now = std::time::Instant::now();
            let elapsed = now.duration_since(r.at).as_secs_f64();
            r.tokens = (r.tokens + elapsed * NO_EFFECT_PER_SECOND).min(NO_EFFECT_BURST);
            r.at = now;
            if r.tokens < 1.0 {
                r.unwritten += 1;
                return;
            }
            r.tokens -= 1.0;
        }
        self.event(event, fields);
    }

    /// Appends one event: `{"ts_ms", "session", "seq", "event", ...fields}`. A failed write
    /// is reported on stderr and does not fail the call that caused it.
    ///
    /// The first event written after some were left out ([`SessionLog::no_effect`]) says
    /// how many (`events_not_written`), whatever its kind: a call's own event after its
    /// flood of progress lines says it, though its process writes nothing after it.
    pub fn event(&self, event: &str, mut fields: Value) {
        let Some(file) = &self.file else { return };
        let unwritten = std::mem::take(&mut self.no_effect.lock().unwritten);
        if unwritten > 0
            && let Some(obj) = fields.as_object_mut()
        {
            obj.insert("events_not_written".into(), json!(unwritten));
        }
        let mut line = json!({
            "ts_ms": now_ms(),
            "session": self.session,
            "seq": self.seq.fetch_add(1, Ordering::Relaxed),
            "event": event,
        });
        if let (Some(obj), Value::Object(extra)) = (line.as_object_mut(), fields) {
            obj.extend(extra);
        }
        // Operators `tail -f` it: no raw control a terminal acts on.
        let mut bytes = crate::shown::json_for_terminal(line.to_string()).into_bytes();
        bytes.push(b'\n');
        let Some(path) = &self.path else { return };
        let mut file = file.lock();
        if file.is_none() {
            *file = open_logged(path);
        }
        let extra = bytes.len() as u64;
        if file.as_ref().is_some_and(|f| outgrown(f, extra)) {
            // A lock held past a rotation's time is not a rotation to wait for (review 25
            // F1); once one was, later events only try it, and do not pay the wait each
            // (review 26 F5: 20 ms an event while another process held it).
            let blocked = self.rotation_blocked.load(Ordering::Relaxed);
            let wait = if blocked { Duration::ZERO } else { LOCK_WAIT };
            match rotate(path, extra, wait) {
                Ok(()) => self.rotation_blocked.store(false, Ordering::Relaxed),
                // Held by someone else: tried again next event.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if !blocked {
                        tracing::error!(
                            "session log {}: another process holds its lock; it cannot be rotated until that ends",
                            path.display()
                        );
                    }
                    self.rotation_blocked.store(true, Ordering::Relaxed);
                }
                Err(e) => tracing::error!("session log {}: cannot rotate: {e}", path.display()),
            }
            *file = open_logged(path);
            // Still unrotated and at the hard bound: the event is counted, not written,
            // so a held lock cannot grow the log without end.
            if file.as_ref().is_some_and(|f| {
                f.metadata()
                    .is_ok_and(|m| m.len() + extra > HARD_LOG_FILE_BYTES)
            }) {
                self.no_effect.lock().unwritten += unwritten + 1;
                return;
            }
        }
        if let Some(f) = file.as_mut()
            && let Err(e) = f.write_all(&bytes)
        {
            tracing::error!("session log write failed: {e}");
        }
    }
}

/// The most a session log grows to: then it becomes its `~old` file (replacing the one
/// before) and a new one begins, so one session's log takes at most twice this, however
/// many processes write it. A long-lived `mcp serve` logs every request of every client
/// to one session (one client grew it 1.7 GB an hour, front round 7), and nothing else
/// bounds a single log.
pub const MAX_LOG_FILE_BYTES: u64 = 64 << 20;

/// The most a log grows to when it cannot be rotated (another process holds its lock for
/// good): past it events are counted (`events_not_written`), not written.
pub const HARD_LOG_FILE_BYTES: u64 = 2 * MAX_LOG_FILE_BYTES;

/// Opens the log at `path` for appending; a failure is reported and the event not written.
fn open_logged(path: &Path) -> Option<File> {
    crate::cache::open_append(path)
        .map_err(|e| tracing::error!("session log {}: cannot open: {e}", path.display()))
        .ok()
}

/// Whether a writer holding `file` must look again at its log before writing `extra`
/// bytes: they would take it past the bound, or it is in the log no more (another writer
/// rotated it away twice, or pruning removed it, and lines written to it would reach no
/// one). A file another writer rotated once is still kept, as `~old`: a line that fits
/// goes there, and the first that does not moves to the new file.
fn outgrown(file: &File, extra: u64) -> bool {
    file.metadata()
        .is_ok_and(|m| m.nlink() == 0 || (m.len() > 0 && m.len() + extra > MAX_LOG_FILE_BYTES))
}

/// Sets the log at `path` aside as its `~old` file if `extra` more bytes would take it past
/// the bound.
///
/// Every writer of one log (processes of one `--session`, gateway sessions sharing a file)
/// reaches this at once when the log fills, each holding the full file. Were each to rename
/// on the word of its own handle, the second would move the first one's new file over the
/// generation just set aside, and that generation would be gone (222,205 records, review).
/// So the decision is taken by one writer at a time, under the lock of the file the name
/// holds now, and on that file's size: to a writer whose handle another has rotated away,
/// the new file has room, and it only reopens.
fn rotate(path: &Path, extra: u64, wait: Duration) -> std::io::Result<()> {
    let current = Locked::current(path, wait)?;
    let m = current.0.metadata()?;
    if m.len() > 0 && m.len() + extra > MAX_LOG_FILE_BYTES {
        std::fs::rename(path, old_log(path))?;
    }
    Ok(())
}

/// The file a log's name holds, under an exclusive `flock` until dropped.
struct Locked(File);

/// The longest a writer waits for another's rotation (see [`Locked::new`]).
const LOCK_WAIT: Duration = Duration::from_millis(20);

/// Attempts at [`Locked::current`]: each failed one means another writer filled and
/// rotated a whole generation meanwhile.
const LOCK_ATTEMPTS: usize = 8;

impl Locked {
    /// Locks the file at `path`. The lock belongs to a file, not to its name, and another
    /// writer may rename the file between the open and the lock: then the one locked is
    /// no longer the log, and the one that replaced it is tried.
    fn current(path: &Path, wait: Duration) -> std::io::Result<Locked> {
        for _ in 0..LOCK_ATTEMPTS {
            let locked = Locked::new(crate::cache::open_append(path)?, wait)?;
            let held = locked.0.metadata()?;
            if std::fs::symlink_metadata(path)
                .is_ok_and(|named| (named.dev(), named.ino()) == (held.dev(), held.ino()))
            {
                return Ok(locked);
            }
        }
        Err(std::io::Error::other(format!(
            "its file was replaced at each of {LOCK_ATTEMPTS} attempts to lock it"
        )))
    }

    /// Never waits longer than [`LOCK_WAIT`]: events are written on the runtime's
    /// workers, and another process of this user holding the lock (a swapped log, locked
    /// for good) held both of them, and every run's deadline, for as long as it liked
    /// (review 25 F1). A writer rotates in microseconds, so a lock held longer is not a
    /// rotation to wait for: the event is written where the log is now, and rotation is
    /// tried again at the next one.
    fn new(file: File, wait: Duration) -> std::io::Result<Locked> {
        let started = std::time::Instant::now();
        loop {
            match flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
                Ok(()) => return Ok(Locked(file)),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock && started.elapsed() < wait =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // Closing the file releases the lock too, but not while a child forked meanwhile
        // still holds a copy of the descriptor; a failed unlock leaves that to the close.
        let _ = flock(&self.0, libc::LOCK_UN);
    }
}

/// `flock(2)` on `file`, waiting for the lock and retried when a signal interrupts it.
/// Locks of two descriptors of one file exclude each other within a process too, so two
/// logs of one file in a gateway take turns as two processes do. (Through libc: our
/// `nix` is built without its `fs` feature, and `File::lock` is newer than our
/// `rust-version`.)
fn flock(file: &File, operation: libc::c_int) -> std::io::Result<()> {
    loop {
        // SAFETY: flock reads only the descriptor, which `file` keeps open for the call.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `NAME.jsonl`'s older half, `NAME~old.jsonl`: a name no key's log has (a plain key's
/// name has no `~`, a hashed one 32 hex digits after it), and a `.jsonl`, so pruning
/// counts it.
fn old_log(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{stem}~old.jsonl"))
}

/// Removes the oldest session logs (by last write) of `state_dir` until at most
/// `max_files` of them take at most `max_bytes` together: a long-lived server makes one
/// per client key, and keys are the clients' to choose. Returns how many went.
pub fn prune_sessions(state_dir: &Path, max_files: usize, max_bytes: u64) -> usize {
    let Ok(dir) = sessions_dir(state_dir) else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            meta.is_file()
                .then(|| (meta.modified().unwrap_or(UNIX_EPOCH), meta.len(), e.path()))
        })
        .collect();
    // Newest first: what is kept is a prefix.
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    let (mut kept, mut bytes, mut removed) = (0usize, 0u64, 0usize);
    for (_, len, path) in files {
        if kept < max_files && bytes + len <= max_bytes {
            kept += 1;
            bytes += len;
        } else if std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// `{state_dir}/sessions`, created if needed, by its resolved path: a folder only this user
/// can write (the cache's rule, [`crate::cache::prepare`]), so no one else can plant a link
/// or a file at a log's name, which a client may choose.
fn sessions_dir(state_dir: &Path) -> Result<PathBuf> {
    crate::cache::prepare(&state_dir.join("sessions")).map_err(|e| {
        Error::Usage(format!(
            "cannot use the state directory for session logs: {e}"
        ))
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The file name of a session's log. Keys come from clients, so only a key made of
/// letters, digits, `-`, `_` and `.` (not first), at most 96 bytes, is its own name;
/// any other becomes those characters of it, `~` (which no such key holds) and 32 hex
/// digits of its BLAKE3 hash. Two keys never share a file: `a/b` and `a_b`, two long keys
/// with one prefix, the empty key and `s` all get names of their own.
pub fn session_file_name(session: &str) -> String {
    let plain = !session.is_empty()
        && session.len() <= 96
        && !session.starts_with('.')
        && session
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
    if plain {
        return format!("{session}.jsonl");
    }
    let kept: String = session
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(64)
        .collect();
    let hash = blake3::hash(session.as_bytes()).to_hex();
    format!("{kept}~{}.jsonl", &hash[..32])
}

/// The default state directory: `$XDG_DATA_HOME/toolsearch`, else
/// `$HOME/.local/share/toolsearch`, else `./.toolsearch`.
pub fn default_state_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("toolsearch");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home).join(".local/share/toolsearch");
    }
    PathBuf::from(".toolsearch")
}

/// A new session id: time and process, unique enough for file names on one host.
pub fn new_session_id() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}-{}",
        now_ms(),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flood of refusals is written at its rate and counted past it; what ran is always
    /// written, and the next event written says how many were not.
    #[test]
    fn refusals_past_their_rate_are_counted_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let log = SessionLog::open(dir.path(), "flood").unwrap();
        let lines = || {
            std::fs::read_to_string(log.path().unwrap())
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .collect::<Vec<_>>()
        };
        for i in 0..3000 {
            log.no_effect("call", json!({"requested": format!("nope{i}")}));
        }
        // The burst, and what the rate let through while the loop ran (a loaded machine
        // takes seconds over it); well short of all.
        let written = lines().len();
        assert!((500..2500).contains(&written), "{written}");
        // The next event written, whatever it is, says how many were not.
        log.event("call", json!({"id": "ran"}));
        let ran = lines().last().unwrap().clone();
        assert_eq!(ran["id"], "ran");
        assert!(ran["events_not_written"].as_u64().unwrap() > 0, "{ran}");
        std::thread::sleep(std::time::Duration::from_millis(100));
        log.no_effect("call", json!({"requested": "after"}));
        let all = lines();
        let last = all.last().unwrap();
        assert_eq!(last["requested"], "after");
        // Every refusal is either written or counted in a later one that was.
        let counted: u64 = all
            .iter()
            .filter_map(|e| e["events_not_written"].as_u64())
            .sum();
        let refusals = all.iter().filter(|e| e.get("requested").is_some()).count();
        assert_eq!(counted as usize + refusals, 3001, "{last}");
    }

    #[test]
    fn events_are_whole_lines_with_sequence_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let log = SessionLog::open(dir.path(), "s/../1").unwrap();
        assert!(log.is_open());
        log.release();
        assert!(!log.is_open());
        log.event("search", json!({"query": "x\ny", "ids": ["a"]}));
        log.event("call", json!({"id": "a"}));
        let text = std::fs::read_to_string(log.path().unwrap()).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["event"], "search");
        assert_eq!(lines[0]["query"], "x\ny");
        assert_eq!(lines[1]["seq"], 1);
        assert!(log.path().unwrap().starts_with(dir.path().join("sessions")));
    }

    /// A log's name is predictable (a session key, often the client's): whoever could write
    /// the sessions folder could plant a link there to any file this user may write and
    /// have log lines appended to it. The folder is made this user's alone (one open to
    /// others is set aside), and a link or a file not of this user's at the name is
    /// refused, never followed.
    #[test]
    fn a_log_is_never_written_through_a_planted_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let sessions = dir.path().join("sessions");
        std::fs::create_dir(&sessions).unwrap();
        std::os::unix::fs::symlink(&victim, sessions.join("k.jsonl")).unwrap();
        std::fs::set_permissions(&sessions, std::fs::Permissions::from_mode(0o777)).unwrap();
        let log = SessionLog::open(dir.path(), "k").unwrap();
        log.event("search", json!({"query": "$(touch PWNED)"}));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        let mode = std::fs::metadata(&sessions).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);

        // Planted in a private folder (by this user, or before it was made private): refused.
        std::os::unix::fs::symlink(&victim, sessions.join("j.jsonl")).unwrap();
        assert!(SessionLog::open(dir.path(), "j").is_err());
        let lazy = SessionLog::lazy(dir.path(), "j", "j").unwrap();
        lazy.event("search", json!({"query": "x"}));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    }

    /// One session's log never grows past its bound: the older half is kept beside it,
    /// under a name no key's log can have.
    #[test]
    fn a_log_past_its_bound_begins_again_keeping_one_older_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = SessionLog::open(dir.path(), "long").unwrap();
        let big = "x".repeat(1 << 20);
        for _ in 0..(2 * MAX_LOG_FILE_BYTES / (1 << 20) + 8) {
            log.event("search", json!({"query": big}));
        }
        let path = log.path().unwrap().to_path_buf();
        let old = path.with_file_name("long~old.jsonl");
        let (now, before) = (
            std::fs::metadata(&path).unwrap().len(),
            std::fs::metadata(&old).unwrap().len(),
        );
        assert!(
            now <= MAX_LOG_FILE_BYTES && before <= MAX_LOG_FILE_BYTES,
            "{now} {before}"
        );
        assert!(now > 0 && before > MAX_LOG_FILE_BYTES / 2);
        assert!(!session_file_name("long~old").contains("~old.jsonl"));
        // Pruning sees the older half as a log of its own.
        assert_eq!(prune_sessions(dir.path(), 1, u64::MAX), 1);
    }

    /// Makes the log at `path` `len` bytes long without writing them (a sparse file): a
    /// generation just short of the bound, for the price of a few lines.
    fn grow_to(path: &Path, len: u64) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .set_len(len)
            .unwrap();
    }

    /// The `id`s of the events in the log at `path`, in order.
    fn ids_in(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| {
                let event = serde_json::from_str::<Value>(l).unwrap();
                event["id"].as_str().unwrap().to_string()
            })
            .collect()
    }

    /// Two writers of one log (two processes of one `--session`, or two gateway sessions
    /// sharing a file): the first past the bound sets the full generation aside, and the
    /// second, whose handle still names that generation, appends to the new file instead
    /// of rotating again (it renamed the new file over the older one, and a whole
    /// generation, 222,205 records, was gone).
    #[test]
    fn a_second_writer_does_not_rotate_away_the_generation_the_first_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let a = SessionLog::open(dir.path(), "shared").unwrap();
        let b = SessionLog::open(dir.path(), "shared").unwrap();
        let path = a.path().unwrap().to_path_buf();
        let old = path.with_file_name("shared~old.jsonl");
        grow_to(&path, MAX_LOG_FILE_BYTES - 10);
        a.event("call", json!({"id": "a1"}));
        b.event("call", json!({"id": "b1"}));
        assert_eq!(
            std::fs::metadata(&old).unwrap().len(),
            MAX_LOG_FILE_BYTES - 10,
            "the generation set aside was replaced"
        );
        assert_eq!(ids_in(&path), ["a1", "b1"]);
    }

    /// A writer whose file went out of the log entirely (rotated away twice by another,
    /// or pruned) finds the current file at its next event: its lines went to a file no
    /// name reached.
    #[test]
    fn a_writer_whose_file_was_rotated_away_twice_appends_to_the_current_one() {
        let dir = tempfile::tempdir().unwrap();
        let a = SessionLog::open(dir.path(), "shared").unwrap();
        let b = SessionLog::open(dir.path(), "shared").unwrap();
        let path = a.path().unwrap().to_path_buf();
        let pad = "x".repeat(2000);
        grow_to(&path, MAX_LOG_FILE_BYTES - 1000);
        a.event("call", json!({"id": "a1", "pad": pad}));
        // Still within the bound: b's line goes to the file it holds, now the older one.
        b.event("call", json!({"id": "b1"}));
        grow_to(&path, MAX_LOG_FILE_BYTES - 1000);
        a.event("call", json!({"id": "a2", "pad": pad}));
        b.event("call", json!({"id": "b2"}));
        assert_eq!(ids_in(&path), ["a2", "b2"]);
        let old = path.with_file_name("shared~old.jsonl");
        assert_eq!(
            std::fs::metadata(&old).unwrap().len(),
            MAX_LOG_FILE_BYTES - 1000
        );
    }

    /// A writer that finds the rotation lock held past a rotation's time (another process
    /// holding it for good) does not wait for it: its line goes where the log is now, and
    /// the rotation is made at a later event once the lock is free (review 25 F1: the wait
    /// had no end, on the runtime's workers).
    #[test]
    fn a_writer_does_not_wait_on_a_lock_held_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let a = SessionLog::open(dir.path(), "shared").unwrap();
        let path = a.path().unwrap().to_path_buf();
        let old = path.with_file_name("shared~old.jsonl");
        grow_to(&path, MAX_LOG_FILE_BYTES - 10);
        let held = Locked::current(&path, LOCK_WAIT).unwrap();
        a.event("call", json!({"id": "a1"}));
        assert!(!old.exists());
        let log = std::fs::read(&path).unwrap();
        let tail = String::from_utf8_lossy(&log[log.len() - 300..]).into_owned();
        assert!(tail.contains("\"a1\""), "{tail}");
        drop(held);
        a.event("call", json!({"id": "a2"}));
        assert!(std::fs::metadata(&old).unwrap().len() > MAX_LOG_FILE_BYTES - 10);
        assert_eq!(ids_in(&path), ["a2"]);
    }

    /// A lock held for good costs the events after the first nothing but a try, and the
    /// log stops at its hard bound; the events not written are counted, and said by the
    /// first written once the lock is free (review 26 F5: 20 ms an event, and the log grew
    /// past its bound without end).
    #[test]
    fn a_lock_held_for_good_neither_slows_every_event_nor_grows_the_log_without_end() {
        let dir = tempfile::tempdir().unwrap();
        let a = SessionLog::open(dir.path(), "held").unwrap();
        let path = a.path().unwrap().to_path_buf();
        grow_to(&path, HARD_LOG_FILE_BYTES - 300);
        let held = Locked::current(&path, LOCK_WAIT).unwrap();
        a.event("call", json!({"id": "first"}));
        assert!(a.rotation_blocked.load(Ordering::Relaxed));
        for i in 0..50 {
            a.event(
                "call",
                json!({"id": format!("e{i}"), "pad": "x".repeat(100)}),
            );
        }
        assert!(std::fs::metadata(&path).unwrap().len() <= HARD_LOG_FILE_BYTES);
        drop(held);
        a.event("call", json!({"id": "after"}));
        assert!(!a.rotation_blocked.load(Ordering::Relaxed));
        let line = std::fs::read_to_string(&path).unwrap();
        let event: Value = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(event["id"], "after");
        assert!(
            event["events_not_written"].as_u64().unwrap() >= 45,
            "{event}"
        );
    }

    /// `flock` locks of two descriptors of one file exclude each other within a process
    /// (`fcntl` locks would not): two logs of one file in a gateway take turns too.
    #[test]
    fn the_rotation_lock_excludes_another_descriptor_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = SessionLog::open(dir.path(), "locked").unwrap();
        let path = log.path().unwrap();
        let held = Locked::current(path, LOCK_WAIT).unwrap();
        let other = crate::cache::open_append(path).unwrap();
        let refused = flock(&other, libc::LOCK_EX | libc::LOCK_NB).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::WouldBlock);
        drop(held);
        flock(&other, libc::LOCK_EX | libc::LOCK_NB).unwrap();
    }

    #[test]
    fn session_file_names_are_safe_and_name_one_key_each() {
        let keys = [
            "a/b",
            "a_b",
            "",
            "s",
            ".hidden",
            "ü",
            "u",
            &"k".repeat(97),
            &"k".repeat(98),
            "../../etc/passwd",
        ];
        let names: Vec<String> = keys.iter().map(|k| session_file_name(k)).collect();
        let distinct: std::collections::HashSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), keys.len(), "{names:?}");
        for n in &names {
            assert!(!n.contains('/') && !n.starts_with('.'), "{n}");
        }
        assert_eq!(session_file_name("gw-1a2b-3"), "gw-1a2b-3.jsonl");
    }

    #[test]
    fn counters_keep_the_latest_selected() {
        let c = Counters::default();
        for i in 0..MAX_SELECTED + 5 {
            c.executed(&format!("t{i}"), Source::Openclaw);
        }
        let s = c.snapshot();
        assert_eq!(s.selected.len(), MAX_SELECTED);
        assert_eq!(s.selected.last().map(String::as_str), Some("t1028"));
        assert_eq!(s.executed_count, MAX_SELECTED as u64 + 5);
    }

    #[test]
    fn counters_count_by_source() {
        let c = Counters::default();
        c.searched(2);
        c.called();
        c.executed("openclaw:core:x", Source::Openclaw);
        let s = c.snapshot();
        assert_eq!(s.search_count, 2);
        assert_eq!(s.executed_by_source["openclaw"], 1);
        assert_eq!(s.selected, ["openclaw:core:x"]);
    }

    #[test]
    fn a_lazy_log_makes_its_file_on_its_first_event_and_old_logs_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let log = SessionLog::lazy(dir.path(), "shared", "one").unwrap();
        assert!(!log.path().unwrap().exists(), "a file before any event");
        log.event("request", json!({}));
        SessionLog::lazy(dir.path(), "shared", "two")
            .unwrap()
            .event("request", json!({}));
        let text = std::fs::read_to_string(log.path().unwrap()).unwrap();
        assert!(
            text.contains("\"one\"") && text.contains("\"two\""),
            "{text}"
        );
        for i in 0..5 {
            SessionLog::open(dir.path(), &format!("s{i}"))
                .unwrap()
                .event("x", json!({}));
        }
        assert_eq!(prune_sessions(dir.path(), 3, u64::MAX), 3);
        let left = std::fs::read_dir(dir.path().join("sessions"))
            .unwrap()
            .count();
        assert_eq!(left, 3);
        assert_eq!(
            prune_sessions(dir.path(), 10, 0),
            3,
            "a byte bound of 0 keeps none"
        );
    }
}
