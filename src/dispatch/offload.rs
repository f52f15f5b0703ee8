//! Where a search's or a describe's work runs, for every caller that awaits it (the code
//! bridge, the structured tools): on tokio's blocking pool, never on the runtime's
//! workers. Their work grows with what the caller and the catalog bring — the first search
//! of a catalog builds its index (5 s for 10,000 tools), a describe may serialize megabytes
//! of schema — and on the workers it held both of them: runs past their deadlines and `mcp
//! serve` unanswering for seconds (sandbox round 32 F1, F2; round 34 F3 in tools mode).
//!
//! Each lane runs at most one work per core at once over the process, each holding its
//! place until its work ends (not until its caller stops waiting): unbounded, heavy
//! describes oversubscribed the cores and searches waiting for an index took a thread each,
//! 294 of them (round 33 F2, F3). A caller waiting for a place holds no thread, and
//! dropping it gives the place up. Searches and describes have a lane each: searches that
//! wait for an index being built hold their places while they wait, and in one lane they
//! kept every other client's describes (which need no index) out until the build ended
//! (round 34 F2); now they hold back only other searches, which would wait for the index
//! anyway.

use std::sync::{Arc, OnceLock};

use tokio::sync::Semaphore;

/// The kind of work, and so its lane.
#[derive(Debug, Clone, Copy)]
pub enum Lane {
    Search,
    Describe,
}

fn places(lane: Lane) -> &'static Arc<Semaphore> {
    static SEARCH: OnceLock<Arc<Semaphore>> = OnceLock::new();
    static DESCRIBE: OnceLock<Arc<Semaphore>> = OnceLock::new();
    let lane = match lane {
        Lane::Search => &SEARCH,
        Lane::Describe => &DESCRIBE,
    };
    lane.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
        Arc::new(Semaphore::new(cores))
    })
}

/// Runs `work` on the blocking pool once its lane has a place; `Err` says why it did not
/// finish (it panicked).
pub async fn offload<T: Send + 'static>(
    lane: Lane,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let place = Arc::clone(places(lane))
        .acquire_owned()
        .await
        .map_err(|e| e.to_string())?;
    tokio::task::spawn_blocking(move || {
        let _place = place;
        work()
    })
    .await
    .map_err(|e| e.to_string())
}
