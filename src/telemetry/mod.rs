//! Counters and the JSONL session log.
//!
//! The session log lets anyone tell, after the fact, how many tool schemas the model saw at
//! first, how many searches and describes it made, which final tool ran and where it came
//! from. One event a line, each line written with a single `write` on a file opened in
//! append mode and never buffered, so a process killed between two events loses neither
//! (and a process killed in the middle of one leaves at most that one line short).
//!
//! This module records; it decides nothing.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

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
    selected: parking_lot::Mutex<Vec<String>>,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CounterSnapshot {
    pub search_count: u64,
    pub describe_count: u64,
    pub call_count: u64,
    pub executed_count: u64,
    /// Executed calls by source.
    pub executed_by_source: BTreeMap<String, u64>,
    /// Ids of the tools executed, in order.
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
        self.selected.lock().push(id.to_string());
    }

    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            search_count: self.searches.load(Ordering::Relaxed),
            describe_count: self.describes.load(Ordering::Relaxed),
            call_count: self.calls.load(Ordering::Relaxed),
            executed_count: self.executed.load(Ordering::Relaxed),
            executed_by_source: self.by_source.lock().clone(),
            selected: self.selected.lock().clone(),
        }
    }
}

/// The session log: one JSON event a line.
#[derive(Debug)]
pub struct SessionLog {
    session: String,
    path: Option<PathBuf>,
    file: Option<parking_lot::Mutex<File>>,
    seq: AtomicU64,
}

impl SessionLog {
    /// Opens (appending) `{state_dir}/sessions/{session}.jsonl`.
    pub fn open(state_dir: &Path, session: &str) -> Result<Self> {
        let dir = state_dir.join("sessions");
        std::fs::create_dir_all(&dir).map_err(|e| {
            Error::Usage(format!(
                "cannot create the state directory {}: {e}",
                dir.display()
            ))
        })?;
        let path = dir.join(format!("{}.jsonl", safe_file_name(session)));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| {
                Error::Usage(format!(
                    "cannot open the session log {}: {e}",
                    path.display()
                ))
            })?;
        Ok(SessionLog {
            session: session.to_string(),
            path: Some(path),
            file: Some(parking_lot::Mutex::new(file)),
            seq: AtomicU64::new(0),
        })
    }

    /// A log that records nothing (embedders that keep no state, unit tests).
    pub fn disabled(session: &str) -> Self {
        SessionLog {
            session: session.to_string(),
            path: None,
            file: None,
            seq: AtomicU64::new(0),
        }
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn session(&self) -> &str {
        &self.session
    }

    /// Appends one event: `{"ts_ms", "session", "seq", "event", ...fields}`. A failed write
    /// is reported on stderr and does not fail the call that caused it.
    pub fn event(&self, event: &str, fields: Value) {
        let Some(file) = &self.file else { return };
        let mut line = json!({
            "ts_ms": now_ms(),
            "session": self.session,
            "seq": self.seq.fetch_add(1, Ordering::Relaxed),
            "event": event,
        });
        if let (Some(obj), Value::Object(extra)) = (line.as_object_mut(), fields) {
            obj.extend(extra);
        }
        let mut bytes = line.to_string().into_bytes();
        bytes.push(b'\n');
        if let Err(e) = file.lock().write_all(&bytes) {
            tracing::error!("session log write failed: {e}");
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Session keys come from clients; keep them to a safe file name.
fn safe_file_name(session: &str) -> String {
    let s: String = session
        .chars()
        .take(96)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("s{s}")
    } else {
        s
    }
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

    #[test]
    fn events_are_whole_lines_with_sequence_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let log = SessionLog::open(dir.path(), "s/../1").unwrap();
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
}
