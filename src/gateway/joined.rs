//! Catalogs with a request's client tools joined, kept for the next request that sends
//! the same tools: an agent sends its tools with every request, and building the catalog
//! and its index anew each time cost every such request its CPU (128 requests with client
//! tools stretched a tool round from 8 s to 27 s, front round 11).
//!
//! Keyed by the BLAKE3 hash of the tools' JSON bytes (the same tools in another order are
//! another key: a miss, never a wrong hit) and valid only while the configured catalog they
//! were joined to is the current one: an upstream server coming or going makes a new one,
//! and the entry is built again. The base is held weakly, so a replaced catalog is freed.

use std::num::NonZeroUsize;
use std::sync::{Arc, Weak};

use serde_json::Value;

/// Joined catalogs kept: each is a whole catalog with its index, and one client sending
/// new tools every request only turns the cache over.
pub const JOINED_KEPT: usize = 8;

/// The tools' JSON bytes of every catalog kept, together; a list larger than a quarter
/// of it is joined for its request and not kept. A catalog with its index holds about six
/// times its tools' bytes, outside every request's pool: eight 3.9 MB lists kept the
/// gateway at 221 MB (front round 14 F6); this keeps it near 25 MB.
pub const JOINED_BYTES: usize = 4 << 20;

/// Joined catalogs by the hash of their tools, each with the base it was joined to and
/// its tools' bytes; and those bytes together.
struct Kept<B, T> {
    lru: lru::LruCache<[u8; 32], (Weak<B>, Arc<T>, usize)>,
    bytes: usize,
}

pub struct Joined<B, T> {
    kept: parking_lot::Mutex<Kept<B, T>>,
}

impl<B, T> Default for Joined<B, T> {
    fn default() -> Self {
        Joined {
            kept: parking_lot::Mutex::new(Kept {
                lru: lru::LruCache::new(
                    NonZeroUsize::new(JOINED_KEPT).unwrap_or(NonZeroUsize::MIN),
                ),
                bytes: 0,
            }),
        }
    }
}

impl<B, T> Joined<B, T> {
    /// The catalog `tools` joined to `base`: the one kept, or `build`'s, then kept. The
    /// lock is not held while building (two requests may build the same one; the later
    /// is kept). Errors are not kept.
    pub fn get_or_build<E>(
        &self,
        base: &Arc<B>,
        tools: &[Value],
        build: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        let Ok(bytes) = serde_json::to_vec(tools) else {
            return build().map(Arc::new);
        };
        let key = *blake3::hash(&bytes).as_bytes();
        let size = bytes.len();
        drop(bytes);
        if let Some((built_on, joined, _)) = self.kept.lock().lru.get(&key)
            && Weak::ptr_eq(built_on, &Arc::downgrade(base))
        {
            return Ok(Arc::clone(joined));
        }
        let joined = Arc::new(build()?);
        if size > JOINED_BYTES / 4 {
            return Ok(joined);
        }
        let mut kept = self.kept.lock();
        let entry = (Arc::downgrade(base), Arc::clone(&joined), size);
        // `push` gives back what it replaced or pushed out: either way no longer kept.
        if let Some((_, (_, _, gone))) = kept.lru.push(key, entry) {
            kept.bytes -= gone;
        }
        kept.bytes += size;
        while kept.bytes > JOINED_BYTES {
            match kept.lru.pop_lru() {
                Some((_, (_, _, gone))) => kept.bytes -= gone,
                None => break,
            }
        }
        Ok(joined)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::cell::Cell;

    #[test]
    fn the_same_tools_on_the_same_base_are_built_once_and_anything_else_again() {
        let joined: Joined<String, String> = Joined::default();
        let base = Arc::new("base".to_string());
        let builds = Cell::new(0);
        let build = |name: &str| {
            builds.set(builds.get() + 1);
            Ok::<_, ()>(format!("base+{name}"))
        };
        let pick = [json!({"type": "function", "name": "pick"})];
        let a = joined.get_or_build(&base, &pick, || build("pick")).unwrap();
        let b = joined.get_or_build(&base, &pick, || build("pick")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(builds.get(), 1);
        // Other tools: their own catalog, not the kept one.
        let other = [json!({"type": "function", "name": "other"})];
        let c = joined
            .get_or_build(&base, &other, || build("other"))
            .unwrap();
        assert_eq!(*c, "base+other");
        assert_eq!(builds.get(), 2);
        // The base replaced (an upstream server came or went): the old one is freed (the
        // cache holds it weakly), and the tools are joined to the new one.
        let weak = Arc::downgrade(&base);
        drop(base);
        assert!(weak.upgrade().is_none());
        let base = Arc::new("base".to_string());
        let d = joined.get_or_build(&base, &pick, || build("pick")).unwrap();
        assert!(!Arc::ptr_eq(&a, &d));
        assert_eq!(builds.get(), 3);
    }

    #[test]
    fn errors_are_not_kept_and_the_cache_is_bounded() {
        let joined: Joined<(), usize> = Joined::default();
        let base = Arc::new(());
        let tools = [json!({"name": "x"})];
        assert!(joined.get_or_build(&base, &tools, || Err("bad")).is_err());
        assert_eq!(
            *joined
                .get_or_build(&base, &tools, || Ok::<_, ()>(1))
                .unwrap(),
            1
        );
        for i in 0..JOINED_KEPT * 3 {
            let tools = [json!({"name": format!("t{i}")})];
            joined
                .get_or_build(&base, &tools, || Ok::<_, ()>(i))
                .unwrap();
        }
        assert_eq!(joined.kept.lock().lru.len(), JOINED_KEPT);
    }

    #[test]
    fn the_cache_holds_its_bytes_bound_and_keeps_no_oversized_list() {
        let joined: Joined<(), usize> = Joined::default();
        let base = Arc::new(());
        let big = [json!("x".repeat(JOINED_BYTES / 4 + 1))];
        let mut builds = 0;
        for _ in 0..2 {
            joined
                .get_or_build(&base, &big, || {
                    builds += 1;
                    Ok::<_, ()>(0)
                })
                .unwrap();
        }
        assert_eq!(builds, 2, "an oversized list is not kept");
        for i in 0..6 {
            let tools = [json!(format!("{i}{}", "y".repeat(JOINED_BYTES / 5)))];
            joined
                .get_or_build(&base, &tools, || Ok::<_, ()>(i))
                .unwrap();
        }
        let kept = joined.kept.lock();
        assert!(kept.bytes <= JOINED_BYTES, "{}", kept.bytes);
        assert_eq!(kept.lru.len(), 4);
        assert_eq!(
            kept.bytes,
            kept.lru.iter().map(|(_, (_, _, b))| b).sum::<usize>()
        );
    }
}
