//! Named sessions: what `metadata.session_key` names. A session is one dispatcher — its
//! session log, its hooks one at a time — whatever each request carries (a request's
//! client tools route its calls, they do not make a dispatcher of their own), a lock that
//! runs its turns one at a time, the count of its turns (run ids stay unique in its log),
//! and its conversation history, kept as compact JSON text.
//!
//! Sessions are kept within bounds ([`Kept`]): at most `[gateway] sessions` of them,
//! their histories at most [`HISTORY_MAX_BYTES`] together, and none unused for longer
//! than `[gateway] session_ttl_s`; the least recently used go first. A session that goes
//! takes its history with it, and its log file is closed (each session's file is open
//! only while one of its turns runs: [`crate::telemetry::SessionLog::release`]).
//!
//! A request without a key gets a session of its own, not kept: `gw-<run>-<n>`, where
//! `<run>` is random per gateway start, so no two requests ever share a log, across
//! restarts either.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Mutex as AsyncMutex;

use super::kept::Kept;
use crate::agent::Message;
use crate::dispatch::Dispatcher;

/// The memory all named sessions' histories may take together.
pub const HISTORY_MAX_BYTES: usize = 256 * 1024 * 1024;

/// What a session costs besides its history (its dispatcher, log and lock), counted
/// against [`HISTORY_MAX_BYTES`] too.
const SESSION_BYTES: usize = 4096;

/// One session.
pub struct Session {
    pub dispatcher: Arc<Dispatcher>,
    /// Held from reading the history to writing it: one turn at a time.
    pub turn: Arc<AsyncMutex<()>>,
    turns: AtomicU64,
}

impl Session {
    pub fn new(dispatcher: Dispatcher) -> Self {
        Session {
            dispatcher: Arc::new(dispatcher),
            turn: Arc::new(AsyncMutex::new(())),
            turns: AtomicU64::new(0),
        }
    }

    /// How many turns the session ran before this one (counting this one as run).
    pub fn next_turn(&self) -> u64 {
        self.turns.fetch_add(1, Ordering::Relaxed)
    }
}

struct Slot {
    session: Arc<Session>,
    /// The conversation so far, as JSON text (empty: none).
    history: String,
}

/// The named sessions of one gateway.
pub struct Sessions {
    kept: Mutex<Kept<String, Slot>>,
    /// Random per start: the `<run>` of generated keys.
    run: String,
    generated: AtomicU64,
}

impl Sessions {
    pub fn new(max_sessions: usize, max_idle: Duration) -> Self {
        let run = super::store::random_id("");
        Sessions {
            kept: Mutex::new(Kept::new(max_sessions, HISTORY_MAX_BYTES, max_idle)),
            run: run[..8].to_string(),
            generated: AtomicU64::new(0),
        }
    }

    /// A key for a request that names none: `gw-<run>-<n>`.
    pub fn generated_key(&self) -> String {
        let n = self.generated.fetch_add(1, Ordering::Relaxed);
        format!("{}{}-{n}", super::server::GENERATED_KEY_PREFIX, self.run)
    }

    /// The session `key` names, made by `open` when there is none (or it was evicted).
    pub fn get_or_open<E>(
        &self,
        key: &str,
        open: impl FnOnce() -> Result<Session, E>,
    ) -> Result<Arc<Session>, E> {
        if let Some(slot) = self.kept.lock().touch(key) {
            return Ok(Arc::clone(&slot.session));
        }
        // Opened outside the lock (it creates a file); a racing request may have kept
        // one meanwhile, and then that one is the session.
        let session = Arc::new(open()?);
        let mut kept = self.kept.lock();
        if let Some(slot) = kept.touch(key) {
            return Ok(Arc::clone(&slot.session));
        }
        kept.insert(
            key.to_string(),
            Slot {
                session: Arc::clone(&session),
                history: String::new(),
            },
            key.len() + SESSION_BYTES,
        );
        Ok(session)
    }

    /// The session's conversation so far (none once it was evicted).
    pub fn history(&self, key: &str) -> Vec<Message> {
        let text = match self.kept.lock().touch(key) {
            Some(slot) if !slot.history.is_empty() => slot.history.clone(),
            _ => return Vec::new(),
        };
        serde_json::from_str(&text).unwrap_or_default()
    }

    /// Keeps `messages` as the session's conversation, if the session is still kept.
    pub fn remember(&self, key: &str, messages: &[Message]) {
        let text = serde_json::to_string(messages).unwrap_or_default();
        let bytes = key.len() + SESSION_BYTES + text.len();
        let mut kept = self.kept.lock();
        if let Some(slot) = kept.touch(key) {
            slot.history = text;
            kept.resize(key, bytes);
        }
    }

    /// How many sessions are kept, and the bytes they cost.
    #[cfg(test)]
    pub fn size(&self) -> (usize, usize) {
        let kept = self.kept.lock();
        (kept.len(), kept.bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::DispatcherBuilder;
    use crate::telemetry::SessionLog;

    fn open(dir: &std::path::Path, key: &str) -> Result<Session, String> {
        let log = SessionLog::open(dir, key).map_err(|e| e.to_string())?;
        let config = crate::Config::default();
        let catalog = crate::Catalog::build(
            Vec::new(),
            &crate::catalog::Facts {
                config: &config,
                env: &|_| None,
                sources_down: &Default::default(),
            },
        )
        .map_err(|e| e.to_string())?;
        let catalog = Arc::new(catalog);
        Ok(Session::new(
            DispatcherBuilder::new(catalog)
                .session_log(Arc::new(log))
                .build(),
        ))
    }

    fn said(text: &str) -> Vec<Message> {
        vec![Message::User {
            content: text.into(),
        }]
    }

    #[test]
    fn sessions_are_bounded_by_count_and_the_least_recent_goes_with_its_history() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = Sessions::new(2, Duration::from_secs(60));
        let a = sessions.get_or_open("a", || open(dir.path(), "a")).unwrap();
        sessions.remember("a", &said("from a"));
        sessions.get_or_open("b", || open(dir.path(), "b")).unwrap();
        // `a` used again: `b` is now the least recent.
        let again = sessions.get_or_open("a", || open(dir.path(), "a")).unwrap();
        assert!(Arc::ptr_eq(&a, &again), "one session, one dispatcher");
        sessions.get_or_open("c", || open(dir.path(), "c")).unwrap();
        assert_eq!(sessions.size().0, 2);
        assert_eq!(sessions.history("a"), said("from a"));
        let b = sessions.get_or_open("b", || open(dir.path(), "b")).unwrap();
        assert_eq!(b.next_turn(), 0, "b was forgotten and opened anew");
        assert!(sessions.history("b").is_empty());
    }

    #[test]
    fn an_idle_session_expires_and_histories_count_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = Sessions::new(10, Duration::ZERO);
        sessions.get_or_open("a", || open(dir.path(), "a")).unwrap();
        sessions.remember("a", &said("x"));
        std::thread::sleep(Duration::from_millis(2));
        assert!(sessions.history("a").is_empty());
        let sessions = Sessions::new(10, Duration::from_secs(60));
        sessions.get_or_open("a", || open(dir.path(), "a")).unwrap();
        sessions.remember("a", &said(&"y".repeat(1000)));
        let (n, bytes) = sessions.size();
        assert_eq!(n, 1);
        assert!(
            bytes > 1000 && bytes < 1000 + SESSION_BYTES + 100,
            "{bytes}"
        );
    }

    #[test]
    fn generated_keys_differ_across_starts() {
        let (one, two) = (
            Sessions::new(1, Duration::ZERO),
            Sessions::new(1, Duration::ZERO),
        );
        let (a, b) = (one.generated_key(), two.generated_key());
        assert!(a.starts_with("gw-") && a.ends_with("-0"), "{a}");
        assert_ne!(a, b);
        assert_ne!(one.generated_key(), a);
    }
}
