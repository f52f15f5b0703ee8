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
//!
//! A caller with many works at once (a code run's 16 describes) queues them for a lane one
//! at a time, in its own [`Turns`]: before, three runs' 48 describes of unknown ids were all
//! ahead of another run's one describe in the lane's line, which waited 1.3 s, and past its
//! deadline on a catalog of long names (sandbox round 35 F2). Now each caller is at most one
//! place in a lane's line, so another's work waits for at most one work of each caller
//! ahead of it.

use std::sync::{Arc, OnceLock};

use tokio::sync::Semaphore;

/// The kind of work, and so its lane.
#[derive(Debug, Clone, Copy)]
pub enum Lane {
    Search,
    Describe,
    /// A call's arguments checked against its tool's schema (compiled at its first call).
    Check,
    /// The same for a schema checked in a checker process ([`super::checker`]): a lane of
    /// its own, so that checks of costly schemas, which may take up to their budget, never
    /// keep a light schema's check (microseconds) waiting.
    Checker,
}

fn places(lane: Lane) -> &'static Arc<Semaphore> {
    static SEARCH: OnceLock<Arc<Semaphore>> = OnceLock::new();
    static DESCRIBE: OnceLock<Arc<Semaphore>> = OnceLock::new();
    static CHECK: OnceLock<Arc<Semaphore>> = OnceLock::new();
    static CHECKER: OnceLock<Arc<Semaphore>> = OnceLock::new();
    let lane = match lane {
        Lane::Search => &SEARCH,
        Lane::Describe => &DESCRIBE,
        Lane::Check => &CHECK,
        Lane::Checker => &CHECKER,
    };
    lane.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
        Arc::new(Semaphore::new(cores))
    })
}

/// One caller's turn in each lane: its works enter a lane's line one after another.
#[derive(Debug)]
pub struct Turns {
    search: Semaphore,
    describe: Semaphore,
    check: Semaphore,
    checker: Semaphore,
}

impl Default for Turns {
    fn default() -> Self {
        Turns {
            search: Semaphore::new(1),
            describe: Semaphore::new(1),
            check: Semaphore::new(1),
            checker: Semaphore::new(1),
        }
    }
}

/// Runs `work` on the blocking pool once its lane has a place (and, given `turns`, once the
/// caller's work before it in that lane has ended); `Err` says why it did not finish (it
/// panicked). The place is the work's until it ends, even if the caller stops waiting (a
/// thread cannot be stopped).
pub async fn offload<T: Send + 'static>(
    lane: Lane,
    turns: Option<&Turns>,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let (_turn, place) = enter(lane, turns).await?;
    tokio::task::spawn_blocking(move || {
        let _place = place;
        work()
    })
    .await
    .map_err(|e| e.to_string())
}

/// Awaits `work` holding a place in its lane (and the caller's turn), for work done
/// elsewhere that the lane still bounds (a check in a child process): dropping the future
/// gives the place up with the work, which must then stop (the child is killed).
pub async fn in_lane<T>(
    lane: Lane,
    turns: Option<&Turns>,
    work: impl std::future::Future<Output = T>,
) -> Result<T, String> {
    let _entered = enter(lane, turns).await?;
    Ok(work.await)
}

/// The caller's turn, then a place in the lane.
async fn enter(
    lane: Lane,
    turns: Option<&Turns>,
) -> Result<
    (
        Option<tokio::sync::SemaphorePermit<'_>>,
        tokio::sync::OwnedSemaphorePermit,
    ),
    String,
> {
    let turn = match turns {
        Some(turns) => Some(
            match lane {
                Lane::Search => &turns.search,
                Lane::Describe => &turns.describe,
                Lane::Check => &turns.check,
                Lane::Checker => &turns.checker,
            }
            .acquire()
            .await
            .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let place = Arc::clone(places(lane))
        .acquire_owned()
        .await
        .map_err(|e| e.to_string())?;
    Ok((turn, place))
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::time::Duration;

    /// A caller with many works waiting is one place in a lane's line: another caller's one
    /// work, queued after all of them, starts before most of them (it was last).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_s_many_works_are_one_place_in_line() {
        let started: Arc<Mutex<Vec<&'static str>>> = Arc::default();
        let work = |who: &'static str| {
            let started = Arc::clone(&started);
            move || {
                started.lock().push(who);
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        let busy = Arc::new(Turns::default());
        let many: Vec<_> = (0..40)
            .map(|_| {
                let (busy, work) = (Arc::clone(&busy), work("busy"));
                tokio::spawn(async move { offload(Lane::Describe, Some(&busy), work).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let other = Turns::default();
        offload(Lane::Describe, Some(&other), work("other"))
            .await
            .unwrap();
        let at = started.lock().iter().position(|w| *w == "other").unwrap();
        for m in many {
            m.await.unwrap().unwrap();
        }
        // The lane's places, plus the works of other tests in this process at most.
        assert!(at < 12, "the other caller's work started {at}th of 41");
    }
}
