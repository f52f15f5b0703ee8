//! Stored responses, for `previous_response_id`: a request that names one continues its
//! conversation. Behind a small trait, so several gateway replicas can later share one
//! store; [`MemoryStore`] is the default.
//!
//! A stored response is the whole conversation after it — the internal tool rounds
//! included, so the model keeps what it found — and the response as the client got it
//! (`GET /v1/responses/{id}`). The memory store is bounded three ways: entries, their
//! approximate bytes, and age; the oldest go first, and an expired one is gone even if
//! there is room. Ids are random (128 bits), so one client cannot guess another's.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;

use crate::agent::Message;

/// One response as kept.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredResponse {
    /// The conversation after this response, oldest first.
    pub messages: Vec<Message>,
    /// The response object the client received.
    pub body: Value,
    /// The session the turn ran in, when the client named one.
    pub session_key: Option<String>,
}

pub trait ResponseStore: Send + Sync {
    fn put(&self, id: &str, response: StoredResponse);
    /// `None` when the id was never stored, was evicted or has expired.
    fn get(&self, id: &str) -> Option<Arc<StoredResponse>>;
}

/// The in-memory store; see the module documentation.
pub struct MemoryStore {
    max_entries: usize,
    max_bytes: usize,
    max_age: Duration,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Ids, oldest first.
    order: VecDeque<String>,
    bytes: usize,
}

struct Entry {
    at: Instant,
    bytes: usize,
    response: Arc<StoredResponse>,
}

impl MemoryStore {
    pub fn new(max_entries: usize, max_bytes: usize, max_age: Duration) -> Self {
        MemoryStore {
            max_entries,
            max_bytes,
            max_age,
            inner: Mutex::new(Inner::default()),
        }
    }
}

impl ResponseStore for MemoryStore {
    fn put(&self, id: &str, response: StoredResponse) {
        let bytes = approximate_bytes(&response);
        let mut inner = self.inner.lock();
        if let Some(old) = inner.entries.remove(id) {
            inner.bytes -= old.bytes;
            inner.order.retain(|o| o != id);
        }
        inner.bytes += bytes;
        inner.order.push_back(id.to_string());
        inner.entries.insert(
            id.to_string(),
            Entry {
                at: Instant::now(),
                bytes,
                response: Arc::new(response),
            },
        );
        let now = Instant::now();
        while let Some(oldest) = inner.order.front().cloned() {
            let expired = inner
                .entries
                .get(&oldest)
                .is_none_or(|e| now.duration_since(e.at) > self.max_age);
            let over = inner.entries.len() > self.max_entries || inner.bytes > self.max_bytes;
            if !expired && !over {
                break;
            }
            inner.order.pop_front();
            if let Some(e) = inner.entries.remove(&oldest) {
                inner.bytes -= e.bytes;
            }
        }
    }

    fn get(&self, id: &str) -> Option<Arc<StoredResponse>> {
        let inner = self.inner.lock();
        let entry = inner.entries.get(id)?;
        (entry.at.elapsed() <= self.max_age).then(|| Arc::clone(&entry.response))
    }
}

/// The text a response holds: what its memory grows with.
fn approximate_bytes(response: &StoredResponse) -> usize {
    let messages: usize = response
        .messages
        .iter()
        .map(|m| match m {
            Message::User { content } => content.len(),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                content.len()
                    + tool_calls
                        .iter()
                        .map(|c| c.id.len() + c.name.len() + c.arguments.to_string().len())
                        .sum::<usize>()
            }
            Message::Tool {
                call_id,
                name,
                content,
                ..
            } => call_id.len() + name.len() + content.len(),
        })
        .sum();
    messages + response.body.to_string().len() + 64
}

/// A fresh id: `prefix` and 32 hex digits from the OS's random source.
pub fn random_id(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness (never seen on Linux): a clock-and-counter id, unique but
        // guessable, is still better than no answer.
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        return format!("{prefix}{t:x}{n:x}");
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn response(text: &str) -> StoredResponse {
        StoredResponse {
            messages: vec![Message::User {
                content: text.into(),
            }],
            body: json!({}),
            session_key: None,
        }
    }

    #[test]
    fn the_oldest_go_first_when_the_count_or_the_bytes_are_over() {
        let store = MemoryStore::new(2, 1 << 20, Duration::from_secs(60));
        store.put("a", response("1"));
        store.put("b", response("2"));
        store.put("c", response("3"));
        assert!(store.get("a").is_none());
        assert!(store.get("b").is_some() && store.get("c").is_some());

        let store = MemoryStore::new(100, 300, Duration::from_secs(60));
        store.put("a", response(&"x".repeat(100)));
        store.put("b", response(&"y".repeat(100)));
        assert!(store.get("a").is_none(), "300 bytes hold one of them");
        assert_eq!(
            store.get("b").map(|r| r.messages.clone()),
            Some(response(&"y".repeat(100)).messages)
        );
    }

    #[test]
    fn an_expired_response_is_gone() {
        let store = MemoryStore::new(10, 1 << 20, Duration::ZERO);
        store.put("a", response("1"));
        std::thread::sleep(Duration::from_millis(2));
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
