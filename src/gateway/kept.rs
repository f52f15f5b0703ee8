//! What the gateway keeps for its clients — stored responses, named sessions — held within
//! three bounds: entries, bytes (each entry's real cost, as its owner measures it) and age
//! (since it was stored or last used). The least recently used go first; an expired entry
//! is gone even when there is room. Every long-lived thing a client can make the gateway
//! hold lives in one of these, so no client can grow the gateway without bound.

use std::borrow::Borrow;
use std::hash::Hash;
use std::time::{Duration, Instant};

use lru::LruCache;

/// A map within bounds; see the module documentation.
pub struct Kept<K: Hash + Eq, V> {
    map: LruCache<K, Held<V>>,
    /// Entries in use now (a session with a turn in flight): never dropped, whatever
    /// the bounds say; the bounds hold again once they are free.
    pinned: fn(&V) -> bool,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
    max_age: Duration,
}

struct Held<V> {
    value: V,
    bytes: usize,
    at: Instant,
}

impl<K: Hash + Eq + Clone, V> Kept<K, V> {
    pub fn new(max_entries: usize, max_bytes: usize, max_age: Duration) -> Self {
        Kept {
            map: LruCache::unbounded(),
            pinned: |_| false,
            bytes: 0,
            max_entries,
            max_bytes,
            max_age,
        }
    }

    /// Entries for which `pinned` holds are kept over the bounds.
    pub fn pinned(mut self, pinned: fn(&V) -> bool) -> Self {
        self.pinned = pinned;
        self
    }

    /// Keeps `value`, which costs `bytes`, replacing what `key` held; then the oldest go
    /// until the bounds hold (this one too, when it alone is over them).
    pub fn insert(&mut self, key: K, value: V, bytes: usize) {
        if let Some(old) = self.map.put(
            key,
            Held {
                value,
                bytes,
                at: Instant::now(),
            },
        ) {
            self.bytes -= old.bytes;
        }
        self.bytes += bytes;
        self.evict();
    }

    /// The value of `key`, unless it has expired; its place in the order is kept (a
    /// stored response ages from when it was stored).
    pub fn peek<Q>(&mut self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.drop_if_expired(key);
        self.map.peek(key).map(|h| &h.value)
    }

    /// The value of `key`, unless it has expired, made the most recently used (a session
    /// ages from its last use).
    pub fn touch<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.drop_if_expired(key);
        let held = self.map.get_mut(key)?;
        held.at = Instant::now();
        Some(&mut held.value)
    }

    /// Records that `key`'s value now costs `bytes` (and was just used); then evicts.
    pub fn resize<Q>(&mut self, key: &Q, bytes: usize)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(held) = self.map.get_mut(key) {
            self.bytes = self.bytes - held.bytes + bytes;
            held.bytes = bytes;
            held.at = Instant::now();
        }
        self.evict();
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let held = self.map.pop(key)?;
        self.bytes -= held.bytes;
        Some(held.value)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The bytes all entries cost together.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn drop_if_expired<Q>(&mut self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self
            .map
            .peek(key)
            .is_some_and(|h| h.at.elapsed() > self.max_age && !(self.pinned)(&h.value))
        {
            self.remove(key);
        }
    }

    /// The least recently used go while there are too many, they cost too much, or the
    /// least recent has expired.
    /// Drops the least recently used entries that are not pinned while a bound is over,
    /// then any expired one.
    fn evict(&mut self) {
        loop {
            let over = self.map.len() > self.max_entries || self.bytes > self.max_bytes;
            let victim = self
                .map
                .iter()
                .rev()
                .filter(|(_, h)| !(self.pinned)(&h.value))
                .find(|(_, h)| over || h.at.elapsed() > self.max_age)
                .map(|(k, _)| k.clone());
            let Some(key) = victim else { break };
            if let Some(held) = self.map.pop(&key) {
                self.bytes -= held.bytes;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_go_first_by_count_and_by_bytes() {
        let mut k = Kept::new(2, 1000, Duration::from_secs(60));
        k.insert("a", 1, 10);
        k.insert("b", 2, 10);
        assert_eq!(k.touch("a"), Some(&mut 1));
        k.insert("c", 3, 10);
        assert!(k.peek("b").is_none(), "b was the least recently used");
        assert!(k.peek("a").is_some() && k.peek("c").is_some());

        let mut k = Kept::new(100, 300, Duration::from_secs(60));
        k.insert("a", (), 200);
        k.insert("b", (), 200);
        assert!(k.peek("a").is_none(), "300 bytes hold one of them");
        assert_eq!(k.bytes(), 200);
        k.insert("huge", (), 301);
        assert!(k.is_empty(), "an entry over the bound alone is not kept");
        assert_eq!(k.bytes(), 0);
    }

    #[test]
    fn a_resized_entry_counts_what_it_costs_now() {
        let mut k = Kept::new(10, 100, Duration::from_secs(60));
        k.insert("a", (), 10);
        k.insert("b", (), 10);
        k.resize("b", 95);
        assert!(k.peek("a").is_none(), "b grew: a went");
        assert_eq!((k.len(), k.bytes()), (1, 95));
        assert_eq!(k.remove("b"), Some(()));
        assert_eq!(k.bytes(), 0);
    }

    #[test]
    fn an_expired_entry_is_gone() {
        let mut k = Kept::new(10, 100, Duration::ZERO);
        k.insert("a", (), 1);
        std::thread::sleep(Duration::from_millis(2));
        assert!(k.peek("a").is_none());
        assert!(k.touch("a").is_none());
        assert_eq!(k.bytes(), 0);
    }

    #[test]
    fn a_pinned_entry_outlasts_the_bounds_until_it_is_free() {
        let mut k: Kept<&str, std::sync::Arc<()>> = Kept::new(1, 100, Duration::from_secs(60))
            .pinned(|v| std::sync::Arc::strong_count(v) > 1);
        let busy = std::sync::Arc::new(());
        k.insert("busy", std::sync::Arc::clone(&busy), 1);
        k.insert("other", std::sync::Arc::new(()), 1);
        assert!(k.peek("busy").is_some(), "a pinned entry was evicted");
        assert!(k.peek("other").is_none(), "the free one goes instead");
        drop(busy);
        k.insert("third", std::sync::Arc::new(()), 1);
        assert!(k.peek("busy").is_none(), "once free, the bounds hold again");
    }
}
