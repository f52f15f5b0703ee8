//! The tool results a host's turns hold at once.
//!
//! A turn's results live in its conversation until the turn ends, and its own bound
//! ([`super::MAX_CONVERSATION_BYTES`]) is per turn: 64 turns of 64 calls of 1 MB held
//! 1.07 GB (front round 8). Each turn keeps its first [`TURN_RESULTS_KEPT`] bytes of results
//! as its own (a turn that reads a few files or searches is never refused), and the rest
//! take their places in one pool over all turns, as each result arrives. A result that finds
//! no room is not kept: the model reads why instead, and may call again.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The results every turn holds past its own [`TURN_RESULTS_KEPT`], in bytes.
pub const TOOL_RESULTS_IN_FLIGHT: usize = 256 * 1024 * 1024;

/// A turn's results kept outside the pool. The gateway runs at most 128 turns at once (its
/// `MAX_TURNS_AT_ONCE`), so these take at most 128 MiB.
pub const TURN_RESULTS_KEPT: usize = 1024 * 1024;

/// A pool of [`TOOL_RESULTS_IN_FLIGHT`], in KiB.
pub fn pool() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(TOOL_RESULTS_IN_FLIGHT / 1024))
}

/// One turn's results' places, let go when the turn ends.
#[derive(Default)]
pub struct ResultBytes {
    pool: Option<Arc<Semaphore>>,
    bytes: usize,
    held: Option<OwnedSemaphorePermit>,
}

impl ResultBytes {
    /// Counts against `pool`, or nothing (a host that runs one turn at a time).
    pub fn new(pool: Option<Arc<Semaphore>>) -> Self {
        ResultBytes {
            pool,
            bytes: 0,
            held: None,
        }
    }

    /// Whether a result of `n` bytes may be kept; when it may, its places are taken.
    pub fn keep(&mut self, n: usize) -> bool {
        let Some(pool) = &self.pool else {
            return true;
        };
        let after = self.bytes + n;
        let want = after.saturating_sub(TURN_RESULTS_KEPT).div_ceil(1024);
        let have = self.held.as_ref().map_or(0, |p| p.num_permits());
        if want > have {
            let need = u32::try_from(want - have).unwrap_or(u32::MAX);
            let Ok(more) = Arc::clone(pool).try_acquire_many_owned(need) else {
                return false;
            };
            super::join_places(&mut self.held, more);
        }
        self.bytes = after;
        true
    }

    /// Why a result was not kept, for the model.
    pub fn refusal(n: usize) -> String {
        format!(
            "this call's result ({n} bytes) was not kept: the tool results of the turns in flight take {} MiB, the most this host holds at once; call it again shortly, or ask for less",
            TOOL_RESULTS_IN_FLIGHT >> 20
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_keeps_its_own_share_then_takes_from_the_pool() {
        let pool = Arc::new(Semaphore::new(1024));
        let mut turn = ResultBytes::new(Some(Arc::clone(&pool)));
        assert!(turn.keep(TURN_RESULTS_KEPT));
        assert_eq!(pool.available_permits(), 1024);
        assert!(turn.keep(512 * 1024));
        assert_eq!(pool.available_permits(), 512);
        // Past the pool: refused, and nothing taken for it.
        assert!(!turn.keep(600 * 1024));
        assert_eq!(pool.available_permits(), 512);
        // Another turn still has its own share.
        let mut other = ResultBytes::new(Some(Arc::clone(&pool)));
        assert!(other.keep(TURN_RESULTS_KEPT));
        drop(turn);
        assert_eq!(pool.available_permits(), 1024);
        assert!(ResultBytes::refusal(10).contains("not kept"));
    }

    #[test]
    fn without_a_pool_everything_is_kept() {
        let mut turn = ResultBytes::new(None);
        assert!(turn.keep(usize::MAX / 2));
    }
}
