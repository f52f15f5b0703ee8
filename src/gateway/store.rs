//! Stored responses, for `previous_response_id`: a request that names one continues its
//! conversation. Behind a small trait, so several gateway replicas can later share one
//! store; [`MemoryStore`] is the default.
//!
//! A stored response is the whole conversation after it — the internal tool rounds
//! included, so the model keeps what it found — and the response as the client got it
//! (`GET /v1/responses/{id}`), both kept as compact JSON text: a client's JSON parsed into
//! values costs many times its text, text costs what it says, so the store's byte bound is
//! what it really holds. The memory store is bounded three ways ([`Kept`]): entries,
//! bytes, and age since it was stored; the oldest go first. Ids are random (128 bits), so
//! one client cannot guess another's.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;

use super::json::Budget;
use super::kept::Kept;
use crate::agent::Message;

/// One response as kept.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredResponse {
    /// The conversation after this response, oldest first, as JSON text.
    conversation: String,
    /// How many messages of it came before this response (the request's input ended
    /// there).
    input_messages: usize,
    /// The response object the client received, as JSON text.
    body: String,
    /// The session the turn ran in, when the client named one.
    pub session_key: Option<String>,
    /// The bytes of each text delta its live stream sent, when it was streamed: a replay
    /// sends the same deltas under the same sequence numbers, so a client resuming after
    /// any number it saw gets exactly what it missed (one delta for the whole text, the
    /// live stream's numbers were not the replay's, and a resumed text lost its middle:
    /// front round 10 F2).
    pub pieces: Option<Vec<u32>>,
}

impl StoredResponse {
    pub fn new(
        messages: &[Message],
        input_messages: usize,
        body: &Value,
        session_key: Option<String>,
    ) -> Self {
        StoredResponse {
            conversation: serde_json::to_string(messages).unwrap_or_else(|_| "[]".into()),
            input_messages,
            body: body.to_string(),
            session_key,
            pieces: None,
        }
    }

    /// The same, streamed live in deltas of these byte lengths.
    pub fn streamed_in(mut self, pieces: Vec<u32>) -> Self {
        self.pieces = Some(pieces);
        self
    }

    /// The conversation after this response, read within the continuing request's
    /// `budget`: parsed, its argument objects can cost many times their text.
    pub fn messages(&self, budget: &mut Budget) -> Result<Vec<Message>, String> {
        budget.parse(&self.conversation)
    }

    /// The conversation's bytes as text.
    pub fn conversation_bytes(&self) -> usize {
        self.conversation.len()
    }

    /// How many messages of [`StoredResponse::messages`] were the request's input.
    pub fn input_messages(&self) -> usize {
        self.input_messages
    }

    /// The response object as the client got it (JSON text).
    pub fn body(&self) -> &str {
        &self.body
    }

    /// What it takes in memory: its texts, and a little for the entry.
    pub fn bytes(&self) -> usize {
        self.conversation.len()
            + self.body.len()
            + self.session_key.as_ref().map_or(0, String::len)
            + self.pieces.as_ref().map_or(0, |p| p.len() * 4)
            + 128
    }
}

pub trait ResponseStore: Send + Sync {
    fn put(&self, id: &str, response: StoredResponse);
    /// `None` when the id was never stored, was evicted or has expired.
    fn get(&self, id: &str) -> Option<Arc<StoredResponse>>;
    /// Forgets `id`; whether it was there.
    fn remove(&self, id: &str) -> bool;
}

/// The in-memory store; see the module documentation.
pub struct MemoryStore {
    kept: Mutex<Kept<String, Arc<StoredResponse>>>,
}

impl MemoryStore {
    pub fn new(max_entries: usize, max_bytes: usize, max_age: Duration) -> Self {
        MemoryStore {
            kept: Mutex::new(Kept::new(max_entries, max_bytes, max_age)),
        }
    }

    /// The bytes all stored responses take.
    pub fn bytes(&self) -> usize {
        self.kept.lock().bytes()
    }
}

impl ResponseStore for MemoryStore {
    fn put(&self, id: &str, response: StoredResponse) {
        let bytes = response.bytes();
        self.kept
            .lock()
            .insert(id.to_string(), Arc::new(response), bytes);
    }

    fn get(&self, id: &str) -> Option<Arc<StoredResponse>> {
        self.kept.lock().peek(id).cloned()
    }

    fn remove(&self, id: &str) -> bool {
        self.kept.lock().remove(id).is_some()
    }
}

/// The responses whose turns run now, each with what `GET` answers for it until it is
/// stored. Unknown to the store while their turn ran, they were a 404 to `GET` and `DELETE`,
/// and a `DELETE` sent then had no effect: the response was stored when the turn ended
/// (front round 17 F4). Bounded by the turns a gateway runs at once.
#[derive(Default)]
pub struct InFlight {
    running: Mutex<std::collections::HashMap<String, Running>>,
}

struct Running {
    /// The response as `GET` gives it while the turn runs (JSON text).
    in_progress: String,
    /// A `DELETE` came: the response is not stored when the turn ends.
    deleted: bool,
}

/// What a request that names a response finds.
pub enum Found {
    Stored(Arc<StoredResponse>),
    /// Its turn still runs; the in-progress response as JSON text.
    Running(String),
    Unknown,
}

impl InFlight {
    /// Registers `id` as running, with `in_progress` as what `GET` answers; the registration
    /// lasts as long as the guard, or until [`Ran::store`].
    pub fn start(self: &Arc<Self>, id: &str, in_progress: &Value) -> Ran {
        self.running.lock().insert(
            id.to_string(),
            Running {
                in_progress: in_progress.to_string(),
                deleted: false,
            },
        );
        Ran {
            in_flight: Arc::clone(self),
            id: id.to_string(),
        }
    }

    /// `id` in `store`, or running, or unknown. Looked up running first: a turn that ends
    /// between the two looks is then in the store.
    pub fn find(&self, store: &dyn ResponseStore, id: &str) -> Found {
        if let Some(r) = self.running.lock().get(id).filter(|r| !r.deleted) {
            return Found::Running(r.in_progress.clone());
        }
        store.get(id).map_or(Found::Unknown, Found::Stored)
    }

    /// Forgets `id`: a running response is not stored when its turn ends. Whether it was
    /// there.
    pub fn remove(&self, store: &dyn ResponseStore, id: &str) -> bool {
        // Under the lock that [`Ran::store`] takes to store and unregister, so a response is
        // either marked before it is stored or removed from the store after.
        let mut running = self.running.lock();
        match running.get_mut(id) {
            Some(r) if !r.deleted => {
                r.deleted = true;
                true
            }
            Some(_) => false,
            None => store.remove(id),
        }
    }
}

/// A running response's registration; dropped, it ends (a turn that failed or whose client
/// went away is not stored).
pub struct Ran {
    in_flight: Arc<InFlight>,
    id: String,
}

impl Ran {
    /// Stores the finished response in `store` unless a `DELETE` came while it ran.
    pub fn store(self, store: &dyn ResponseStore, response: StoredResponse) {
        let mut running = self.in_flight.running.lock();
        if running.remove(&self.id).is_some_and(|r| !r.deleted) {
            store.put(&self.id, response);
        }
    }
}

impl Drop for Ran {
    fn drop(&mut self) {
        self.in_flight.running.lock().remove(&self.id);
    }
}

/// A fresh id: `prefix` and 32 hex digits from the OS's random source.
pub fn random_id(prefix: &str) -> String {
    format!("{prefix}{}", crate::ids::random_hex(16))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn response(text: &str) -> StoredResponse {
        StoredResponse::new(
            &[Message::User {
                content: text.into(),
            }],
            1,
            &json!({}),
            None,
        )
    }

    #[test]
    fn the_oldest_go_first_when_the_count_or_the_bytes_are_over() {
        let store = MemoryStore::new(2, 1 << 20, Duration::from_secs(60));
        store.put("a", response("1"));
        store.put("b", response("2"));
        store.put("c", response("3"));
        assert!(store.get("a").is_none());
        assert!(store.get("b").is_some() && store.get("c").is_some());

        let store = MemoryStore::new(100, 500, Duration::from_secs(60));
        store.put("a", response(&"x".repeat(200)));
        store.put("b", response(&"y".repeat(200)));
        assert!(store.get("a").is_none(), "500 bytes hold one of them");
        assert_eq!(
            store
                .get("b")
                .map(|r| r.messages(&mut Budget::default()).unwrap()),
            Some(
                response(&"y".repeat(200))
                    .messages(&mut Budget::default())
                    .unwrap()
            )
        );
    }

    #[test]
    fn a_response_costs_what_its_text_costs_however_it_nests() {
        // 4 MiB of `[]` parses into millions of values; kept as text it is 4 MiB.
        let pad: Vec<Value> = vec![json!([]); 1 << 20];
        let body = json!({"tool_choice": {"type": "web_search_preview", "pad": pad}});
        let r = StoredResponse::new(&[], 0, &body, None);
        assert!(r.bytes() < 3_200_000, "{}", r.bytes());
        let store = MemoryStore::new(100, 10 << 20, Duration::from_secs(60));
        for i in 0..20 {
            store.put(&format!("r{i}"), r.clone());
        }
        assert!(store.bytes() <= 10 << 20, "{}", store.bytes());
    }

    #[test]
    fn an_expired_or_removed_response_is_gone() {
        let store = MemoryStore::new(10, 1 << 20, Duration::ZERO);
        store.put("a", response("1"));
        std::thread::sleep(Duration::from_millis(2));
        assert!(store.get("a").is_none());
        let store = MemoryStore::new(10, 1 << 20, Duration::from_secs(60));
        store.put("a", response("1"));
        assert!(store.remove("a"));
        assert!(!store.remove("a"));
        assert!(store.get("a").is_none());
    }

    #[test]
    fn ids_are_random_and_hex() {
        let (a, b) = (random_id("resp_"), random_id("resp_"));
        assert_ne!(a, b);
        assert_eq!(a.len(), "resp_".len() + 32);
        assert!(a["resp_".len()..].chars().all(|c| c.is_ascii_hexdigit()));
    }
}
