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

/// A joined catalog and the base it was joined to, by the hash of the tools.
type Kept<B, T> = lru::LruCache<[u8; 32], (Weak<B>, Arc<T>)>;

pub struct Joined<B, T> {
    kept: parking_lot::Mutex<Kept<B, T>>,
}

impl<B, T> Default for Joined<B, T> {
    fn default() -> Self {
        Joined {
            kept: parking_lot::Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(JOINED_KEPT).unwrap_or(NonZeroUsize::MIN),
            )),
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
        drop(bytes);
        if let Some((built_on, joined)) = self.kept.lock().get(&key)
            && Weak::ptr_eq(built_on, &Arc::downgrade(base))
        {
            return Ok(Arc::clone(joined));
        }
        let joined = Arc::new(build()?);
        self.kept
            .lock()
            .put(key, (Arc::downgrade(base), Arc::clone(&joined)));
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
        assert_eq!(joined.kept.lock().len(), JOINED_KEPT);
    }
}
