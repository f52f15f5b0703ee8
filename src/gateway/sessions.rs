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
//! A session some request holds — waiting for its turn or running it — is never evicted,
//! so its turns stay one at a time; its turn writes the history into that same session.
//! A new key's session is kept only once a request of it is known valid
//! ([`Sessions::keep`]): until then it is found by its key, so two first requests still
//! take turns, but it counts for nothing and evicts nothing, so requests that are refused
//! cannot push other clients' sessions out.
//!
//! A request without a key gets a session of its own, not kept: `gw-<run>-<n>`, where
//! `<run>` is random per gateway start; all such requests of one start log to one file,
//! `gw-<run>.jsonl`, each line naming its request's key. A log file is created by its
//! first event, which a refused request never writes; the state directory keeps at most
//! [`MAX_SESSION_FILES`] logs of [`MAX_SESSION_LOG_BYTES`] together.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Mutex as AsyncMutex;

use super::kept::Kept;
use crate::agent::Message;
use crate::dispatch::Dispatcher;

/// The memory all named sessions' histories may take together.
pub const HISTORY_MAX_BYTES: usize = 256 * 1024 * 1024;

/// Session log files the state directory keeps, and their bytes together: the oldest
/// go first ([`crate::telemetry::prune_sessions`]), checked at the gateway's first valid
/// request and every [`PRUNE_EVERY`]th after (any session's: one client writing to one
/// log for ever is pruned too). The bound is shared: a client that writes a lot pushes the
/// oldest logs out, whoever wrote them.
pub const MAX_SESSION_FILES: usize = 10_000;
pub const MAX_SESSION_LOG_BYTES: u64 = 1 << 30;
const PRUNE_EVERY: u64 = 64;

/// What a session costs besides its history (its dispatcher, log and lock), counted
/// against [`HISTORY_MAX_BYTES`] too.
const SESSION_BYTES: usize = 4096;

/// One session.
#[derive(Default)]
pub struct Session {
    /// Made by its first valid request ([`Session::dispatcher`]).
    dispatcher: std::sync::OnceLock<Arc<Dispatcher>>,
    /// Held from reading the history to writing it: one turn at a time.
    pub turn: Arc<AsyncMutex<()>>,
    turns: AtomicU64,
    /// Requests waiting for [`Session::turn`].
    waiting: AtomicUsize,
}

impl Session {
    pub fn new() -> Self {
        Session::default()
    }

    /// The session's dispatcher, made by `make` the first time.
    pub fn dispatcher<E>(
        &self,
        make: impl FnOnce() -> Result<Dispatcher, E>,
    ) -> Result<Arc<Dispatcher>, E> {
        if let Some(d) = self.dispatcher.get() {
            return Ok(Arc::clone(d));
        }
        let made = Arc::new(make()?);
        Ok(Arc::clone(self.dispatcher.get_or_init(|| made)))
    }

    /// A place in the line for this session's turn, while fewer than `max` wait; the
    /// place is given back when the guard drops (the turn began, or the request went).
    pub fn queue(self: &Arc<Self>, max: usize) -> Option<Queued> {
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= max {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Queued(Arc::clone(self)))
    }

    /// How many turns the session ran before this one (counting this one as run).
    pub fn next_turn(&self) -> u64 {
        self.turns.fetch_add(1, Ordering::Relaxed)
    }
}

struct Slot {
    session: Arc<Session>,
    /// The conversation so far, as JSON text (empty: none), shared with the requests
    /// reading it.
    history: Arc<str>,
}

/// Sessions of not yet valid requests past which the dead ones are swept out: live
/// ones are at most the requests in flight.
const OPENING_SWEEP: usize = 1024;

/// A request's place in a session's line ([`Session::queue`]).
pub struct Queued(Arc<Session>);

impl Drop for Queued {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The named sessions of one gateway.
pub struct Sessions {
    kept: Mutex<Kept<String, Slot>>,
    /// Sessions of keys not kept, while some request holds them. Locked inside `kept`.
    opening: Mutex<HashMap<String, Weak<Session>>>,
    /// Random per start: the `<run>` of generated keys.
    run: String,
    generated: AtomicU64,
    /// Valid requests, for [`Sessions::time_to_prune`].
    requests: AtomicU64,
}

impl Sessions {
    pub fn new(max_sessions: usize, max_idle: Duration) -> Self {
        let run = super::store::random_id("");
        Sessions {
            // A session some request holds (waiting for its turn, or running it) stays:
            // evicted, its next request would get a fresh session and run beside it.
            kept: Mutex::new(
                Kept::new(max_sessions, HISTORY_MAX_BYTES, max_idle)
                    .pinned(|slot: &Slot| Arc::strong_count(&slot.session) > 1),
            ),
            opening: Mutex::new(HashMap::new()),
            run: run[..8].to_string(),
            generated: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        }
    }

    /// The log file of every request without a key: `gw-<run>`, one per start.
    pub fn keyless_file(&self) -> String {
        format!("{}{}", super::server::GENERATED_KEY_PREFIX, self.run)
    }

    /// Whether this valid request should prune the state directory's logs: the first,
    /// then every [`PRUNE_EVERY`]th.
    pub fn time_to_prune(&self) -> bool {
        self.requests
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(PRUNE_EVERY)
    }

    /// A key for a request that names none: `gw-<run>-<n>`.
    pub fn generated_key(&self) -> String {
        let n = self.generated.fetch_add(1, Ordering::Relaxed);
        format!("{}{}-{n}", super::server::GENERATED_KEY_PREFIX, self.run)
    }

    /// The session `key` names: the kept one, or one a request of that key not yet known
    /// valid holds, or a new one, not kept until [`Sessions::keep`].
    pub fn find(&self, key: &str) -> Arc<Session> {
        let mut kept = self.kept.lock();
        if let Some(slot) = kept.touch(key) {
            return Arc::clone(&slot.session);
        }
        let mut opening = self.opening.lock();
        if let Some(session) = opening.get(key).and_then(Weak::upgrade) {
            return session;
        }
        if opening.len() >= OPENING_SWEEP {
            opening.retain(|_, s| s.strong_count() > 0);
        }
        let session = Arc::new(Session::new());
        opening.insert(key.to_string(), Arc::downgrade(&session));
        session
    }

    /// Keeps `session` as the one `key` names, now that a request of it is valid (kept
    /// already: only marked used).
    pub fn keep(&self, key: &str, session: &Arc<Session>) {
        let mut kept = self.kept.lock();
        if kept.touch(key).is_some() {
            return;
        }
        kept.insert(
            key.to_string(),
            Slot {
                session: Arc::clone(session),
                history: Arc::from(""),
            },
            key.len() + SESSION_BYTES,
        );
        self.opening.lock().remove(key);
    }

    /// The session's conversation so far, as JSON text (none once it was evicted).
    pub fn history(&self, key: &str) -> Option<Arc<str>> {
        match self.kept.lock().touch(key) {
            Some(slot) if !slot.history.is_empty() => Some(Arc::clone(&slot.history)),
            _ => None,
        }
    }

    /// Keeps `messages` as the conversation of `session`, if it is still the session
    /// `key` names (never into another opened under the same key meanwhile): its latest
    /// turns, as many as leave room for a request's input under the bound a turn may send
    /// ([`kept_turns`]). Kept whole, a turn whose answer took a session past the bound made
    /// every later request on its key a 400, and each refusal kept it alive (front round
    /// 11).
    pub fn remember(&self, key: &str, session: &Arc<Session>, messages: &[Message]) {
        let messages = kept_turns(messages, HISTORY_ROOM);
        let mut text = serde_json::to_string(messages).unwrap_or_default();
        // Within the JSON values a request may read too: a history of few bytes but many
        // values (tool calls' arguments) made every later request on its key a 400 "too
        // intricate to continue", for good (front round 17 F1).
        if crate::provider::bounded::count_values(text.as_bytes()) > HISTORY_VALUES {
            let kept = kept_turns_by(messages, HISTORY_VALUES, |m| {
                crate::provider::bounded::count_values(&serde_json::to_vec(m).unwrap_or_default())
            });
            text = serde_json::to_string(kept).unwrap_or_default();
        }
        let bytes = key.len() + SESSION_BYTES + text.len();
        let mut kept = self.kept.lock();
        if let Some(slot) = kept.touch(key)
            && Arc::ptr_eq(&slot.session, session)
        {
            slot.history = Arc::from(text);
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

/// The bytes of history a session keeps at most: what a turn may send, less room for the
/// largest request's input.
pub const HISTORY_ROOM: usize =
    crate::agent::MAX_CONVERSATION_BYTES - super::server::MAX_REQUEST_BYTES;

/// The latest turns of `messages` (each from a user message on) that fit in `room` bytes:
/// the oldest whole turns go first, so no tool result loses its call; none, if the last
/// alone does not fit.
pub fn kept_turns(messages: &[Message], room: usize) -> &[Message] {
    if crate::agent::conversation_bytes(messages) <= room {
        return messages;
    }
    kept_turns_by(messages, room, |m| {
        crate::agent::conversation_bytes(std::slice::from_ref(m))
    })
}

/// The JSON values of history a session keeps at most: half of what a request may read,
/// the rest for its own body.
pub const HISTORY_VALUES: usize = crate::provider::bounded::MAX_JSON_VALUES / 2;

/// The latest whole turns of `messages` whose `cost` together stays within `room`.
fn kept_turns_by(
    messages: &[Message],
    room: usize,
    cost: impl Fn(&Message) -> usize,
) -> &[Message] {
    let mut size = 0usize;
    let mut from = messages.len();
    for (i, m) in messages.iter().enumerate().rev() {
        size = size.saturating_add(cost(m));
        if size > room {
            break;
        }
        if matches!(m, Message::User { .. }) {
            from = i;
        }
    }
    &messages[from..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::json::Budget;

    /// The session's history, parsed.
    fn read(sessions: &Sessions, key: &str) -> Vec<Message> {
        sessions
            .history(key)
            .map(|text| Budget::default().parse(&text).unwrap())
            .unwrap_or_default()
    }

    /// A session as a valid request gets it.
    fn open(sessions: &Sessions, key: &str) -> Arc<Session> {
        let session = sessions.find(key);
        sessions.keep(key, &session);
        session
    }

    fn said(text: &str) -> Vec<Message> {
        vec![Message::User {
            content: text.into(),
        }]
    }

    /// A history of few bytes and many JSON values keeps its latest whole turns within the
    /// values a request may read, so the next request on it can be read (front round 17 F1:
    /// two turns of 120,000 values made every later request a 400, for good).
    #[test]
    fn a_history_past_its_values_keeps_its_latest_whole_turns() {
        let turn = |text: &str, values: usize| {
            vec![
                Message::User {
                    content: text.into(),
                },
                Message::Assistant {
                    content: String::new(),
                    tool_calls: vec![crate::provider::ToolCall {
                        id: format!("c-{text}"),
                        name: "f".into(),
                        arguments: serde_json::json!({"v": vec![0; values]}),
                        unreadable: None,
                    }],
                },
            ]
        };
        let sessions = Sessions::new(10, Duration::from_secs(60));
        let s = open(&sessions, "k");
        let mut all = turn("one", 60_000);
        all.extend(turn("two", 60_000));
        all.extend(turn("three", 60_000));
        sessions.remember("k", &s, &all);
        let kept = read(&sessions, "k");
        assert_eq!(kept.len(), 2);
        assert!(matches!(&kept[0], Message::User { content } if content == "three"));
    }

    /// A session past the bound keeps its latest whole turns, so the next request on it
    /// can be sent (front round 11: every later request was a 400, for ever).
    #[test]
    fn a_history_past_its_room_keeps_its_latest_whole_turns() {
        let turn = |text: &str, answer: usize| {
            vec![
                Message::User {
                    content: text.into(),
                },
                Message::Assistant {
                    content: "a".repeat(answer),
                    tool_calls: Vec::new(),
                },
            ]
        };
        let mut all = turn("one", 10);
        all.extend(turn("two", 600));
        all.extend(turn("three", 300));
        assert_eq!(kept_turns(&all, 10_000).len(), 6);
        let kept = kept_turns(&all, 910);
        assert_eq!(kept.len(), 4);
        assert!(matches!(&kept[0], Message::User { content } if content == "two"));
        assert_eq!(kept_turns(&all, 400).len(), 2);
        assert!(kept_turns(&all, 100).is_empty());

        let sessions = Sessions::new(10, Duration::from_secs(60));
        let s = open(&sessions, "k");
        let mut big = turn("huge", HISTORY_ROOM);
        sessions.remember("k", &s, &big);
        assert!(read(&sessions, "k").is_empty());
        big.extend(turn("small", 10));
        sessions.remember("k", &s, &big);
        assert_eq!(read(&sessions, "k").len(), 2);
    }

    #[test]
    fn sessions_are_bounded_by_count_and_the_least_recent_goes_with_its_history() {
        let sessions = Sessions::new(2, Duration::from_secs(60));
        let a = open(&sessions, "a");
        sessions.remember("a", &a, &said("from a"));
        drop(open(&sessions, "b"));
        // `a` used again: `b` is now the least recent.
        let again = open(&sessions, "a");
        assert!(Arc::ptr_eq(&a, &again), "one session, one dispatcher");
        drop((a, again));
        drop(open(&sessions, "c"));
        assert_eq!(sessions.size().0, 2);
        assert_eq!(read(&sessions, "a"), said("from a"));
        let b = open(&sessions, "b");
        assert_eq!(b.next_turn(), 0, "b was forgotten and opened anew");
        assert!(read(&sessions, "b").is_empty());
    }

    #[test]
    fn an_idle_session_expires_and_histories_count_their_bytes() {
        let sessions = Sessions::new(10, Duration::ZERO);
        let a = open(&sessions, "a");
        sessions.remember("a", &a, &said("x"));
        drop(a);
        std::thread::sleep(Duration::from_millis(2));
        assert!(read(&sessions, "a").is_empty());
        let sessions = Sessions::new(10, Duration::from_secs(60));
        let a = open(&sessions, "a");
        sessions.remember("a", &a, &said(&"y".repeat(1000)));
        let (n, bytes) = sessions.size();
        assert_eq!(n, 1);
        assert!(
            bytes > 1000 && bytes < 1000 + SESSION_BYTES + 100,
            "{bytes}"
        );
    }

    #[test]
    fn a_session_in_use_is_never_evicted_and_takes_only_its_own_history() {
        let sessions = Sessions::new(1, Duration::ZERO);
        let victim = open(&sessions, "victim");
        // Over the count and past its idle time while held: it stays.
        drop(open(&sessions, "other"));
        std::thread::sleep(Duration::from_millis(2));
        let again = open(&sessions, "victim");
        assert!(
            Arc::ptr_eq(&victim, &again),
            "a session in use was replaced"
        );
        // A stale session object writes nothing into the one now kept.
        let stale = Arc::new(Session::new());
        sessions.remember("victim", &stale, &said("stale"));
        let sessions2 = Sessions::new(1, Duration::from_secs(60));
        let kept = open(&sessions2, "k");
        sessions2.remember("k", &stale, &said("stale"));
        assert!(read(&sessions2, "k").is_empty());
        sessions2.remember("k", &kept, &said("mine"));
        assert_eq!(read(&sessions2, "k"), said("mine"));
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

    #[test]
    fn refused_requests_keep_nothing_and_evict_no_one() {
        let sessions = Sessions::new(2, Duration::from_secs(60));
        let victim = open(&sessions, "victim");
        sessions.remember("victim", &victim, &said("mine"));
        drop(victim);
        // Requests that are refused find a session and drop it, never keeping it.
        for i in 0..5000 {
            drop(sessions.find(&format!("bad-{i}")));
        }
        assert_eq!(sessions.size().0, 1);
        assert!(sessions.opening.lock().len() <= OPENING_SWEEP);
        assert_eq!(read(&sessions, "victim"), said("mine"));
    }

    #[test]
    fn two_first_requests_of_a_key_share_one_session() {
        let sessions = Sessions::new(2, Duration::from_secs(60));
        let first = sessions.find("k");
        let second = sessions.find("k");
        assert!(
            Arc::ptr_eq(&first, &second),
            "their turns would not take turns"
        );
        sessions.keep("k", &first);
        assert!(Arc::ptr_eq(&sessions.find("k"), &first));
        // Once every holder is gone without keeping it, the key starts afresh.
        let fresh = Sessions::new(2, Duration::from_secs(60));
        assert_eq!(fresh.find("z").next_turn(), 0);
        assert_eq!(
            fresh.find("z").next_turn(),
            0,
            "a dropped, unkept session lived on"
        );
    }
}
